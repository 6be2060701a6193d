"""`t1 plan-memory`: the analytic layout planner (t1/model/memory.py), or with --measure the
trainer's real megatron-core models measured at a config's own layout (t1/train/megatron/measure.py).

    t1 plan-memory --preset qwen3.5-122b-a10b --gpus-per-node 8 --gpu-mem-gib 141 --budget-gib 95
    t1 plan-memory --measure --config workflow/config/qwen3.5-122b-a10b.yaml [--json FILE]
        [--tokens N] [--attention local|flash] [--recompute on|off]

--measure builds actor and critic for one rank of each pipeline stage under a fake process
group of train.gpus ranks and FakeTensorMode (no GPU, no memory), counts parameters, fp32
gradient buffers and the distributed optimizer's shard, runs one micro-batch of
agent.context_tokens forward and backward fake, and prints per role the measured per-rank peak
beside the planner's estimate, then the co-resident peak (critic trains first, then actor; the
idle role offloaded except its gradient buffers). Exit 1 when a role's co-resident peak exceeds
train.gpu_budget_gib (2 on a bad config). `--attention flash` replaces the local spec's
DotProductAttention (which the trainer builds today: an [s, s] score matrix per head) by a
flash-attention stand-in: what a TE spec needs (the default follows train.attention as the
GPU nodes build it). With train.optimizer_offload the peak is the larger of the
forward/backward (optimizer state on the host) and the optimizer step (no activations).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from t1.model import memory, memory_spec
from t1.records import write_json_atomic

PLANNER_REQUIRED = ("preset", "gpus_per_node", "gpu_mem_gib", "budget_gib")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _planner_arguments(parser)
    for action in parser._actions:  # required only without --measure (checked in main)
        if action.dest in PLANNER_REQUIRED:
            action.required = False
    parser.add_argument(
        "--measure",
        action="store_true",
        help="measure the trainer's real models at --config's train.* layout (fake process group)",
    )
    parser.add_argument(
        "--tokens", type=int, default=None, help="--measure: tokens per micro-batch"
    )
    parser.add_argument(
        "--attention",
        choices=("local", "flash"),
        default=None,
        help="--measure: core attention: local (megatron-core's, the CPU's) or the flash "
        "stand-in (what train.attention te/auto builds on GPU nodes; the default follows it)",
    )
    parser.add_argument(
        "--recompute",
        choices=("on", "off"),
        default=None,
        help="--measure: override train.recompute",
    )


def main(args: argparse.Namespace) -> int:
    if not args.measure:
        missing = [f"--{d.replace('_', '-')}" for d in PLANNER_REQUIRED if getattr(args, d) is None]
        if missing:
            print(f"t1 plan-memory: {', '.join(missing)} required (or --measure)", file=sys.stderr)
            return 2
        return _plan(args)
    if not args.config:
        print("t1 plan-memory --measure: --config FILE required", file=sys.stderr)
        return 2
    from t1.config import load_config
    from t1.train.megatron.measure import measure

    cfg = load_config(args.config)
    if cfg.train.backend != "megatron":
        print("t1 plan-memory --measure: train.backend must be megatron", file=sys.stderr)
        return 2
    if args.recompute:
        cfg = dataclasses.replace(
            cfg, train=dataclasses.replace(cfg.train, recompute=args.recompute == "on")
        )
    res = measure(cfg, tokens=args.tokens or args.seq_len, attention=args.attention)
    print(table(res))
    if args.json:
        write_json_atomic(args.json, res, indent=2)
    return 0 if res["fits"] else 1


def table(res: dict) -> str:
    lay = res["layout"]
    lines = [
        f"measured (fake process group, FakeTensorMode): {lay['world']} GPUs, TP={lay['tp']} "
        f"PP={lay['pp']} EP={lay['ep']} ETP={lay['etp']}; 1 x {res['tokens']} tokens, logits "
        f"chunk {res['logits_chunk']}, attention {res['attention']}",
        f"{'GiB per GPU':<20}{'actor':>12}{'critic':>12}",
    ]
    a, c = res["roles"]["actor"], res["roles"]["critic"]
    for item in a["breakdown_gib"]:
        lines.append(
            f"{item:<20}{a['breakdown_gib'][item]:>12.2f}{c['breakdown_gib'].get(item, 0):>12.2f}"
        )
    for phase in a.get("phases_gib", {}):
        lines.append(
            f"{'  ' + phase:<20}{a['phases_gib'][phase]:>12.2f}"
            f"{c['phases_gib'].get(phase, 0):>12.2f}   (train.optimizer_offload: Adam state on "
            "the host between steps)"
        )
    lines.append(
        f"{'measured peak':<20}{a['peak_gib']:>12.2f}{c['peak_gib']:>12.2f}"
        f"   (worst stage: actor {a['worst_stage']}, critic {c['worst_stage']})"
    )
    p = res["planned_gib"]
    if p:
        lines.append(
            f"{'planner estimate':<20}{p['actor']:>12.2f}{p['critic']:>12.2f}"
            "   (t1.model.memory_breakdown; micro-batch = train.micro_batch rows)"
        )
    co = res["coresident"]
    lines.append(
        f"{'co-resident peak':<20}{co['phase_peak_gib']['actor']:>12.2f}"
        f"{co['phase_peak_gib']['critic']:>12.2f}   (critic first, then actor; stays on GPU: "
        f"{co['stays_on_gpu']})"
    )
    verdict = "fits" if res["fits"] else "DOES NOT FIT"
    lines.append(f"budget {res['budget_gib']} GiB per GPU: {verdict}")
    lines.append("not measured fake (stand-ins):")
    lines += [f"  {k}: {v}" for k, v in res["stand_ins"].items()]
    return "\n".join(lines)


def _planner_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", required=True, help=f"tiny | {memory_spec.QWEN35_122B.name}")
    parser.add_argument("--gpus-per-node", type=int, required=True)
    parser.add_argument("--gpu-mem-gib", type=float, required=True)
    parser.add_argument("--budget-gib", type=float, required=True, help="limit for each role")
    parser.add_argument("--max-nodes", type=int, default=16)
    parser.add_argument(
        "--allow-offload", action="store_true", help="also try optimizer CPU offload"
    )
    parser.add_argument(
        "--config",
        default=None,
        help="campaign YAML (tiny preset: model, vocab, context, minibatch)",
    )
    parser.add_argument(
        "--seq-len", type=int, default=None, help="tokens per sequence (default: the preset's)"
    )
    parser.add_argument("--micro-batch", type=int, default=None, help="sequences per micro-batch")
    parser.add_argument("--json", default=None, help="also write the result here")


def _plan(args: argparse.Namespace) -> int:
    """The analytic planner: the cheapest layout of a preset that fits the budget."""
    try:
        spec = memory_spec.preset(args.preset, args.config)
    except ValueError as e:
        print(f"t1 plan-memory: {e}", file=sys.stderr)
        return 2
    over = {k: v for k, v in (("seq_len", args.seq_len), ("micro_batch", args.micro_batch)) if v}
    spec = dataclasses.replace(spec, **over)
    result = memory.search(
        spec,
        args.gpus_per_node,
        args.gpu_mem_gib,
        args.budget_gib,
        args.max_nodes,
        args.allow_offload,
    )
    print(memory.table(result))
    if args.json:
        write_json_atomic(args.json, result, indent=2)
    return 0 if result["fits"] else 1

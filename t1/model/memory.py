"""Per-GPU memory of the actor and the critic for a model preset and a parallel layout.

    t1 plan-memory --preset qwen3.5-122b-a10b --gpus-per-node 8 --gpu-mem-gib 141 --budget-gib 95
    t1 plan-memory --preset tiny --gpus-per-node 1 --gpu-mem-gib 24 --budget-gib 8 [--config FILE]
    t1 plan-memory ... [--max-nodes 16] [--allow-offload] [--seq-len N] [--micro-batch B] [--json FILE]

It searches layouts (nodes x GPUs; TP, PP, EP, ETP; DP follows; distributed optimizer;
recompute none / selective / full; optimizer CPU offload only with --allow-offload) and prints
the cheapest one that keeps EACH role (actor, critic: they co-reside on the training GPUs and
train in turn) within the budget, with the breakdown. "Cheapest": fewest GPUs, then no
offload, then least recompute, then least pipeline / tensor / expert parallelism. JSON keys:
`layout`, `actor_gib`, `critic_gib`, `fits` (+ `breakdown`, `params`, `assumptions`, ...).
Exit code 0 when a layout fits, 1 when none does (the JSON then holds the least-bad one).

Two frameworks, one per preset:
* `megatron` (the 122B preset): bf16 weights, fp32 main grads (persistent buffers), fp32
  master weights + Adam moments (12 B/param) sharded over DP (dense) / expert-DP (experts)
  with the distributed optimizer; sequence parallelism (activations / TP); 1F1B pipeline
  (stage 0 holds PP micro-batches, i.e. all layers' activations of one micro-batch); flash
  attention (no s^2 term); Gated DeltaNet states recomputed in backward (as the chunked
  kernels do); log-probabilities computed in chunks of `logits_chunk` tokens (the vocab is
  248k: full logits of a 33k sequence would be ~8 GB bf16 per TP rank); a fixed runtime
  reserve (CUDA context, NCCL, allocator slack). Activation counts per token and layer are
  listed in `_megatron_layer` below.
* `hf` (the tiny preset, CPU): fp32 weights, grads and Adam moments (16 B/param), no
  parallelism; activations = what HF's Qwen3-MoE forward saves for backward (per token per
  layer 6h + 4(a*d) + 4(g*d) + E + k(2h + 4f) floats, counted with saved-tensor hooks), plus
  3h + V for the head and, for the actor, 3 transient [tokens, V] buffers at the top of
  backward (the gradients through logsumexp, gather and the shift). Measured against the real
  CPU step by `t1 bench train` and tests/test_memory.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from dataclasses import dataclass
from typing import Any

from t1.records import write_json_atomic

GIB = 1024**3
ROLES = ("actor", "critic")
RECOMPUTE = ("none", "selective", "full")
ITEMS = ("weights", "grads", "optimizer", "activations", "logits", "routing", "runtime")


@dataclass(frozen=True)
class ModelSpec:
    """Architecture numbers the planner needs (one MoE block in every layer)."""

    name: str
    layers: int
    hidden: int
    vocab: int
    heads: int  # full attention query heads
    kv_heads: int
    head_dim: int
    experts: int
    top_k: int
    expert_ffn: int
    shared_expert_ffn: int = 0  # 0 = no shared expert
    attn_output_gate: bool = False  # Qwen3.5 gated attention (q_proj emits a gate as well)
    full_attention_interval: int = 1  # every n-th layer is full attention, the rest linear
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_dim: int = 0
    linear_value_dim: int = 0
    linear_conv_kernel: int = 4
    framework: str = "megatron"  # megatron | hf
    seq_len: int = 4096
    micro_batch: int = 1  # sequences per micro-batch

    def layer_kinds(self) -> list[str]:
        n = self.full_attention_interval
        return ["full" if (i + 1) % n == 0 else "linear" for i in range(self.layers)]

    # ------------------------------------------------------------ parameter counts

    def full_attention_params(self) -> int:
        h, a, g, d = self.hidden, self.heads, self.kv_heads, self.head_dim
        q = h * a * d * (2 if self.attn_output_gate else 1)
        return q + 2 * h * g * d + a * d * h + 2 * d  # q, k, v, o + q/k norms

    def linear_attention_params(self) -> int:
        h = self.hidden
        kd = self.linear_key_heads * self.linear_key_dim
        vd = self.linear_value_heads * self.linear_value_dim
        hv = self.linear_value_heads
        conv = (2 * kd + vd) * self.linear_conv_kernel
        return (
            h * (2 * kd + vd) + h * vd + 2 * h * hv + conv + 2 * hv + self.linear_value_dim + vd * h
        )

    def shared_expert_params(self) -> int:
        if not self.shared_expert_ffn:
            return 0
        return 3 * self.hidden * self.shared_expert_ffn + self.hidden  # + its sigmoid gate

    def layer_dense_params(self, kind: str) -> int:
        """Non-expert parameters of one layer: attention, 2 norms, router, shared expert."""
        attn = self.full_attention_params() if kind == "full" else self.linear_attention_params()
        return attn + 2 * self.hidden + self.experts * self.hidden + self.shared_expert_params()

    def expert_params_per_layer(self) -> int:
        return self.experts * 3 * self.hidden * self.expert_ffn

    def param_counts(self) -> dict[str, int]:
        """Counts by part; `total` = the actor (untied embeddings; no vision tower, no MTP)."""
        kinds = self.layer_kinds()
        full, linear = kinds.count("full"), kinds.count("linear")
        out = {
            "embedding": self.vocab * self.hidden,
            "lm_head": self.vocab * self.hidden,
            "full_attention": full * self.full_attention_params(),
            "linear_attention": linear * self.linear_attention_params(),
            "norms": self.layers * 2 * self.hidden + self.hidden,
            "router": self.layers * self.experts * self.hidden,
            "shared_expert": self.layers * self.shared_expert_params(),
            "experts": self.layers * self.expert_params_per_layer(),
        }
        out["total"] = sum(out.values())
        out["critic_total"] = out["total"] - out["lm_head"] + self.hidden + 1
        return out


QWEN35_122B = ModelSpec(
    name="qwen3.5-122b-a10b",
    layers=48,
    hidden=3072,
    vocab=248_320,
    heads=32,
    kv_heads=2,
    head_dim=256,
    experts=256,
    top_k=8,
    expert_ffn=1024,
    shared_expert_ffn=1024,
    attn_output_gate=True,
    full_attention_interval=4,
    linear_key_heads=16,
    linear_value_heads=64,
    linear_key_dim=128,
    linear_value_dim=128,
    linear_conv_kernel=4,
    framework="megatron",
    seq_len=33_000,
    micro_batch=1,
)


def tiny_spec(cfg: Any = None) -> ModelSpec:
    """The tiny CPU model from a Config (or the defaults): t1.model.policy's mapping of `model:`."""
    from t1.config import Config

    cfg = cfg or Config()
    m = cfg.model
    qwen35 = m.arch == "qwen3_5_moe"
    return ModelSpec(
        name="tiny",
        layers=m.layers,
        hidden=m.hidden,
        vocab=cfg.tokenizer.vocab_size,
        heads=m.heads,
        kv_heads=m.kv_heads,
        head_dim=m.head_dim,
        experts=m.experts,
        top_k=m.top_k,
        expert_ffn=m.expert_intermediate,
        shared_expert_ffn=m.expert_intermediate if qwen35 else 0,
        attn_output_gate=qwen35,
        full_attention_interval=4 if qwen35 else 1,
        linear_key_heads=m.kv_heads if qwen35 else 0,
        linear_value_heads=m.heads if qwen35 else 0,
        linear_key_dim=m.head_dim if qwen35 else 0,
        linear_value_dim=m.head_dim if qwen35 else 0,
        framework="hf",
        seq_len=cfg.agent.context_tokens,
        micro_batch=cfg.ppo.minibatch,
    )


def preset(name: str, config_path: str | None = None) -> ModelSpec:
    if name == QWEN35_122B.name:
        return QWEN35_122B
    if name == "tiny":
        from t1.config import load_config

        return tiny_spec(load_config(config_path) if config_path else None)
    raise ValueError(f"unknown preset {name!r} (known: tiny, {QWEN35_122B.name})")


# ---------------------------------------------------------------- layouts


@dataclass(frozen=True)
class Layout:
    nodes: int
    gpus_per_node: int
    tp: int = 1
    pp: int = 1
    ep: int = 1
    etp: int = 1
    dist_opt: bool = True
    recompute: str = "none"
    offload: bool = False
    logits_chunk: int = 4096  # tokens per chunk of the log-prob computation (0 = all at once)

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def dp(self) -> int:
        return self.world // (self.tp * self.pp)

    @property
    def edp(self) -> int:
        return self.world // (self.pp * self.ep * self.etp)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(world=self.world, dp=self.dp, edp=self.edp)
        return d


def valid(spec: ModelSpec, lay: Layout) -> bool:
    w = lay.world
    if w % (lay.tp * lay.pp) or (w // lay.pp) % (lay.ep * lay.etp):
        return False
    if (
        spec.layers % lay.pp
        or spec.experts % lay.ep
        or spec.expert_ffn % lay.etp
        or lay.tp % lay.etp
    ):
        return False
    heads = [spec.heads, spec.kv_heads]
    if spec.full_attention_interval > 1:
        heads += [spec.linear_key_heads, spec.linear_value_heads]
    return all(x % lay.tp == 0 for x in heads)


def _stages(spec: ModelSpec, pp: int) -> list[list[str]]:
    kinds, n = spec.layer_kinds(), spec.layers // pp
    return [kinds[i * n : (i + 1) * n] for i in range(pp)]


# ---------------------------------------------------------------- activations


def _megatron_layer(spec: ModelSpec, kind: str, recompute: str, lay: Layout) -> float:
    """Elements saved per token for one layer on one GPU (bf16 unless noted), SP over TP.

    none:      full attention  2h + 6ad + 3gd   (norm in/out, q(+gate), k, v, q/k-norm inputs,
                                                 flash output, gated output, o_proj input)
               linear (GDN)    2h + 8Kd + 6Vd   (in_proj out, conv pre/post activation, z,
                                                 l2-normed q/k, core output, gated-norm output)
               MoE             3h + 4E + k(2h + 3f) + 3fs   (norms, fp32 router logits/probs,
                                                 permuted input, fc1 out, act out, fc2 out,
                                                 shared expert)
    selective: keep GEMM inputs only (norms, activations, conv, rope, gates recomputed):
               full h + 3ad + 2gd, linear h + 2Kd + 3Vd, MoE h + 4E + k(2h + 2f) + 2fs + h
    full:      the layer input h only (the working set of one recomputed layer is added once).
    Expert terms count s*k/tp assignments per GPU (balanced routing), each ETP rank holding
    f/etp of the expert width for etp times the tokens.
    """
    h, a, g, d = spec.hidden, spec.heads, spec.kv_heads, spec.head_dim
    kd = spec.linear_key_heads * spec.linear_key_dim
    vd = spec.linear_value_heads * spec.linear_value_dim
    e, k, f, fs = spec.experts, spec.top_k, spec.expert_ffn, spec.shared_expert_ffn
    ad, gate = a * d, (1 if spec.attn_output_gate else 0)  # the gate adds 2 (none) / 1 a*d
    tp, etp = lay.tp, lay.etp
    if recompute == "full":
        return h / tp
    if recompute == "none":
        mix = 2 * h + (4 + 2 * gate) * ad + 3 * g * d if kind == "full" else 2 * h + 8 * kd + 6 * vd
        dense = 3 * h + 4 * e + 3 * fs
        expert = k * etp * (2 * h + 3 * f / etp)
    else:
        mix = h + (2 + gate) * ad + 2 * g * d if kind == "full" else h + 2 * kd + 3 * vd
        dense = 2 * h + 4 * e + 2 * fs
        expert = k * etp * (2 * h + 2 * f / etp)
    return (mix + dense + expert) / tp


def _hf_layer(spec: ModelSpec) -> float:
    """Floats HF's Qwen3-MoE forward saves per token and layer (fp32, eager/SDPA on the CPU)."""
    h, ad, gd = spec.hidden, spec.heads * spec.head_dim, spec.kv_heads * spec.head_dim
    return 6 * h + 4 * ad + 4 * gd + spec.experts + spec.top_k * (2 * h + 4 * spec.expert_ffn)


# ---------------------------------------------------------------- the breakdown


def breakdown(spec: ModelSpec, lay: Layout, role: str) -> dict[str, float]:
    """Bytes per GPU of one role (actor | critic) under a layout, worst pipeline stage."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}")
    stages = _stages(spec, lay.pp)
    per_stage = []
    for i, kinds in enumerate(stages):
        dense = sum(spec.layer_dense_params(kd) for kd in kinds)
        if i == 0:
            dense += spec.vocab * spec.hidden
        if i == lay.pp - 1:
            dense += spec.hidden + (
                spec.vocab * spec.hidden if role == "actor" else spec.hidden + 1
            )
        experts = len(kinds) * spec.expert_params_per_layer()
        per_stage.append((dense / lay.tp, experts / (lay.ep * lay.etp), i))
    tokens = spec.seq_len * spec.micro_batch
    out = {}
    if spec.framework == "hf":
        dense, experts, _ = max(per_stage, key=lambda x: x[0] + x[1])
        n = dense + experts
        out["weights"], out["grads"], out["optimizer"] = 4 * n, 4 * n, 8 * n
        out["activations"] = 4 * tokens * (spec.layers * _hf_layer(spec) + 3 * spec.hidden)
        out["logits"] = 4 * tokens * spec.vocab * 4 if role == "actor" else 0.0
        out["routing"] = 2 * tokens * spec.layers * spec.top_k  # int16 replay record
        out["runtime"] = 0.0
        return out
    best = None
    for dense, experts, stage in per_stage:
        shard = (dense / lay.dp + experts / lay.edp) if lay.dist_opt else dense + experts
        opt = 0.0 if lay.offload else 12 * shard
        layers_here = len(stages[stage])
        in_flight = lay.pp - stage  # 1F1B: stage i holds pp - i micro-batches
        per_layer = [_megatron_layer(spec, kd, lay.recompute, lay) for kd in stages[stage]]
        act = 2 * tokens * sum(per_layer) * in_flight
        if lay.recompute == "full":  # one layer's full working set during its recompute
            act += 2 * tokens * max(_megatron_layer(spec, kd, "none", lay) for kd in stages[stage])
        logits = 0.0
        if stage == lay.pp - 1 and role == "actor":
            chunk = min(tokens, lay.logits_chunk or tokens)
            logits = chunk * spec.vocab / lay.tp * 10 + 2 * tokens * spec.hidden / lay.tp
        routing = 8 * tokens / lay.tp * layers_here * spec.top_k * in_flight  # int64 replay ids
        b = {
            "weights": 2 * (dense + experts),
            "grads": 4 * (dense + experts),
            "optimizer": opt,
            "activations": act,
            "logits": logits,
            "routing": routing,
            "runtime": 4.0 * GIB,
        }
        if best is None or sum(b.values()) > sum(best.values()):
            best = b
    return best


def plan(spec: ModelSpec, lay: Layout) -> dict[str, Any]:
    """The breakdown of both roles under one layout, in GiB."""
    res: dict[str, Any] = {"layout": lay.as_dict(), "breakdown": {}}
    for role in ROLES:
        b = breakdown(spec, lay, role)
        res["breakdown"][role] = {k: round(v / GIB, 3) for k, v in b.items()} | {
            "total": round(sum(b.values()) / GIB, 3)
        }
        res[f"{role}_gib"] = res["breakdown"][role]["total"]
    return res


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidates(
    spec: ModelSpec, gpus_per_node: int, max_nodes: int, allow_offload: bool
) -> list[Layout]:
    if spec.framework == "hf":
        return [Layout(n, gpus_per_node, dist_opt=False) for n in range(1, max_nodes + 1)]
    out = []
    for nodes in range(1, max_nodes + 1):
        world = nodes * gpus_per_node
        for tp, pp in itertools.product(_divisors(gpus_per_node), _divisors(spec.layers)):
            if world % (tp * pp):
                continue
            for ep, etp in itertools.product(_divisors(spec.experts), _divisors(tp)):
                for rc, dist, off in itertools.product(
                    RECOMPUTE, (True, False), (False, True) if allow_offload else (False,)
                ):
                    lay = Layout(nodes, gpus_per_node, tp, pp, ep, etp, dist, rc, off)
                    if valid(spec, lay):
                        out.append(lay)
    return out


def _rank(lay: Layout, res: dict[str, Any]) -> tuple:
    worst = max(res["actor_gib"], res["critic_gib"])
    return (
        lay.world,
        lay.offload,
        RECOMPUTE.index(lay.recompute),
        lay.pp,
        lay.tp * lay.etp,
        lay.ep,
        not lay.dist_opt,
        worst,
    )


def search(
    spec: ModelSpec,
    gpus_per_node: int,
    gpu_mem_gib: float,
    budget_gib: float,
    max_nodes: int = 16,
    allow_offload: bool = False,
) -> dict[str, Any]:
    """The cheapest layout whose actor and critic each fit min(budget, GPU memory)."""
    limit = min(budget_gib, gpu_mem_gib)
    best, least_bad = None, None
    for lay in candidates(spec, gpus_per_node, max_nodes, allow_offload):
        if best is not None and lay.world > best[0].world:
            break  # candidates come in order of size; nothing larger can rank better
        res = plan(spec, lay)
        worst = max(res["actor_gib"], res["critic_gib"])
        if worst <= limit and (best is None or _rank(lay, res) < _rank(*best)):
            best = (lay, res)
        if least_bad is None or worst < max(least_bad[1]["actor_gib"], least_bad[1]["critic_gib"]):
            least_bad = (lay, res)
    if least_bad is None:
        raise ValueError(
            f"{spec.name}: no valid layout on up to {max_nodes} nodes of {gpus_per_node} GPUs"
        )
    lay, res = best or least_bad
    params = spec.param_counts()
    return {
        "layout": res["layout"],
        "actor_gib": res["actor_gib"],
        "critic_gib": res["critic_gib"],
        "fits": best is not None,
        "breakdown": res["breakdown"],
        "preset": spec.name,
        "framework": spec.framework,
        "gpus_per_node": gpus_per_node,
        "gpu_mem_gib": gpu_mem_gib,
        "budget_gib": budget_gib,
        "seq_len": spec.seq_len,
        "micro_batch": spec.micro_batch,
        "params": params,
        "params_b": {k: round(v / 1e9, 3) for k, v in params.items()},
        "assumptions": __doc__.split("Two frameworks, one per preset:")[1].strip(),
    }


def table(result: dict[str, Any]) -> str:
    """The breakdown as a fixed-width text table."""
    b = result["breakdown"]
    lay = result["layout"]
    head = (
        f"{result['preset']}: {lay['nodes']} node(s) x {lay['gpus_per_node']} GPU(s) = {lay['world']}; "
        f"TP={lay['tp']} PP={lay['pp']} EP={lay['ep']} ETP={lay['etp']} DP={lay['dp']} (expert DP={lay['edp']}); "
        f"distributed optimizer={'on' if lay['dist_opt'] else 'off'}, recompute={lay['recompute']}, "
        f"offload={'on' if lay['offload'] else 'off'}; seq {result['seq_len']} x {result['micro_batch']}"
    )
    lines = [head, f"{'GiB per GPU':<14}{'actor':>10}{'critic':>10}"]
    for item in (*ITEMS, "total"):
        lines.append(f"{item:<14}{b['actor'][item]:>10.2f}{b['critic'][item]:>10.2f}")
    verdict = "fits" if result["fits"] else "DOES NOT FIT"
    lines.append(
        f"budget {result['budget_gib']} GiB per role on {result['gpu_mem_gib']} GiB GPUs: {verdict}"
    )
    p = result["params_b"]
    lines.append(
        f"params: total {p['total']}B, experts {p['experts']}B, critic {p['critic_total']}B"
    )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", required=True, help=f"tiny | {QWEN35_122B.name}")
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


def main(args: argparse.Namespace) -> int:
    try:
        spec = preset(args.preset, args.config)
    except ValueError as e:
        print(f"t1 plan-memory: {e}", file=sys.stderr)
        return 2
    over = {k: v for k, v in (("seq_len", args.seq_len), ("micro_batch", args.micro_batch)) if v}
    spec = dataclasses.replace(spec, **over)
    result = search(
        spec,
        args.gpus_per_node,
        args.gpu_mem_gib,
        args.budget_gib,
        args.max_nodes,
        args.allow_offload,
    )
    print(table(result))
    if args.json:
        write_json_atomic(args.json, result, indent=2)
    return 0 if result["fits"] else 1

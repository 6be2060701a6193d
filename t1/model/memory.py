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

Modules: this one searches the layouts; the model numbers and presets are
t1/model/memory_spec.py, a layout's per-GPU breakdown t1/model/memory_breakdown.py; the command
is t1/train/plan_memory.py (its --measure builds the trainer's models, so it sits in train).

Two frameworks, one per preset:
* `megatron` (the 122B preset): bf16 weights, fp32 main grads (persistent buffers), fp32
  master weights + Adam moments (12 B/param) sharded over DP (dense) / expert-DP (experts)
  with the distributed optimizer; sequence parallelism (activations / TP); 1F1B pipeline
  (stage 0 holds PP micro-batches, i.e. all layers' activations of one micro-batch); flash
  attention (no s^2 term); Gated DeltaNet states recomputed in backward (as the chunked
  kernels do); log-probabilities computed in chunks of `logits_chunk` tokens (the vocab is
  248k: full logits of a 33k sequence would be ~8 GB bf16 per TP rank); a fixed runtime
  reserve (CUDA context, NCCL, allocator slack). Activation counts per token and layer are
  listed in `_megatron_layer` (t1/model/memory_breakdown.py).
* `hf` (the tiny preset, CPU): fp32 weights, grads and Adam moments (16 B/param), no
  parallelism; activations = what HF's Qwen3-MoE forward saves for backward (per token per
  layer 6h + 4(a*d) + 4(g*d) + E + k(2h + 4f) floats, counted with saved-tensor hooks), plus
  3h + V for the head and, for the actor, 3 transient [tokens, V] buffers at the top of
  backward (the gradients through logsumexp, gather and the shift). Measured against the real
  CPU step by `t1 bench train` and tests/test_memory.py.
"""

from __future__ import annotations

import itertools
from typing import Any

from t1.model.memory_breakdown import ITEMS, Layout, plan, valid
from t1.model.memory_spec import ModelSpec

RECOMPUTE = ("none", "selective", "full")


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

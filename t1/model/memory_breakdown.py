"""Per-GPU bytes of the actor or the critic under one parallel layout (the planner's model).

    res = plan(spec, Layout(nodes=1, gpus_per_node=8, tp=2, ep=8))   # GiB of both roles
    breakdown(spec, lay, "actor")       # bytes by item (ITEMS), worst pipeline stage

`Layout` (nodes x GPUs; TP, PP, EP, ETP; DP follows; distributed optimizer, recompute,
offload) and `valid`; the activations saved per token and layer (`_megatron_layer`,
`_hf_layer`); `breakdown` and `plan`. The assumptions: t1/model/memory.py's docstring.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from t1.model.memory_spec import ModelSpec

GIB = 1024**3
ROLES = ("actor", "critic")
ITEMS = ("weights", "grads", "optimizer", "activations", "logits", "routing", "runtime")


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
        # the output layer on every token: the most t1.train.hf.loss_region_logp computes (a
        # row wholly in the loss region); fewer loss positions need less
        out["logits"] = 4 * tokens * spec.vocab * 4 if role == "actor" else 0.0
        out["routing"] = 2 * tokens * spec.layers * spec.top_k  # int16 replay record
        out["runtime"] = 0.0
        return out
    best = None
    for dense, experts, stage in per_stage:
        shard = (dense / lay.dp + experts / lay.edp) if lay.dist_opt else dense + experts
        opt_state = 12 * shard  # fp32 main weights + Adam moments
        opt = 0.0 if lay.offload else opt_state
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
        if lay.offload:  # the state waits on the host; the step brings it back (no activations)
            step = b["weights"] + b["grads"] + opt_state + b["runtime"]
            b["optimizer"] = max(0.0, step - sum(b.values()))  # what the step adds to the peak
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

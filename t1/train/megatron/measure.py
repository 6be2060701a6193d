"""Per-rank GPU memory of the trainer's REAL megatron-core models, measured without a GPU.

    from t1.train.megatron.measure import measure
    res = measure(cfg)          # cfg: t1.config.Config with train.backend megatron
    res["roles"]["actor"]["peak_gib"], res["coresident"]["peak_gib"], res["fits"]

For one rank of each pipeline stage of the layout in `cfg.train` (tensor_parallel,
pipeline_parallel, expert_parallel, expert_tensor_parallel on train.gpus) this module:

* initializes torch.distributed with the FAKE backend (torch.testing's FakeStore, "fake") at the
  full world size and that rank, then megatron-core's parallel_state with the layout, so every
  group size and rank (TP, PP, EP, ETP, DP, expert DP) is the one the real rank gets;
* builds the actor and the critic with the trainer's own functions (model.transformer_config,
  build_actor, build_critic; the HF config the trainer gets: t1.model.policy.hf_config of
  `model:` or the checkpoint's with model.init_from) under FakeTensorMode: real shard shapes,
  no memory;
* counts this rank's parameters (bf16 with model.train_dtype bfloat16), the fp32 gradient
  buffers of megatron-core's DDP (`grad_reduce_in_fp32`, full size on every rank) and the
  distributed optimizer's fp32 main weights + Adam moments (12 B per parameter of this rank's
  shard: dense parameters over the data-parallel group, expert parameters over the
  expert-data-parallel group, as DistributedOptimizer shards them);
* runs one micro-batch (1 x agent.context_tokens) forward AND backward under FakeTensorMode
  through the trainer's own code paths (actor: vocab_logp.hidden_states + the chunked
  vocab-parallel log-probs, 4,096 tokens per chunk; critic: model.forward's value head), with a
  dispatch-mode tracker of every live tensor storage (parameters excluded; each bf16 weight
  gradient freed once accumulated, as megatron-core's DDP hook does): the peak is measured.

What cannot run fake and what stands in (listed in the result's `stand_ins`):
* the Gated DeltaNet recurrence: fla's `chunk_gated_delta_rule` (Triton; not importable here)
  -> an autograd function that returns the output shape and saves its inputs q, k, v, g, beta
  for backward, as the chunked kernel does (states recomputed in backward; the planner's
  assumption, memory_breakdown._megatron_layer). Its internal transient workspace is not
  measured. fla's `l2norm` -> its torch formula (same tensors);
* MoE token routing: the token counts per expert come from the router's output (`.tolist()`
  is data-dependent and cannot run on fake tensors), so the token dispatcher is replaced by a
  balanced stand-in of megatron-core's alltoall dispatcher (permute to N*k rows, all-to-all over
  EP, all-gather over ETP, the experts' real SequentialMLP on balanced counts, the inverse, the
  probability-weighted unpermute). Router, shared expert and experts are megatron-core's code;
* not measurable at all: CUDA context, NCCL buffers, allocator fragmentation: the planner's
  fixed runtime reserve is added (memory_breakdown's 4 GiB) and reported as such;
* pipeline schedule: one micro-batch is measured; under 1F1B stage i holds pp - i micro-batches'
  saved activations, added as (pp - i - 1) x the measured saved activations at the end of forward.

Co-residence (`coresident`): the trainer trains the critic first, then the actor, offloading
the idle role with train.offload (residency.py): a bf16 role releases its DDP buffers (weights
and gradients) and moves its fp32 main weights and Adam moments to the host; without offload
the idle role stays whole. With train.optimizer_offload (host-resident optimizer state,
main_weights.py) a role's peak is the larger of its forward/backward without the optimizer
state and its optimizer step without activations (`phases`). The GPU-resident peak of a role's phase = that role's peak + what of
the idle role stays (`_idle_resident`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

import torch

from t1.train.megatron.measure_fakes import (
    GIB,
    RUNTIME_RESERVE,
    STAND_INS,
    BalancedDispatcher,
    LiveBytes,
    _cuda_shims,
    _flash_forward,
    _patched,
)

# ---------------------------------------------------------------- one rank


def hf_config_of(cfg):
    """The HF config the trainer's models are built from (t1.train.build's policy)."""
    if cfg.model.init_from:
        from t1.model.spec import hf_config

        return hf_config(cfg.model.init_from)
    from t1.model.policy import hf_config

    return hf_config(cfg.model, cfg.tokenizer.vocab_size)


def _init(world: int, rank: int, lay: dict[str, int]) -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel
    from torch.testing._internal.distributed.fake_pg import FakeStore

    _teardown()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    ps.initialize_model_parallel(
        tensor_model_parallel_size=lay["tp"],
        pipeline_model_parallel_size=lay["pp"],
        expert_model_parallel_size=lay["ep"],
        expert_tensor_parallel_size=lay["etp"],
        create_gloo_process_groups=False,
    )
    tensor_parallel.random.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)


def _teardown() -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    if ps.model_parallel_is_initialized():
        ps.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()


def build_fake(cfg, role: str, fake_mode):
    """(model, transformer config) of `role` on the current (fake-initialized) rank, built
    by the trainer's functions under `fake_mode`."""
    from t1.train.megatron import model as M

    hc = hf_config_of(cfg)
    dtype = torch.bfloat16 if cfg.model.train_dtype == "bfloat16" else torch.float32
    tc = M.transformer_config(
        hc,
        replay=cfg.ppo.replay,
        dtype=dtype,
        dispatcher="allgather",  # same parameters; alltoall's constructor needs a CUDA stream
        router_fusion=cfg.train.router_fusion,
        recompute=cfg.train.recompute,
        deterministic=False,  # the GPU path: fla's recurrence (its stand-in here)
    )
    with fake_mode:
        model = (M.build_actor if role == "actor" else M.build_critic)(tc, hc)
    return model, tc


def param_counts(model) -> dict[str, int]:
    """Elements and bytes of this rank's parameters, dense / expert (megatron-core marks expert
    parameters `allreduce=False`)."""
    out = {"dense": 0, "expert": 0, "bytes": 0}
    for p in model.parameters():
        out["expert" if not getattr(p, "allreduce", True) else "dense"] += p.numel()
        out["bytes"] += p.numel() * p.element_size()
    return out


def _activations(
    model, tc, role: str, tokens: int, chunk: int, fake_mode, attention: str = "local"
) -> dict[str, float]:
    """Measured bytes of one micro-batch's forward + backward on this rank (fake tensors).
    attention "flash": the local spec's DotProductAttention (an [sq, sk] score matrix per head)
    replaced by a flash-attention stand-in (what a TE spec would run)."""
    import types

    from megatron.core import parallel_state as ps
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.moe.moe_layer import MoELayer

    from t1.train.megatron import model as M
    from t1.train.megatron import vocab_logp as VL

    for m in model.modules():
        if isinstance(m, MoELayer):
            m.token_dispatcher = BalancedDispatcher(tc, m.num_local_experts)
        if attention == "flash" and isinstance(m, DotProductAttention):
            m.forward = types.MethodType(_flash_forward, m)
    params = [p for p in model.parameters()]
    hooks = [
        p.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", None))
        for p in params
        if p.requires_grad
    ]
    tp = ps.get_tensor_model_parallel_world_size()
    t = tokens + (-tokens % tp)
    first, last = ps.is_pipeline_first_stage(), ps.is_pipeline_last_stage()
    tracker = LiveBytes(ignore=[p.untyped_storage() for p in params])
    saved_end_fwd = 0
    model.train()
    try:
        with fake_mode, tracker:
            ids = torch.zeros(1, t, dtype=torch.long)
            if not first:  # the previous stage's output, [S/TP, B, H] under SP
                s = t // tp if tc.sequence_parallel else t
                x = torch.empty(s, 1, tc.hidden_size, dtype=tc.params_dtype, requires_grad=True)
                model.set_input_tensor(x)
            if last and role == "actor":
                h = VL.hidden_states(model, ids)
                w, start, real = VL.output_shard(model)
                logp, _ = VL.aligned_logp_entropy(
                    h, w, ids, start, real, chunk=chunk, group=ps.get_tensor_model_parallel_group()
                )
                out = logp.float().sum()
            elif last:
                out = M.forward(model, ids)[..., 0].float().sum()
            else:
                pos = torch.arange(t)[None]
                out = model(ids, pos, M.causal_mask(t))
            saved_end_fwd = tracker.live
            if out.dim() == 0:
                out.backward()
            else:
                out.backward(torch.empty_like(out))
            del out
    finally:
        for h in hooks:
            h.remove()
    return {"peak": float(tracker.peak), "saved": float(saved_end_fwd)}


def measure_rank(
    cfg, role: str, stage: int, tokens: int, chunk: int = 4096, attention: str = "local"
) -> dict[str, Any]:
    """Bytes of `role` on the first rank of pipeline stage `stage` of cfg.train's layout."""
    from megatron.core import parallel_state as ps
    from torch._subclasses.fake_tensor import FakeTensorMode

    t = cfg.train
    lay = {
        "tp": t.tensor_parallel,
        "pp": t.pipeline_parallel,
        "ep": t.expert_parallel,
        "etp": t.expert_tensor_parallel,
    }
    world = t.gpus
    rank = stage * (world // lay["pp"])  # pp is the outermost of megatron's tp-cp-ep-dp-pp
    with _patched(_cuda_shims()):
        _init(world, rank, lay)
        try:
            assert ps.get_pipeline_model_parallel_rank() == stage
            fake = FakeTensorMode(allow_non_fake_inputs=True)
            model, tc = build_fake(cfg, role, fake)
            n = param_counts(model)
            dp = ps.get_data_parallel_world_size()
            edp = ps.get_expert_data_parallel_world_size()
            act = _activations(model, tc, role, tokens, chunk, fake, attention) if tokens else None
        finally:
            _teardown()
    params = n["dense"] + n["expert"]
    b = {
        "weights": float(n["bytes"]),
        "grads": 4.0 * params,
        "optimizer": 12.0 * (n["dense"] / dp + n["expert"] / edp),
    }
    out = {
        "rank": rank,
        "stage": stage,
        "dp": dp,
        "edp": edp,
        "params": params,
        "params_dense": n["dense"],
        "params_expert": n["expert"],
        "bytes": b,
    }
    if act is not None:
        in_flight = lay["pp"] - stage
        b["activations_peak"] = act["peak"]
        b["pipeline_in_flight"] = (in_flight - 1) * act["saved"]
        b["runtime"] = RUNTIME_RESERVE
        out["saved_activations"] = act["saved"]
    out["total"] = sum(b.values())
    if act is not None and t.optimizer_offload:  # main_weights.MainWeightsAdam(host_state=True)
        fwd_bwd = out["total"] - b["optimizer"]  # the optimizer state waits on the host
        step = b["weights"] + b["grads"] + b["optimizer"] + b["runtime"]  # no activations
        out["phases"] = {"forward_backward": fwd_bwd, "optimizer_step": step}
        out["total"] = max(fwd_bwd, step)
    return out


# ---------------------------------------------------------------- the whole layout


def _gib(x: float) -> float:
    return round(x / GIB, 6)


def attention_of(cfg) -> str:
    """The measure's core attention for cfg.train.attention as the GPU nodes build it: "te"
    sized by the flash stand-in (Transformer Engine does not import here), else "local"."""
    from t1.train.megatron.attention import resolve

    return (
        "flash" if resolve(cfg.train.attention, on_gpu=cfg.campaign.gpus > 0) == "te" else "local"
    )


def measure(
    cfg, tokens: int | None = None, chunk: int = 4096, attention: str | None = None
) -> dict[str, Any]:
    """Measured per-rank bytes of actor and critic (worst stage each), the co-resident peak,
    and the planner's estimate beside them. `attention`: local | flash (default: what
    cfg.train.attention builds on the GPU nodes, attention_of)."""
    from t1.train.megatron.plan import plan_for

    attention = attention_of(cfg) if attention is None else attention
    tokens = cfg.agent.context_tokens if tokens is None else tokens
    pp = cfg.train.pipeline_parallel
    roles: dict[str, Any] = {}
    for role in ("critic", "actor"):  # the trainer's order: critic first, then actor
        stages = [measure_rank(cfg, role, s, tokens, chunk, attention) for s in range(pp)]
        worst = max(stages, key=lambda r: r["total"])
        roles[role] = {
            "stages": [
                dict(
                    r, bytes={k: _gib(v) for k, v in r["bytes"].items()}, total_gib=_gib(r["total"])
                )
                for r in stages
            ],
            "worst_stage": worst["stage"],
            "peak_gib": _gib(worst["total"]),
            "breakdown_gib": {k: _gib(v) for k, v in worst["bytes"].items()},
            "phases_gib": {k: _gib(v) for k, v in worst.get("phases", {}).items()},
        }
    stays, idle_of = _idle_resident(cfg)
    co = {}
    for role, idle in (("critic", "actor"), ("actor", "critic")):
        best = 0.0
        for s in range(pp):
            here = roles[role]["stages"][s]
            best = max(best, here["total_gib"] + idle_of(roles[idle]["stages"][s]["bytes"]))
        co[role] = round(best, 3)
    budget = cfg.train.gpu_budget_gib
    plan = None
    with contextlib.suppress(Exception):
        plan = plan_for(_with_seq(cfg, tokens))
    peak = max(co.values())
    return {  # GiB throughout
        "layout": {
            "world": cfg.train.gpus,
            "tp": cfg.train.tensor_parallel,
            "pp": pp,
            "ep": cfg.train.expert_parallel,
            "etp": cfg.train.expert_tensor_parallel,
        },
        "tokens": tokens,
        "logits_chunk": chunk,
        "attention": attention,
        "roles": roles,
        "coresident": {
            "order": ["critic", "actor"],
            "phase_peak_gib": co,
            "peak_gib": peak,
            "stays_on_gpu": stays,
        },
        "planned_gib": None
        if plan is None
        else {
            "actor": plan["actor_gib"],
            "critic": plan["critic_gib"],
            "breakdown": plan["breakdown"],
        },
        "budget_gib": budget,
        "fits": bool(tokens) and peak <= budget,
        "stand_ins": STAND_INS,
    }


def _with_seq(cfg, tokens: int):  # the planner's figure at the measured tokens
    return dataclasses.replace(cfg, agent=dataclasses.replace(cfg.agent, context_tokens=tokens))


def _idle_resident(cfg):
    """(what of the idle role stays on the GPU, in words; its GiB from a stage's breakdown).
    Without train.offload all of it; with offload a bf16 role's DDP buffers (weights and
    gradients) are released and its fp32 main weights and Adam moments moved to the host
    (main_weights.MainWeightsAdam.move), while an fp32 role keeps its gradient buffers."""
    host = cfg.train.optimizer_offload  # Adam state on the host between steps, either role
    if not cfg.train.offload:
        return (
            "all of the idle role (train.offload false)"
            + (" but its optimizer state (train.optimizer_offload)" if host else ""),
            lambda b: b["weights"] + b["grads"] + (0.0 if host else b["optimizer"]),
        )
    if cfg.model.train_dtype == "bfloat16":
        return "nothing of the idle role (offloaded: weights, gradients, optimizer)", lambda b: 0.0
    return "the idle role's fp32 gradient buffers (fp32 offload keeps main_grad)", lambda b: b[
        "grads"
    ]

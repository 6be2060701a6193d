"""Which trainer a config gets, and the memory plan checked before it launches.

    from t1.train.megatron.plan import build, check_plan
    check_plan(cfg)                        # raises naming the role and GiB when it cannot fit
    trainer = build(cfg, actor, critic)    # HFTrainer or MegatronTrainer per train.backend

`check_plan` runs t1.model.memory's planner on the config's model (`tiny_spec`: the `model:` section,
the tokenizer's vocabulary, agent.context_tokens, ppo.minibatch; with `model.init_from` the
checkpoint's architecture, t1.model.spec, after refusing a `model:` section that contradicts
it) for the chosen backend:
* hf: one process holds everything (fp32 weights, grads, Adam). If the actor or the critic
  needs more than `train.gpu_budget_gib`, refuse: such a model needs train.backend megatron.
* megatron: the layout of train.* (TP, PP, EP, ETP) on train.gpus (DP follows), activation
  recompute "full" when train.recompute else "none", each role alone within the budget (actor
  and critic co-reside and train in turn); with `train.offload` the idle role waits in host
  memory, without it both roles must fit `campaign.gpu_mem_gib` together (`co_resident_gib`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from t1.config import Config


class PlanError(ValueError):
    """The memory plan does not fit the configured budget."""


def plan_for(cfg: Config) -> dict[str, Any]:
    from t1.model import memory_breakdown
    from t1.model.spec import memory_spec

    t = cfg.train
    spec = dataclasses.replace(memory_spec(cfg), name=f"{cfg.model.arch} ({t.backend})")
    if t.backend == "hf":
        lay = memory_breakdown.Layout(1, 1, dist_opt=False)
    else:
        spec = dataclasses.replace(spec, framework="megatron")
        lay = memory_breakdown.Layout(
            1,
            t.gpus,
            tp=t.tensor_parallel,
            pp=t.pipeline_parallel,
            ep=t.expert_parallel,
            etp=t.expert_tensor_parallel,
            recompute="full" if t.recompute else "none",
            offload=t.optimizer_offload,  # Adam state on the host between steps (main_weights.py)
        )
        if not memory_breakdown.valid(spec, lay):
            raise PlanError(
                f"train: layout tp={lay.tp} pp={lay.pp} ep={lay.ep} etp={lay.etp} on "
                f"{lay.world} GPUs does not divide the model (layers, experts, heads)"
            )
    return memory_breakdown.plan(spec, lay)


def check_plan(cfg: Config) -> dict[str, Any]:
    """The plan of `cfg`'s backend; raises PlanError when a role exceeds train.gpu_budget_gib."""
    if cfg.train.backend not in ("hf", "megatron"):
        raise ValueError(f"train.backend must be hf or megatron, got {cfg.train.backend!r}")
    if cfg.train.backend == "megatron" and cfg.ppo.kl_coef > 0:
        raise PlanError(
            f"ppo.kl_coef {cfg.ppo.kl_coef:g} needs a reference policy beside actor and critic, "
            "which the megatron trainer does not hold (a third model on the GPUs): set "
            "ppo.kl_coef: 0 (the recipe has no KL term) or train.backend: hf"
        )
    from t1.model.spec import resolve

    cfg = resolve(cfg)  # model.init_from: SpecMismatch naming every disagreeing key
    res = plan_for(cfg)
    budget = cfg.train.gpu_budget_gib
    for role in ("actor", "critic"):
        if res[f"{role}_gib"] > budget:
            hint = (
                "it needs train.backend megatron (t1 plan-memory --preset ... sizes a layout)"
                if cfg.train.backend == "hf"
                else "raise train.tensor_parallel / expert_parallel / pipeline_parallel"
            )
            raise PlanError(
                f"train.backend {cfg.train.backend}: the {role} needs {res[f'{role}_gib']:.1f} GiB "
                f"per process/GPU, over train.gpu_budget_gib {budget:g}: {hint}"
            )
    res["co_resident_gib"] = co_resident_gib(cfg, res)
    gpu = cfg.campaign.gpu_mem_gib
    if gpu > 0 and res["co_resident_gib"] > gpu:
        raise PlanError(
            f"train: actor {res['actor_gib']:.1f} + critic {res['critic_gib']:.1f} GiB stay on "
            f"the same GPUs (train.offload false): {res['co_resident_gib']:.1f} GiB, over "
            f"campaign.gpu_mem_gib {gpu:g}; set train.offload: true (the idle role waits in host "
            "memory) or shard further"
        )
    return res


def co_resident_gib(cfg: Config, res: dict[str, Any]) -> float:
    """GPU memory of actor and critic on the same GPUs: both roles at once, or with
    `train.offload` the larger role alone (the other's weights, gradients and Adam state wait in
    host memory while it trains: critic first, then actor)."""
    a, c = res["actor_gib"], res["critic_gib"]
    return max(a, c) if cfg.train.offload else a + c


def build(cfg: Config, actor, critic, actor_lr: float | None = None):
    """The trainer of `cfg.train.backend`, after the memory plan check."""
    check_plan(cfg)
    if cfg.train.backend == "hf":
        from t1.train.state import build_trainer

        return build_trainer(cfg, actor, critic, actor_lr=actor_lr)
    from t1.train.megatron.attention import resolve as resolve_attention
    from t1.train.megatron.runtime import Parallel
    from t1.train.megatron.trainer import MegatronTrainer
    from t1.train.state import trainer_options

    t = cfg.train
    return MegatronTrainer(
        actor,
        critic,
        **trainer_options(cfg, actor_lr),
        parallel=Parallel(
            t.tensor_parallel, t.pipeline_parallel, t.expert_parallel, t.expert_tensor_parallel
        ),
        router_fusion=t.router_fusion,
        offload=t.offload,
        optimizer_offload=t.optimizer_offload,
        attention=resolve_attention(t.attention),
        recompute=t.recompute,
        logp_chunk=t.logp_chunk,
    )

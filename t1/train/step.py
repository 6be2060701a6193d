"""One PPO step, critic first: the order the recipe prescribes, on any `Trainer` backend.

    from t1.train.step import ppo_step
    metrics = ppo_step(trainer, batch, cfg.ppo, gap_ema=prev_ema)

1. actor forward (no grad, R³ replay): old logprobs, entropy, and the train-inference gap
   against the engine's logprobs over the loss region;
2. critic forward: values V0 before any update; returns from the rewards (on each row's final
   sampled token) by GAE; explained variance of V0 against those returns;
3. critic updates: `epochs` passes of minibatches (`minibatch` rows each) on the clipped value
   loss around V0;
4. critic forward again: values V1 of the UPDATED critic -> the actor's advantages (GAE);
5. actor updates: `epochs` passes of minibatches on the clipped surrogate (no entropy bonus),
   ratios against the old logprobs of step 1 (`old_logp: trainer`, the default) or the
   engine's (`old_logp: rollout`); with `kl_coef` > 0 plus kl_coef times the KL estimate to
   the reference policy (`trainer.reference_logp`, taken once before the updates; the recipe
   has no KL term).
With `update_actor=False` (critic re-calibration) steps 4-5 are skipped.

Returns a flat dict of metrics for the JSON-lines log (see `t1.store.metrics_log`).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any

import torch

from t1.config import PPOConfig
from t1.ppo.advantages import gae, token_rewards
from t1.ppo.losses import LOSS_AGGS, aggregate, kl_penalty, masked_mean, policy_loss, value_loss
from t1.ppo.metrics import clip_fraction, ema, explained_variance, train_inference_gap
from t1.train.batch import Batch
from t1.train.protocol import Trainer


def minibatches(trainer: Trainer, n: int, size: int) -> list[list[int]]:
    """Row indices of one epoch: a shuffle from the trainer's generator, cut into `size`s."""
    perm = trainer.permutation(n) if hasattr(trainer, "permutation") else list(range(n))
    size = max(1, size)
    return [perm[i : i + size] for i in range(0, n, size)]


def _rows(x: torch.Tensor, idx: list[int], mb: Batch) -> torch.Tensor:
    """Rows `idx` of a whole-batch [B, T] tensor, trimmed and moved like the minibatch `mb`."""
    return x[idx, : mb.input_ids.shape[1]].to(mb.input_ids.device)


def ppo_step(
    trainer: Trainer,
    batch: Batch,
    cfg: PPOConfig,
    *,
    gap_ema: float | None = None,
    update_actor: bool = True,
) -> dict[str, Any]:
    """Run one critic-first PPO step on `batch`; returns its metrics (including the new
    `gap_ema`, `advantages` and `returns` tensors under the keys `_advantages`/`_returns`)."""
    if cfg.old_logp not in ("trainer", "rollout"):
        raise ValueError(f"ppo.old_logp must be 'trainer' or 'rollout', got {cfg.old_logp!r}")
    if cfg.loss_agg not in LOSS_AGGS:
        raise ValueError(f"ppo.loss_agg must be one of {LOSS_AGGS}, got {cfg.loss_agg!r}")
    t0 = time.perf_counter()
    mask = batch.loss_mask

    # 1. the old policy, as the trainer sees it now
    old = trainer.actor_forward(batch, entropy=True)
    gap = train_inference_gap(old.logp, batch.rollout_logp, mask)
    old_logp = old.logp if cfg.old_logp == "trainer" else batch.rollout_logp

    # 2. pre-update values, returns, explained variance
    rewards = token_rewards(batch.reward, mask)
    v0 = trainer.critic_values(batch)
    _, returns = gae(rewards, v0, mask, cfg.gamma, cfg.lam)
    ev = explained_variance(v0, returns, mask)

    # 3. critic first
    vlosses = []
    for _ in range(cfg.epochs):
        for idx in minibatches(trainer, batch.size, cfg.minibatch):
            mb = batch.select(idx)

            def vloss_fn(values, b, idx=idx):
                loss = value_loss(
                    values,
                    _rows(v0, idx, b),
                    _rows(returns, idx, b),
                    b.loss_mask,
                    cfg.value_clip_eps,
                )
                return loss, {"value_loss": float(loss.detach())}

            vlosses.append(trainer.critic_update(mb, vloss_fn)["value_loss"])

    metrics: dict[str, Any] = {
        "gap": gap,
        "gap_ema": ema(gap_ema, gap),
        "explained_variance": ev,
        "value_loss": _mean(vlosses),
        "entropy": float(masked_mean(old.entropy, mask)),
    }
    # R3 check of step 1's forward (hf backend): live routing vs the engine's, experts used
    for key, value in (getattr(trainer, "routing_check", None) or {}).items():
        metrics[f"routing_{key}"] = value

    # 4-5. advantages from the freshly updated critic, then the actor
    plosses, clips, kls = [], [], []
    if update_actor:
        v1 = trainer.critic_values(batch)
        advantages, _ = gae(rewards, v1, mask, cfg.gamma, cfg.lam)
        ref_logp = None
        if cfg.kl_coef > 0:
            ref_logp = trainer.reference_logp(batch)
            # how far the actor is from the reference before this step's updates
            metrics["kl_ref"] = float(masked_mean(kl_penalty(old.logp, ref_logp), mask))
        for _ in range(cfg.epochs):
            for idx in minibatches(trainer, batch.size, cfg.minibatch):
                mb = batch.select(idx)

                def ploss_fn(logp, b, idx=idx):
                    o, a = _rows(old_logp, idx, b), _rows(advantages, idx, b)
                    loss = policy_loss(logp, o, a, b.loss_mask, cfg.clip_eps, cfg.loss_agg)
                    out = {
                        "policy_loss": float(loss.detach()),
                        "clip_fraction": clip_fraction(logp, o, b.loss_mask, cfg.clip_eps),
                    }
                    if ref_logp is not None:
                        r = _rows(ref_logp, idx, b)
                        kl = aggregate(kl_penalty(logp, r), b.loss_mask, cfg.loss_agg)
                        loss = loss + cfg.kl_coef * kl
                        out["kl_loss"] = float(kl.detach())
                    return loss, out

                m = trainer.actor_update(mb, ploss_fn)
                plosses.append(m["policy_loss"])
                clips.append(m["clip_fraction"])
                if "kl_loss" in m:
                    kls.append(m["kl_loss"])
        metrics["_advantages"] = advantages
        metrics["advantage_mean"] = float(masked_mean(advantages, mask))
    metrics["_returns"] = returns
    metrics["_old_logp"] = old_logp
    metrics["policy_loss"] = _mean(plosses)
    metrics["clip_fraction"] = _mean(clips)
    if kls:
        metrics["kl_loss"] = _mean(kls)
    metrics["actor_updated"] = bool(update_actor)
    metrics.update(batch_stats(batch))
    dt = time.perf_counter() - t0
    metrics["step_time_s"] = dt
    metrics["tokens_per_s"] = batch.tokens / dt if dt > 0 else math.nan
    return metrics


def batch_stats(batch: Batch) -> dict[str, Any]:
    """Reward, resolved rate (overall, per category), statuses, placeholder and drift rates."""
    meta = batch.meta
    out: dict[str, Any] = {
        "rows": batch.size,
        "tokens": batch.tokens,
        "loss_tokens": batch.loss_tokens,
    }
    rewards = [float(m["reward"]) for m in meta if "reward" in m] or batch.reward.tolist()
    out["reward_mean"] = sum(rewards) / len(rewards) if rewards else math.nan
    resolved = [m for m in meta if "resolved" in m]
    if resolved:
        out["resolved_rate"] = sum(bool(m["resolved"]) for m in resolved) / len(resolved)
        per: dict[str, list[bool]] = defaultdict(list)
        for m in resolved:
            per[str(m.get("category", "unknown"))].append(bool(m["resolved"]))
        out["resolved_by_category"] = {k: sum(v) / len(v) for k, v in sorted(per.items())}
    statuses: dict[str, int] = defaultdict(int)
    for m in meta:
        if "status" in m:
            statuses[str(m["status"])] += 1
    out["status_counts"] = dict(statuses)
    out["truncated"] = statuses.get("TRUNCATED", 0)
    if batch.routing is not None:
        real = torch.arange(batch.input_ids.shape[1])[None, :] < batch.lengths[:, None]
        ph = (batch.routing < 0).flatten(2).any(-1)
        out["placeholder_rate"] = float((ph & real).sum()) / max(1, int(real.sum()))
        last = torch.arange(batch.input_ids.shape[1])[None, :] == (batch.lengths[:, None] - 1)
        # The final position of a segment may hold -1 (engines never capture it; nothing in the
        # segment depends on its routing); any other loss position with -1 is a TITO bug.
        out["placeholders_in_loss"] = int((ph & batch.loss_mask & ~last).sum())
    drift = [m["drift_positions"] for m in meta if "drift_positions" in m]
    if drift:
        out["drift_rate"] = sum(drift) / max(1, batch.loss_tokens)
    return out


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan

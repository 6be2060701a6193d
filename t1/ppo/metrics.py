"""Per-step training metrics as pure functions over [B, T] tensors and the loss mask.

    from t1.ppo.metrics import train_inference_gap, ema, explained_variance, entropy_from_logits
    gap = train_inference_gap(logp_train, logp_rollout, loss_mask)
    gap_ema = ema(gap_ema, gap, alpha=0.25)

The train-inference gap is the mask-weighted mean |log pi_train - log pi_rollout| over the loss
region (paper: 0.021 without TITO + R3, 0.013 with both). The EMA opens at the first value.
Explained variance takes the critic's values from BEFORE its update on the batch, so it
measures prediction on data the critic has not fitted yet.
"""

from __future__ import annotations

import math

import torch

from t1.ppo.losses import masked_mean

GAP_EMA_ALPHA = 0.25


def train_inference_gap(
    logp_train: torch.Tensor, logp_rollout: torch.Tensor, loss_mask: torch.Tensor
) -> float:
    """Mask-weighted mean |logp_train - logp_rollout|. All [B, T]; returns a float (nan when
    the loss region is empty)."""
    mask = loss_mask.bool()
    if not mask.any():
        return math.nan
    diff = (logp_train.detach().double() - logp_rollout.detach().double()).abs()
    return float(masked_mean(diff, mask))


def ema(previous: float | None, value: float, alpha: float = GAP_EMA_ALPHA) -> float:
    """Exponential moving average: alpha * value + (1 - alpha) * previous; the first value
    (previous None or nan) opens the average. A nan value leaves the average unchanged."""
    if math.isnan(value):
        return math.nan if previous is None else previous
    if previous is None or math.isnan(previous):
        return value
    return alpha * value + (1.0 - alpha) * previous


def explained_variance(
    values: torch.Tensor, returns: torch.Tensor, loss_mask: torch.Tensor
) -> float:
    """1 - Var(R - V) / Var(R) over the loss positions. values, returns: [B, T].

    Population variances, pooled over all loss tokens of the batch. Returns nan when Var(R) is
    0 (e.g. every trajectory got the same reward) or the loss region is empty.
    """
    mask = loss_mask.bool()
    r = returns.detach().double()[mask]
    v = values.detach().double()[mask]
    if r.numel() == 0:
        return math.nan
    var_r = r.var(unbiased=False)
    if float(var_r) == 0.0:
        return math.nan
    return float(1.0 - (r - v).var(unbiased=False) / var_r)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax over the last axis: [B, T, V] -> [B, T] (nats)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def clip_fraction(
    logp: torch.Tensor, old_logp: torch.Tensor, loss_mask: torch.Tensor, clip_eps: float = 0.2
) -> float:
    """Share of loss tokens whose ratio exp(logp - old_logp) lies outside [1-eps, 1+eps]
    (whatever the advantage's sign). All [B, T]."""
    ratio = torch.exp(logp.detach() - old_logp.detach())
    out = ((ratio < 1.0 - clip_eps) | (ratio > 1.0 + clip_eps)).double()
    return float(masked_mean(out, loss_mask.bool()))

"""PPO losses: symmetric clipped surrogate and clipped value loss.

    from t1.ppo.losses import masked_mean, policy_loss, value_loss
    loss = policy_loss(logp, old_logp, adv, loss_mask, clip_eps=0.2)
    loss = policy_loss(logp, old_logp, adv, loss_mask, clip_eps=0.2, agg="sequence")
    loss = loss + kl_coef * aggregate(kl_penalty(logp, ref_logp), loss_mask, agg)
    vloss = value_loss(values, old_values, returns, loss_mask, clip_eps=0.2)

How the policy loss averages over the loss region (`ppo.loss_agg`; verl's `loss_agg_mode`):
  token     the sum over all loss positions of all rows divided by their count (the default;
            long trajectories weigh more than short ones, token for token);
  sequence  each row's mean over its own loss positions, then the mean over the rows that
            have any (every trajectory weighs the same: a 40-token family answer is not
            drowned by a 700-token failure beside it).
The value loss is always the token-level mean. There is no entropy bonus. A KL term to a
reference policy (the one PPO started from) joins the actor's loss only with `ppo.kl_coef` > 0
(the recipe has none): `kl_penalty`, averaged the same way as the surrogate.
"""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x over positions where mask is set. x, mask: [B, T]. Returns a 0-d tensor
    (0 when the mask is empty, so an empty minibatch contributes no gradient)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


LOSS_AGGS = ("token", "sequence")


def sequence_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each row's mean of x over its masked positions, then the mean over the rows with any.
    x, mask: [B, T]. Returns a 0-d tensor (0 when the mask is empty)."""
    m = mask.to(x.dtype)
    count = m.sum(dim=1)
    rows = count > 0
    per_row = (x * m).sum(dim=1) / count.clamp(min=1.0)
    return (per_row * rows.to(x.dtype)).sum() / rows.sum().clamp(min=1).to(x.dtype)


def aggregate(x: torch.Tensor, mask: torch.Tensor, agg: str = "token") -> torch.Tensor:
    """`masked_mean` (agg "token") or `sequence_mean` (agg "sequence")."""
    if agg == "token":
        return masked_mean(x, mask)
    if agg == "sequence":
        return sequence_mean(x, mask)
    raise ValueError(f"ppo.loss_agg must be one of {', '.join(LOSS_AGGS)}, got {agg!r}")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    clip_eps: float = 0.2,
    agg: str = "token",
) -> torch.Tensor:
    """Clipped surrogate: mean of -min(rho * A, clip(rho, 1-eps, 1+eps) * A) over the loss region.

    logp (with grad), old_logp, advantages: [B, T]; loss_mask: [B, T]; agg: token | sequence
    (how the mean is taken; module docstring).
    rho = exp(logp - old_logp). Returns a 0-d tensor. (The clip fraction is a metric:
    `t1.ppo.metrics.clip_fraction`.)
    """
    ratio = torch.exp(logp - old_logp.detach())
    adv = advantages.detach()
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    return aggregate(-torch.minimum(unclipped, clipped), loss_mask, agg)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token estimate of KL(actor || reference) on tokens the actor sampled: the "k3"
    estimator, exp(d) - d - 1 with d = ref_logp - logp (Schulman, "Approximating KL
    divergence"; verl's and slime's `low_var_kl`). Non-negative, 0 where the two agree, and
    its gradient in logp, 1 - pi_ref / pi, lowers a token the actor now favours far more than
    the reference did whatever its advantage: a pull back that does not vanish when the critic
    has learnt that a task fails. d is clamped to [-10, 10] as verl does.

    logp (with grad), ref_logp: [B, T]. Returns [B, T] (mask and average it with `aggregate`)."""
    d = torch.clamp(ref_logp.detach() - logp, -10.0, 10.0)
    return torch.exp(d) - d - 1.0


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    loss_mask: torch.Tensor,
    clip_eps: float = 0.2,
) -> torch.Tensor:
    """Clipped value loss: mean of 0.5 * max((V - R)^2, (V_clip - R)^2) over the loss region.

    values (with grad), old_values, returns: [B, T]; loss_mask: [B, T].
    V_clip = old_V + clip(V - old_V, -eps, +eps) (eps in the units of the reward).
    """
    old = old_values.detach()
    ret = returns.detach()
    v_clip = old + torch.clamp(values - old, -clip_eps, clip_eps)
    err = torch.maximum((values - ret) ** 2, (v_clip - ret) ** 2)
    return 0.5 * masked_mean(err, loss_mask)

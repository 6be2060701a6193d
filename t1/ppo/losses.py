"""PPO losses: symmetric clipped surrogate and clipped value loss, token-level means.

    from t1.ppo.losses import masked_mean, policy_loss, value_loss
    loss = policy_loss(logp, old_logp, adv, loss_mask, clip_eps=0.2)
    vloss = value_loss(values, old_values, returns, loss_mask, clip_eps=0.2)

Every mean is a token-level mean over the loss region of the whole batch: sum over all loss
positions of all rows divided by their count (long trajectories weigh more than short ones,
token for token). There are no KL terms and no entropy bonus.
"""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x over positions where mask is set. x, mask: [B, T]. Returns a 0-d tensor
    (0 when the mask is empty, so an empty minibatch contributes no gradient)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    clip_eps: float = 0.2,
) -> torch.Tensor:
    """Clipped surrogate: mean of -min(rho * A, clip(rho, 1-eps, 1+eps) * A) over the loss region.

    logp (with grad), old_logp, advantages: [B, T]; loss_mask: [B, T].
    rho = exp(logp - old_logp). Returns a 0-d tensor. (The clip fraction is a metric:
    `t1.ppo.metrics.clip_fraction`.)
    """
    ratio = torch.exp(logp - old_logp.detach())
    adv = advantages.detach()
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    return masked_mean(-torch.minimum(unclipped, clipped), loss_mask)


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

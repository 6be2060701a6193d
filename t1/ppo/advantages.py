"""Rewards on tokens, and generalized advantage estimation over the loss region.

    from t1.ppo.advantages import token_rewards, gae
    r = token_rewards(reward, loss_mask)               # [B, T]
    adv, ret = gae(r, values, loss_mask, gamma=1.0, lam=1.0)

Indexing: position t of every [B, T] tensor is the token at position t of the stream. An action
is a loss position (a token the sampler emitted); values[b, t] is the critic's estimate of the
return from just before token t was sampled (the trainer shifts the value head's output by one
so that this holds).

Masking: context positions (observations, template glue, padding) are not actions; the
recursion skips them, so the successor of an action is the NEXT LOSS POSITION of the same row,
however much context lies between. The last action of a row is terminal (its successor value is
0). Advantages and returns are 0 at context positions.

With gamma = lam = 1 (the recipe) this reduces to advantage = return - value, where the return
of every action is the sum of the rewards from it to the end of the row; with the reward on the
final sampled token only, that is the row's reward.
"""

from __future__ import annotations

import torch


def token_rewards(reward: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Place each row's scalar reward on its final sampled token.

    reward: [B] float; loss_mask: [B, T] bool/0-1. Returns [B, T] float, zero except at the last
    loss position of each row. A row without any loss position gets no reward (all zeros).
    """
    mask = loss_mask.bool()
    b, t = mask.shape
    pos = torch.arange(t, device=mask.device).expand(b, t)
    last = torch.where(mask, pos, torch.full_like(pos, -1)).max(dim=1).values  # [B]
    dtype = reward.dtype if reward.is_floating_point() else torch.float32
    out = torch.zeros(b, t, dtype=dtype, device=mask.device)
    rows = torch.nonzero(last >= 0).squeeze(1)
    out[rows, last[rows]] = reward.to(mask.device)[rows].to(out.dtype)
    return out


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    loss_mask: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over the loss positions of each row; context positions are skipped.

    rewards, values: [B, T] float; loss_mask: [B, T] bool/0-1.
    Returns (advantages [B, T], returns [B, T]), both 0 at context positions, with
    returns = advantages + values at loss positions (the critic's regression target).

    For the loss positions t_1 < ... < t_n of a row (successor of t_i is t_{i+1}):
        delta_i = r[t_i] + gamma * V[t_{i+1}] - V[t_i]          (V[t_{n+1}] = 0)
        A_i     = delta_i + gamma * lam * A_{i+1}               (A_{n+1} = 0)
    Rewards at context positions are ignored (they are zero by construction).
    """
    mask = loss_mask.bool()
    values = values.detach().to(torch.float32)
    rewards = rewards.to(torch.float32)
    b, t = mask.shape
    adv = torch.zeros(b, t, device=values.device)
    next_value = torch.zeros(b, device=values.device)
    next_adv = torch.zeros(b, device=values.device)
    if gamma == 1.0 and lam == 1.0:
        # Closed form: A = (sum of rewards from t on, over loss positions) - V.
        r = torch.where(mask, rewards, torch.zeros_like(rewards))
        ret = r.flip(1).cumsum(1).flip(1)
        adv = torch.where(mask, ret - values, torch.zeros_like(ret))
    else:
        for i in range(t - 1, -1, -1):
            m = mask[:, i]
            delta = rewards[:, i] + gamma * next_value - values[:, i]
            a = delta + gamma * lam * next_adv
            adv[:, i] = torch.where(m, a, torch.zeros_like(a))
            next_value = torch.where(m, values[:, i], next_value)
            next_adv = torch.where(m, a, next_adv)
    returns = torch.where(mask, adv + values, torch.zeros_like(adv))
    return adv, returns

"""Clipped surrogate and clipped value loss against hand-computed values."""

import math

import pytest
import torch

from t1.ppo.losses import aggregate, masked_mean, policy_loss, sequence_mean, value_loss


def test_masked_mean_is_token_level_over_the_batch():
    x = torch.tensor([[1.0, 2.0, 100.0], [3.0, 100.0, 100.0]])
    m = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert masked_mean(x, m).item() == pytest.approx(2.0)  # (1+2+3)/3, not mean of row means
    assert masked_mean(x, torch.zeros_like(m)).item() == 0.0


def test_sequence_mean_weighs_every_row_the_same():
    x = torch.tensor([[1.0, 2.0, 100.0], [3.0, 100.0, 100.0], [7.0, 7.0, 7.0]])
    m = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # the empty third row does not count
    assert sequence_mean(x, m).item() == pytest.approx((1.5 + 3.0) / 2)
    assert aggregate(x, m, "token").item() == pytest.approx(2.0)
    assert sequence_mean(x, torch.zeros_like(m)).item() == 0.0
    with pytest.raises(ValueError, match="loss_agg"):
        aggregate(x, m, "seq")


def test_policy_loss_by_sequence_gives_a_short_row_a_long_rows_weight():
    # a 1-token row with A=+1 beside a 3-token row with A=-1, ratio 1: the token mean is
    # -(1 - 3) / 4 = 0.5, the sequence mean -(1 + (-1)) / 2 = 0; the short row's gradient is
    # 1/4 of the loss's per token, then 1/2
    logp = torch.zeros(2, 3, requires_grad=True)
    adv = torch.tensor([[1.0, 0.0, 0.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    token = policy_loss(logp, logp.detach(), adv, mask, 0.2)
    assert token.item() == pytest.approx(0.5)
    seq = policy_loss(logp, logp.detach(), adv, mask, 0.2, agg="sequence")
    assert seq.item() == pytest.approx(0.0)
    seq.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-0.5, 0.0, 0.0], [1 / 6, 1 / 6, 1 / 6]]))


def test_policy_loss_clips_symmetrically():
    # Four loss tokens, ratios 1.5 (A>0: clipped to 1.2), 0.5 (A>0: unclipped min 0.5),
    # 1.5 (A<0: unclipped -1.5 is the min), 0.5 (A<0: clipped to 0.8 -> -0.8); one masked token.
    ratio = torch.tensor([[1.5, 0.5, 1.5, 0.5, 3.0]])
    old = torch.zeros(1, 5)
    logp = torch.log(ratio).requires_grad_(True)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0, 10.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    loss = policy_loss(logp, old, adv, mask, clip_eps=0.2)
    expected = -(1.2 * 1 + 0.5 * 1 + 1.5 * -1 + 0.8 * -1) / 4
    assert loss.item() == pytest.approx(expected)
    loss.backward()
    # Gradient flows only where the unclipped term was taken: d(-rho*A)/dlogp = -rho*A / 4.
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -0.5 / 4, 1.5 / 4, 0.0, 0.0]]))


def test_policy_loss_at_ratio_one_is_minus_mean_advantage():
    logp = torch.tensor([[-1.0, -2.0, -3.0]])
    adv = torch.tensor([[0.3, -0.9, 0.9]])
    loss = policy_loss(logp, logp.clone(), adv, torch.ones(1, 3), 0.2)
    assert loss.item() == pytest.approx(-0.1)


def test_value_loss_clipping():
    old = torch.tensor([[0.0, 0.0, 0.0]])
    new = torch.tensor([[0.5, 0.1, -0.5]], requires_grad=True)
    ret = torch.tensor([[1.0, 1.0, 0.0]])
    mask = torch.tensor([[1, 1, 1]])
    loss = value_loss(new, old, ret, mask, clip_eps=0.2)
    # t0: unclipped (0.5-1)^2=0.25, clipped (0.2-1)^2=0.64 -> 0.64 (pessimistic max)
    # t1: inside the clip: (0.1-1)^2 = 0.81 both
    # t2: unclipped 0.25, clipped (-0.2)^2 = 0.04 -> 0.25
    assert loss.item() == pytest.approx(0.5 * (0.64 + 0.81 + 0.25) / 3)
    loss.backward()
    # t0 takes the clipped branch (no gradient through new), t1 and t2 the unclipped one.
    assert torch.allclose(new.grad, torch.tensor([[0.0, (0.1 - 1.0) / 3, -0.5 / 3]]))
    assert not math.isnan(loss.item())


def test_kl_penalty_is_k3_zero_at_the_reference_and_lowers_what_the_actor_overfavours():
    from t1.ppo.losses import kl_penalty

    ref = torch.log(torch.tensor([[0.5, 0.02, 0.3]]))
    logp = torch.log(torch.tensor([[0.5, 0.9, 0.1]])).requires_grad_(True)
    k = kl_penalty(logp, ref)
    d = ref - logp.detach()
    assert torch.allclose(k.detach(), d.exp() - d - 1)
    assert k[0, 0].item() == 0.0 and (k.detach() >= 0).all()
    k.sum().backward()
    # d/dlogp = 1 - pi_ref / pi: positive where the actor favours a token more than the
    # reference (descent lowers it), negative where less (descent raises it), 0 where equal
    assert logp.grad[0, 0].item() == 0.0
    assert logp.grad[0, 1].item() > 0.9 and logp.grad[0, 2].item() < -1.9
    # a far-off token is clamped (d in [-10, 10]), not an overflow
    assert torch.isfinite(kl_penalty(torch.tensor([[-1e4]]), torch.tensor([[0.0]]))).all()

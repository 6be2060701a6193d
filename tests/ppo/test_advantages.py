"""GAE and reward placement against hand-computed values."""

import pytest
import torch

from t1.ppo.advantages import gae, token_rewards


def test_reward_lands_on_last_sampled_token():
    mask = torch.tensor([[0, 1, 1, 0, 1, 0, 0], [0, 0, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0]])
    r = token_rewards(torch.tensor([0.7, -1.0, 5.0]), mask)
    expected = torch.zeros(3, 7)
    expected[0, 4] = 0.7  # last loss position of row 0 (trailing context ignored)
    expected[1, 3] = -1.0
    assert torch.equal(r, expected)  # row 2 has no loss position: no reward anywhere


def test_gamma_lambda_one_is_return_minus_value():
    mask = torch.tensor([[0, 1, 1, 0, 0, 1]], dtype=torch.bool)
    values = torch.tensor([[9.0, 0.2, 0.4, 9.0, 9.0, 0.5]])
    rewards = token_rewards(torch.tensor([1.0]), mask)
    adv, ret = gae(rewards, values, mask, 1.0, 1.0)
    assert torch.allclose(adv, torch.tensor([[0.0, 0.8, 0.6, 0.0, 0.0, 0.5]]))
    assert torch.allclose(ret, torch.tensor([[0.0, 1.0, 1.0, 0.0, 0.0, 1.0]]))


def test_general_gae_skips_context_positions():
    # Actions at t=1, 2, 5; context at 0, 3, 4 carries junk values that must not enter.
    mask = torch.tensor([[0, 1, 1, 0, 0, 1]], dtype=torch.bool)
    values = torch.tensor([[100.0, 0.5, 0.25, 100.0, -100.0, 1.0]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0, 2.0]])
    g, lam = 0.9, 0.8
    # Hand computation over the action sequence V = (0.5, 0.25, 1.0), r = (0, 0, 2):
    d3 = 2.0 + 0.0 - 1.0  # 1.0
    d2 = 0.0 + g * 1.0 - 0.25  # 0.65
    d1 = 0.0 + g * 0.25 - 0.5  # -0.275
    a3 = d3
    a2 = d2 + g * lam * a3  # 0.65 + 0.72 = 1.37
    a1 = d1 + g * lam * a2  # -0.275 + 0.9864 = 0.7114
    adv, ret = gae(rewards, values, mask, g, lam)
    exp_adv = torch.tensor([[0.0, a1, a2, 0.0, 0.0, a3]])
    assert torch.allclose(adv, exp_adv, atol=1e-6)
    assert torch.allclose(ret, torch.tensor([[0.0, a1 + 0.5, a2 + 0.25, 0.0, 0.0, a3 + 1.0]]))
    assert adv[0, 1].item() == pytest.approx(0.7114, abs=1e-6)


def test_loop_matches_closed_form_at_one_and_rows_are_independent():
    torch.manual_seed(0)
    mask = torch.rand(3, 11) > 0.4
    values = torch.randn(3, 11)
    rewards = token_rewards(torch.randn(3), mask)
    fast = gae(rewards, values, mask, 1.0, 1.0)
    slow = gae(rewards, values, mask, 1.0, 0.999999999)  # takes the loop
    assert torch.allclose(fast[0], slow[0], atol=1e-5)
    one = gae(rewards[1:2], values[1:2], mask[1:2], 0.95, 0.9)[0]
    assert torch.allclose(gae(rewards, values, mask, 0.95, 0.9)[0][1:2], one)


def test_lambda_zero_is_one_step_td():
    mask = torch.tensor([[1, 0, 1, 1]], dtype=torch.bool)
    values = torch.tensor([[0.1, 7.0, 0.3, 0.6]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    adv, _ = gae(rewards, values, mask, gamma=0.5, lam=0.0)
    assert torch.allclose(adv, torch.tensor([[0.5 * 0.3 - 0.1, 0.0, 0.5 * 0.6 - 0.3, 1.0 - 0.6]]))

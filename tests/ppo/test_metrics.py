"""Step metrics against hand-computed values."""

import math

import pytest
import torch

from t1.ppo.metrics import (
    clip_fraction,
    ema,
    entropy_from_logits,
    explained_variance,
    train_inference_gap,
)


def test_gap_is_mask_weighted_mean_abs_difference():
    train = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -9.0, -9.0]])
    rollout = torch.tensor([[-1.1, -1.8, -5.0], [-1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert train_inference_gap(train, rollout, mask) == pytest.approx((0.1 + 0.2 + 0.0) / 3)
    assert math.isnan(train_inference_gap(train, rollout, torch.zeros_like(mask)))


def test_ema_alpha_quarter():
    e = ema(None, 0.04)
    assert e == 0.04
    e = ema(e, 0.0)
    assert e == pytest.approx(0.03)  # 0.25*0 + 0.75*0.04
    e = ema(e, 0.12)
    assert e == pytest.approx(0.25 * 0.12 + 0.75 * 0.03)
    assert ema(e, math.nan) == e


def test_explained_variance():
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    ret = torch.tensor([[0.0, 1.0, 0.0, 1.0, 50.0]])
    assert explained_variance(ret, ret, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full_like(ret, 0.5), ret, mask) == pytest.approx(0.0)
    # V = 0: Var(R - V) = Var(R) + 0 -> still 0 since the variance ignores the mean shift.
    assert explained_variance(torch.zeros_like(ret), ret, mask) == pytest.approx(0.0)
    # V = (1, 0, 1, 0): residual (-1, 1, -1, 1) has variance 1, Var(R) = 0.25 -> 1 - 4 = -3.
    v = torch.tensor([[1.0, 0.0, 1.0, 0.0, 0.0]])
    assert explained_variance(v, ret, mask) == pytest.approx(-3.0)
    assert math.isnan(explained_variance(v, torch.ones_like(ret), mask))


def test_entropy():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [100.0, 0.0, 0.0, 0.0]]])
    ent = entropy_from_logits(logits)
    assert ent.shape == (1, 2)
    assert ent[0, 0].item() == pytest.approx(math.log(4))
    assert ent[0, 1].item() == pytest.approx(0.0, abs=1e-6)


def test_clip_fraction_counts_ratios_outside_the_band():
    old = torch.zeros(1, 5)
    logp = torch.log(torch.tensor([[1.0, 1.25, 0.75, 1.1, 5.0]]))
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    assert clip_fraction(logp, old, mask, 0.2) == pytest.approx(0.5)

"""The PPO step: critic first, advantages from the updated critic, the surrogate goes down."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from t1.ppo.advantages import token_rewards
from t1.ppo.losses import policy_loss
from t1.train.step import ppo_step
from tests.train.conftest import make_trainer


def test_critic_is_updated_before_the_advantages_are_taken(trainer, batch, ppo_cfg):
    trainer.calls = []
    v0 = trainer.critic_values(batch)
    trainer.calls = []
    m = ppo_step(trainer, batch, ppo_cfg)
    n = math.ceil(batch.size / ppo_cfg.minibatch)
    assert (
        trainer.calls
        == ["actor.forward", "critic.values"]
        + ["critic.update"] * n
        + ["critic.values"]
        + ["actor.update"] * n
    )
    # The actor's advantages are return - V1 with V1 the values of the critic AFTER its update
    # (the actor's updates do not touch the critic, so the critic now still gives V1).
    v1 = trainer.critic_values(batch)
    mask = batch.loss_mask
    adv, ret = m["_advantages"], m["_returns"]
    assert torch.allclose(adv[mask], (ret - v1)[mask], atol=1e-6)
    assert not torch.allclose(adv[mask], (ret - v0)[mask], atol=1e-4)
    # gamma = lam = 1: the return of every action is its row's reward.
    expected_ret = token_rewards(batch.reward, mask).sum(1, keepdim=True).expand_as(mask)
    assert torch.allclose(ret[mask], expected_ret[mask])


def test_ppo_step_lowers_the_surrogate_on_a_fixed_batch(trainer, batch, ppo_cfg):
    m = ppo_step(trainer, batch, ppo_cfg)
    old, adv = m["_old_logp"], m["_advantages"]
    before = policy_loss(old, old, adv, batch.loss_mask, ppo_cfg.clip_eps)
    after = policy_loss(
        trainer.actor_forward(batch).logp, old, adv, batch.loss_mask, ppo_cfg.clip_eps
    )
    assert after.item() < before.item()


def test_recalibration_step_leaves_the_actor_alone(trainer, batch, ppo_cfg):
    actor_before = {k: v.clone() for k, v in trainer.actor.state_dict().items()}
    critic_before = {k: v.clone() for k, v in trainer.critic.state_dict().items()}
    trainer.calls = []
    m = ppo_step(trainer, batch, ppo_cfg, update_actor=False)
    assert "actor.update" not in trainer.calls and not m["actor_updated"]
    assert all(torch.equal(v, trainer.actor.state_dict()[k]) for k, v in actor_before.items())
    assert any(not torch.equal(v, trainer.critic.state_dict()[k]) for k, v in critic_before.items())


def test_step_metrics(trainer, batch, ppo_cfg):
    m = ppo_step(trainer, batch, ppo_cfg, gap_ema=0.5)
    assert 0 < m["gap"] < 0.1  # rollout logprobs = trainer's + 0.01 at loss positions
    assert abs(m["gap"] - 0.01) < 1e-3 and m["gap_ema"] == 0.25 * m["gap"] + 0.75 * 0.5
    assert m["rows"] == batch.size and m["loss_tokens"] == int(batch.loss_mask.sum())
    assert m["resolved_rate"] == sum(x["resolved"] for x in batch.meta) / batch.size
    assert set(m["resolved_by_category"]) == {"a", "b"}
    assert 0 < m["placeholder_rate"] < 1 and m["status_counts"] == {"COMPLETED": batch.size}
    for k in (
        "explained_variance",
        "value_loss",
        "policy_loss",
        "clip_fraction",
        "entropy",
        "tokens_per_s",
        "step_time_s",
    ):
        assert k in m and not (isinstance(m[k], float) and math.isnan(m[k])), k


def test_loss_agg_changes_the_actor_update_and_an_unknown_one_is_refused(batch, ppo_cfg):
    def actor_after(agg):
        tr = make_trainer()
        ppo_step(tr, batch, dataclasses.replace(ppo_cfg, loss_agg=agg))
        return {k: v.clone() for k, v in tr.actor.state_dict().items()}

    token, again, seq = actor_after("token"), actor_after("token"), actor_after("sequence")
    assert all(torch.equal(v, again[k]) for k, v in token.items())  # the same trainer twice
    assert any(not torch.equal(v, seq[k]) for k, v in token.items())
    with pytest.raises(ValueError, match="loss_agg"):
        ppo_step(make_trainer(), batch, dataclasses.replace(ppo_cfg, loss_agg="seq-mean"))

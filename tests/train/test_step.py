"""The PPO step: critic first, advantages from the updated critic, the surrogate goes down."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from t1.ppo.advantages import token_rewards
from t1.ppo.losses import kl_penalty, masked_mean, policy_loss
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


def _kl_to(trainer, ref, batch) -> float:
    """The mean k3 estimate of KL(actor || ref) over the loss region of `batch`."""
    trainer.reference = ref
    return float(masked_mean(kl_penalty(trainer.actor_forward(batch).logp,
                                        trainer.reference_logp(batch)), batch.loss_mask))  # fmt: skip


def test_kl_coef_pulls_the_actor_toward_the_reference_and_zero_leaves_the_step_alone(
    batch, ppo_cfg
):
    # The reference is another policy (seed 1): the actor starts far from it. Several steps on
    # the same batch with and without the KL term; only the KL term brings the actor closer.
    ref = make_trainer(seed=1).actor.eval()

    def after(kl_coef, steps=3):
        tr = make_trainer()
        if kl_coef > 0:
            tr.reference = ref
        tr.calls = []
        for _ in range(steps):
            m = ppo_step(tr, batch, dataclasses.replace(ppo_cfg, kl_coef=kl_coef))
        return tr, m

    start = _kl_to(make_trainer(), ref, batch)
    plain, m0 = after(0.0)
    assert "reference.forward" not in plain.calls and "kl_ref" not in m0 and "kl_loss" not in m0
    pulled, m1 = after(5.0)
    assert pulled.calls.count("reference.forward") == 3
    assert m1["kl_ref"] > 0 and m1["kl_loss"] > 0
    assert _kl_to(pulled, ref, batch) < 0.7 * start
    assert _kl_to(plain, ref, batch) > 0.9 * start
    # kl_coef 0 is the step without the term, bit for bit (the recipe's default)
    base = make_trainer()
    ppo_step(base, batch, ppo_cfg)
    for _ in range(2):
        ppo_step(base, batch, ppo_cfg)
    assert all(
        torch.equal(v, plain.actor.state_dict()[k]) for k, v in base.actor.state_dict().items()
    )


def test_the_reference_of_an_identical_policy_costs_nothing(batch, ppo_cfg):
    # A reference equal to the actor: the estimate is 0 and so is its gradient (1 - pi_ref/pi),
    # so one update on the whole batch moves the actor as the plain step does.
    import copy

    cfg = dataclasses.replace(ppo_cfg, minibatch=batch.size)
    with_kl = make_trainer()
    with_kl.reference = copy.deepcopy(with_kl.actor).eval()
    m = ppo_step(with_kl, batch, dataclasses.replace(cfg, kl_coef=1.0))
    plain = make_trainer()
    ppo_step(plain, batch, cfg)
    assert abs(m["kl_ref"]) < 1e-6 and abs(m["kl_loss"]) < 1e-6
    moved = False
    for k, v in plain.actor.state_dict().items():
        assert torch.allclose(v, with_kl.actor.state_dict()[k], atol=1e-6), k
        moved |= not torch.equal(v, with_kl.reference.state_dict()[k])
    assert moved  # the step did update the actor


def test_a_kl_coef_without_a_reference_is_an_error_and_a_negative_one_is_refused(batch, ppo_cfg):
    with pytest.raises(RuntimeError, match="reference"):
        ppo_step(make_trainer(), batch, dataclasses.replace(ppo_cfg, kl_coef=0.1))
    with pytest.raises(ValueError, match="kl_coef"):
        dataclasses.replace(ppo_cfg, kl_coef=-0.1)

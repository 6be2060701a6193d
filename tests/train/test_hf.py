"""The hf backend: replay really routes, the router keeps its gradient, state round-trips."""

from __future__ import annotations

import io

import pytest
import torch

from t1.model.routing import moe_gates
from t1.train.batch import collate
from t1.train.step import ppo_step


def _random_routing(batch, experts: int = 8, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    b, t, layers, k = batch.routing.shape
    # k distinct experts per position: a random permutation's first k entries.
    ids = torch.stack([torch.randperm(experts, generator=g)[:k] for _ in range(b * t * layers)])
    ids = ids.view(b, t, layers, k).to(torch.int16)
    ids[batch.routing < 0] = -1  # keep the placeholders where they were
    return ids


def test_replay_uses_recorded_experts_except_at_placeholders(trainer, batch):
    batch.routing = _random_routing(batch)
    trainer.forward_rows = batch.size  # one forward, so the gate taps line up with the batch
    seen = []  # (live logits, ids used) per layer, seen after the replay hook ran
    hooks = [
        g.register_forward_hook(lambda m, i, o: seen.append((o[0], o[2])))
        for g in moe_gates(trainer.actor)
    ]
    try:
        replayed = trainer.actor_forward(batch)
    finally:
        for h in hooks:
            h.remove()
    b, t, layers, k = batch.routing.shape
    used = torch.stack([ids for _, ids in seen], 1).view(b, t, layers, k)
    live = torch.stack([lg.topk(k, dim=-1).indices for lg, _ in seen], 1).view(b, t, layers, k)
    rec = batch.routing.long()
    placeholder = (rec < 0).any(-1, keepdim=True).expand_as(rec)
    assert placeholder.any() and (~placeholder).any()
    # Recorded positions use exactly the recorded experts; placeholders the live top-k.
    assert torch.equal(used[~placeholder], rec[~placeholder])
    assert torch.equal(used[placeholder], live[placeholder])
    # Replay changes the computation (the random record differs from live routing), so a
    # trainer that silently ignored the record would fail here.
    assert not torch.equal(used, live)
    trainer.replay = False
    plain = trainer.actor_forward(batch)
    assert not torch.allclose(replayed.logp, plain.logp)


def test_router_gets_gradient_under_replay(trainer, batch):
    batch.routing = _random_routing(batch)
    gates = moe_gates(trainer.actor)
    before = [g.weight.detach().clone() for g in gates]

    def loss_fn(logp, b):
        return -(logp * b.loss_mask).sum() / b.loss_mask.sum(), {}

    trainer.actor_update(batch, loss_fn)
    for g, w in zip(gates, before, strict=True):
        assert g.weight.grad is not None and g.weight.grad.abs().sum() > 0
        assert not torch.equal(g.weight.detach(), w)


def _params(trainer):
    return {f"a.{k}": v for k, v in trainer.actor.state_dict().items()} | {
        f"c.{k}": v for k, v in trainer.critic.state_dict().items()
    }


def test_state_dict_round_trips_bit_exactly(ppo_cfg, make_trainer, make_rows):
    t1 = make_trainer(seed=0)
    batch = collate(make_rows(t1.actor, n=5))
    ema = None
    for _ in range(2):
        ema = ppo_step(t1, batch, ppo_cfg, gap_ema=ema)["gap_ema"]
    buf = io.BytesIO()
    torch.save(t1.state_dict(), buf)
    for _ in range(2):
        ppo_step(t1, batch, ppo_cfg, gap_ema=ema)
    expected = _params(t1)

    t2 = make_trainer(seed=7)  # different init: everything must come from the state
    buf.seek(0)
    t2.load_state_dict(torch.load(buf, weights_only=False))
    for _ in range(2):
        ppo_step(t2, batch, ppo_cfg, gap_ema=ema)
    got = _params(t2)
    assert got.keys() == expected.keys()
    for k in expected:
        assert torch.equal(got[k], expected[k]), k
    assert t2.counters == t1.counters == {"actor_updates": 8, "critic_updates": 8}
    assert torch.equal(t2.generator.get_state(), t1.generator.get_state())


def test_loss_region_logp_is_token_logp_at_the_loss_and_its_gradient(trainer, batch):
    """The output layer on the loss positions only: the same logp there, 0 elsewhere, and the
    same gradient of a masked loss as through the full logits."""
    from t1.train.hf import loss_region_logp, token_logp

    model, ids, mask = trainer.actor, batch.input_ids, batch.loss_mask
    assert mask.any() and (~mask).any()

    def loss_and_grads(fn):
        model.zero_grad(set_to_none=True)
        logp = fn()
        (-(logp * mask).sum() / mask.sum()).backward()
        return logp.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    full, g_full = loss_and_grads(
        lambda: token_logp(model(input_ids=ids, use_cache=False).logits, ids)
    )
    part, g_part = loss_and_grads(lambda: loss_region_logp(model, ids, mask))
    torch.testing.assert_close(part[mask], full[mask], rtol=0, atol=1e-5)
    assert torch.count_nonzero(part[~mask]) == 0  # nothing computed off the loss region
    assert len(g_full) == len(g_part)
    for a, b in zip(g_full, g_part, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_picked_logp_is_autograds_log_softmax_pick_bit_for_bit():
    """The one-pass backward of picked_logp: the same values and the same gradient, to the bit,
    as autograd through `gather - logsumexp` (so the weights a stage writes do not change)."""
    from t1.train.hf import autograd_picked_logp, picked_logp

    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(64, 4096, generator=g) * 4).requires_grad_()
    target = torch.randint(0, 4096, (64,), generator=g)
    target[1] = target[0]  # two rows on one token
    weight = torch.randn(64, generator=g)

    def value_and_grad(fn):
        logits.grad = None
        out = fn()
        (out * weight).sum().backward()
        return out.detach(), logits.grad.clone()

    want, want_grad = value_and_grad(lambda: autograd_picked_logp(logits, target))
    got, got_grad = value_and_grad(lambda: picked_logp(logits * 1.0, target))  # a copy: consumed
    assert torch.equal(got, want)
    assert torch.equal(got_grad, want_grad)
    assert got_grad.sum(-1).abs().max() < 1e-5 * weight.abs().max()  # softmax - onehot sums to 0
    out = picked_logp(logits * 1.0, target)
    out.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="run it once"):  # its logits are spent
        out.sum().backward()


@pytest.mark.parametrize("arch", ["qwen3_moe", "qwen3_5_moe"])
def test_loss_region_logp_matches_the_full_logits_of_both_architectures(arch):
    """The preset's architecture (Qwen3.5-MoE: linear + full attention, shared expert) takes the
    same path as the tiny one: `.model` is its backbone (final norm included), `.lm_head` its head."""
    import dataclasses

    from t1.config import load_config
    from t1.model.policy import build_policy
    from t1.train.hf import loss_region_logp, token_logp

    cfg = load_config("workflow/config/tiny.yaml")
    model = build_policy(dataclasses.replace(cfg.model, arch=arch), 300, 0)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 300, (2, 24), generator=g)
    mask = torch.zeros(2, 24, dtype=torch.bool)
    mask[0, 10:] = True
    mask[1, 5:9] = True
    with torch.no_grad():
        full = token_logp(model(input_ids=ids, use_cache=False).logits, ids)
        part = loss_region_logp(model, ids, mask)
    torch.testing.assert_close(part[mask], full[mask], rtol=0, atol=1e-5)
    assert torch.count_nonzero(part[~mask]) == 0

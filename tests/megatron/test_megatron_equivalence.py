"""HF <-> Megatron on the same weights: exact conversion, equal logits and values, R³ replay.

pytest tests/megatron/test_megatron_equivalence.py -q
"""

from __future__ import annotations

import pytest
import torch
from megatron_helpers import MODEL, VOCAB, make_models, make_rows

from t1.train.batch import collate
from t1.train.megatron import convert as C

L, E = MODEL.layers, MODEL.experts


def test_round_trip_is_exact_for_actor_and_critic():
    actor, critic = make_models()
    for kind, m in (("actor", actor), ("critic", critic)):
        hf = m.state_dict()
        back = C.mcore_to_hf(C.hf_to_mcore(hf, m.config, kind, tp=4), m.config, kind)
        assert set(back) == set(hf)
        assert max((back[k] - v).abs().max().item() for k, v in hf.items()) == 0.0


@pytest.mark.parametrize(
    "sizes", [C.Sizes(tp=2), C.Sizes(ep=2), C.Sizes(pp=2), C.Sizes(tp=2, ep=2, etp=2, pp=2)]
)
def test_shard_unshard_is_exact_and_splits(sizes):
    actor, critic = make_models()
    for kind, m in (("actor", actor), ("critic", critic)):
        full = C.hf_to_mcore(m.state_dict(), m.config, kind, tp=sizes.tp)
        shards = {}
        for tp in range(sizes.tp):
            for pp in range(sizes.pp):
                for ep in range(sizes.ep):
                    r = C.Ranks(tp=tp, pp=pp, ep=ep, etp=tp % sizes.etp)
                    shards[r] = C.shard(full, sizes, r, L, E, kind)
        back = C.unshard(shards, sizes, L, E, kind)
        assert set(back) == set(full)
        assert all(torch.equal(back[k], v) for k, v in full.items())
        one = next(iter(shards.values()))
        n_experts = sum(".linear_fc1." in k for k in one)
        assert n_experts == (L // sizes.pp) * (E // sizes.ep)
        if sizes.tp > 1 and kind == "actor":
            qkv = one["decoder.layers.0.self_attention.linear_qkv.weight"]
            assert (
                qkv.shape[0]
                == full["decoder.layers.0.self_attention.linear_qkv.weight"].shape[0] // sizes.tp
            )


def test_shard_refuses_a_split_that_does_not_divide():
    actor, _ = make_models()
    full = C.hf_to_mcore(actor.state_dict(), actor.config, "actor")
    with pytest.raises(ValueError, match="cannot split"):
        C.shard(full, C.Sizes(tp=3), C.Ranks(), L, E)


@pytest.fixture(scope="module")
def built():
    from t1.train.megatron.trainer import MegatronTrainer

    actor, critic = make_models()
    return actor, critic, MegatronTrainer(actor, critic)


def test_logits_and_values_agree_with_hf(built):
    from t1.train.megatron.model import forward

    actor, critic, tr = built
    ids = torch.randint(0, VOCAB, (3, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = actor(input_ids=ids, use_cache=False).logits, forward(tr.actor, ids)
        v, w = critic(ids), forward(tr.critic, ids)[..., 0]
    assert a.shape == b.shape
    assert (a - b).abs().max().item() < 2e-5
    assert (v - w).abs().max().item() < 2e-5


def test_replay_routes_every_token_to_the_captured_experts(built):
    from t1.train.megatron import replay as R
    from t1.train.megatron.model import forward

    actor, _, tr = built
    batch = collate(make_rows(actor))
    ids, rec = batch.input_ids, batch.routing.long()
    real = (rec >= 0).all(-1)  # [B, T, L]: positions with a record
    with R.RoutingObserver(tr.actor) as seen, torch.no_grad():
        forward(tr.actor, ids)
    live = seen.routing(ids.shape[0], MODEL.top_k)
    with R.RoutingObserver(tr.actor) as seen, torch.no_grad(), R.replaying(tr.actor, rec):
        forward(tr.actor, ids)
    replayed = seen.routing(ids.shape[0], MODEL.top_k)
    want = rec.sort(-1).values
    agree_on = (replayed == want).all(-1)[real].float().mean().item()
    agree_off = (live == want).all(-1)[real].float().mean().item()
    assert agree_on == 1.0
    assert agree_off < 0.9  # the router on its own picks other experts for many tokens
    # placeholders (-1) took the live choice
    assert torch.equal(replayed[~real], live[~real])
    # and the replay state is cleared after the block
    assert all(r.router_replay.target_topk_idx is None for r in R.routers(tr.actor))


def test_replayed_logits_match_hf_replay(built):
    from t1.model.routing import replay as hf_replay
    from t1.train.megatron import replay as R
    from t1.train.megatron.model import forward

    actor, _, tr = built
    batch = collate(make_rows(actor, n=3))
    with torch.no_grad():
        with hf_replay(actor, batch.routing):
            a = actor(input_ids=batch.input_ids, use_cache=False).logits
        with R.replaying(tr.actor, batch.routing):
            b = forward(tr.actor, batch.input_ids)
        c = forward(tr.actor, batch.input_ids)
    assert (a - b).abs().max().item() < 2e-5
    assert (a - c).abs().max().item() > 1e-3  # replay changed the result


def test_router_fusion_with_replay_is_refused(built):
    from t1.train.megatron.model import transformer_config

    actor, _, _ = built
    with pytest.raises(ValueError, match="router_fusion"):
        transformer_config(actor.config, replay=True, router_fusion=True)

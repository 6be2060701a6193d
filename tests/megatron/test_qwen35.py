"""Qwen3.5 (`model.arch: qwen3_5_moe`) on the megatron backend against HF transformers' model.

    pytest tests/megatron/test_qwen35.py -q

A tiny Qwen3_5MoeForCausalLM (4 layers: 3 Gated DeltaNet + 1 gated full attention, shared
expert, partial RoPE) with every weight perturbed (so no mapping hides behind an init value),
converted to megatron-core's GPTModel (t1.train.megatron.model / convert): exact round trip,
the TP layout of the GDN tensors, equal logits / values / gradients, R³ replay, and the
negative controls showing those comparisons catch a wrong layout. The GDN runs megatron-core's
own torch path (`deterministic_mode`); `fla_shim.py` says exactly what it stands in for. Every
forward runs eagerly (`torch._dynamo` off for this module): megatron-core wraps the gated
norm / output gate in `torch.compile`, whose first CPU compile takes ~45 s and gives the same
figures.
"""

from __future__ import annotations

import pytest
import torch

from t1.config import ModelConfig
from t1.model.policy import Critic, build_policy
from t1.train.batch import Row, collate
from t1.train.megatron import convert as C

VOCAB = 250
MODEL = ModelConfig(
    arch="qwen3_5_moe",
    layers=4,
    hidden=64,
    heads=4,
    kv_heads=2,  # also the GDN key heads (2) < value heads (4): the grouped path runs
    head_dim=16,
    intermediate=128,
    expert_intermediate=32,
    experts=8,
    top_k=2,
)
L, E = MODEL.layers, MODEL.experts
TOL = 2e-5  # fp32, as for qwen3_moe (test_megatron_equivalence.py)


@pytest.fixture(scope="module", autouse=True)
def _eager_and_fla_shim():
    import cpu_shim
    import fla_shim

    cpu_shim.install()  # before the module-scoped models (conftest's is per test)
    fla_shim.install()
    was = torch._dynamo.config.disable
    torch._dynamo.config.disable = True
    yield
    torch._dynamo.config.disable = was


def make_models(seed: int = 0):
    actor = build_policy(MODEL, VOCAB, seed=seed)
    g = torch.Generator().manual_seed(seed + 5)
    with torch.no_grad():
        for p in actor.parameters():
            p.add_(torch.randn(p.shape, generator=g) * (0.1 if p.dim() == 1 else 0.02))
    critic = Critic.from_policy(actor, seed=seed + 1)
    with torch.no_grad():
        critic.value_head.weight.normal_(0, 0.5, generator=g)
    return actor, critic


def make_rows(actor, n: int = 4, seed: int = 0, placeholder_every: int = 7) -> list[Row]:
    """Rows whose routing ANOTHER Qwen3.5 (seed + 100) recorded; one row crosses the GDN chunk
    size (64)."""
    from t1.model.routing import RoutingCapture
    from t1.train.hf import token_logp

    other, _ = make_models(seed + 100)
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        t = 70 if i == 0 else 20 + 3 * i
        ids = torch.randint(0, VOCAB, (t,), generator=g)
        mask = torch.zeros(t, dtype=torch.bool)
        mask[5:t] = True
        with torch.no_grad(), RoutingCapture(other) as cap:
            other(input_ids=ids[None], use_cache=False)
        with torch.no_grad():
            logp = token_logp(actor(input_ids=ids[None], use_cache=False).logits, ids[None])[0]
        routing = cap.collect().to(torch.int16)
        routing[::placeholder_every] = -1
        rows.append(
            Row(
                ids=ids.tolist(),
                loss_mask=mask.tolist(),
                logprobs=(logp * mask).tolist(),
                routing=routing,
                reward=float(i % 3) / 2,
                meta={"task_id": f"t{i}"},
            )
        )
    return rows


@pytest.fixture(scope="module")
def built():
    from t1.train.megatron.trainer import MegatronTrainer

    actor, critic = make_models()
    return actor, critic, MegatronTrainer(actor, critic)


# ---------------------------------------------------------------- conversion


def test_round_trip_is_exact_for_actor_and_critic():
    actor, critic = make_models()
    assert actor.config.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    for kind, m in (("actor", actor), ("critic", critic)):
        hf = m.state_dict()
        full = C.hf_to_mcore(hf, m.config, kind, tp=4)
        back = C.mcore_to_hf(full, m.config, kind)
        assert set(back) == set(hf)
        assert max((back[k] - v).abs().max().item() for k, v in hf.items()) == 0.0
        assert "decoder.layers.0.self_attention.in_proj.weight" in full
        assert "decoder.layers.3.self_attention.linear_qkv.weight" in full
        assert "decoder.layers.0.mlp.shared_experts.gate_weight" in full


@pytest.mark.parametrize(
    "sizes", [C.Sizes(tp=2), C.Sizes(ep=2), C.Sizes(pp=2), C.Sizes(tp=2, ep=2, etp=2, pp=2)]
)
def test_shard_unshard_is_exact(sizes):
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


def test_tp2_gdn_and_shared_expert_shards_hold_each_ranks_heads():
    """At TP 2, rank r's GDN in_proj holds its half of q, k, v, z, b, a (in that order),
    conv1d its half of q, k, v: the local layout GatedDeltaNet.forward splits. The shared
    expert's fc1 holds its half of gate_proj then of up_proj."""
    actor, _ = make_models()
    c, hf = actor.config, actor.state_dict()
    full = C.hf_to_mcore(hf, c, "actor", tp=2)
    qk = c.linear_num_key_heads * c.linear_key_head_dim
    la = "model.layers.1.linear_attn."
    q, k, v = hf[la + "in_proj_qkv.weight"].split([qk, qk, qk * 2])
    z, b, a = (hf[la + f"in_proj_{x}.weight"] for x in "zba")
    conv = hf[la + "conv1d.weight"].split([qk, qk, qk * 2])
    se = "model.layers.1.mlp.shared_expert."
    for r in range(2):
        local = C.shard(full, C.Sizes(tp=2), C.Ranks(tp=r), L, E)
        m = "decoder.layers.1.self_attention."
        want = torch.cat([x.chunk(2)[r] for x in (q, k, v, z, b, a)])
        assert torch.equal(local[m + "in_proj.weight"], want)
        assert torch.equal(local[m + "conv1d.weight"], torch.cat([x.chunk(2)[r] for x in conv]))
        assert torch.equal(local[m + "dt_bias"], hf[la + "dt_bias"].chunk(2)[r])
        assert torch.equal(local[m + "out_proj.weight"], hf[la + "out_proj.weight"].chunk(2, 1)[r])
        assert torch.equal(local[m + "out_norm.weight"], hf[la + "norm.weight"])
        fc1 = local["decoder.layers.1.mlp.shared_experts.linear_fc1.weight"]
        gate, up = hf[se + "gate_proj.weight"], hf[se + "up_proj.weight"]
        assert torch.equal(fc1, torch.cat([gate.chunk(2)[r], up.chunk(2)[r]]))


# ---------------------------------------------------------------- forwards


def test_logits_and_values_agree_with_hf(built):
    from t1.train.megatron.model import forward

    actor, critic, tr = built
    ids = torch.randint(0, VOCAB, (2, 80), generator=torch.Generator().manual_seed(1))  # 2 chunks
    with torch.no_grad():
        a, b = actor(input_ids=ids, use_cache=False).logits, forward(tr.actor, ids)
        v, w = critic(ids), forward(tr.critic, ids)[..., 0]
    assert a.shape == b.shape
    assert (a - b).abs().max().item() < TOL
    assert (v - w).abs().max().item() < TOL


@pytest.mark.parametrize("swap", ["gdn_beta_alpha", "attn_query_gate"])
def test_a_wrong_layout_is_caught(built, swap):
    """The logits comparison above can fail: swapping two same-shaped blocks of the
    conversion (GDN b <-> a rows; the full-attention query <-> output-gate rows) moves the
    logits far beyond the tolerance."""
    from t1.train.megatron.model import forward

    actor, _, tr = built
    c = actor.config
    full = C.hf_to_mcore(actor.state_dict(), c, "actor")
    if swap == "gdn_beta_alpha":
        w = full["decoder.layers.0.self_attention.in_proj.weight"]
        nv = c.linear_num_value_heads
        full["decoder.layers.0.self_attention.in_proj.weight"] = torch.cat(
            [w[: -2 * nv], w[-nv:], w[-2 * nv : -nv]]
        )
    else:
        n, g, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        w = full["decoder.layers.3.self_attention.linear_qkv.weight"].reshape(
            g, 2 * n // g + 2, d, -1
        )
        w = torch.cat([w[:, n // g : 2 * n // g], w[:, : n // g], w[:, 2 * n // g :]], 1)
        full["decoder.layers.3.self_attention.linear_qkv.weight"] = w.flatten(0, 2)
    good = {k: v.clone() for k, v in C.local_state(tr.actor).items()}  # (a CPU view otherwise)
    ids = torch.randint(0, VOCAB, (1, 40), generator=torch.Generator().manual_seed(2))
    try:
        C.load_local(tr.actor, full)
        with torch.no_grad():
            err = (actor(input_ids=ids, use_cache=False).logits - forward(tr.actor, ids)).abs()
    finally:
        C.load_local(tr.actor, good)
    assert err.max().item() > 1e-3


@pytest.mark.parametrize("recompute", [False, True])
def test_one_actor_update_loss_and_gradients_agree_with_hf(recompute):
    """Also under full activation recompute: the GDN layers are recomputed and every MoE layer
    replays the record in the recompute (t1/train/megatron/replay.py)."""
    from t1.ppo.losses import policy_loss
    from t1.train.hf import HFTrainer
    from t1.train.megatron.trainer import MegatronTrainer

    a1, c1 = make_models()
    a2, c2 = make_models()
    hf = HFTrainer(a1, c1, actor_lr=1e-3, critic_lr=1e-3)
    mg = MegatronTrainer(a2, c2, actor_lr=1e-3, critic_lr=1e-3, recompute=recompute)
    batch = collate(make_rows(hf.actor, n=3))
    old = hf.actor_forward(batch).logp
    adv = torch.randn(batch.input_ids.shape, generator=torch.Generator().manual_seed(3))

    def loss_fn(logp, b):
        loss = policy_loss(logp, old[:, : logp.shape[1]], adv[:, : logp.shape[1]], b.loss_mask, 0.2)
        return loss, {"policy_loss": float(loss.detach())}

    m1, m2 = hf.actor_update(batch, loss_fn), mg.actor_update(batch, loss_fn)
    assert abs(m1["policy_loss"] - m2["policy_loss"]) < 1e-6
    g1 = {k: p.grad for k, p in hf.actor.named_parameters() if p.grad is not None}
    g2 = C.mcore_to_hf(
        {k: p.grad for k, p in mg.actor.named_parameters() if p.grad is not None},
        mg.hf_config,
        "actor",
    )
    assert set(g1) == set(g2)
    err = max((g1[k] - g2[k]).abs().max().item() for k in g1)
    scale = max(g.abs().max().item() for g in g1.values())
    assert err < 1e-4 * scale, (err, scale)
    for name in ("in_proj_a", "in_proj_b", "in_proj_z"):  # the GDN got gradients
        assert g2[f"model.layers.0.linear_attn.{name}.weight"].abs().sum() > 0


# ---------------------------------------------------------------- R³ replay


def test_replay_routes_every_token_to_the_captured_experts(built):
    from t1.model.routing import replay as hf_replay
    from t1.train.megatron import replay as R
    from t1.train.megatron.model import forward

    actor, _, tr = built
    batch = collate(make_rows(actor))
    ids, rec = batch.input_ids, batch.routing.long()
    real = (rec >= 0).all(-1)  # [B, T, L]: positions with a record
    with R.RoutingObserver(tr.actor) as seen, torch.no_grad():
        live_logits = forward(tr.actor, ids)
    live = seen.routing(ids.shape[0], MODEL.top_k)
    with R.RoutingObserver(tr.actor) as seen, torch.no_grad(), R.replaying(tr.actor, rec):
        replayed_logits = forward(tr.actor, ids)
    replayed = seen.routing(ids.shape[0], MODEL.top_k)
    want = rec.sort(-1).values
    assert (replayed == want).all(-1)[real].float().mean().item() == 1.0
    assert (live == want).all(-1)[real].float().mean().item() < 0.9
    # placeholders (-1) take the router's own choice. Only at layer 0 is that the choice of the
    # un-replayed forward too: deeper routers see tokens mixed with replayed earlier positions.
    first = ~real[..., 0]
    assert first.any()
    assert torch.equal(replayed[..., 0, :][first], live[..., 0, :][first])
    with torch.no_grad(), hf_replay(actor, batch.routing):
        hf_logits = actor(input_ids=ids, use_cache=False).logits
    lengths = batch.lengths
    for i, n in enumerate(lengths.tolist()):  # real tokens of each row
        assert (hf_logits[i, :n] - replayed_logits[i, :n]).abs().max().item() < TOL
    assert (replayed_logits - live_logits).abs().max().item() > 1e-3


# ---------------------------------------------------------------- what runs and what refuses


def test_without_fla_the_build_refuses_naming_it(built, monkeypatch):
    from megatron.core.ssm import gated_delta_net as gdn

    from t1.train.megatron.model import qwen35_block_spec

    _, _, tr = built
    monkeypatch.setattr(gdn, "HAVE_FLA", False)
    with pytest.raises(RuntimeError, match="flash-linear-attention"):
        qwen35_block_spec(tr.actor.config)


def test_the_fla_kernel_path_is_not_what_runs(built):
    """Without deterministic_mode megatron-core calls fla's chunk_gated_delta_rule, which the
    shim refuses: the figures above come from megatron-core's torch recurrence."""
    import dataclasses

    from t1.train.megatron.model import build_actor, forward

    actor, _, tr = built
    tc = dataclasses.replace(tr.actor.config, deterministic_mode=False)
    m = build_actor(tc, actor.config)
    C.load_local(m, C.local_state(tr.actor))
    with torch.no_grad(), pytest.raises(RuntimeError, match="chunk_gated_delta_rule"):
        forward(m, torch.zeros(1, 8, dtype=torch.long))


def test_check_arch_refuses_other_families_and_an_incomplete_qwen35_config():
    """(Replaces test_megatron_equivalence.py's former Qwen3.5 refusal.)"""
    from t1.train.megatron.model import check_arch

    class Llama:
        model_type = "llama"

    class NoLayerTypes:
        model_type = "qwen3_5_moe_text"
        num_hidden_layers = 4

    with pytest.raises(ValueError, match="qwen3_moe / qwen3_5_moe"):
        check_arch(Llama())
    with pytest.raises(ValueError, match="layer_types"):
        check_arch(NoLayerTypes())
    actor, _ = make_models()
    check_arch(actor.config)  # the real Qwen3.5 config passes

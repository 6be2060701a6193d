"""Training above world size 1, per-rank checkpoints and activation recompute with replay.

    pytest tests/megatron/test_megatron_parallel.py -q

One `torchrun --nproc-per-node 2` run (gloo, CPU; train_worker.py, the `ws2` fixture of
conftest.py) does a PPO step at EP 2 /
DP 2 and at EP 1 / DP 2, a checkpoint + resume at EP 2, and the EP 2 step with megatron-core's
gradient reduction switched off; the tests compare those with a world-size-1 run here.
Pipeline parallelism (megatron-core's schedule) and the trainer at TP 2: test_megatron_pipeline.py.
Recompute runs at world size 1 in this process.
"""

from __future__ import annotations

import json

import pytest
import torch
from megatron_helpers import make_models, make_rows

from t1.config import PPOConfig
from t1.ppo.losses import policy_loss
from t1.train.batch import collate
from t1.train.step import ppo_step

LR = dict(actor_lr=1e-3, critic_lr=1e-3, seed=0)
FORWARD_KEYS = ("gap", "explained_variance", "entropy")
ROUTING_KEYS = ("routing_positions", "routing_live_mismatch", "routing_replay_mismatch")


@pytest.fixture(scope="module")
def ws1():
    """The same PPO step at world size 1 (metrics, HF weights)."""
    import cpu_shim

    cpu_shim.install()
    from t1.train.megatron.trainer import MegatronTrainer

    batch = collate(make_rows(make_models(0)[0]))
    tr = MegatronTrainer(*make_models(0), **LR)
    m = ppo_step(tr, batch, PPOConfig(minibatch=2, epochs=1))
    return m, {kind: tr.hf_state(kind) for kind in ("actor", "critic")}


def _max_err(a, b) -> float:
    return max((a[k][n] - b[k][n]).abs().max().item() for k in a for n in a[k])


def _check_equal(ws1, got):
    m1, w1 = ws1
    m2, w2 = got["metrics"], got["weights"]
    for k in ("policy_loss", "value_loss", *FORWARD_KEYS):
        assert abs(m1[k] - m2[k]) < 1e-6 * max(1.0, abs(m1[k])), (k, m1[k], m2[k])
    for k in (*ROUTING_KEYS, "clip_fraction", "rows"):
        assert m1[k] == m2[k], (k, m1[k], m2[k])
    assert m2["routing_replay_mismatch"] == 0 < m2["routing_live_mismatch"]
    err = _max_err(w1, w2)
    assert err < 2e-5, err  # 3 Adam updates at lr 1e-3 each: fp32 rounding of the reductions
    return err


@pytest.mark.slow
@pytest.mark.integration
def test_ep2_dp2_ppo_step_equals_world_size_1(ws2, ws1):
    got = torch.load(ws2 / "ep2.pt", weights_only=False)
    assert (got["ep"], got["dp"]) == (2, 2)
    _check_equal(ws1, got)


@pytest.mark.slow
@pytest.mark.integration
def test_dp2_with_replicated_experts_equals_world_size_1(ws2, ws1):
    got = torch.load(ws2 / "dp2.pt", weights_only=False)
    assert (got["ep"], got["dp"]) == (1, 2)
    _check_equal(ws1, got)


@pytest.mark.slow
@pytest.mark.integration
def test_without_gradient_reduction_world_size_2_parts_from_world_size_1(ws2, ws1):
    """The guard above can fail: skip megatron-core's all-reduce and the weights move apart."""
    got = torch.load(ws2 / "no_reduce.pt", weights_only=False)
    assert _max_err(ws1[1], got["weights"]) > 1e-4


@pytest.mark.slow
@pytest.mark.integration
def test_resume_at_world_size_2_is_bit_identical(ws2):
    res = json.loads((ws2 / "resume.json").read_text())
    assert res["weights_equal"] is True and res["metrics_equal"] is True
    assert res["files"] == ["COMPLETE", "manifest.json", "rank_00000.bin", "rank_00001.bin"]


# ---------------------------------------------------------------- checkpoint protocol, WS 1


def test_rank_checkpoint_counts_only_with_its_marker_and_refuses_another_layout(tmp_path):
    from t1.train.megatron import checkpoint as MC
    from t1.train.megatron.trainer import MegatronTrainer

    tr = MegatronTrainer(*make_models(0), **LR)
    path = MC.save(tr, tmp_path, 3, progress={"step": 3})
    assert MC.load(tr, tmp_path).step == 3
    state = torch.load(path / "rank_00000.bin", weights_only=False)
    with pytest.raises(ValueError, match="resume with the same world size"):
        MC.load_local_state(tr, {**state, "layout": {**state["layout"], "ep": 2}}, "x")
    (path / "COMPLETE").unlink()
    assert MC.load(tr, tmp_path) is None


# ---------------------------------------------------------------- recompute + replay, WS 1


def _update_with_spies(recompute: bool, live_recompute: bool = False):
    """One actor update on rows whose record another model routed; returns the gradients,
    the replay actions each router saw and the experts it dispatched to in each forward."""
    from t1.train.megatron import replay as R
    from t1.train.megatron.trainer import MegatronTrainer

    batch = collate(make_rows(make_models(0)[0], n=2))
    tr = MegatronTrainer(*make_models(0), recompute=recompute, **LR)
    actions: list[str] = []
    for r in R.routers(tr.actor):
        rr, orig = r.router_replay, r.router_replay.get_replay_topk

        def spy(*a, rr=rr, orig=orig, **k):
            actions.append(getattr(rr.router_replay_action, "name", "LIVE"))
            return orig(*a, **k)

        rr.get_replay_topk = spy
    adv = torch.linspace(-1, 1, batch.input_ids.numel()).reshape(batch.input_ids.shape)

    def loss_fn(logp, b):
        loss = policy_loss(logp, torch.zeros_like(logp), adv[:, : logp.shape[1]], b.loss_mask)
        return loss, {"policy_loss": float(loss.detach())}

    if live_recompute:  # the guard broken: the recompute is not told to replay
        orig_bw = R._ToBackward.backward

        def bw(ctx, grad):
            for rr in ctx.instances:
                rr.clear_router_replay_action()
            return grad, None

        R._ToBackward.backward = staticmethod(bw)
    try:
        with R.RoutingObserver(tr.actor) as seen:
            tr.actor_update(batch, loss_fn)
    finally:
        if live_recompute:
            R._ToBackward.backward = orig_bw
    grads = {k: p.grad.clone() for k, p in tr.actor.named_parameters()}
    rec = batch.routing.long()
    per_forward = []
    for i in range(len(seen.maps[0])):  # forward, then (with recompute) the recompute
        maps = [m[i] for m in seen.maps]
        ids = [torch.arange(m.shape[1]).expand_as(m)[m].reshape(m.shape[0], -1) for m in maps]
        used = torch.stack(
            [x.reshape(-1, rec.shape[0], rec.shape[-1]).transpose(0, 1) for x in ids], 2
        )
        real = (rec >= 0).all(-1)
        per_forward.append(float((used == rec.sort(-1).values).all(-1)[real].float().mean()))
    return grads, actions, per_forward


def test_recompute_replays_the_recorded_experts_in_the_backward():
    g0, a0, f0 = _update_with_spies(recompute=False)
    g1, a1, f1 = _update_with_spies(recompute=True)
    assert set(a0) == {"REPLAY_FORWARD"} and f0 == [1.0]
    assert a1.count("REPLAY_BACKWARD") == a1.count("REPLAY_FORWARD") == 2  # one per layer
    assert f1 == [1.0, 1.0]  # forward and recompute: every token to the captured experts
    assert all(torch.equal(g0[k], g1[k]) for k in g0)  # the same gradients, bit for bit


def test_recompute_without_backward_replay_routes_live_and_changes_the_gradients():
    """The guard above can fail: a recompute left to route live picks other experts."""
    g0, _, _ = _update_with_spies(recompute=False)
    g2, _, f2 = _update_with_spies(recompute=True, live_recompute=True)
    assert f2[1] < 0.5  # the recompute (live) did not route to the record
    err = max((g0[k] - g2[k]).abs().max().item() for k in g0)
    scale = max(g.abs().max().item() for g in g0.values())
    assert err > 0.01 * scale, (err, scale)


def test_train_recompute_reaches_the_memory_plan_and_the_trainer():
    from t1.config import Config, TrainConfig, load_config
    from t1.train.megatron.plan import build, plan_for

    tiny = load_config("workflow/config/tiny.yaml")
    cfg = {
        rc: Config(**{**tiny.__dict__, "train": TrainConfig(backend="megatron", recompute=rc)})
        for rc in (False, True)
    }
    assert plan_for(cfg[True])["actor_gib"] < plan_for(cfg[False])["actor_gib"]
    tr = build(cfg[True], *make_models(0))
    assert tr.recompute and tr.actor.config.recompute_granularity == "full"

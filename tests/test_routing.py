"""Routing records, capture and replay on a real tiny Qwen3 MoE (t1/model/routing.py)."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import torch

from t1.config import ModelConfig
from t1.model import routing
from t1.model.policy import build_policy

VOCAB = 512


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(2)
    return build_policy(ModelConfig(), VOCAB, seed=0)


def test_record_dtype_and_bytes():
    assert routing.record_dtype(8) == np.uint8
    assert routing.record_dtype(256) == np.uint8
    assert routing.record_dtype(257) == np.uint16
    assert routing.bytes_per_token(48, 8, 256) == 384
    assert routing.bytes_per_token(48, 8, 512) == 768
    with pytest.raises(ValueError):
        routing.record_dtype(70000)


def test_compact_rejects_out_of_range():
    with pytest.raises(ValueError, match="outside"):
        routing.compact(np.array([[[0, 8]]]), 8)
    with pytest.raises(ValueError, match="outside"):
        routing.compact(np.array([[[-1, 2]]]), 8)


def test_sglang_round_trip_and_255_is_an_expert():
    ids = np.random.default_rng(0).integers(0, 256, size=(7, 3, 2))
    ids[0, 0, 0] = 255
    payload = routing.encode_sglang(ids)
    # SGLang's wire form: raw little-endian int32.
    assert len(base64.b64decode(payload)) == 7 * 3 * 2 * 4
    back = routing.decode_sglang(payload, layers=3, k=2, num_experts=256)
    assert back.dtype == np.uint8 and back.shape == (7, 3, 2)
    assert np.array_equal(back, ids)
    with pytest.raises(ValueError, match="multiple"):
        routing.decode_sglang(payload, layers=5, k=2, num_experts=256)
    minus = routing.encode_sglang(np.full((1, 3, 2), -1))
    with pytest.raises(ValueError, match="outside"):
        routing.decode_sglang(minus, layers=3, k=2, num_experts=256)


def test_the_npz_record_format_is_gone():
    """One routing record format (t1/model/routing.py docstring): the capture form in trajectory
    records, the int16 stream form with -1 in TITO; no second on-disk format beside them."""
    for name in ("save", "load", "to_replay", "from_replay"):
        assert not hasattr(routing, name), name


def test_mismatch_skips_placeholders_and_ignores_slot_order():
    rec = np.array([[[0, 1]], [[2, 3]], [[-1, -1]], [[4, 5]]], np.int16)
    same = np.array([[[1, 0]], [[2, 3]], [[7, 7]], [[4, 5]]])  # slot order and a placeholder
    assert routing.mismatch(same, rec) == (0, 3)
    other = same.copy()
    other[3, 0, 1] = 6
    assert routing.mismatch(other, rec) == (1, 3)


def test_live_and_used_stages_under_replay(model):
    """Inside replay, "live" is the gate's own choice (before replay) and "used" what the
    experts module was called with; without replay both are the live choice."""
    ids = torch.randint(0, VOCAB, (1, 10))
    live, _ = _forward(model, ids)
    forced = (live + 3) % 8
    forced[0, 4] = -1  # a placeholder: routed live there
    with (
        torch.no_grad(),
        routing.RoutingCapture(model, stage="live") as pre,
        routing.RoutingCapture(model, stage="used") as used,
        routing.replay(model, forced),
    ):
        model(ids)
    pre_ids, used_ids = pre.collect().view(1, 10, 4, 2), used.collect().view(1, 10, 4, 2)
    rec = forced[0].numpy()
    assert routing.mismatch(used_ids[0].numpy(), rec) == (0, 9)  # replay reached the experts
    assert torch.equal(pre_ids[0, :, 0], live[0, :, 0])  # layer 0: same input, live choice
    assert routing.mismatch(pre_ids[0].numpy(), rec)[0] == 9  # it is not the replayed one
    assert torch.equal(used_ids[0, 4], pre_ids[0, 4])  # the placeholder routes live
    with torch.no_grad(), routing.RoutingCapture(model, stage="used") as used:
        model(ids)  # no replay: the experts get the live ids
    assert torch.equal(used.collect().view(1, 10, 4, 2), live)
    with pytest.raises(ValueError, match="stage"):
        routing.RoutingCapture(model, stage="after")
    assert all("forward" not in gate.__dict__ for gate in routing.moe_gates(model))
    assert all(not e._forward_pre_hooks for e in routing.moe_experts(model))


def test_capture_covers_every_layer_and_position(model):
    layers, k, experts = routing.routing_shape(model)
    assert (layers, k, experts) == (4, 2, 8)
    ids = torch.randint(0, VOCAB, (2, 9))
    with torch.no_grad(), routing.RoutingCapture(model) as cap:
        out = model(ids, use_cache=True)
        step = model(ids[:, :1], cache=out.cache, use_cache=True)  # one decode step, 2 rows
    rows = cap.collect()
    assert rows.shape == (2 * 9 + 2, layers, k)
    # Every slot holds a valid expert, distinct within a position.
    assert rows.min() >= 0 and rows.max() < experts
    assert (rows[..., 0] != rows[..., 1]).all()
    # Capture equals the router's own top-k, recomputed from the logits.
    with torch.no_grad():
        full = model(ids, output_router_logits=True)
    for layer, logits in enumerate(full.router_logits):
        top = logits.topk(k, dim=-1).indices
        assert torch.equal(top.sort(-1).values, rows[: 2 * 9, layer].sort(-1).values)
    assert step.logits.shape == (2, 1, VOCAB)


def _forward(model, ids, r=None):
    with torch.no_grad(), routing.RoutingCapture(model) as cap:
        if r is None:
            logits = model(ids).logits
        else:
            with routing.replay(model, r):
                logits = model(ids).logits
        rows = cap.collect()
    return rows.view(ids.shape[0], ids.shape[1], *rows.shape[1:]), logits


def test_replay_of_own_routing_is_identity(model):
    ids = torch.randint(0, VOCAB, (2, 12))
    live, logits = _forward(model, ids)
    replayed, logits2 = _forward(model, ids, live)
    assert torch.equal(replayed, live)
    torch.testing.assert_close(logits2, logits, rtol=0, atol=1e-5)


def test_replay_is_not_silently_ignored(model):
    """Permuted routing must be followed at every position, and must change the output."""
    torch.manual_seed(3)
    ids = torch.randint(0, VOCAB, (1, 16))
    live, logits = _forward(model, ids)
    forced = (live + 3) % 8  # a different pair of experts everywhere
    forced[0, 5] = -1  # one placeholder position: live routing there
    chosen, logits2 = _forward(model, ids, forced)
    mask = torch.ones(16, dtype=torch.bool)
    mask[5] = False
    assert torch.equal(chosen[0, mask], forced[0, mask])
    assert not torch.equal(chosen[0, 5], forced[0, 5])
    assert (logits2 - logits).abs().max() > 1e-3
    # The placeholder position's first layer has the same input as live, so it routes live.
    assert torch.equal(chosen[0, 5, 0], live[0, 5, 0])


def test_replay_weights_renormalized_and_differentiable():
    logits = torch.randn(3, 8, requires_grad=True)
    idx = torch.tensor([[0, 1], [7, 2], [3, 3]])
    w = routing.replay_weights(logits, idx, normalize=True)
    torch.testing.assert_close(w.sum(-1), torch.ones(3))
    p = torch.softmax(logits, -1)
    torch.testing.assert_close(w[1, 0], p[1, 7] / (p[1, 7] + p[1, 2]))
    w[:, 0].sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


def test_gradients_reach_gates_under_replay(model):
    ids = torch.randint(0, VOCAB, (1, 10))
    live, _ = _forward(model, ids)
    forced = (live + 1) % 8
    model.zero_grad()
    with routing.replay(model, forced):
        out = model(ids)
    torch.log_softmax(out.logits, -1)[0, :-1].gather(-1, ids[0, 1:, None]).sum().backward()
    for gate in routing.moe_gates(model):
        assert gate.weight.grad is not None and gate.weight.grad.abs().sum() > 0
    model.zero_grad()


def test_replay_shape_mismatch_raises(model):
    ids = torch.randint(0, VOCAB, (1, 6))
    with pytest.raises(ValueError, match="routing must be"):
        with routing.replay(model, torch.zeros(1, 6, 3, 2, dtype=torch.long)):
            pass
    with pytest.raises(ValueError, match="routed 6 tokens"):
        with torch.no_grad(), routing.replay(model, torch.zeros(1, 5, 4, 2, dtype=torch.long)):
            model(ids)


def test_capture_sees_replayed_ids_in_either_order_and_taps_are_removed(model):
    ids = torch.randint(0, VOCAB, (1, 8))
    live, _ = _forward(model, ids)
    forced = (live + 5) % 8
    with torch.no_grad(), routing.replay(model, forced), routing.RoutingCapture(model) as cap:
        model(ids)
    assert torch.equal(cap.collect().view(1, 8, 4, 2), forced)
    with pytest.raises(RuntimeError, match="nest"):
        with routing.replay(model, forced), routing.replay(model, forced):
            pass
    assert all("forward" not in gate.__dict__ for gate in routing.moe_gates(model))

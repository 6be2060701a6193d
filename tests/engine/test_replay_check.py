"""The R3 replay check, made able to fail: a bf16 rollout's routing replayed in fp32.

    .venv/bin/pytest tests/engine/test_replay_check.py -q

The policy's routers are nearly tied (gate weights scaled down), so the bf16 engine and the
fp32 trainer pick different experts at many positions - the train-inference routing mismatch
R3 exists to remove - and each check below is shown to fail when replay is switched off:

* live mismatch: the trainer's own top-k, recorded BEFORE replay overrides it, against the
  engine's capture (> 0 here whatever replay does: it is the problem, not the fix);
* replay mismatch: the experts the MoE layers were actually CALLED with, against the capture
  (0 with replay; equal to the live mismatch without);
* the logprob gap over the loss region: its max within bf16 tolerance with replay, above it
  without (the threshold is chosen so that replay off fails it), and the mean lower with.
Both `t1.bench.gap_replay.replay_check` and the hf trainer's per-step `routing_check` are tested.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from t1.bench.gap_replay import replay_check
from t1.config import ModelConfig
from t1.engine.base import GenerateRequest, SamplingParams
from t1.engine.local import LocalEngine
from t1.model import routing as rt
from t1.model.policy import build_policy, load_policy, save_policy
from t1.tito import Segment
from t1.train.batch import Row, collate
from t1.train.hf import HFTrainer

VOCAB = 512
TIED = 0.02  # gate weights scaled by this: router logits nearly tied, bf16 flips the top-k
# max |logp_train - logp_rollout| over the loss region: bf16 vs fp32 with the same experts
# stays below it (measured 0.005); with replay off the other experts push it above (0.045)
GAP_MAX = 0.02


def rollout(engine: LocalEngine, turns: int = 3, seed: int = 0) -> Segment:
    """A multi-turn trajectory with the prefix cache, as the TITO stream the trainer gets:
    ids, loss mask, logprobs, and routing int16 [T, L, k] (-1 at the last position, never fed
    to the engine, and at one context position, as a repaired boundary would leave)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (12,), generator=g).tolist()
    mask, logprobs = [0] * len(ids), [0.0] * len(ids)
    parts, start = [], 0
    for t in range(turns):
        sp = SamplingParams(temperature=1.0, max_new_tokens=40, seed=seed * 100 + t)
        res = engine.generate(
            [GenerateRequest(ids, sp, session_id=f"r{seed}", routing_start=start)]
        )[0]
        res.check(engine.layers, engine.k)
        parts.append(res.routing)
        start = len(ids) + len(res.output_ids) - 1
        ids = ids + res.output_ids
        mask += [1] * len(res.output_ids)
        logprobs += res.output_logprobs
        if t < turns - 1:
            obs = torch.randint(0, VOCAB, (5,), generator=g).tolist()
            ids, mask, logprobs = ids + obs, mask + [0] * 5, logprobs + [0.0] * 5
    capture = np.concatenate(parts)
    assert capture.shape[0] == len(ids) - 1
    routing = np.concatenate([capture, capture[:1]]).astype(np.int16)
    routing[-1] = -1
    routing[3] = -1
    assert mask[3] == 0 and mask[-1] == 1
    return Segment(
        np.asarray(ids, np.int32),
        np.asarray(mask, bool),
        np.asarray(logprobs, np.float32),
        routing,
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    torch.set_num_threads(2)
    policy = build_policy(ModelConfig(), VOCAB, seed=0)
    with torch.no_grad():
        for gate in rt.moe_gates(policy):
            gate.weight.mul_(TIED)
    path = tmp_path_factory.mktemp("policy") / "p"
    save_policy(policy, path)
    engine = LocalEngine(load_policy(path), dtype="bfloat16")
    segs = [rollout(engine, seed=s) for s in (0, 1)]
    return path, segs


def _trainer_copy(path):
    return load_policy(path, dtype=torch.float32)  # the trainer's own fp32 copy


def test_replay_check_passes_with_replay_and_fails_without(world):
    path, segs = world
    on = replay_check(_trainer_copy(path), segs)
    off = replay_check(_trainer_copy(path), segs, replay=False)
    print(
        f"\nreplay check on {on['segments']} streams, {on['positions']} routed positions, "
        f"{on['loss_tokens']} loss tokens: live routing differs from the engine's at "
        f"{on['live_differs']} ({100 * on['live_differs_rate']:.1f}%); experts used differ at "
        f"{on['replay_mismatch']} with replay, {off['replay_mismatch']} without; |logp_train - "
        f"logp_rollout| mean/max {on['gap_replay']:.4f}/{on['gap_replay_max']:.4f} with "
        f"replay, {off['gap_replay']:.4f}/{off['gap_replay_max']:.4f} without"
    )
    assert on["positions"] == sum(int((s.routing[:, 0, 0] >= 0).sum()) for s in segs)
    assert on["live_differs"] > 0  # the mismatch exists, replay or not
    assert on["replay_mismatch"] == 0  # the experts really used are the engine's
    assert on["gap_replay_max"] < GAP_MAX and on["gap_replay"] < on["gap_live"]
    # the guard broken: replay off
    # (without replay the differences compound through the layers: more positions differ)
    assert off["replay_mismatch"] == off["live_differs"] >= on["live_differs"]
    assert off["gap_replay_max"] >= GAP_MAX and off["gap_replay"] == off["gap_live"]


def test_trainer_reports_the_routing_check_of_each_forward(world):
    path, segs = world
    rows = [Row(s.ids, s.loss_mask, s.logprobs, s.routing, 1.0) for s in segs]
    batch = collate(rows)
    checks = {}
    for replay in (True, False):
        trainer = HFTrainer(_trainer_copy(path), None, replay=replay, forward_rows=1)
        out = trainer.actor_forward(batch)
        checks[replay] = dict(trainer.routing_check)
        gap = (out.logp - batch.rollout_logp).abs()[batch.loss_mask]
        checks[replay]["gap_max"] = float(gap.max())
    on, off = checks[True], checks[False]
    print(f"\ntrainer routing check: with replay {on}, without {off}")
    routed = sum(int((s.routing[:, 0, 0] >= 0).sum()) for s in segs)
    assert on["positions"] == off["positions"] == routed
    assert on["replay_mismatch"] == 0 and on["live_mismatch"] > 0
    assert off["replay_mismatch"] == off["live_mismatch"] >= on["live_mismatch"]
    assert on["gap_max"] < GAP_MAX <= off["gap_max"]

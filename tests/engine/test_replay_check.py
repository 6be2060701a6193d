"""Issue 3 acceptance, replay check: a bf16 rollout's routing replayed in an fp32 full forward.

Feeding a trajectory's ids with its captured routing back through the model in replay mode
must reproduce the engine's expert choices at every non-placeholder position, and the
logprobs must agree with the rollout's within bf16 tolerance. Without replay, the fraction of
positions whose routing differs is measured and printed (`t1 bench rollout` reports it too).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from t1 import routing as rt
from t1.config import ModelConfig
from t1.engine.base import GenerateRequest, SamplingParams
from t1.engine.local import LocalEngine
from t1.policy import build_policy, load_policy, save_policy

VOCAB = 512


def rollout(engine: LocalEngine, turns: int = 3, seed: int = 0):
    """A multi-turn trajectory with the prefix cache: returns (ids, loss mask, logprobs, routing).

    routing is the compact record of every position but the last, concatenated from the
    turns' `routing_start` slices, plus a validity mask.
    """
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
    routing = np.concatenate(parts)
    assert routing.shape[0] == len(ids) - 1
    return ids, np.array(mask), np.array(logprobs), routing


@pytest.fixture(scope="module")
def trajectory(tmp_path_factory):
    torch.set_num_threads(2)
    path = tmp_path_factory.mktemp("policy") / "p"
    save_policy(build_policy(ModelConfig(), VOCAB, seed=0), path)
    engine = LocalEngine(load_policy(path), dtype="bfloat16")
    trainer = load_policy(path, dtype=torch.float32)  # the trainer's own fp32 copy
    return trainer, rollout(engine)


def _forward(model, ids, r=None):
    x = torch.tensor([ids])
    with torch.no_grad(), rt.RoutingCapture(model) as cap:
        if r is None:
            logits = model(x).logits
        else:
            with rt.replay(model, r[None]):
                logits = model(x).logits
        chosen = cap.collect()
    logp = torch.log_softmax(logits[0].float(), -1)[:-1].gather(-1, x[0, 1:, None])[:, 0]
    return chosen.numpy(), np.concatenate([[0.0], logp.numpy()])


def test_replay_reproduces_engine_routing_and_logprobs(trajectory):
    trainer, (ids, mask, logprobs, routing) = trajectory
    layers, k, experts = rt.routing_shape(trainer)
    # The stream's routing: the engine's rows, plus a placeholder for the last position
    # (never fed to the engine) and one for a context position, as TITO repair would leave.
    valid = np.ones(len(ids), bool)
    valid[-1] = False
    valid[3] = False
    record = np.concatenate([routing, np.zeros((1, layers, k), routing.dtype)])
    r = rt.to_replay(record, valid)
    assert mask[3] == 0 and mask[-1] == 1  # placeholders: a context position and the unfed last

    chosen, lp_replay = _forward(trainer, ids, r)
    assert np.array_equal(chosen[valid], record[valid].astype(np.int64))

    loss = mask.astype(bool)
    gap_replay = np.abs(lp_replay - logprobs)[loss]
    chosen_live, lp_live = _forward(trainer, ids)
    gap_live = np.abs(lp_live - logprobs)[loss]
    differs = (chosen_live[:-1] != routing.astype(np.int64)).any(axis=(1, 2))
    print(
        f"\nreplay check: {loss.sum()} loss tokens; |logp_train - logp_rollout| mean/max "
        f"with replay {gap_replay.mean():.4f}/{gap_replay.max():.4f}, without "
        f"{gap_live.mean():.4f}/{gap_live.max():.4f}; positions routed differently without "
        f"replay: {differs.mean():.4%} ({differs.sum()}/{differs.size})"
    )
    # bf16 inference vs fp32 training: logits carry ~3 significant digits.
    assert gap_replay.max() < 0.05
    assert gap_replay.mean() < 0.01


def test_replayed_stream_survives_the_compact_record(trajectory, tmp_path):
    trainer, (ids, mask, logprobs, routing) = trajectory
    rt.save(tmp_path / "r.npz", routing)
    back, valid = rt.load(tmp_path / "r.npz")
    assert back.dtype == np.uint8 and valid.all()
    assert np.array_equal(back, routing)

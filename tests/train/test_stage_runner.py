"""t1.train.stage: the one stage skeleton (SFT, critic warm-up) and the one retention knob,
`campaign.keep_checkpoints`, reaching every stage directory's checkpoints."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import yaml

from t1.agent.trajectory import Status, Trajectory, Turn, save_trajectory
from t1.config import load_config
from t1.model.policy import build_policy, save_policy
from t1.store.ckpt import list_step_dirs
from t1.store.metrics_log import read_events
from t1.supervise.child import EXIT_REQUEUE
from t1.train import critic_warmup, sft
from t1.train.state import StageDir

VOCAB = 64
MODEL = {
    "layers": 1,
    "hidden": 32,
    "heads": 2,
    "kv_heads": 1,
    "head_dim": 16,
    "intermediate": 64,
    "expert_intermediate": 16,
    "experts": 4,
    "top_k": 2,
}


def _config(tmp_path, keep: int) -> str:
    data = {
        "run": {"threads": 1, "seed": 0},
        "tokenizer": {"vocab_size": VOCAB},
        "model": MODEL,
        "ppo": {"minibatch": 2},
        "sft": {"epochs": 2, "batch": 2, "save_every": 1, "lr": 1e-3},
        "critic_warmup": {"epochs": 2, "batch": 2, "save_every": 1},
        "campaign": {"keep_checkpoints": keep},
    }
    path = tmp_path / f"cfg-keep{keep}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Four one-turn trajectories (two resolved) and a tiny policy; no engine needed."""
    tmp = tmp_path_factory.mktemp("stage_runner")
    rng = np.random.default_rng(0)
    for i in range(4):
        prompt, out = rng.integers(3, VOCAB, 10), rng.integers(3, VOCAB, 5)
        routing = rng.integers(0, 4, (14, 1, 2)).astype(np.uint8)
        turn = Turn(prompt, out, np.full(5, -1.0, np.float32), routing, 0)
        meta = {"resolved": i % 2 == 0, "passed": i % 2, "total": 1}
        traj = Trajectory(
            f"t{i}", Status.COMPLETED, [turn], reward=float(i % 2 == 0), metadata=meta
        )
        save_trajectory(traj, tmp / "data" / "trajectories" / f"{i:04d}-t{i}")
    cfg = load_config(_config(tmp, 2))
    policy = save_policy(build_policy(cfg.model, VOCAB, seed=0), tmp / "init" / "actor")
    # sft starts from a policy dir; critic warm-up from a dir holding actor/ (an SFT output)
    return {"tmp": tmp, "data": tmp / "data", "policy": policy, "init": tmp / "init"}


def _args(cfg, inputs, source, out, max_steps=None):
    return argparse.Namespace(
        config=cfg, inputs=[str(inputs)], source=str(source), out=str(out), critic=None,
        tokenizer=None, max_steps=max_steps,
    )  # fmt: skip


class _Stop:
    requested = False


@pytest.mark.parametrize("keep", [2, 3])
def test_sft_keeps_campaign_keep_checkpoints(world, tmp_path, keep):
    cfg_path = _config(tmp_path, keep)
    out = tmp_path / "sft"
    rc = sft.run(load_config(cfg_path), _args(cfg_path, world["data"], world["policy"], out))
    assert rc == 0 and (out / "DONE.json").exists() and (out / "actor").is_dir()
    steps = [e["step"] for e in read_events(out, "sft_step")]
    assert steps == [1, 2, 3, 4]  # 4 rows, batch 2, 2 epochs; a checkpoint after each step
    kept = sorted(s for s, _ in list_step_dirs(out / "ckpt"))
    assert kept == [4 - keep + 1 + i for i in range(keep)]
    assert [e["step"] for e in read_events(out, "sft_done")] == [4]


def test_critic_warmup_stops_resumes_and_finishes(world, tmp_path):
    cfg_path = _config(tmp_path, 2)
    cfg = load_config(cfg_path)
    sft_dir = world["init"]
    out = tmp_path / "warm"
    stop = _Stop()
    stop.requested = True  # asked to stop before the first step: save and ask for a requeue
    assert critic_warmup.run(cfg, _args(cfg_path, world["data"], sft_dir, out), stop) == (
        EXIT_REQUEUE
    )
    assert not (out / "DONE.json").exists() and list_step_dirs(out / "ckpt")
    assert critic_warmup.run(cfg, _args(cfg_path, world["data"], sft_dir, out, max_steps=1)) == 0
    assert not (out / "DONE.json").exists()
    assert critic_warmup.run(cfg, _args(cfg_path, world["data"], sft_dir, out)) == 0
    assert [e["step"] for e in read_events(out, "critic_warmup_step")] == [1, 2, 3, 4]
    assert (out / "critic").is_dir() and not (out / "actor").exists()
    assert critic_warmup.run(cfg, _args(cfg_path, world["data"], sft_dir, out)) == 0  # DONE


def test_no_trainable_rows_is_exit_3(world, tmp_path, capsys):
    cfg_path = _config(tmp_path, 2)
    empty = tmp_path / "empty"
    empty.mkdir()
    rc = sft.run(load_config(cfg_path), _args(cfg_path, empty, world["policy"], tmp_path / "o"))
    assert rc == 3 and "t1 train sft: no trainable trajectory" in capsys.readouterr().out


def test_stage_dir_refuses_to_save_without_a_valid_keep(tmp_path):
    with pytest.raises(ValueError, match="must be >= 2"):
        StageDir(tmp_path, "sft", keep=1)
    with pytest.raises(ValueError, match="keep_checkpoints"):
        StageDir(tmp_path, "sft").save(None, {"step": 1})

"""Fallback, never fresh: a PPO step whose previous step's checkpoint is corrupt redoes that
step from the newest good checkpoint up the chain - same weights, same step numbers - and
records the incident; a chain that cannot be rebuilt is an error, never a fresh start.

    .venv/bin/pytest tests/train/test_ppo_fallback.py -q
"""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file
from test_stages import VOCAB, _args, _config, _rollout

from t1.config import load_config
from t1.model.policy import build_policy, load_policy, save_policy
from t1.store.ckpt import list_step_dirs
from t1.store.incidents import read_incidents
from t1.store.metrics_log import read_events
from t1.train import cli


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ppo-fallback")
    cfg = _config(tmp, run={"deterministic": True, "threads": 1})
    sft = tmp / "sft"
    save_policy(build_policy(load_config(cfg).model, VOCAB, seed=0), sft / "actor")
    rollout = _rollout(cfg, sft / "actor", tmp / "rollout")
    ref = _chain(cfg, rollout, sft, tmp / "ref", 3)
    return {"tmp": tmp, "cfg": cfg, "sft": sft, "rollout": rollout, "ref": _state(ref[-1])}


def _chain(cfg, rollout, source, base, n, start=0):
    dirs = [base / f"step{i}" for i in range(n)]
    for i in range(start, n):
        prev = dirs[i - 1] if i else source
        assert cli.main(_args(cfg, "ppo", rollout, prev, dirs[i])) == 0
    return dirs


def _state(step_dir):
    return {
        "actor": load_policy(step_dir / "actor").state_dict(),
        "critic": load_file(str(step_dir / "critic" / "critic.safetensors")),
    }


def _corrupt(step_dir):
    (_, ckpt), *_ = list_step_dirs(step_dir / "ckpt")
    part = ckpt / "actor.safetensors"
    raw = bytearray(part.read_bytes())
    raw[-40] ^= 0xFF  # inside the tensor data: same size, wrong sha256
    part.write_bytes(bytes(raw))


def test_corrupt_previous_checkpoint_redoes_that_step_bit_identically(world):
    cfg, rollout = world["cfg"], world["rollout"]
    dirs = _chain(cfg, rollout, world["sft"], world["tmp"] / "faulty", 2)
    _corrupt(dirs[1])
    (step2,) = _chain(cfg, rollout, dirs[1], world["tmp"] / "faulty2", 1)
    got = _state(step2)
    for part in ("actor", "critic"):
        ref = world["ref"][part]
        assert all(torch.equal(got[part][k], ref[k]) for k in ref), part
    (ev,) = read_events(step2, "ppo_step")
    assert ev["step"] == 2  # the step number is kept (a fresh start would say 0)
    fallback = [i for i in read_incidents(step2 / "incidents.jsonl")]
    assert [(i["kind"], i["step"]) for i in fallback] == [("checkpoint_fallback", 1)]
    corrupt = read_incidents(dirs[1] / "incidents.jsonl")
    assert any(i["kind"] == "checkpoint_corrupt" for i in corrupt)


def test_a_chain_that_cannot_be_rebuilt_is_an_error_not_a_fresh_start(world, capsys):
    cfg, rollout = world["cfg"], world["rollout"]
    dirs = _chain(cfg, rollout, world["sft"], world["tmp"] / "broken", 2)
    shutil.rmtree(dirs[1] / "ckpt")
    (dirs[1] / "step.json").unlink()
    out = world["tmp"] / "broken2"
    assert cli.main(_args(cfg, "ppo", rollout, dirs[1], out)) == 5
    said = capsys.readouterr().out
    assert str(dirs[1]) in said and "refusing to start PPO fresh" in said
    assert not (out / "DONE.json").exists() and not (out / "actor").exists()

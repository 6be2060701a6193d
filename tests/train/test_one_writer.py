"""One writer per output and no silent fresh start, with the real `t1 train --stage sft`.

.venv/bin/pytest tests/train/test_one_writer.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_stages import _config, _rollout

from t1.store.ckpt import list_step_dirs
from t1.store.incidents import read_incidents
from t1.store.lock import LOCK_NAME
from t1.store.metrics_log import last_attempt, read_events

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T1 = str(Path(sys.executable).with_name("t1"))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one-writer")
    cfg = _config(tmp, run={"deterministic": True, "threads": 1})
    policy = tmp / "policy"
    subprocess.run(
        [T1, "init-policy", "--config", cfg, "--out", str(policy), "--vocab-size", "256"],
        check=True,
        capture_output=True,
    )
    return {"tmp": tmp, "cfg": cfg, "policy": policy, "data": _rollout(cfg, policy, tmp / "x", n=4)}


def _cmd(w, out: Path, *extra: str) -> list[str]:
    return [T1, "train", "--config", w["cfg"], "--stage", "sft", "--in", str(w["data"]),
            "--from", str(w["policy"]), "--out", str(out), *extra]  # fmt: skip


def test_two_sft_trainers_on_one_output_never_run_together(world):
    out = world["tmp"] / "shared"
    first = subprocess.Popen(_cmd(world, out), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lock = out / LOCK_NAME
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the first one holds the lock
        try:
            if json.loads(lock.read_text() or "{}").get("pid") == first.pid:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    second = subprocess.run(_cmd(world, out), capture_output=True, text=True)
    still_running = first.poll() is None
    assert first.wait(timeout=300) == 0, first.stdout.read().decode()
    assert still_running, "the first trainer finished before the second started: no overlap"
    assert second.returncode == 4, second.stdout + second.stderr
    assert f"pid {first.pid}" in second.stdout and str(out) in second.stdout, second.stdout
    # the second wrote nothing: every sft_step once, one attempt
    steps = read_events(out, "sft_step")
    assert [e["step"] for e in steps] == list(range(1, 5))  # 4 rows, batch 2, 2 epochs
    assert {e["attempt"] for e in steps} == {1}
    again = subprocess.run(_cmd(world, out), capture_output=True, text=True)
    assert again.returncode == 0 and "nothing to do" in again.stdout


def test_unusable_checkpoints_refuse_a_fresh_start_unless_asked(world):
    out = world["tmp"] / "corrupt-all"
    r = subprocess.run(_cmd(world, out, "--max-steps", "3"), capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    ckpts = list_step_dirs(out / "ckpt")
    assert len(ckpts) == 3
    for _, path in ckpts:  # every checkpoint fails its checksum
        part = path / "actor.safetensors"
        raw = bytearray(part.read_bytes())
        raw[-40] ^= 0xFF
        part.write_bytes(bytes(raw))
    r = subprocess.run(_cmd(world, out), capture_output=True, text=True)
    assert r.returncode == 5, r.stdout + r.stderr
    assert "--restart-stage" in r.stdout and "step_00000003" in r.stdout, r.stdout
    assert not (out / "DONE.json").exists()
    r = subprocess.run(_cmd(world, out, "--restart-stage"), capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    kinds = [i["kind"] for i in read_incidents(out / "incidents.jsonl")]
    assert "checkpoint_corrupt" in kinds and "stage_restarted" in kinds
    assert list(out.glob("ckpt.discarded-*"))
    # steps 1-3 were written by two attempts: readers keep the last, marked redone
    steps = last_attempt(read_events(out, "sft_step"))
    assert [e["step"] for e in steps] == list(range(1, 5))
    assert [bool(e.get("redone")) for e in steps] == [True] * 3 + [False]

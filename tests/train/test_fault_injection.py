"""Fault injection with real processes: `t1 train` killed with SIGKILL anywhere resumes
bit-for-bit; a corrupt newest checkpoint is detected, reported and skipped.

    .venv/bin/pytest tests/train/test_fault_injection.py -q -s     (-s prints the kill log)

Each run is the real `t1 train --stage sft` command in its own process, deterministic mode
on, a checkpoint every optimizer step. A reference run goes uninterrupted; each trial starts
the same command, kills it (-9) at a seeded random time or while a checkpoint is being
written (its `.tmp-step_*` directory or a `step_*` without `COMPLETE` seen on disk), then
reruns the same command until it exits 0, and compares the final actor weights with
torch.equal.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_stages import _config, _rollout

from t1.model.policy import load_policy
from t1.store.ckpt import list_step_dirs
from t1.store.incidents import read_incidents

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T1 = str(Path(sys.executable).with_name("t1"))
TRIALS = 10  # half at random times in the training span, half during checkpoint writes
SEED = 20261129


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    cfg = _config(tmp, run={"deterministic": True, "threads": 1})
    policy = tmp / "policy"
    subprocess.run(
        [T1, "init-policy", "--config", cfg, "--out", str(policy), "--vocab-size", "256"],
        check=True,
        capture_output=True,
    )
    # 8 trajectories, 2 epochs of batch 2: 8 optimizer steps, a checkpoint after each.
    data = _rollout(cfg, policy, tmp / "expert", n=8)
    ref = tmp / "ref"
    t0 = time.perf_counter()
    proc = subprocess.Popen(_cmd(cfg, data, policy, ref), stdout=subprocess.DEVNULL)
    t_first = None
    while proc.poll() is None:
        if t_first is None and (ref / "ckpt").exists():
            t_first = time.perf_counter()  # the first checkpoint write began
        time.sleep(0.01)
    assert proc.returncode == 0 and t_first is not None
    return {
        "tmp": tmp,
        "cfg": cfg,
        "policy": policy,
        "data": data,
        "ref": _actor(ref),
        "ref_s": time.perf_counter() - t0,
        "train_s": time.perf_counter() - t_first,  # first checkpoint write -> exit
    }


def _cmd(cfg, data, policy, out, max_steps=None):
    cmd = [T1, "train", "--config", cfg, "--stage", "sft", "--in", str(data)]
    cmd += ["--from", str(policy), "--out", str(out)]
    return cmd + (["--max-steps", str(max_steps)] if max_steps else [])


def _actor(out: Path) -> dict[str, torch.Tensor]:
    return load_policy(out / "actor").state_dict()


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _writing(root: Path) -> bool:
    """A checkpoint write is under way: a temp dir, or a step dir not yet marked."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return False
    for n in names:
        if n.startswith(".tmp-step_"):
            return True
        if n.startswith("step_") and not os.path.exists(root / n / "COMPLETE"):
            return True
    return False


def _run_killed(cmd, out: Path, kill_at: float | None, nth_write: int | None) -> str:
    """Start cmd; SIGKILL it kill_at s after its first checkpoint write began, or on the nth
    checkpoint write seen. Returns where it was killed ("t=..s", "write #n (...)") or
    "finished" if it ended first."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0, seen, was_writing = None, 0, False
    try:
        while proc.poll() is None:
            if t0 is None and (out / "ckpt").exists():
                t0 = time.perf_counter()
            if kill_at is not None and t0 is not None and time.perf_counter() - t0 >= kill_at:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                state = sorted(os.listdir(out / "ckpt"))
                return f"first write + {kill_at:.2f}s ({', '.join(state)})"
            if nth_write is not None:
                writing = _writing(out / "ckpt")
                if writing and not was_writing:
                    seen += 1
                    if seen >= nth_write:
                        proc.send_signal(signal.SIGKILL)
                        proc.wait()
                        state = sorted(os.listdir(out / "ckpt"))
                        return f"write #{seen} ({', '.join(state)})"
                was_writing = writing
            time.sleep(0.0005 if nth_write is not None else 0.01)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, f"{cmd}: exit {proc.returncode} before the kill"
    return "finished"


def _finish(cmd) -> tuple[int, str]:
    """Rerun until exit 0; returns (reruns, the output of the last one)."""
    for n in range(1, 4):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode == 0:
            return n, proc.stdout
    raise AssertionError(f"{cmd}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")


def test_sigkill_anywhere_resumes_bit_identically(fixture):
    rng = random.Random(SEED)
    cmd_of = lambda out: _cmd(fixture["cfg"], fixture["data"], fixture["policy"], out)  # noqa: E731
    report, kills, resumed_mid = [], 0, 0
    for trial in range(TRIALS):
        out = fixture["tmp"] / f"trial_{trial:02d}"
        if trial % 2 == 0:
            where = _run_killed(cmd_of(out), out, rng.uniform(0.0, 0.9 * fixture["train_s"]), None)
        else:
            where = _run_killed(cmd_of(out), out, None, rng.randint(1, 8))
        kills += where != "finished"
        reruns, stdout = _finish(cmd_of(out))
        resumed = "resuming from" in stdout
        resumed_mid += resumed
        same = _same(_actor(out), fixture["ref"])
        report.append(f"trial {trial:2d}: killed at {where}; resumed={resumed}; identical={same}")
        assert same, "\n".join(report)
        assert (out / "DONE.json").exists()
    ref = f"reference run {fixture['ref_s']:.1f}s ({fixture['train_s']:.1f}s from the first write)"
    print("", ref, *report, sep="\n")
    assert kills >= 10, "\n".join(report)
    assert resumed_mid >= 5, "\n".join(report)  # most kills land after a checkpoint


def test_corrupt_newest_checkpoint_is_skipped(fixture):
    out = fixture["tmp"] / "corrupt"
    cmd = _cmd(fixture["cfg"], fixture["data"], fixture["policy"], out)
    assert subprocess.run(cmd[:] + ["--max-steps", "5"], capture_output=True).returncode == 0
    steps = list_step_dirs(out / "ckpt")
    assert steps[0][0] == 5 and steps[1][0] == 4
    part = steps[0][1] / "actor.safetensors"
    raw = bytearray(part.read_bytes())
    for i in range(len(raw) - 64, len(raw) - 32):  # inside the tensor data: size unchanged
        raw[i] ^= 0xFF
    part.write_bytes(bytes(raw))
    reruns, stdout = _finish(cmd)
    assert "step_00000004" in stdout and "resuming from" in stdout, stdout
    bad = [i for i in read_incidents(out / "incidents.jsonl")]
    assert any(
        i["kind"] == "checkpoint_corrupt" and i["step"] == 5 and "actor.safetensors" in i["problem"]
        for i in bad
    ), bad
    assert _same(_actor(out), fixture["ref"])

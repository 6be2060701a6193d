"""Fault injection into a PPO segment with real processes: `t1 segment` (real rollouts of the
tiny MoE in bubblewrap sandboxes, real verifiers, real `t1 train --stage ppo`) killed with
SIGKILL - the whole process tree, as a lost node would - and rerun resumes to the weights of an
uninterrupted run, bit for bit.

    .venv/bin/pytest tests/train/test_ppo_fault_injection.py -q -s   (-s prints the kill log)

Deterministic mode is on (run.deterministic: seeded sampling per step and trajectory,
over-sampling admits by the trajectories' virtual clocks, one thread). A reference segment of
2 PPO steps runs uninterrupted; each trial starts the same command, kills its tree at a seeded
random time, in a rollout, or while the trainer writes a checkpoint, then reruns the same
command until it exits 0 and compares the final actor and critic with torch.equal. tests/train/
test_fault_injection.py does the same for 10 trials of `t1 train --stage sft`.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from t1.model.policy import load_policy

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed"),
    pytest.mark.timeout(1500),
]

REPO = Path(__file__).resolve().parents[2]
T1 = str(Path(sys.executable).with_name("t1"))
TASKS = ["csv-summary", "word-frequency", "stats-debug", "datamash-report"]
SEED = 20261129
CONFIG = {
    "run": {"name": "faults", "seed": 5, "deterministic": True, "threads": 1},
    "tokenizer": {"vocab_size": 512},
    "engine": {"max_new_tokens": 24},
    "agent": {"max_turns": 2, "context_tokens": 1024, "command_timeout_s": 10},
    "rollout": {"launch": 3, "admit": 2, "workers": 2},
    "ppo": {"minibatch": 2},
    "campaign": {"steps_per_segment": 2, "keep_checkpoints": 3},
    "reward": {"scale": 10},  # the hand-made pool below records no assertion counts
}


def _t1(*args: str) -> None:
    r = subprocess.run([T1, *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Config, tokenizer, initial policy and a pool of four example tasks; one reference run."""
    tmp = tmp_path_factory.mktemp("ppo-faults")
    cfg = tmp / "config.yaml"
    cfg.write_text(yaml.safe_dump(CONFIG))
    _t1("tokenizer", "train", "--vocab-size", "512", "--out", str(tmp / "tokenizer"))
    _t1("init-policy", "--config", str(cfg), "--tokenizer", str(tmp / "tokenizer"),
        "--out", str(tmp / "sft" / "actor"))  # fmt: skip
    world = {"tmp": tmp, "cfg": cfg}
    ref = _run_dir(world, "ref")
    t0 = time.perf_counter()
    r = subprocess.run(_cmd(world, ref), capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    world["ref_s"] = time.perf_counter() - t0
    world["ref"] = _weights(ref)
    return world


def _run_dir(world: dict, name: str) -> Path:
    """A run directory with the pool the segment reads (results/<run>/pool/train)."""
    run = world["tmp"] / name
    pool = run / "pool/train"
    pool.mkdir(parents=True)
    tasks = [{"path": str(REPO / "workflow/tasks" / t)} for t in TASKS]
    manifest = {"schema_version": 1, "status": "complete", "tasks": tasks}
    (pool / "manifest.json").write_text(json.dumps(manifest))
    return run


def _cmd(world: dict, run: Path) -> list[str]:
    return [T1, "segment", "--config", str(world["cfg"]), "--iter", "0", "--run-dir", str(run),
            "--from", str(world["tmp"] / "sft"), "--tokenizer", str(world["tmp"] / "tokenizer"),
            "--out", str(run / "ppo/iter_00000/DONE")]  # fmt: skip


def _weights(run: Path) -> dict[str, dict[str, torch.Tensor]]:
    last = run / "ppo/steps/step_000001/train"
    return {
        "actor": load_policy(last / "actor").state_dict(),
        "critic": load_file(str(last / "critic/critic.safetensors")),
    }


def _tree(pid: int) -> list[int]:
    """pid and all its descendants (from /proc), parents first."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the segment and everything under it at once: sandboxes, rollout, trainer.
    The tree is frozen first (SIGSTOP until no new process appears), so nothing forked in
    between escapes; the root is reaped only after, so no pid is reused meanwhile."""
    frozen: set[int] = set()
    while True:
        new = [p for p in _tree(proc.pid) if p not in frozen]
        if not new:
            break
        for p in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGSTOP)
        frozen.update(new)
    for p in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    proc.wait()


def _writing_checkpoint(run: Path) -> bool:
    steps = run / "ppo/steps"
    return any(steps.glob("step_*/train/ckpt/.tmp-*")) or any(
        d.is_dir() and not (d / "COMPLETE").exists() for d in steps.glob("step_*/train/ckpt/step_*")
    )


def _in_rollout(run: Path) -> bool:
    return any(
        r.is_dir() and not (r / "rollout.json").exists()
        for r in (run / "ppo/steps").glob("step_*/rollout")
    )


WHEN = ["random", "rollout", "checkpoint"]  # ~50 s each; the SFT test runs 10 random trials


@pytest.mark.parametrize("trial", range(len(WHEN)))
def test_sigkill_of_a_ppo_segment_resumes_bit_identically(world, trial):
    rng = random.Random(SEED + trial)
    when = WHEN[trial]
    run = _run_dir(world, f"trial{trial}")
    kill_at = rng.uniform(0.1, 0.9) * world["ref_s"]
    proc = subprocess.Popen(_cmd(world, run), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.perf_counter()
    killed = None
    while proc.poll() is None:
        elapsed = time.perf_counter() - t0
        if (
            (when == "random" and elapsed >= kill_at)
            or (when == "rollout" and elapsed >= kill_at / 2 and _in_rollout(run))
            or (when == "checkpoint" and _writing_checkpoint(run))
        ):
            _kill_tree(proc)
            killed = f"{when} at {elapsed:.1f} s of {world['ref_s']:.1f} s"
            break
        time.sleep(0.005)
    print(f"\n[ppo-faults] trial {trial}: killed {killed or 'never (it finished first)'}")
    assert killed or when == "checkpoint", "the segment finished before it could be killed"
    for _ in range(3):
        r = subprocess.run(_cmd(world, run), capture_output=True, text=True)
        if r.returncode == 0:
            break
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    got = _weights(run)
    for part in ("actor", "critic"):
        ref = world["ref"][part]
        assert got[part].keys() == ref.keys()
        diff = [k for k in ref if not torch.equal(got[part][k], ref[k])]
        assert not diff, f"{part} differs from the uninterrupted run in {diff[:5]}"

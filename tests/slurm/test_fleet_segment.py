"""One PPO segment on the local Slurm with its rollout fleet split into job steps (issue 13).

    sudo bash .ci/slurm/up.sh && .venv/bin/pytest tests/slurm/test_fleet_segment.py -q -s

The tiny config with its fleet overlay (tests/slurm/fleet.yaml: one `t1 serve` replica,
colocated) runs `t1 segment` as one sbatch job; t1/run/segment_fleet.py starts the replica as a job
step, waits for its /health, runs the steps' rollouts against it (real sandboxes, real
verifiers) and each `t1 train --stage ppo` as a trainer job step, loads every step's weights
into the replica, and stops the replica step. `sacct` must show the server step and the trainer
steps in the one allocation, and the replica must report the segment's final weights.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from shared_fixtures import slurm_problem

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
T1 = str(BIN / "t1")
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
TASKS = ["csv-summary", "word-frequency"]
STEPS = 2

_problem = slurm_problem()
pytestmark = [
    pytest.mark.slurm,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(_problem is not None, reason=f"local Slurm not up: {_problem}"),
    pytest.mark.timeout(600),
]


def _t1(*args: str) -> None:
    r = subprocess.run([T1, *args], capture_output=True, text=True, env=ENV)
    assert r.returncode == 0, r.stdout + r.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sacct_steps(job: str) -> list[dict[str, str]]:
    """Every step of the job (batch, replica0, trainer, ...) with state and exit code."""
    out = subprocess.run(
        ["sacct", "-n", "-P", "-j", job, "-o", "JobID,JobName,State,ExitCode"],
        capture_output=True,
        text=True,
    ).stdout
    rows = [
        dict(zip(("id", "name", "state", "exit"), line.split("|"), strict=False))
        for line in out.split("\n")
    ]
    return [r for r in rows if len(r) == 4]


def test_a_segment_splits_its_allocation_into_server_and_trainer_steps(tmp_path):
    port = _free_port()
    _t1("tokenizer", "train", "--vocab-size", "512", "--out", str(tmp_path / "tokenizer"))
    cfg = tmp_path / "config.yaml"
    _t1(
        "run-config", "--base", str(REPO / "workflow/config/tiny.yaml"),
        str(REPO / "tests/slurm/fleet.yaml"),
        "--set", "run.name=fleet", "--set", "run.threads=1", "--set", f"fleet.port={port}",
        "--set", "tokenizer.vocab_size=512", "--set", f"campaign.steps_per_segment={STEPS}",
        "--set", "rollout.launch=2", "--set", "rollout.admit=2", "--set", "rollout.workers=1",
        "--set", "agent.max_turns=1", "--set", "agent.context_tokens=1024",
        "--set", "engine.max_new_tokens=16", "--set", "ppo.minibatch=2",
        "--set", "reward.scale=10",  # the hand-made pool below records no assertion counts
        "--out", str(cfg),
    )  # fmt: skip
    _t1("init-policy", "--config", str(cfg), "--tokenizer", str(tmp_path / "tokenizer"),
        "--out", str(tmp_path / "sft" / "actor"))  # fmt: skip
    run = tmp_path / "run"
    (run / "pool/train").mkdir(parents=True)
    tasks = [{"path": str(REPO / "workflow/tasks" / t)} for t in TASKS]
    manifest = {"schema_version": 1, "status": "complete", "tasks": tasks}
    (run / "pool/train/manifest.json").write_text(json.dumps(manifest))
    done = run / "ppo/iter_00000/DONE"
    segment = [T1, "segment", "--config", str(cfg), "--iter", "0", "--run-dir", str(run),
               "--from", str(tmp_path / "sft"), "--tokenizer", str(tmp_path / "tokenizer"),
               "--out", str(done)]  # fmt: skip
    sbatch = ["sbatch", "--parsable", "--wait", "--account=t1", "--partition=debug", "--nodes=1"]
    sbatch += ["--ntasks=1", "--cpus-per-task=2", "--mem=3000M", "--time=10"]
    sbatch += [f"--chdir={REPO}", f"--output={tmp_path}/slurm-%j.out", "--job-name=t1-fleet-seg"]
    t0 = time.monotonic()
    r = subprocess.run([*sbatch, "--wrap", " ".join(segment)], capture_output=True, text=True,
                       env=ENV, timeout=540)  # fmt: skip
    took = time.monotonic() - t0
    job = r.stdout.strip().split(";")[0]
    logs = "\n".join(p.read_text()[-6000:] for p in tmp_path.glob("slurm-*.out"))
    assert r.returncode == 0, f"{r.stdout}{r.stderr}\n{logs}"
    print(f"sbatch job {job}: {took:.1f} s\n{logs[-3000:]}")

    # one allocation, a server step beside the trainer steps (sacct may lag the job's end)
    for _ in range(30):
        steps = _sacct_steps(job)
        if sum(s["name"] == "trainer" for s in steps) == STEPS and any(
            s["name"] == "replica0" and s["state"] not in ("RUNNING", "PENDING") for s in steps
        ):
            break
        time.sleep(1)
    print("\n".join(f"{s['id']} {s['name']} {s['state']} {s['exit']}" for s in steps))
    assert {s["id"].split(".")[0] for s in steps} == {job}
    trainer = [s for s in steps if s["name"] == "trainer"]
    server = [s for s in steps if s["name"] == "replica0"]
    assert len(trainer) == STEPS and all(s["state"] == "COMPLETED" for s in trainer), steps
    assert len(server) == 1 and server[0]["id"] not in {s["id"] for s in trainer}, steps
    # stopped by the driver at the end: srun cancels its step on SIGTERM ("CANCELLED by 0")
    assert server[0]["state"].split()[0] in ("COMPLETED", "CANCELLED"), steps
    assert any(s["name"] == "batch" and s["state"] == "COMPLETED" for s in steps), steps

    # every step sampled from the replica after loading its policy there
    for s in range(STEPS):
        sdir = run / f"ppo/steps/step_{s:06d}"
        prev = (tmp_path / "sft") if s == 0 else run / f"ppo/steps/step_{s - 1:06d}/train"
        fleet = json.loads((sdir / "rollout/fleet.json").read_text())
        assert fleet["weight_updates"] == 1 and fleet["failed_weight_updates"] == 0, fleet
        assert fleet["version"] == str((prev / "actor").resolve()), fleet
        assert fleet["requests"] > 0 and fleet["replicas"][0]["served"] > 0, fleet
        assert fleet["replicas"][0]["url"] == f"http://localhost:{port}", fleet
        assert (sdir / "train/DONE.json").exists()

    # the segment finished with its final weights on the replica, as the replica reports
    final = run / f"ppo/steps/step_{STEPS - 1:06d}/train/actor"
    rec = json.loads((run / "ppo/iter_00000/fleet_steps.json").read_text())
    assert rec["status"] == "complete" and rec["job_id"] == job, rec
    (info,) = rec["replicas_after"]
    assert info["model_path"] == str(final) and info["weight_version"] == str(final.resolve())
    assert (
        rec["replicas"][0]["launch"][:1] == ["srun"] and "--overlap" in rec["replicas"][0]["launch"]
    )
    assert [t["line"][:1] for t in rec["trainer_steps"]] == [["srun"]] * STEPS
    assert json.loads(done.read_text())["status"] == "complete"

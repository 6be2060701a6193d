"""The local Slurm (.ci/slurm/up.sh) and the workflow through the real Snakemake Slurm executor:
sbatch + sacct, a chain of segments as Slurm jobs, `scontrol requeue` of a running segment,
a segment that stops itself ahead of its time limit and requeues itself.

    sudo bash .ci/slurm/up.sh && .venv/bin/pytest tests/slurm -q -m slurm
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from shared_fixtures import slurm_problem

from t1.store.ckpt import latest_complete
from t1.store.incidents import read_incidents

REPO = Path(__file__).resolve().parents[2]
CHAIN = REPO / "tests/workflow/chain/Snakefile"
BIN = Path(sys.executable).parent
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


_problem = slurm_problem()
pytestmark = [
    pytest.mark.slurm,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(_problem is not None, reason=f"local Slurm not up: {_problem}"),
]


def sacct_states(job: str) -> list[str]:
    """States of every run of a job, oldest first (requeued runs included)."""
    out = subprocess.run(
        ["sacct", "-n", "-X", "-D", "-P", "-j", job, "-o", "State"], capture_output=True, text=True
    ).stdout
    return out.split()


def wait_states(job: str, final: str = "COMPLETED", timeout: float = 60) -> list[str]:
    end = time.time() + timeout
    while time.time() < end:
        states = sacct_states(job)
        if states and states[-1] == final:
            return states
        time.sleep(1)
    return sacct_states(job)


def run_chain(
    workdir: Path, *config: str, release_holds: bool = False, timeout: float = 400
) -> tuple[str, list[str]]:
    """The chain workflow through profiles/slurm-ci; returns (output, Slurm job ids).

    release_holds: a requeued job is held ~2 minutes (BeginTime); release it, as an operator
    would with `scontrol update jobid=X StartTime=now`, 1.5 s after it was first seen held:
    slurmd refuses to launch a job whose credential it revoked within the same second
    ("Killing non-startable batch JobId=305: Job credential revoked", and the job ends FAILED;
    slurmctld.log, 2026-12-06)."""
    cmd = [
        str(BIN / "snakemake"),
        "-s",
        str(CHAIN),
        "-d",
        str(workdir),
        "--profile",
        str(REPO / "profiles/slurm-ci"),
        "--config",
        *config,
    ]
    p = subprocess.Popen(
        cmd, env=ENV, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    jobs: list[str] = []

    def read() -> None:
        for line in p.stdout:
            lines.append(line)
            m = re.search(r"submitted with SLURM jobid (\d+)", line)
            if m:
                jobs.append(m[1])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    end = time.time() + timeout
    held: dict[str, float] = {}  # job -> when it was first seen held (BeginTime)
    while p.poll() is None:
        assert time.time() < end, "".join(lines)
        for job in jobs if release_holds else []:
            st = subprocess.run(
                ["squeue", "-h", "-j", job, "-o", "%T %r"], capture_output=True, text=True
            ).stdout
            if not (st.startswith("PENDING") and "BeginTime" in st):
                held.pop(job, None)
            elif time.time() - held.setdefault(job, time.time()) >= 1.5:
                subprocess.run(["scontrol", "update", f"jobid={job}", "StartTime=now"], check=False)
        time.sleep(0.5)
    reader.join(timeout=10)
    out = "".join(lines)
    assert p.returncode == 0, out
    return out, jobs


def runs(workdir: Path) -> list[dict]:
    return [json.loads(x) for x in (workdir / "out/runs.log").read_text().splitlines()]


def steps_once(workdir: Path, total: int) -> None:
    history = latest_complete(workdir / "out/ckpt").load("metrics")
    assert [s for s, _ in history] == list(range(1, total + 1))


def test_sbatch_wait_and_sacct(tmp_path):
    r = subprocess.run(
        ["sbatch", "--wait", "--parsable", "-o", str(tmp_path / "%j.out"), "--wrap", "hostname"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]
    assert (tmp_path / f"{job}.out").read_text().strip()
    assert wait_states(job) == ["COMPLETED"]


def test_segment_chain_runs_as_slurm_jobs(tmp_path):
    out, jobs = run_chain(tmp_path, "segments=2", "steps=2", "step_s=0.1")
    assert len(jobs) == 2, out  # every non-local rule is a job
    for job in jobs:
        assert wait_states(job) == ["COMPLETED"], job
    assert [r["job"] for r in runs(tmp_path)] == jobs
    steps_once(tmp_path, 4)


def test_scontrol_requeue_of_a_running_segment_resumes_and_finishes(tmp_path):
    done = {}

    def requeue_once() -> None:
        end = time.time() + 200
        while time.time() < end and "job" not in done:
            ckpt = (
                latest_complete(tmp_path / "out/ckpt") if (tmp_path / "out/ckpt").exists() else None
            )
            if ckpt is not None and ckpt.step >= 3:
                job = runs(tmp_path)[0]["job"]
                subprocess.run(["scontrol", "requeue", job], check=True)
                done["job"] = job
            time.sleep(0.3)

    t = threading.Thread(target=requeue_once, daemon=True)
    t.start()
    out, jobs = run_chain(tmp_path, "segments=1", "steps=24", "step_s=0.5", release_holds=True)
    t.join(timeout=5)
    assert done.get("job") == jobs[0], out
    assert wait_states(jobs[0]) == ["REQUEUED", "COMPLETED"]
    first, second = runs(tmp_path)
    assert first["step"] == 0 and 3 <= second["step"] < 24 and second["job"] == first["job"]
    records = read_incidents(tmp_path / "out/iter_00000/incidents.jsonl")
    assert records[0]["kind"] == "stop_requested" and records[0]["reason"] == "SIGTERM"
    steps_once(tmp_path, 24)


def test_segment_stops_ahead_of_its_time_limit_and_requeues_itself(tmp_path):
    # time limit 2 min, stop 100 s before it: each run of the job has ~20 s; the work takes ~30 s
    out, jobs = run_chain(
        tmp_path,
        "segments=1",
        "steps=60",
        "step_s=0.5",
        "runtime=2",
        "margin=100",
        release_holds=True,
    )
    states = wait_states(jobs[0])
    assert states[-1] == "COMPLETED" and "REQUEUED" in states, states
    starts = runs(tmp_path)
    assert len(starts) >= 2 and all(s["job"] == jobs[0] for s in starts)
    assert [s["step"] for s in starts] == sorted({s["step"] for s in starts})  # always progress
    reasons = [
        r["reason"]
        for r in read_incidents(tmp_path / "out/iter_00000/incidents.jsonl")
        if r["kind"] == "stop_requested"
    ]
    assert reasons and set(reasons) == {"time limit ahead"}
    steps_once(tmp_path, 60)

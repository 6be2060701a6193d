"""Long jobs outside Snakemake (t1/supervise/submit.py): submitit's checkpoint-and-requeue, for real -
submitit's local executor always, the local Slurm when it is up.

    .venv/bin/pytest tests/test_submit.py -q
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from t1.store.ckpt import latest_complete
from t1.supervise.submit import submit, wait

REPO = Path(__file__).resolve().parents[1]
TOY = REPO / "tests/workflow/chain/toy_trainer.py"


def toy(tmp_path: Path, until: int, step_s: float) -> list[str]:
    return [
        sys.executable,
        str(TOY),
        "--ckpt",
        str(tmp_path / "out/ckpt"),
        "--until",
        str(until),
        "--out",
        str(tmp_path / "out/DONE"),
        "--step-s",
        str(step_s),
    ]


def wait_for_step(tmp_path: Path, step: int, job, timeout: float = 120) -> None:
    end = time.time() + timeout
    while time.time() < end:
        assert not job.done(), job.stderr()
        root = tmp_path / "out/ckpt"
        ck = latest_complete(root) if root.exists() else None
        if ck is not None and ck.step >= step:
            return
        time.sleep(0.2)
    raise AssertionError(f"no checkpoint at step {step}")


def check_resumed(tmp_path: Path, total: int) -> list[dict]:
    """Every run went on from where the one before it stopped; each step ran once."""
    starts = [json.loads(x) for x in (tmp_path / "out/runs.log").read_text().splitlines()]
    # a run stopped after its last step but before DONE leaves the next one nothing but DONE
    # (under load the stop signal can land there): only the last start may be at `total`
    assert starts[0]["step"] == 0 and all(0 < s["step"] < total for s in starts[1:-1]), starts
    assert len(starts) == 1 or 0 < starts[-1]["step"] <= total, starts
    assert [s["step"] for s in starts] == sorted({s["step"] for s in starts}), starts
    history = latest_complete(tmp_path / "out/ckpt").load("metrics")
    assert [s for s, _ in history] == list(range(1, total + 1))
    assert json.loads((tmp_path / "out/DONE").read_text())["step"] == total
    return starts


def test_local_executor_checkpoints_requeues_and_resumes(tmp_path):
    # 1-minute limit, USR2 55 s ahead of it: each run of the job gets ~5 s; the work takes ~8 s
    job = submit(
        toy(tmp_path, 80, 0.1),
        str(tmp_path / "submitit"),
        local=True,
        timeout_min=1,
        slurm_signal_delay_s=55,
        stop_timeout_s=30,
    )
    assert job.result() == 0
    starts = check_resumed(tmp_path, 80)
    assert len(starts) >= 2
    log = "".join(p.read_text() for p in (tmp_path / "submitit").glob("*_0_log.*"))
    assert "asking the command to checkpoint (SIGUSR2)" in log and "timed-out" in log


def _slurm_up() -> bool:
    if shutil.which("sinfo") is None:
        return False
    r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True)
    return r.returncode == 0 and ("idle" in r.stdout or "mixed" in r.stdout)


@pytest.mark.slurm
@pytest.mark.integration
@pytest.mark.skipif(not _slurm_up(), reason="local Slurm not up (bash .ci/slurm/up.sh)")
def test_slurm_job_checkpoints_on_usr2_requeues_itself_and_resumes(tmp_path):
    job = submit(
        toy(tmp_path, 40, 0.25),
        str(tmp_path / "submitit"),
        timeout_min=10,
        slurm_partition="debug",
        slurm_account="t1",
        mem_gb=1,
        cpus_per_task=1,
        stop_timeout_s=30,
    )
    wait_for_step(tmp_path, 3, job)
    job._interrupt()  # scancel --signal=USR2: as ahead of the time limit

    def release_the_requeue_hold() -> None:
        st = subprocess.run(
            ["squeue", "-h", "-j", job.job_id, "-o", "%T %r"], capture_output=True, text=True
        ).stdout
        if st.startswith("PENDING") and "BeginTime" in st:
            subprocess.run(["scontrol", "update", f"jobid={job.job_id}", "StartTime=now"])

    # wait(), not job.result(): mid-requeue sacct may call the cancelled attempt FAILED
    assert wait(job, poll_s=0.5, timeout_s=240, on_poll=release_the_requeue_hold) == 0
    starts = check_resumed(tmp_path, 40)
    assert len(starts) == 2 and starts[1]["step"] >= 3
    assert starts[0]["job"] == starts[1]["job"] == job.job_id
    end = time.time() + 60  # accounting lags the result file a little
    while True:
        cmd = ["sacct", "-n", "-X", "-D", "-P", "-j", job.job_id, "-o", "State"]
        states = subprocess.run(cmd, capture_output=True, text=True).stdout.split()
        if states[-1:] == ["COMPLETED"] or time.time() > end:
            break
        time.sleep(1)
    assert states[0] == "REQUEUED" and states[-1] == "COMPLETED", states

"""The Slurm job a segment runs in: its time limit, and whether to requeue it after a stop.

A segment that stops early (exit 75) wants to run again. Who requeues it depends on who
asked it to stop:

* the supervisor's own deadline (time limit minus `stop_margin_s`), a main child that exits
  75 on its own, or SIGUSR2 (`sbatch --signal=B:USR2@N`, sent only to ask for exactly this):
  nobody else will, so the job requeues itself (`scontrol requeue $SLURM_JOB_ID`);
* SIGTERM or SIGINT: sent by `scontrol requeue` or preemption (Slurm requeues the job itself),
  by `scancel` (the user wants it gone) or by Ctrl-C. Requeueing here is wrong in every case,
  and racy in the first: our `scontrol requeue` can land on the job's *next* run, which Slurm
  may already have started while this supervisor (an orphan once its step is gone) was still
  checkpointing; measured in CI as a requeued job whose second run ended FAILED.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess

EXTERNAL_STOPS = ("SIGTERM", "SIGINT")


def job_id() -> str | None:
    return os.environ.get("SLURM_JOB_ID") or None


def deadline() -> float | None:
    """End of this Slurm job's time limit (Unix seconds), or None outside Slurm / unlimited."""
    job = job_id()
    if not job:
        return None
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%e"], capture_output=True, text=True, timeout=20
        ).stdout.strip()
        return dt.datetime.fromisoformat(out).timestamp()
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def should_requeue(stop_reason: str | None) -> bool:
    """True when the stop that ended this run came from us, not from Slurm or a user."""
    return stop_reason not in EXTERNAL_STOPS


def requeue(stop_reason: str | None) -> str:
    """Requeue this job if the stop asks for it; returns what was done, for the log."""
    job = job_id()
    if job is None:
        return "not in a Slurm job: nothing to requeue"
    if not should_requeue(stop_reason):
        return f"stopped by {stop_reason}: Slurm or the user decides what happens to job {job}"
    r = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, check=False)
    if r.returncode:
        return f"scontrol requeue {job} failed: {r.stderr.strip() or r.returncode}"
    return f"requeued job {job}"

"""Submit a long `t1` job to Slurm outside Snakemake, with submitit's checkpoint-and-requeue.

    python -m t1.supervise.submit --time 1440 --gpus 8 --partition gpu --logs results/tiny/submitit -- \\
        t1 supervise --config results/tiny/config.yaml --workdir results/tiny/ppo/manual -- \\
        t1 segment --config results/tiny/config.yaml --iter 7 --from ... --out ...
    python -m t1.supervise.submit --local --time 10 --wait -- t1 ...   # submitit's local executor

What submitit gives such a job (the conventions DESIGN §6 borrows): Slurm sends SIGUSR2
`--signal-delay-s` before the time limit (submitit asks for `--signal=USR2@S`); submitit's
handler calls `Command.checkpoint()`, which forwards SIGUSR2 to the command (t1 supervise /
t1 train checkpoint at the next safe point and exit 75), waits up to `--stop-timeout-s`, and
returns the same command for the requeue; submitit then requeues the job (`scontrol requeue`),
and the rerun resumes from the newest checkpoint. Preemption (SIGTERM to every process of the
job) reaches the command directly; it checkpoints and exits 75 the same way. The command must
therefore be resumable however often this happens - every t1 stage is.

Library use:
    job = submit(["t1", "train", ...], folder="logs/submitit", timeout_min=240, gpus_per_node=8)
    job.job_id, job.result()        # the command's exit code
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import submitit
from submitit.helpers import Checkpointable, DelayedSubmission


class Command(Checkpointable):
    """A command line run as a submitit job; checkpoints by forwarding SIGUSR2 to it."""

    def __init__(self, argv: list[str], stop_timeout_s: float = 120.0) -> None:
        self.argv = list(argv)
        self.stop_timeout_s = stop_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"argv": self.argv, "stop_timeout_s": self.stop_timeout_s, "_proc": None}

    def __call__(self) -> int:
        env = submitit.JobEnvironment()
        print(
            f"t1.submit: job {env.job_id} (rank {env.global_rank}/{env.num_tasks}): {' '.join(self.argv)}",
            flush=True,
        )
        if env.global_rank != 0:
            return 0  # one command per job; other tasks have nothing to do
        self._proc = subprocess.Popen(self.argv, start_new_session=True)
        rc = self._proc.wait()
        print(f"t1.submit: command exited {rc}", flush=True)
        return rc

    def checkpoint(self, *args: Any, **kwargs: Any) -> DelayedSubmission:
        """Called by submitit's signal handler, possibly while __call__ sits in proc.wait():
        so no Popen methods here (they take a lock that wait() holds) - plain waitpid."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            print("t1.submit: asking the command to checkpoint (SIGUSR2)", flush=True)
            os.kill(proc.pid, signal.SIGUSR2)
            if not _reaped(proc.pid, self.stop_timeout_s):
                print(
                    f"t1.submit: no exit within {self.stop_timeout_s:g} s; killing it", flush=True
                )
                os.killpg(proc.pid, signal.SIGKILL)
                _reaped(proc.pid, 30)
        return DelayedSubmission(Command(self.argv, self.stop_timeout_s))


def _reaped(pid: int, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # already reaped
            return True
        if done:
            return True
        time.sleep(0.1)
    return False


def submit(
    argv: list[str],
    folder: str,
    *,
    local: bool = False,
    stop_timeout_s: float = 120.0,
    **parameters: Any,
) -> submitit.Job:
    """Submit `argv` as one job; `parameters` are submitit's (timeout_min, gpus_per_node,
    slurm_partition, slurm_account, cpus_per_task, mem_gb, nodes, slurm_signal_delay_s, name)."""
    if local:  # submitit's local executor: a subset of the settings, the signal delay included
        executor: submitit.Executor = submitit.LocalExecutor(folder=folder)
        delay = parameters.pop("slurm_signal_delay_s", None)
        keep = ("timeout_min", "gpus_per_node", "tasks_per_node")
        parameters = {k: v for k, v in parameters.items() if k in keep}
        if delay is not None:
            parameters["signal_delay_s"] = delay
    else:
        executor = submitit.AutoExecutor(folder=folder)
    executor.update_parameters(**parameters)
    return executor.submit(Command(argv, stop_timeout_s))


def wait(
    job: submitit.Job,
    *,
    poll_s: float = 1.0,
    settle_s: float = 30.0,
    timeout_s: float | None = None,
    on_poll: Callable[[], None] | None = None,
) -> Any:
    """`job.result()` that survives a requeue. While Slurm requeues a job, sacct can show the
    attempt it just cancelled as FAILED for a moment; submitit's `done()` takes that for the
    end and `result()` then fails for want of a result file. Here a finished state counts only
    once the result file exists, or once Slurm has said "finished" for `settle_s` on end."""
    if not isinstance(job, submitit.SlurmJob):
        return job.result()
    end = None if timeout_s is None else time.monotonic() + timeout_s
    finished_since: float | None = None
    while not job.paths.result_pickle.exists():
        if end is not None and time.monotonic() > end:
            raise TimeoutError(f"job {job.job_id}: no result within {timeout_s:g} s")
        if on_poll is not None:
            on_poll()
        if job.watcher.is_done(job.job_id, mode="force"):
            finished_since = finished_since or time.monotonic()
            if time.monotonic() - finished_since >= settle_s:
                break
        else:
            finished_since = None
        time.sleep(poll_s)
    return job.result()


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m t1.supervise.submit", description=__doc__.splitlines()[0]
    )
    p.add_argument("--time", type=int, required=True, help="time limit, minutes")
    p.add_argument("--logs", default="results/submitit", help="submitit folder (logs, pickles)")
    p.add_argument("--partition", default=None)
    p.add_argument("--account", default=None)
    p.add_argument("--gpus", type=int, default=0, help="GPUs per node")
    p.add_argument("--cpus", type=int, default=2, help="CPUs per task")
    p.add_argument("--mem-gb", type=float, default=8)
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument(
        "--signal-delay-s", type=int, default=300, help="SIGUSR2 this long before the limit"
    )
    p.add_argument(
        "--stop-timeout-s", type=float, default=120, help="wait this long for the checkpoint"
    )
    p.add_argument("--name", default="t1")
    p.add_argument("--local", action="store_true", help="submitit's local executor (no Slurm)")
    p.add_argument("--wait", action="store_true", help="wait for the job; exit with its code")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("give the command after --")
    params: dict[str, Any] = {
        "timeout_min": args.time,
        "cpus_per_task": args.cpus,
        "mem_gb": args.mem_gb,
        "nodes": args.nodes,
        "name": args.name,
        "slurm_signal_delay_s": args.signal_delay_s,
    }
    if args.gpus:
        params["gpus_per_node"] = args.gpus
    if args.partition:
        params["slurm_partition"] = args.partition
    if args.account:
        params["slurm_account"] = args.account
    job = submit(cmd, args.logs, local=args.local, stop_timeout_s=args.stop_timeout_s, **params)
    print(f"t1.submit: job {job.job_id} submitted; logs in {args.logs}", flush=True)
    if args.wait:
        rc = wait(job)
        print(f"t1.submit: job {job.job_id} finished: exit {rc}", flush=True)
        return int(rc)
    return 0


if __name__ == "__main__":
    sys.exit(_main())

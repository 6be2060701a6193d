"""`t1 supervise`: start a segment's children, watch them, restart them, stop them cleanly.

    t1 supervise --config CFG --workdir DIR -- t1 segment --config CFG --iter 3 --out DONE
    t1 supervise --config CFG --workdir DIR --spec children.yaml [-- MAIN COMMAND ...]

A segment (one Slurm job) runs a few processes: the engine server(s), the trainer, rollout
workers. The supervisor starts each as its own process group, copies its output (prefixed
`[name]`) to stdout and DIR/logs/NAME.log, and watches it:

* dead: a child that exits non-zero (or is killed) is restarted after a backoff
  (`backoff_s`, doubled per restart, at most `backoff_max_s`) while its restart budget
  (`max_restarts`) lasts; exit code 2 (bad arguments/config) is fatal at once.
* hung: a child whose heartbeat is older than `heartbeat_timeout_s` (`startup_timeout_s`
  before its first beat) gets SIGTERM, SIGKILL `kill_grace_s` later, and is restarted likewise.
  Heartbeats: `file` (default) - the child touches $T1_HEARTBEAT_FILE, e.g. by calling
  `t1.supervise.child.heartbeat()` at each step; `output` - any line it prints counts; `none`.
* stop: SIGUSR2 or SIGTERM (Slurm's `--signal`, preemption, scancel, Ctrl-C of snakemake),
  or the Slurm time limit minus `stop_margin_s`, only set a flag; the loop then forwards each
  main child's `stop_signal` (default SIGUSR2) to it - the trainer checkpoints at its next
  safe point and exits - waits up to `stop_timeout_s`, then stops the services.
  With `--requeue` inside Slurm the job then requeues itself, but only after a stop of its
  own (deadline, SIGUSR2, a child's exit 75): after SIGTERM, Slurm or the user decides
  (t1/supervise/slurm_job.py says why).

Roles: `main` children do the work; the segment is done when all of them exit 0. `service`
children (engines, workers) run until the mains are done and are restarted whenever they die.

Exit codes (documented contract, also for children):
    0   every main child finished (exit 0)
    75  stopped early after a checkpoint (EX_TEMPFAIL): requeue or retry the segment; a main
        child that exits 75 on its own asks for the same
    1   a child's restart budget is spent, or it failed fatally
    2   bad arguments or spec

One supervisor runs per DIR at a time (DIR/supervise.lock; a second one waits, e.g. when a
killed snakemake left its job running and the rerun starts the segment again).

No orphans: each child gets PR_SET_PDEATHSIG=SIGKILL, so it dies with the supervisor even when
the supervisor is SIGKILLed (its own process group, which a kill of snakemake's group misses,
is no shelter); `t1 segment` does the same for its `t1 train` / `t1 rollout` (t1.store.lock). The
supervisor records its children in DIR/supervise.children.json (pid, start time, command
line) and on start SIGKILLs the process group of every recorded child that is still that
program, or whose members outlived it (`orphan_killed` incident), before it starts its own.

Every incident (child died / hung / restarted, budget spent, stop requested, stop timed out,
waiting for the lock) is a JSON line in DIR/incidents.jsonl (t1.store.incidents). The children and
their restart policy come from `--spec` and `-- MAIN COMMAND` (t1/supervise/spec.py).

Children see T1_HEARTBEAT_FILE, T1_CHILD_NAME, T1_RESTART (0 on the first start) and
T1_SUPERVISED=1. Inside a child (t1/supervise/child.py): `stop = StopRequest()` installs flag-only handlers for SIGUSR2
and SIGTERM; check `stop.requested` at safe points, checkpoint, `sys.exit(EXIT_REQUEUE)`.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from t1.store.incidents import IncidentLog
from t1.store.lock import PidFile
from t1.supervise import slurm_job
from t1.supervise.child import EXIT_DONE, EXIT_FAILED, EXIT_REQUEUE, EXIT_USAGE, HEARTBEAT_ENV
from t1.supervise.spec import ChildSpec, Policy, SpecError, load_spec

TICK_S = 0.1


# ----------------------------------------------------------------------------- runtime

_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # preexec_fn: only a C call, safe after fork
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class _Child:
    """One supervised process and its bookkeeping."""

    def __init__(self, spec: ChildSpec, workdir: Path, out_lock: threading.Lock) -> None:
        self.spec, self.workdir, self.out_lock = spec, workdir, out_lock
        self.proc: subprocess.Popen[bytes] | None = None
        self.state = "waiting"  # waiting | running | killing | done | stopped | failed
        self.start_at = 0.0  # when a waiting child (re)starts
        self.restarts = 0
        self.started = self.beat = 0.0
        self.kill_at = 0.0  # SIGKILL time while killing
        self.after_kill = "restart"  # what follows the kill: restart | stopped
        self.hb_file = workdir / "heartbeat" / spec.name
        self.log_path = workdir / "logs" / f"{spec.name}.log"
        self.pids: PidFile | None = None  # WORKDIR/supervise.children.json (next attempt)

    def spawn(self) -> None:
        self.hb_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.hb_file.unlink(missing_ok=True)
        env = {
            **os.environ,
            **self.spec.env,
            HEARTBEAT_ENV: str(self.hb_file),
            "T1_CHILD_NAME": self.spec.name,
            "T1_RESTART": str(self.restarts),
            "T1_SUPERVISED": "1",
            "PYTHONUNBUFFERED": "1",
        }
        popen: dict[str, Any] = dict(
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        if self.pids is not None:  # recorded before it runs: nothing it starts can escape
            self.proc = self.pids.spawn(self.spec.name, self.spec.cmd, **popen)
        else:
            self.proc = subprocess.Popen(self.spec.cmd, **popen)
        self.state, self.started, self.beat = "running", time.time(), 0.0
        threading.Thread(target=self._pump, args=(self.proc,), daemon=True).start()

    def _pump(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        with open(self.log_path, "ab") as logf:
            logf.write(f"--- start {self.restarts} pid {proc.pid} {time.ctime()}\n".encode())
            for line in iter(proc.stdout.readline, b""):
                if self.spec.heartbeat == "output":
                    self.beat = time.time()
                logf.write(line)
                logf.flush()
                with self.out_lock:
                    sys.stdout.write(f"[{self.spec.name}] {line.decode(errors='replace')}")
                    sys.stdout.flush()

    def last_beat(self) -> float:
        """Time of the last heartbeat, 0 if none since this start."""
        if self.spec.heartbeat == "file":
            try:
                mtime = self.hb_file.stat().st_mtime
            except FileNotFoundError:
                return 0.0
            return mtime if mtime >= self.started - 1 else 0.0
        return self.beat

    def hung_for(self, now: float) -> float | None:
        """Seconds past the heartbeat deadline, or None if the child is not hung."""
        p = self.spec.policy
        if self.spec.heartbeat == "none":
            return None
        beat = self.last_beat()
        limit = p.heartbeat_timeout_s if beat else p.startup_timeout_s
        since = now - (beat or self.started)
        return since if limit > 0 and since > limit else None

    def signal_group(self, sig: int) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def signal_leader(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)


class Supervisor:
    """Runs children until the mains finish, the budget is spent, or a stop is requested."""

    def __init__(
        self,
        children: list[ChildSpec],
        workdir: str | os.PathLike[str],
        incidents: IncidentLog | None = None,
        deadline: float | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.incidents = incidents or IncidentLog(self.workdir / "incidents.jsonl")
        self.out_lock = threading.Lock()
        self.children = [_Child(s, self.workdir, self.out_lock) for s in children]
        self.deadline = deadline
        self.stop_reason: str | None = None  # set by signal handlers / the deadline
        self.stopping_since: float | None = None
        self.failure: str | None = None

    def request_stop(self, reason: str) -> None:
        """Only sets the flag: safe from a signal handler."""
        if self.stop_reason is None:
            self.stop_reason = reason

    def install_signal_handlers(self) -> None:
        def handler(signum: int, frame: Any) -> None:
            self.request_stop(signal.Signals(signum).name)

        for sig in (signal.SIGUSR2, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, handler)

    def say(self, text: str) -> None:
        with self.out_lock:
            print(f"[supervise] {text}", flush=True)

    def incident(self, kind: str, **fields: Any) -> None:
        self.incidents.write(kind, **fields)
        self.say(f"{kind}: " + ", ".join(f"{k}={v}" for k, v in fields.items()))

    # ------------------------------------------------------------------ the loop

    def acquire_lock(self) -> bool:
        """One supervisor per workdir: an orphan of a killed snakemake, or the job of an
        earlier submission still running, holds WORKDIR/supervise.lock; wait for it (a stop
        request while waiting gives up). The kernel drops the lock when its holder dies."""
        self._lock = open(self.workdir / "supervise.lock", "a+")  # held until exit
        waited = False
        while True:
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waited:
                    self._lock.seek(0)
                    holder = self._lock.read().strip() or "unknown"
                    self.incident("lock_wait", holder=holder, action="wait for it to finish")
                    waited = True
                if self.stop_reason is not None:
                    return False
                time.sleep(0.5)
        self._lock.seek(0)
        self._lock.truncate()
        holder = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "slurm_job": os.environ.get("SLURM_JOB_ID"),
            "since": time.time(),
        }
        self._lock.write(json.dumps(holder))
        self._lock.flush()
        return True

    def run(self) -> int:
        if not self.acquire_lock():
            self.say(f"stopped while waiting for the lock ({self.stop_reason})")
            return EXIT_REQUEUE
        pids = PidFile(self.workdir / "supervise.children.json")
        for k in pids.reap():  # what a killed earlier supervisor left: its children's groups
            self.incident("orphan_killed", child=k["name"], pid=k["pid"], action="SIGKILL group")
        for c in self.children:
            c.pids = pids
            c.spawn()
            self.say(f"started {c.spec.name} (pid {c.proc.pid}): {' '.join(c.spec.cmd)}")
        try:
            while True:
                now = time.time()
                if self.deadline is not None and now >= self.deadline:
                    self.request_stop("time limit ahead")
                if self.stop_reason is not None and self.stopping_since is None:
                    self._begin_stop(now)
                for c in self.children:
                    self._watch(c, now)
                code = self._outcome(now)
                if code is not None:
                    return self._finish(code)
                time.sleep(TICK_S)
        except BaseException:
            for c in self.children:
                c.signal_group(signal.SIGKILL)
            raise

    def _begin_stop(self, now: float) -> None:
        self.stopping_since = now
        self.incident("stop_requested", reason=self.stop_reason, action="checkpoint and exit")
        for c in self.children:
            if c.spec.role != "main":
                continue
            if c.state == "running":
                c.signal_leader(getattr(signal, c.spec.stop_signal))
            elif c.state == "waiting":
                c.state = "stopped"

    def _watch(self, c: _Child, now: float) -> None:
        p = c.spec.policy
        if c.state == "waiting" and now >= c.start_at:
            if self.stopping_since is None:
                c.spawn()
                self.incident(
                    "child_restarted", child=c.spec.name, restart=c.restarts, pid=c.proc.pid
                )
            return
        if c.state not in ("running", "killing"):
            return
        rc = c.proc.poll()
        if rc is not None:
            c.signal_group(signal.SIGKILL)  # leftovers of its process group
            self._exited(c, rc, now)
            return
        if c.state == "killing":
            if now >= c.kill_at:
                c.signal_group(signal.SIGKILL)
            return
        stopping = self.stopping_since is not None
        if stopping and c.spec.role == "main" and now - self.stopping_since > p.stop_timeout_s:
            self.incident(
                "stop_timeout",
                child=c.spec.name,
                waited_s=round(now - self.stopping_since, 1),
                action="kill",
            )
            self._kill(c, now, then="stopped")
            return
        silent = c.hung_for(now)
        if silent is not None and not stopping:
            self.incident(
                "child_hung",
                child=c.spec.name,
                pid=c.proc.pid,
                silent_s=round(silent, 1),
                action="kill and restart",
            )
            self._kill(c, now, then="restart")

    def _kill(self, c: _Child, now: float, then: str) -> None:
        c.signal_group(signal.SIGTERM)
        c.state, c.kill_at, c.after_kill = "killing", now + c.spec.policy.kill_grace_s, then

    def _exited(self, c: _Child, rc: int, now: float) -> None:
        name, p = c.spec.name, c.spec.policy
        how = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit {rc}"
        killed = c.state == "killing"  # by us: hung, or a stop that timed out
        if killed and c.after_kill == "stopped":
            c.state = "stopped"
        elif c.spec.role == "main" and rc == EXIT_DONE and not killed:
            c.state = "done"
            self.say(f"{name} finished")
        elif self.stopping_since is not None:
            c.state = "stopped"
            self.say(f"{name} stopped ({how})")
        elif c.spec.role == "main" and rc == EXIT_REQUEUE and not killed:
            c.state = "stopped"
            self.request_stop(f"{name} asked for a requeue (exit {EXIT_REQUEUE})")
        elif rc == EXIT_USAGE and not killed:
            c.state = "failed"
            self.failure = f"{name}: exit {EXIT_USAGE} (bad arguments or config): not restarted"
            self.incident(
                "child_fatal", child=name, exit=rc, action="fail segment", status="failed"
            )
        elif c.restarts >= p.max_restarts:
            c.state = "failed"
            self.failure = f"{name}: restart budget of {p.max_restarts} spent"
            self.incident(
                "restart_budget_exhausted",
                child=name,
                last=how,
                restarts=c.restarts,
                action="fail segment",
                status="failed",
            )
        else:
            c.restarts += 1
            delay = min(p.backoff_s * 2 ** (c.restarts - 1), p.backoff_max_s)
            c.state, c.start_at = "waiting", now + delay
            if not killed:  # a hung child's incident is already written
                self.incident(
                    "child_died",
                    child=name,
                    how=how,
                    uptime_s=round(now - c.started, 1),
                    action=f"restart {c.restarts} in {delay:g} s",
                )

    def _outcome(self, now: float) -> int | None:
        mains = [c for c in self.children if c.spec.role == "main"]
        if self.failure is not None:
            return EXIT_FAILED
        if all(c.state == "done" for c in mains):
            return EXIT_DONE
        if self.stopping_since is not None and all(
            c.state in ("done", "stopped", "failed") for c in mains
        ):
            return EXIT_REQUEUE
        return None

    def _finish(self, code: int) -> int:
        # services (and any main still running after a failure) get their stop signal, then KILL
        live = [c for c in self.children if c.proc is not None and c.proc.poll() is None]
        for c in live:
            c.signal_leader(
                signal.SIGTERM if c.spec.role == "service" else getattr(signal, c.spec.stop_signal)
            )
        end = time.time() + max([c.spec.policy.kill_grace_s for c in live], default=0)
        while time.time() < end and any(c.proc.poll() is None for c in live):
            time.sleep(TICK_S)
        for c in self.children:
            c.signal_group(signal.SIGKILL)
            if c.proc is not None:
                c.proc.wait()
        word = {EXIT_DONE: "done", EXIT_REQUEUE: "requeue", EXIT_FAILED: "failed"}[code]
        self.incidents.write(
            "supervisor_exit",
            status=word,
            exit=code,
            reason=self.failure or self.stop_reason or "all main children finished",
            restarts={c.spec.name: c.restarts for c in self.children},
        )
        self.say(f"exit {code} ({word}){': ' + (self.failure or self.stop_reason) if code else ''}")
        return code


# ----------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="campaign YAML: campaign.* gives the policy")
    parser.add_argument(
        "--workdir", required=True, help="heartbeats, logs/, incidents.jsonl go here"
    )
    parser.add_argument("--spec", default=None, help="children spec YAML (see module doc)")
    parser.add_argument(
        "--incidents", default=None, help="incident log (default WORKDIR/incidents.jsonl)"
    )
    parser.add_argument(
        "--deadline",
        default="slurm",
        help="'slurm' (time limit of $SLURM_JOB_ID), 'none', or seconds from now",
    )
    parser.add_argument(
        "--requeue",
        action="store_true",
        help="after a stop of our own inside Slurm (deadline, SIGUSR2, a child's exit 75),"
        " `scontrol requeue` this job before exiting 75 (see t1.supervise.slurm_job)",
    )
    for f in fields(Policy):
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            type=type(f.default),
            default=None,
            help=f"override campaign.{f.name}",
        )
    parser.add_argument(
        "cmd", nargs=argparse.REMAINDER, help="-- MAIN COMMAND ... (the main child)"
    )


def policy_from(args: argparse.Namespace) -> Policy:
    policy = Policy()
    if args.config:
        from t1.config import load_config

        campaign = load_config(args.config).campaign
        policy = Policy(**{f.name: getattr(campaign, f.name) for f in fields(Policy)})
    overrides = {
        f.name: getattr(args, f.name) for f in fields(Policy) if getattr(args, f.name) is not None
    }
    return replace(policy, **overrides)


def main(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    try:
        policy = policy_from(args)
        subst = {"workdir": str(Path(args.workdir)), "config": args.config or ""}
        children = load_spec(args.spec, cmd, policy, subst)
    except (SpecError, ValueError) as e:
        print(f"t1 supervise: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.deadline == "slurm":
        end = slurm_job.deadline()
        deadline = end - policy.stop_margin_s if end else None
    elif args.deadline == "none":
        deadline = None
    else:
        deadline = time.time() + float(args.deadline)
    sup = Supervisor(
        children, args.workdir, IncidentLog(args.incidents) if args.incidents else None, deadline
    )
    sup.install_signal_handlers()
    if deadline:
        sup.say(
            f"will stop at {time.ctime(deadline)} (time limit minus {policy.stop_margin_s:.0f} s)"
        )
    code = sup.run()
    if code == EXIT_REQUEUE and args.requeue:
        sup.say(slurm_job.requeue(sup.stop_reason))
    return code

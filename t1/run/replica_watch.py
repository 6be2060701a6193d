"""The rollout replicas of a PPO segment as job steps: started, watched, restarted, stopped.

    steps = ReplicaSteps(cfg, config_path, iter_dir, hosts, children, current=newest_export)
    steps.start(start_weights); steps.wait_healthy(cfg.fleet.start_timeout_s)
    steps.wait_ready()          # before each rollout: every replica answers, none restarting
    steps.stop()
    pytest tests/test_segment_fleet.py -q           # real `t1 serve`s, no Slurm
    pytest tests/slurm/test_fleet_segment.py -q     # a replica step made to hang, on Slurm

Used by t1/run/segment_fleet.py (the driver of a segment on its allocation). Each replica's
line (t1.run.plan.replica_command: srun, the health watcher of t1.engine.launch, the server)
runs in its own session, output to ITER_DIR/replica<R>.log, and has its own monitor thread:

* exited: the step (srun) ended;
* hung: once the replica has answered /health, `fleet.health_failures` checks in a row
  (GET /health, `fleet.health_timeout_s` each, one every `fleet.health_interval_s`) fail: the
  process may be alive (SIGSTOPped, deadlocked) but serves nothing. This driver is what
  catches a hang in a segment: the watcher inside the step only turns health into a
  heartbeat for `t1 supervise`, and a replica step has no heartbeat file.

Either way the step is killed — inside Slurm every step of the allocation named
`replica<R>` (squeue -s) gets `scancel --signal=KILL` and `scancel` (slurmstepd SIGKILLs the
tasks, a stopped one included), srun's process group gets SIGKILL, and the driver waits until
srun is reaped and the step has left squeue, so the port is free — then the same line starts
again. When it answers /health (within `fleet.start_timeout_s`) the current weights are loaded
into it with /update_weights_from_disk (`current()`: the newest finished export on disk and
its weight_version, `export_version`, the fleet client's convention) and its /get_model_info
must report that weight_version; only then is it ready (`wait_ready`). A restart that does not
come back (exits, no /health, a failed load: reason `reload_failed`) is killed and started
again. Each restart counts against `MAX_RESTARTS` per replica (exits and hangs alike); one
more stops the segment (`failure`, named with the replica's log). `restarts[R]` lists them:
time, reason, detail, old_step, new_step (Slurm step ids, None outside Slurm), model_path,
weight_version (as the replica reported it after the reload), healthy_after_s, error.

A rollout that runs while a replica is restarted is safe without the driver: the fleet client
(t1.engine.fleet) marks the replica down, re-samples its trajectories, and loads the current
weights itself before routing to it again (and refuses answers of another weight_version).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from t1.engine import allocation, launch
from t1.engine.weight_update import version_of
from t1.httpjson import HTTPJSONError, post_json
from t1.run import plan
from t1.store.lock import PidFile, die_with_parent
from t1.supervise.child import HEARTBEAT_ENV, heartbeat

STOP_GRACE_S = 30.0
MAX_RESTARTS = 2
KILL_WAIT_S = 60.0  # a killed step must be reaped and gone from squeue within this
TICK_S = 0.2  # how often a monitor looks at its srun


class FleetStepError(RuntimeError):
    """A replica step did not come up, or the fleet did not take the final weights."""


export_version = version_of  # an export's weight_version: the fleet's and the push's convention


def localize(cmd: list[str]) -> list[str]:
    """A plan line made runnable here: `python` -> this interpreter, and the command word after
    srun's options, when it is `t1`, -> this interpreter's t1 (a venv need not be on PATH)."""
    from t1.run.steps import t1_command

    out = [sys.executable if a == "python" else a for a in cmd]
    if out[:1] == ["srun"]:
        at = next((i for i, a in enumerate(out[1:], 1) if not a.startswith("-")), None)
        if at is not None and out[at] == "t1":
            out[at : at + 1] = t1_command()
    elif out[:1] == ["t1"]:
        out[:1] = t1_command()
    return out


def model_info(url: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """A replica's GET /get_model_info (model_path, weight_version), or the error."""
    import json
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/get_model_info", timeout=timeout_s) as r:
            return json.loads(r.read() or b"{}")
    except (urllib.error.URLError, OSError, ValueError) as e:
        return {"error": f"{type(e).__name__}: {e}"}


def slurm_steps(job: str, name: str) -> list[str]:
    """Ids (JOB.STEP) of the job's running steps called `name` (squeue -s)."""
    try:
        out = subprocess.run(
            ["squeue", "-h", "-s", "-j", job, "-o", "%i|%j"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    rows = (line.split("|", 1) for line in out.splitlines() if "|" in line)
    return [sid.strip() for sid, n in rows if n.strip() == name]


class LockedPidFile(PidFile):
    """The driver's PidFile, shared by its main thread and the replica monitors."""

    _lock = threading.Lock()

    def _record(self, name: str, rec: dict[str, Any]) -> None:
        with self._lock:
            super()._record(name, rec)

    def remove(self, name: str) -> None:
        with self._lock:
            super().remove(name)


class ReplicaSteps:
    """The replica job steps of one segment: start, wait for health, watch, restart, stop."""

    def __init__(
        self,
        cfg,
        config_path: str,
        iter_dir: Path,
        hosts: list[str],
        children=None,
        current: Callable[[], tuple[str, str]] | None = None,
    ):
        self.cfg = cfg
        self.config_path = config_path
        self.iter_dir = iter_dir
        self.split = allocation.split_allocation(cfg, hosts)
        self.children = children  # t1.store.lock.PidFile of the driver: a later attempt reaps them
        # () -> (model_path, weight_version) a restarted replica must load; None: keep its launch
        self.current = current
        self.procs: dict[int, subprocess.Popen] = {}
        self.lines: dict[int, list[str]] = {}
        self.restarts: dict[int, list[dict[str, Any]]] = {}
        self.step_ids: dict[int, str | None] = {}  # the Slurm step each replica runs as now
        self.events: list[dict[str, Any]] = []
        self._up: dict[int, bool] = {}  # answered /health since its last start
        self._recovering: set[int] = set()
        self._stopping = threading.Event()
        self._lock = threading.RLock()
        self._monitors: list[threading.Thread] = []
        self.failure: str | None = None  # set when a replica failed more than MAX_RESTARTS times
        self.failed: int | None = None  # that replica's index

    @property
    def replicas(self) -> list[dict[str, Any]]:
        return self.split["replicas"]

    def url(self, index: int) -> str:
        return next(r["url"] for r in self.replicas if r["index"] == index)

    def log(self, index: int) -> Path:
        return self.iter_dir / f"replica{index}.log"

    def event(self, kind: str, index: int, **extra: Any) -> None:
        with self._lock:
            self.events.append({"time": time.time(), "event": kind, "replica": index, **extra})

    def start(self, model_path: str) -> None:
        """Start every replica's srun line (t1.run.plan) from `model_path`."""
        for r in self.replicas:
            self.lines[r["index"]] = localize(
                plan.replica_command(self.cfg, r, model_path, self.config_path)
            )
        self.spawn_lines()

    def spawn_lines(self) -> None:
        """Start `self.lines` (one per replica index), each with its monitor thread."""
        self.iter_dir.mkdir(parents=True, exist_ok=True)
        for index in self.lines:
            self.restarts[index] = []
            self._spawn(index)
        for index in self.lines:
            t = threading.Thread(target=self._monitor, args=(index,), name=f"replica{index}")
            t.daemon = True
            t.start()
            self._monitors.append(t)

    def _slurm(self, index: int) -> str | None:
        """The job id when this replica runs as a step of the current allocation."""
        job = os.environ.get("SLURM_JOB_ID")
        return job if job and self.lines[index][:1] == ["srun"] else None

    def _spawn(self, index: int) -> None:
        line = self.lines[index]
        print(f"$ {' '.join(line)}  > {self.log(index)}", flush=True)
        # a healthy server must not keep the segment's own heartbeat fresh (a hung trainer would
        # go unnoticed by `t1 supervise`): the watcher gets no heartbeat file
        env = {k: v for k, v in os.environ.items() if k != HEARTBEAT_ENV}
        with self._lock:
            if self._stopping.is_set():
                return
            popen: dict[str, Any] = dict(  # srun dies with the driver (t1.store.lock); its own
                stderr=subprocess.STDOUT,  # session: a SIGKILL to the group reaches what it
                preexec_fn=die_with_parent,  # started outside Slurm
                env=env,
                start_new_session=True,
            )
            with open(self.log(index), "ab") as out:
                if self.children is not None:  # recorded before it runs (PidFile.spawn)
                    proc = self.children.spawn(f"replica{index}", line, stdout=out, **popen)
                else:
                    proc = subprocess.Popen(line, stdout=out, **popen)
            self.procs[index] = proc
            self._up[index] = False
            self.step_ids[index] = None
        self.event("started", index, pid=proc.pid)

    def _find_step(self, index: int, old: str | None = None, tries: int = 10) -> str | None:
        job = self._slurm(index)
        if job is None:
            return None
        for _ in range(tries):
            ids = [s for s in slurm_steps(job, f"replica{index}") if s != old]
            if ids:
                return ids[-1]
            if self._stopping.wait(0.5):
                break
        return None

    # ------------------------------------------------------------ watching

    def _monitor(self, index: int) -> None:
        """Exit and hang detection for one replica; restarts it (see the module docstring)."""
        f = self.cfg.fleet
        failures, next_check = 0, 0.0
        while not self._stopping.wait(TICK_S):
            proc = self.procs[index]
            rc = proc.poll()
            if rc is not None:
                self.event("exited", index, rc=rc)
                if not self._recover(index, "exited", f"rc {rc}", rc):
                    return
                failures, next_check = 0, time.monotonic() + f.health_interval_s
                continue
            if time.monotonic() < next_check:
                continue
            next_check = time.monotonic() + f.health_interval_s
            ok = launch.healthy(self.url(index), timeout_s=f.health_timeout_s)
            if self._stopping.is_set() or proc.poll() is not None:
                continue
            if ok:
                failures = 0
                self._answered(index)
            elif self._up[index]:
                failures += 1
                if failures >= f.health_failures:
                    why = (
                        f"{failures} /health checks in a row failed "
                        f"(fleet.health_timeout_s {f.health_timeout_s:g} s)"
                    )
                    self.event("hung", index, detail=why)
                    print(f"replica {index} hung ({why}): killing its step", flush=True)
                    if not self._recover(index, "hung", why, None):
                        return
                    failures, next_check = 0, time.monotonic() + f.health_interval_s

    def _answered(self, index: int) -> None:
        """`index` answered /health since its start (seen by its monitor or by the driver's
        wait): from now on failed checks are a hang. The driver's sighting counts too, or a
        replica that hangs between the driver's check and its monitor's first would never be
        found hung."""
        with self._lock:
            if self._up.get(index) or index in self._recovering:
                return
            self._up[index] = True
        self.step_ids[index] = self._find_step(index)

    def _recover(self, index: int, reason: str, detail: str, rc: int | None) -> bool:
        """Kill the step, start it again, bring it back at the current weights; False when
        the replica is given up (more than MAX_RESTARTS) or the segment is stopping."""
        with self._lock:
            self._recovering.add(index)
        try:
            while not self._stopping.is_set():
                old = self.step_ids.get(index) or self._find_step(index, tries=1)
                self._kill(index)
                done = self.restarts[index]
                if len(done) >= MAX_RESTARTS:
                    self._give_up(index, reason, detail, rc)
                    return False
                entry = {"time": time.time(), "reason": reason, "detail": detail}
                entry["old_step"] = old
                done.append(entry)
                print(f"replica {index} step {reason} ({detail}): starting it again", flush=True)
                self._spawn(index)
                back = self._bring_back(index, old, entry)
                if back is None:
                    return True
                reason, detail, rc = back
            return False
        finally:
            with self._lock:
                self._recovering.discard(index)

    def _give_up(self, index: int, reason: str, detail: str, rc: int | None) -> None:
        reasons = [r["reason"] for r in self.restarts[index]] + [reason]
        if set(reasons) == {"exited"}:
            what = f"exited {len(reasons)} times (last rc {rc})"
        else:
            counts = ", ".join(f"{k} {reasons.count(k)}" for k in sorted(set(reasons)))
            what = f"failed {len(reasons)} times ({counts}; last: {reason}: {detail})"
        with self._lock:
            self.failure = f"replica {index} step {what}; see {self.log(index)}"
            self.failed = index
        self.event("given_up", index, reason=reason)

    def _bring_back(self, index: int, old: str | None, entry: dict[str, Any]):
        """Wait for /health, load the current weights, check them; None when it is back, else
        (reason, detail, rc) of why not (the caller kills and starts it again)."""
        f = self.cfg.fleet
        t0 = time.monotonic()
        proc = self.procs[index]
        while not self._stopping.is_set() and not launch.healthy(
            self.url(index), timeout_s=f.health_timeout_s
        ):
            rc = proc.poll()
            if rc is not None:
                self.event("exited", index, rc=rc)
                entry["error"] = f"exited with rc {rc} before answering /health"
                return "exited", f"rc {rc}", rc
            if time.monotonic() - t0 > f.start_timeout_s:
                entry["error"] = f"no /health within fleet.start_timeout_s {f.start_timeout_s:g} s"
                return "hung", entry["error"], None
            self._stopping.wait(0.5)
        if self._stopping.is_set():
            return None
        entry["healthy_after_s"] = round(time.monotonic() - t0, 2)
        self.step_ids[index] = entry["new_step"] = self._find_step(index, old)
        url = self.url(index)
        want = None
        if self.current is not None:
            path, want = self.current()
            entry["model_path"] = path
            body = {"model_path": path, "weight_version": want, "flush_cache": True}
            try:
                out = post_json(
                    url + "/update_weights_from_disk", body, timeout=self.cfg.engine.timeout_s
                )
            except HTTPJSONError as e:
                out = {"success": False, "message": str(e)}
            if not (isinstance(out, dict) and out.get("success") is True):
                entry["error"] = f"update_weights_from_disk({path}): {out}"
                return "reload_failed", entry["error"], None
        info = model_info(url, timeout_s=f.health_timeout_s)
        entry["weight_version"] = info.get("weight_version")
        if want is not None and info.get("weight_version") != want:
            entry["error"] = f"/get_model_info after the reload: {info}, want {want!r}"
            return "reload_failed", entry["error"], None
        self._up[index] = True
        self.event("back", index, step=entry["new_step"], weight_version=entry["weight_version"])
        print(f"replica {index} is back at weight_version {entry['weight_version']}", flush=True)
        return None

    def _kill(self, index: int) -> None:
        """SIGKILL the replica's step (scancel inside Slurm) and srun's process group; wait
        until srun is reaped and the step left squeue."""
        proc = self.procs[index]
        job = self._slurm(index)
        steps = slurm_steps(job, f"replica{index}") if job else []
        for sid in steps:
            subprocess.run(["scancel", "--signal=KILL", sid], capture_output=True, timeout=30)
            subprocess.run(["scancel", sid], capture_output=True, timeout=30)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + KILL_WAIT_S
        while job and slurm_steps(job, f"replica{index}") and time.monotonic() < deadline:
            time.sleep(0.5)
        if self.children is not None:
            self.children.remove(f"replica{index}")
        self.event("killed", index, rc=proc.returncode, steps=steps)

    # ------------------------------------------------------------ the driver's waits

    def wait_healthy(self, timeout_s: float) -> float:
        """Seconds until every replica answered /health; FleetStepError on timeout or failure."""
        t0 = time.monotonic()
        pending = {r["index"]: r["url"] for r in self.replicas}
        while pending:
            for index, url in list(pending.items()):
                if launch.healthy(url, timeout_s=2.0):
                    pending.pop(index)
                    self._answered(index)
            if self.failure is not None:
                raise FleetStepError(f"{self.failure}\n{self.tail(self.failed or 0)}")
            if pending and time.monotonic() - t0 > timeout_s:
                first = min(pending)
                raise FleetStepError(
                    f"replica {first} ({pending[first]}) did not answer /health within "
                    f"fleet.start_timeout_s {timeout_s:g} s; see {self.log(first)}\n"
                    + self.tail(first)
                )
            if pending:
                heartbeat()  # waiting for a server is progress to `t1 supervise`
                time.sleep(0.5)
        return time.monotonic() - t0

    def ready_timeout_s(self) -> float:
        """The longest a replica may take to be found hung, killed and brought back, every
        restart it has left included."""
        f = self.cfg.fleet
        detect = (f.health_failures + 1) * (f.health_interval_s + f.health_timeout_s)
        back = KILL_WAIT_S + f.start_timeout_s + self.cfg.engine.timeout_s + f.health_timeout_s
        return detect + (MAX_RESTARTS + 1) * back

    def wait_ready(self, timeout_s: float | None = None) -> float:
        """Before a rollout (and the final load): seconds until every replica answers /health
        and none is being restarted; a hung one is found and restarted meanwhile by its
        monitor. FleetStepError when a replica was given up, or after `timeout_s`."""
        timeout_s = self.ready_timeout_s() if timeout_s is None else timeout_s
        t0, said = time.monotonic(), False
        while True:
            if self.failure is not None:
                raise FleetStepError(f"{self.failure}\n{self.tail(self.failed or 0)}")
            with self._lock:
                busy = set(self._recovering)
            pending = [
                r["index"]
                for r in self.replicas
                if r["index"] in busy
                or not launch.healthy(r["url"], timeout_s=self.cfg.fleet.health_timeout_s)
            ]
            if not pending:
                return time.monotonic() - t0
            if not said:
                said = True
                print(
                    f"fleet: waiting for replica(s) {pending} (restarting or not answering)",
                    flush=True,
                )
            if time.monotonic() - t0 > timeout_s:
                raise FleetStepError(
                    f"replica {pending[0]} was not ready (answering /health, not restarting) "
                    f"within {timeout_s:g} s; see {self.log(pending[0])}"
                )
            heartbeat()
            time.sleep(0.5)

    def tail(self, index: int, lines: int = 15) -> str:
        try:
            return "\n".join(self.log(index).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM every replica's srun (it passes it to the step), SIGKILL after the grace."""
        self._stopping.set()
        for t in self._monitors:
            t.join(timeout=10)
        with self._lock:
            procs = list(self.procs.items())
        for _, proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for index, proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._kill(index)
            self.event("stopped", index, rc=proc.returncode)
            if self.children is not None:
                self.children.remove(f"replica{index}")

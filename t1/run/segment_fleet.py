"""A PPO segment on its Slurm allocation: rollout replicas and the trainer as job steps.

    sbatch --nodes=N ... --wrap "t1 segment --config C --iter I --from SFT --out DONE ..."
    pytest tests/slurm/test_fleet_segment.py -q      # one segment on the local Slurm

`t1 segment` hands over here when it runs inside a Slurm allocation (SLURM_JOB_ID is set),
`fleet.replicas` > 0 and no fixed `fleet.urls` are given. The allocation is split by t1.run.plan
(the lines `t1 segment --dry-run` prints), and then:

1. every replica starts as its own job step: plan.replica_command (SGLang, or `t1 serve` with
   `fleet.server: t1`, under the health watcher of t1.engine.launch), from the segment's start
   weights (`--from`/actor for segment 0, else the previous step's `train/actor`); its output
   goes to ITER_DIR/replica<R>.log;
2. the driver waits until every replica answers /health (`fleet.start_timeout_s`); a step that
   exits first stops the segment, naming its log;
3. each PPO step's `t1 rollout` runs in the driver and samples from the replicas; it first loads
   the step's policy (the previous step's HF export) into every replica with
   /update_weights_from_disk (t1.engine.fleet.before_rollout; the step stops if one fails), so
   the replicas take the new weights after every step; `t1 train` runs as the trainer job step
   (plan.trainer_command: one process, or torchrun over the trainer nodes);
4. after the last step the driver loads the segment's final export into every replica the same
   way, reads back each replica's /get_model_info, and writes ITER_DIR/fleet_steps.json (job id,
   split, each step's trainer line, each replica's launch line and answer); a failed load
   removes the marker and exits 3. Then it stops the replica steps (SIGTERM to srun, which
   passes it on; SIGKILL after `STOP_GRACE_S`).

A replica step that exits while the segment runs is started again (at most `MAX_RESTARTS`
times per replica; the fleet client reloads the current weights into it when it answers
/health again, t1.engine.fleet); more exits stop the segment.

`fleet.colocate` puts the replicas on the trainer's nodes (srun --overlap, port + index): the
single-node CI split. Exit codes as `t1 segment`; 3: the fleet failed (named on stderr).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from t1.engine import allocation, launch
from t1.records import write_json_atomic
from t1.run import plan
from t1.store.lock import die_with_parent
from t1.supervise.child import HEARTBEAT_ENV, heartbeat

SCHEMA_VERSION = 1
STOP_GRACE_S = 30.0
MAX_RESTARTS = 2
RECORD = "fleet_steps.json"


class FleetStepError(RuntimeError):
    """A replica step did not come up, or the fleet did not take the final weights."""


def fleet_steps_wanted(cfg) -> bool:
    """Whether `t1 segment` runs its replicas as job steps of the current allocation."""
    return cfg.fleet.replicas > 0 and not cfg.fleet.urls and bool(os.environ.get("SLURM_JOB_ID"))


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


class ReplicaSteps:
    """The replica job steps of one segment: start, wait for health, restart, stop."""

    def __init__(self, cfg, config_path: str, iter_dir: Path, hosts: list[str], children=None):
        self.cfg = cfg
        self.config_path = config_path
        self.iter_dir = iter_dir
        self.split = allocation.split_allocation(cfg, hosts)
        self.children = children  # t1.store.lock.PidFile of the driver: a later attempt reaps them
        self.procs: dict[int, subprocess.Popen] = {}
        self.lines: dict[int, list[str]] = {}
        self.restarts: dict[int, int] = {}
        self.events: list[dict[str, Any]] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self.failure: str | None = None  # set when a replica exited more than MAX_RESTARTS times
        self.failed: int | None = None  # that replica's index

    @property
    def replicas(self) -> list[dict[str, Any]]:
        return self.split["replicas"]

    def log(self, index: int) -> Path:
        return self.iter_dir / f"replica{index}.log"

    def start(self, model_path: str) -> None:
        """Start every replica's srun line (t1.run.plan) from `model_path`."""
        for r in self.replicas:
            self.lines[r["index"]] = localize(
                plan.replica_command(self.cfg, r, model_path, self.config_path)
            )
        self.spawn_lines()

    def spawn_lines(self) -> None:
        """Start `self.lines` (one per replica index) and the watcher that restarts them."""
        self.iter_dir.mkdir(parents=True, exist_ok=True)
        for index in self.lines:
            self.restarts[index] = 0
            self._spawn(index)
        self._watcher = threading.Thread(target=self._watch, name="replica-steps", daemon=True)
        self._watcher.start()

    def _spawn(self, index: int) -> None:
        line = self.lines[index]
        print(f"$ {' '.join(line)}  > {self.log(index)}", flush=True)
        # a healthy server must not keep the segment's own heartbeat fresh (a hung trainer would
        # go unnoticed by `t1 supervise`): the watcher gets no heartbeat file
        env = {k: v for k, v in os.environ.items() if k != HEARTBEAT_ENV}
        with open(self.log(index), "ab") as out:
            proc = subprocess.Popen(  # srun dies with the driver (t1.store.lock), the step with the job
                line, stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent, env=env
            )
        with self._lock:
            self.procs[index] = proc
        if self.children is not None:
            self.children.add(f"replica{index}", proc.pid)
        self.events.append({"time": time.time(), "event": "started", "replica": index})

    def _watch(self) -> None:
        """Start a replica step again when it exits before the segment ends."""
        while not self._stopping.wait(1.0):
            for index, proc in list(self.procs.items()):
                rc = proc.poll()
                if rc is None or self._stopping.is_set():
                    continue
                self.events.append(
                    {"time": time.time(), "event": "exited", "replica": index, "rc": rc}
                )
                if self.restarts[index] >= MAX_RESTARTS:
                    self.failure = (
                        f"replica {index} step exited {self.restarts[index] + 1} times "
                        f"(last rc {rc}); see {self.log(index)}"
                    )
                    self.failed = index
                    self.procs.pop(index)
                    continue
                self.restarts[index] += 1
                print(f"replica {index} step exited with {rc}: starting it again", flush=True)
                self._spawn(index)

    def wait_healthy(self, timeout_s: float) -> float:
        """Seconds until every replica answered /health; FleetStepError on timeout or exit."""
        t0 = time.monotonic()
        pending = {r["index"]: r["url"] for r in self.replicas}
        while pending:
            for index, url in list(pending.items()):
                if launch.healthy(url, timeout_s=2.0):
                    pending.pop(index)
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

    def tail(self, index: int, lines: int = 15) -> str:
        try:
            return "\n".join(self.log(index).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM every replica's srun (it passes it to the step), SIGKILL after the grace."""
        self._stopping.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
        procs = list(self.procs.items())
        for _, proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for index, proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            self.events.append(
                {"time": time.time(), "event": "stopped", "replica": index, "rc": proc.returncode}
            )
            if self.children is not None:
                self.children.remove(f"replica{index}")


def model_info(url: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """A replica's GET /get_model_info (model_path, weight_version), or the error."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/get_model_info", timeout=timeout_s) as r:
            return json.loads(r.read() or b"{}")
    except (urllib.error.URLError, OSError, ValueError) as e:
        return {"error": f"{type(e).__name__}: {e}"}


def trainer_launcher(cfg, split: dict[str, Any], record: list[dict[str, Any]]):
    """Driver.launcher: `t1 train` as the trainer job step, other commands as they are."""
    nodes = split["trainer"]
    layout = plan.trainer_layout(cfg, len(nodes))["layout"]

    def run(what: str, cmd: list[str]) -> list[str]:
        if what != "train":
            return localize(cmd)
        step = Path(cmd[cmd.index("--out") + 1]).parent.name  # .../step_NNNNNN/train
        _, line = plan.trainer_command(cfg, nodes, layout, cmd, f"t1-{cfg.run.name}-{step}")
        record.append({"step": step, "line": line})
        return localize(line)

    return run


def load_final(cfg, urls: list[str], path: Path) -> None:
    """Load the segment's final export into every replica (t1.engine.fleet), or raise."""
    from t1.engine.fleet import Fleet

    fleet = Fleet.from_config(cfg, urls)
    try:
        fleet.update_weights(str(path))
    finally:
        fleet.close()


def run_with_fleet(driver) -> int:
    """t1.run.segment.main inside an allocation with a fleet: replicas up, steps, final weights."""
    from t1.engine.fleet import FleetError
    from t1.run.steps import step_dir

    cfg, args = driver.cfg, driver.args
    hosts, where = allocation.allocation_hosts(cfg)
    if hosts is None:
        print(f"t1 segment: fleet.replicas {cfg.fleet.replicas}: {where}", file=sys.stderr)
        return 2
    iter_dir = Path(args.out).parent
    first = driver.steps()[0]
    start = driver.prev_of(first) / "actor"
    try:
        steps = ReplicaSteps(cfg, args.config, iter_dir, hosts, driver.children)
    except ValueError as e:
        print(f"t1 segment: {args.config}: {e}", file=sys.stderr)
        return 2
    urls = [r["url"] for r in steps.replicas]
    trainer_lines: list[dict[str, Any]] = []
    driver.launcher = trainer_launcher(cfg, steps.split, trainer_lines)
    record: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "status": "running",
        "job_id": os.environ.get("SLURM_JOB_ID"),
        "hosts": hosts,
        "trainer_nodes": steps.split["trainer"],
        "start_weights": str(start),
    }
    rc = 3
    try:
        steps.start(str(start))
        try:
            took = steps.wait_healthy(cfg.fleet.start_timeout_s)
        except FleetStepError as e:
            print(f"t1 segment: {e}", file=sys.stderr, flush=True)
            return 3
        print(f"fleet: {len(urls)} replica step(s) healthy after {took:.1f} s: {urls}", flush=True)
        record["healthy_after_s"] = round(took, 2)
        rc = driver.run()
        if steps.failure is not None:
            print(f"t1 segment: {steps.failure}", file=sys.stderr, flush=True)
            rc = rc or 3
        if rc:
            return rc
        final = step_dir(driver.run_dir, driver.steps()[-1]) / "train" / "actor"
        try:
            load_final(cfg, urls, final)
        except (FleetError, ValueError) as e:
            Path(args.out).unlink(missing_ok=True)
            print(f"t1 segment: loading {final} into the fleet: {e}", file=sys.stderr, flush=True)
            return 3
        record["final_weights"] = str(final)
        record["replicas_after"] = [model_info(u) for u in urls]
        print(f"fleet: final weights {final} loaded into {len(urls)} replica(s)", flush=True)
        record["status"] = "complete"
        return 0
    finally:
        steps.stop()
        record["replicas"] = [
            {**r, "launch": steps.lines.get(r["index"]), "restarts": steps.restarts.get(r["index"])}
            for r in steps.replicas
        ]
        record["trainer_steps"] = trainer_lines
        record["events"] = steps.events
        record["exit"] = rc if record["status"] != "complete" else 0
        write_json_atomic(iter_dir / RECORD, record)

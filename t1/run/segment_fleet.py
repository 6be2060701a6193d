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
   exits meanwhile is started again, more than `MAX_RESTARTS` times stops the segment, naming
   its log;
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

A replica step that exits or hangs while the segment runs (t1/run/replica_watch.py: its own
/health checks, `fleet.health_failures` in a row failing = hung) is killed (scancel of its
step, SIGKILL), started again with the same line, loaded with the current weights (the newest
finished export: `newest_export`, at the fleet client's weight_version) and checked with
/get_model_info; each rollout (and the final load) first waits until no replica is being
restarted. At most `MAX_RESTARTS` restarts per replica, exits and hangs alike; one more stops
the segment. fleet_steps.json lists each replica's restarts (time, reason `exited`/`hung`,
old and new Slurm step, weight_version after the reload).

`fleet.colocate` puts the replicas on the trainer's nodes (srun --overlap, port + index): the
single-node CI split. Exit codes as `t1 segment`; 3: the fleet failed (named on stderr).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from t1.engine import allocation
from t1.records import write_json_atomic
from t1.run import plan
from t1.run.replica_watch import (  # noqa: F401  (re-exported: the segment's fleet API)
    MAX_RESTARTS,
    STOP_GRACE_S,
    FleetStepError,
    LockedPidFile,
    ReplicaSteps,
    export_version,
    localize,
    model_info,
)

SCHEMA_VERSION = 2  # 2: each replica's `restarts` is a list (time, reason, steps, weight_version)
RECORD = "fleet_steps.json"


def fleet_steps_wanted(cfg) -> bool:
    """Whether `t1 segment` runs its replicas as job steps of the current allocation."""
    return cfg.fleet.replicas > 0 and not cfg.fleet.urls and bool(os.environ.get("SLURM_JOB_ID"))


def trainer_launcher(
    cfg,
    split: dict[str, Any],
    record: list[dict[str, Any]],
    ready: Callable[[], Any] | None = None,
):
    """Driver.launcher: `t1 train` as the trainer job step (with fleet.weight_update
    distributed it pushes its actor to every replica: --push-to), other commands as they are; a
    rollout waits for `ready` first (every replica up and at the current weights)."""
    nodes = split["trainer"]
    layout = plan.trainer_layout(cfg, len(nodes))["layout"]

    def run(what: str, cmd: list[str]) -> list[str]:
        if what != "train":
            if what == "rollout" and ready is not None:
                ready()
            return localize(cmd)
        if cfg.fleet.weight_update == "distributed":  # the trainer pushes; the fleet checks
            cmd = [*cmd, "--push-to", ",".join(r["url"] for r in split["replicas"])]
        step = Path(cmd[cmd.index("--out") + 1]).parent.name  # .../step_NNNNNN/train
        _, line = plan.trainer_command(cfg, nodes, layout, cmd, f"t1-{cfg.run.name}-{step}")
        record.append({"step": step, "line": line})
        return localize(line)

    return run


def newest_export(run_dir: Path, steps, start: Path) -> Path:
    """The weights the fleet serves now: the newest finished export among the segment's
    `steps` (train/DONE.json written), else the segment's start weights."""
    from t1.run.steps import step_dir

    for s in reversed(list(steps)):
        train = step_dir(run_dir, s) / "train"
        if (train / "DONE.json").exists():
            return train / "actor"
    return start


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
    if driver.children is not None:  # shared with the replica monitors' threads
        driver.children = LockedPidFile(driver.children.path)

    def current() -> tuple[str, str]:
        path = newest_export(driver.run_dir, driver.steps(), start)
        return str(path), export_version(path)

    try:
        steps = ReplicaSteps(cfg, args.config, iter_dir, hosts, driver.children, current)
    except ValueError as e:
        print(f"t1 segment: {args.config}: {e}", file=sys.stderr)
        return 2
    urls = [r["url"] for r in steps.replicas]
    trainer_lines: list[dict[str, Any]] = []
    driver.launcher = trainer_launcher(cfg, steps.split, trainer_lines, steps.wait_ready)
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
        try:
            rc = driver.run()
            if not rc:
                steps.wait_ready()  # a replica being restarted takes the final weights too
        except FleetStepError as e:
            print(f"t1 segment: {e}", file=sys.stderr, flush=True)
            rc = 3
        if steps.failure is not None:
            print(f"t1 segment: {steps.failure}", file=sys.stderr, flush=True)
            rc = rc or 3
        if rc:
            Path(args.out).unlink(missing_ok=True)  # written by a driver.run() that succeeded
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
            {
                **r,
                "launch": steps.lines.get(r["index"]),
                "step": steps.step_ids.get(r["index"]),
                "restarts": steps.restarts.get(r["index"], []),
            }
            for r in steps.replicas
        ]
        record["trainer_steps"] = trainer_lines
        record["events"] = steps.events
        record["exit"] = rc if record["status"] != "complete" else 0
        write_json_atomic(iter_dir / RECORD, record)

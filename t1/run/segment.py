"""`t1 segment`: one PPO segment - K steps from the newest finished step - then a marker.

    t1 segment --config results/tiny/config.yaml --iter 3 --run-dir results/tiny \\
        --from results/tiny/sft/model [--critic results/tiny/critic/warmup] \\
        --tokenizer results/tiny/tokenizer --out results/tiny/ppo/iter_00003/DONE
    t1 segment ... --dry-run        # print the plan (batches, commands); run nothing

A thin driver; the work of a step is done by the commands it runs (t1/run/steps.py):

    t1 rollout --config C --policy PREV/actor --tokenizer T --tasks <batch> --launch N \\
               --seed S --out RUN/ppo/steps/step_NNNNNN/rollout
    t1 train --config C --stage ppo --in .../rollout --from PREV --out .../train [--critic W]

Outside an allocation's job steps, each command is forked from the driver, which imported
torch, transformers and t1 once before the first step (t1/run/warm_start.py;
`campaign.warm_start: false` starts each as a fresh Python): the same command, without the
~3 s of imports each.

Global step s of segment i runs for s in [i*K, (i+1)*K) (K = campaign.steps_per_segment);
PREV is step s-1's `train` directory, or `--from` for s = 0. The step's batch comes from a
`t1.rollout.oversample.BatchPlanner` over the train pool (the pool's epoch order, t1.tasks.pool: a
reproducible permutation per epoch from run.seed, never the rank order; tasks dropped by
over-sampling carried to the front of the next batch); its state after each step (epoch,
cursor, carry-over) is saved atomically in the step directory as `data.json`, so a resumed
segment plans exactly the batches an uninterrupted one would.

Carry-over is keyed by task path (rollout.json's dropped rows carry it), and a task dropped or
failed `rollout.max_carry` steps in a row goes back to the pool's normal order.

Reward: before its first step the driver pins the run's reward spec in RUN/manifest.json
(t1.verify.reward.pin_reward: `reward.scale`, or 0 = the train pool's largest assertion count), and
every rollout scores with it (`--run-manifest`). A resumed campaign whose config names
another scale stops here with exit 2 and a message naming both scales.

Idempotent however often it is rerun: a step whose `train/DONE.json` exists is skipped; a
rollout without its `rollout.json` is removed and redone; `t1 train` resumes from its own
checkpoint, and when the previous step's checkpoint is corrupt it redoes that step from the one
before (t1/train/ppo.py). After each step, the checkpoints (train/ckpt) of all but the newest
`campaign.keep_checkpoints` (>= 2) finished steps are deleted (weights, metrics and incidents
stay).

Crash safety (`take_over`, before the first step): one driver per segment (ITER_DIR/
.t1-writer.lock); the children of a killed earlier driver (ITER_DIR/segment.children.json:
pid, start time, command line) are killed; every child dies with the driver
(PR_SET_PDEATHSIG); the campaign's inputs (pinned config, train pool manifest, tokenizer, and for segment 0 the SFT
actor and warm critic) are checked against the hashes the first segment recorded in
RUN/manifest.json (t1.store.pinning): a changed input stops the segment naming it.

Inside a Slurm allocation with `fleet.replicas` > 0 (and no fixed `fleet.urls`) the rollout
replicas and each `t1 train` run as job steps of the allocation: t1/run/segment_fleet.py.

Under `t1 supervise`: child output counts as a heartbeat (the trainer may also call
`t1.supervise.heartbeat()`); on SIGUSR2/SIGTERM a running `t1 train` gets SIGUSR2 (it
checkpoints and exits 75), a running rollout is stopped (it is redone), and the driver exits 75.
Exit codes: 0 segment done (marker written), 75 stopped early, 2 bad arguments, otherwise the
failing command's code.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from t1.records import write_json_atomic
from t1.run.steps import step_commands, step_dir, t1_command
from t1.run.warm_start import fork_command, preload, python_threads
from t1.store.lock import PidFile, die_with_parent
from t1.supervise.child import EXIT_REQUEUE, StopRequest, heartbeat

SCHEMA_VERSION = 1


def pool_order(pool_dir: Path, seed: int):
    """The pool's epoch order as task directories: `order(epoch) -> [dir, ...]` (the one
    epoch order of t1.tasks.pool: seeded per epoch, never the rank order)."""
    from t1.tasks.pool import PoolLoader

    try:
        loader = PoolLoader(pool_dir, seed)
    except ValueError as e:
        raise SystemExit(f"t1 segment: {e}") from None
    if not len(loader):
        raise SystemExit(f"t1 segment: {loader.dir / 'manifest.json'}: no tasks")
    return lambda epoch: [str(t.path) for t in loader.epoch(epoch)]


def _dropped_dirs(rollout_json: Path, batch: list[str]) -> list[str]:
    """Task directories of the dropped tail (failures included), one per dropped launch,
    mapped back to the batch's entries by resolved path (two tasks may share a name)."""
    by_path = {str(Path(t).resolve()): t for t in batch}
    rows = json.loads(rollout_json.read_text()).get("dropped_tasks", [])
    out = []
    for r in rows:
        if r.get("path") is None:
            raise SystemExit(f"t1 segment: {rollout_json}: a dropped row without its task path")
        key = str(Path(r["path"]).resolve())
        if key in by_path:
            out.append(by_path[key])
    return out


class Driver:
    def __init__(self, args: argparse.Namespace) -> None:
        from t1.config import load_config
        from t1.rollout.oversample import BatchPlanner

        self.args = args
        self.cfg = load_config(args.config)
        self.run_dir = Path(args.run_dir or Path(self.cfg.run.results_dir) / self.cfg.run.name)
        self.k = args.steps or self.cfg.campaign.steps_per_segment
        self.stop: StopRequest | None = None
        pool = Path(args.pool or self.run_dir / "pool" / "train")
        self.planner = BatchPlanner(
            order=pool_order(pool, self.cfg.run.seed),
            launch=self.cfg.rollout.launch,
            carry_dropped=self.cfg.rollout.carry_dropped,
            max_carry=self.cfg.rollout.max_carry,
        )
        self.pool = pool
        self.manifest = self.run_dir / "manifest.json"

    def pin_reward(self) -> None:
        """Pin the run's reward spec (first segment) or check the config against it."""
        from t1.verify.reward import RewardError, pin_reward

        r = self.cfg.reward
        try:
            spec = pin_reward(
                self.manifest,
                r.kind,
                r.scale,
                r.subtract_noop,
                pool=self.pool,
                malformed_calls=r.malformed_calls,
            )
        except RewardError as e:
            print(f"t1 segment: {e}", file=sys.stderr, flush=True)
            raise SystemExit(2) from None
        print(f"reward: {spec} (pinned in {self.manifest})", flush=True)

    def steps(self) -> range:
        i = self.args.iter
        return range(i * self.k, (i + 1) * self.k)

    def push_to(self) -> list[str] | None:
        """The fixed replicas (fleet.urls) the trainer pushes to with fleet.weight_update
        distributed; inside an allocation segment_fleet's launcher adds its replica steps."""
        f = self.cfg.fleet
        return list(f.urls) if f.weight_update == "distributed" and f.urls else None

    def prev_of(self, s: int) -> Path:
        return step_dir(self.run_dir, s - 1) / "train" if s > 0 else Path(self.args.source)

    def load_planner(self, s: int) -> None:
        """Planner state as it was after step s-1: from its data.json when there is one; a
        dry run goes on in memory (from a fresh planner when earlier steps never ran)."""
        state = step_dir(self.run_dir, s - 1) / "data.json"
        if s == 0:
            return
        if state.exists():
            try:
                self.planner.load_state_dict(json.loads(state.read_text())["planner"])
            except (OSError, ValueError, KeyError) as e:
                raise SystemExit(f"t1 segment: {state}: unreadable data state ({e})") from None
        elif not self.args.dry_run:
            raise SystemExit(f"t1 segment: {state} missing: step {s - 1} has not finished")

    def warm_up(self) -> None:
        """Import what the step commands import, once, when a step will run here (and not as
        a job step of an allocation): each command is then forked from this process."""
        if not self.cfg.campaign.warm_start or self.launcher is not None or self.args.dry_run:
            return
        todo = [s for s in self.steps() if not (step_dir(self.run_dir, s) / "data.json").exists()]
        if not todo:
            return
        n, secs = preload(self.cfg.model.arch)
        threads = python_threads()
        self.warm = threads == 1
        if self.warm:
            print(f"warm start: {n} modules imported in {secs:.1f} s; steps fork from here")
        else:
            print(f"warm start off: {threads} Python threads after the imports (forking needs one)")

    def run(self) -> int:
        self.warm_up()
        for s in self.steps():
            sdir = step_dir(self.run_dir, s)
            if (sdir / "train" / "DONE.json").exists() and (sdir / "data.json").exists():
                print(f"step {s}: done already", flush=True)
                continue
            self.load_planner(s)
            batch = self.planner.next_batch()
            seed = self.cfg.run.seed * 1_000_003 + s
            critic = self.args.critic if s == 0 else None
            cmds = step_commands(
                self.args.config,
                self.prev_of(s),
                sdir,
                batch,
                seed,
                self.args.tokenizer,
                critic,
                self.manifest,
                self.push_to(),
            )
            if self.args.dry_run:
                self.planner.record_dropped([])
                print(json.dumps({"step": s, "prev": str(self.prev_of(s)), "batch": batch, **cmds}))
                continue
            sdir.mkdir(parents=True, exist_ok=True)
            rollout_json = sdir / "rollout" / "rollout.json"
            if not rollout_json.exists():
                shutil.rmtree(sdir / "rollout", ignore_errors=True)
                rc = self.call("rollout", cmds["rollout"])
                if rc:
                    return rc
            rc = self.call("train", cmds["train"])
            if rc:
                return rc
            given_up = self.planner.record_dropped(_dropped_dirs(rollout_json, batch))
            if given_up:
                print(
                    f"step {s}: dropped {self.cfg.rollout.max_carry} steps in a row, back to "
                    f"the pool's order: {', '.join(given_up)}",
                    flush=True,
                )
            write_json_atomic(
                sdir / "data.json",
                {
                    "schema_version": SCHEMA_VERSION,
                    "status": "complete",
                    "step": s,
                    "planner": self.planner.state_dict(),
                },
            )
            self.prune(s)
            heartbeat()
            if self.stop is not None and self.stop.requested:
                print(f"step {s}: finished; stopping ({self.stop.signal})", flush=True)
                return EXIT_REQUEUE
        if not self.args.dry_run:
            last = self.steps()[-1]
            write_json_atomic(
                Path(self.args.out),  # its folder need not exist yet
                {
                    "schema_version": SCHEMA_VERSION,
                    "status": "complete",
                    "iter": self.args.iter,
                    "steps": list(self.steps()),
                    "final": str(step_dir(self.run_dir, last) / "train"),
                    "time": time.time(),
                },
            )
        return 0

    children: PidFile | None = None  # the running child, for the next attempt to reap
    warm = False  # fork the step commands from this process (warm_up, t1/run/warm_start.py)
    # (what, cmd) -> the argv to run; t1.run.segment_fleet puts `t1 train` in its own job step
    launcher: Callable[[str, list[str]], list[str]] | None = None

    def call(self, what: str, cmd: list[str]) -> int:
        """Run one command; its output is a heartbeat; a stop request is passed on."""
        if self.stop is not None and self.stop.requested:
            return EXIT_REQUEUE
        print(f"$ {' '.join(cmd)}", flush=True)
        heartbeat()
        argv = t1_command() + cmd[1:] if cmd[:1] == ["t1"] else cmd
        if self.launcher is not None:
            argv = self.launcher(what, cmd)
        if self.warm and self.launcher is None and cmd[:1] == ["t1"] and python_threads() == 1:
            proc = fork_command(cmd[1:])  # same exit, output, signals and death (warm_start)
        else:
            proc = subprocess.Popen(  # dies with this driver, even by SIGKILL (t1.store.lock)
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
            )
        if self.children is not None:
            self.children.add(what, proc.pid)
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)
        forwarded = False
        while True:
            chunk = proc.stdout.read()
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                heartbeat()
            rc = proc.poll()
            if rc is not None:
                rest = proc.stdout.read()
                if rest:
                    sys.stdout.buffer.write(rest)
                    sys.stdout.flush()
                break
            if self.stop is not None and self.stop.requested and not forwarded:
                forwarded = True
                proc.send_signal(signal.SIGUSR2 if what == "train" else signal.SIGTERM)
            time.sleep(0.1)
        if self.children is not None:
            self.children.remove(what)
        if forwarded and rc != 0:
            return EXIT_REQUEUE
        if rc:
            print(
                f"t1 segment: {what} failed with exit {rc}: {' '.join(cmd)}",
                file=sys.stderr,
                flush=True,
            )
        return rc

    def prune(self, s: int) -> None:
        """Delete the trainer checkpoints (train/ckpt, and a legacy train/trainer.pt) of finished
        steps older than the newest `keep_checkpoints`; their policy weights and metrics stay."""
        keep = self.cfg.campaign.keep_checkpoints
        if keep < 2:  # the newest checkpoint may prove corrupt: keep the step before it too
            raise SystemExit(f"t1 segment: campaign.keep_checkpoints is {keep}; it must be >= 2")
        for train in (self.run_dir / "ppo" / "steps").glob("step_*/train"):
            old = int(train.parent.name.split("_")[1])
            if old > s - keep or not (train / "DONE.json").exists():
                continue
            shutil.rmtree(train / "ckpt", ignore_errors=True)
            (train / "trainer.pt").unlink(missing_ok=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", required=True, help="the run's config (results/<run>/config.yaml)"
    )
    parser.add_argument(
        "--iter", required=True, type=int, help="segment index i (steps i*K .. i*K+K-1)"
    )
    parser.add_argument("--out", required=True, help="marker written when the segment is done")
    parser.add_argument(
        "--from", dest="source", required=True, help="SFT output DIR (start of step 0)"
    )
    parser.add_argument("--critic", default=None, help="critic_warmup output DIR (step 0)")
    parser.add_argument("--run-dir", default=None, help="default: <run.results_dir>/<run.name>")
    parser.add_argument("--pool", default=None, help="train pool DIR (default: RUN_DIR/pool/train)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer DIR")
    parser.add_argument(
        "--steps", type=int, default=None, help="K (default: campaign.steps_per_segment)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    parser.add_argument(
        "--no-measure",
        action="store_true",
        help="--dry-run: skip measuring the trainer's real models (~20 s at the 122B preset)",
    )


def take_over(driver: Driver) -> None:
    """Before the first step: one driver per segment (ITER_DIR/.t1-writer.lock, not inherited),
    kill what a previous attempt's driver left running (ITER_DIR/segment.children.json), and
    check the campaign's inputs against the hashes its first segment recorded (t1.store.pinning)."""
    from t1.store.lock import LockHeld, PidFile, hold_output
    from t1.store.pinning import InputsChanged, pin_inputs

    iter_dir = Path(driver.args.out).parent
    if driver.cfg.campaign.keep_checkpoints < 2:
        raise SystemExit(
            "t1 segment: campaign.keep_checkpoints must be >= 2 (a corrupt newest checkpoint "
            f"falls back to the step before it), got {driver.cfg.campaign.keep_checkpoints}"
        )
    try:
        driver.lock = hold_output(iter_dir, "t1 segment", wait_s=10, inherit=False)
    except LockHeld as e:
        raise SystemExit(f"t1 segment: {e}") from None
    driver.children = PidFile(iter_dir / "segment.children.json")
    for k in driver.children.reap():
        print(f"t1 segment: killed pid {k['pid']} ({k['name']}) left by a previous attempt")
    args = driver.args
    inputs = {"config": args.config, "train_pool": Path(args.pool or driver.run_dir / "pool/train")}
    inputs["train_pool"] = inputs["train_pool"] / "manifest.json"
    if args.tokenizer:
        inputs["tokenizer"] = args.tokenizer
    if args.iter == 0:  # read by the first step only
        inputs["sft_actor"] = Path(args.source) / "actor"
        if args.critic:
            inputs["critic_warmup"] = Path(args.critic) / "critic"
    driver.pin_reward()  # first: a changed reward.scale is named as such, not as a changed config
    try:
        pin_inputs(driver.run_dir / "manifest.json", inputs)
    except InputsChanged as e:
        raise SystemExit(f"t1 segment: {e}") from None


def main(args: argparse.Namespace) -> int:
    if args.dry_run:  # the allocation's plan (t1/run/plan.py); the batches too once the pool exists
        from t1.run.plan import pool_ready, print_plan

        rc = print_plan(args)
        if rc or not pool_ready(args):
            return rc
    driver = Driver(args)
    if not args.dry_run:
        driver.stop = StopRequest()
        take_over(driver)
        from t1.run.segment_fleet import fleet_steps_wanted, run_with_fleet

        if fleet_steps_wanted(driver.cfg):  # replicas as job steps of this allocation
            return run_with_fleet(driver)
    return driver.run()

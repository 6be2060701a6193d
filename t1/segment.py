"""`t1 segment`: one PPO segment - K steps from the newest finished step - then a marker.

    t1 segment --config results/tiny/config.yaml --iter 3 --run-dir results/tiny \\
        --from results/tiny/sft/model [--critic results/tiny/critic/warmup] \\
        --tokenizer results/tiny/tokenizer --out results/tiny/ppo/iter_00003/DONE
    t1 segment ... --dry-run        # print the plan (batches, commands); run nothing

A thin driver; the work of a step is done by the commands it runs (edit `step_commands`):

    t1 rollout --config C --policy PREV/actor --tokenizer T --tasks <batch> --launch N \\
               --seed S --out RUN/ppo/steps/step_NNNNNN/rollout
    t1 train --config C --stage ppo --in .../rollout --from PREV --out .../train [--critic W]

Global step s of segment i runs for s in [i*K, (i+1)*K) (K = campaign.steps_per_segment);
PREV is step s-1's `train` directory, or `--from` for s = 0. The step's batch comes from a
`t1.oversample.BatchPlanner` over the train pool (a reproducible permutation per epoch from
run.seed; tasks dropped by over-sampling carried to the front of the next batch); its state
after each step (epoch, cursor, carry-over) is saved atomically in the step directory as
`data.json`, so a resumed segment plans exactly the batches an uninterrupted one would.

Idempotent however often it is rerun: a step whose `train/DONE.json` exists is skipped; a
rollout without its `rollout.json` is removed and redone; `t1 train` resumes from its own
`trainer.pt`. After each step, `trainer.pt` of all but the newest `campaign.keep_checkpoints`
finished steps is deleted (policy weights and metrics stay).

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
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from t1.supervise.child import EXIT_REQUEUE, StopRequest, heartbeat

SCHEMA_VERSION = 1


def step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "ppo" / "steps" / f"step_{step:06d}"


def pool_tasks(pool_dir: Path) -> list[str]:
    """Task directories of a pool, in its rank order (manifest.json: "tasks" of str or
    {"path"|"dir": str}; relative paths are relative to the pool directory)."""
    manifest = pool_dir / "manifest.json"
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"t1 segment: {manifest}: cannot read the pool manifest ({e})") from None
    out = []
    for item in data.get("tasks", []):
        path = item if isinstance(item, str) else item.get("path") or item.get("dir")
        out.append(str(path if Path(path).is_absolute() else pool_dir / path))
    if not out:
        raise SystemExit(f"t1 segment: {manifest}: no tasks")
    return out


def epoch_order(tasks: list[str], seed: int, epoch: int) -> list[str]:
    """The epoch's permutation: reproducible from (seed, epoch), different every epoch."""
    return random.Random(f"t1-pool:{seed}:{epoch}").sample(tasks, len(tasks))


def t1_command() -> list[str]:
    """How to run `t1` from here: this interpreter's own `t1` (a venv's bin/ need not be on
    PATH: `.venv/bin/t1 segment ...` works unactivated), else `python -m t1.cli`."""
    sibling = Path(sys.executable).with_name("t1")
    if sibling.is_file() and os.access(sibling, os.X_OK):
        return [str(sibling)]
    return [sys.executable, "-m", "t1.cli"]


def step_commands(
    cfg_path: str,
    prev: Path,
    sdir: Path,
    batch: list[str],
    seed: int,
    tokenizer: str | None,
    critic: str | None,
) -> dict[str, list[str]]:
    """The two commands of one PPO step (the flags the rollout and train owners define)."""
    tok = ["--tokenizer", tokenizer] if tokenizer else []
    rollout = ["t1", "rollout", "--config", cfg_path, "--policy", str(prev / "actor"), *tok]
    rollout += ["--tasks", *batch, "--launch", str(len(batch)), "--seed", str(seed)]
    rollout += ["--out", str(sdir / "rollout")]
    train = ["t1", "train", "--config", cfg_path, "--stage", "ppo", "--in", str(sdir / "rollout")]
    train += ["--from", str(prev), "--out", str(sdir / "train"), *tok]
    if critic:
        train += ["--critic", critic]
    return {"rollout": rollout, "train": train}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)  # --out's folder need not exist yet
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _dropped_dirs(rollout_json: Path, batch: list[str]) -> list[str]:
    """Task directories of the dropped tail, mapped back by task id (= directory name)."""
    by_name = {Path(t).name: t for t in batch}
    rows = json.loads(rollout_json.read_text()).get("dropped_tasks", [])
    return [by_name[r["task"]] for r in rows if r.get("task") in by_name]


class Driver:
    def __init__(self, args: argparse.Namespace) -> None:
        from t1.config import load_config
        from t1.oversample import BatchPlanner

        self.args = args
        self.cfg = load_config(args.config)
        self.run_dir = Path(args.run_dir or Path(self.cfg.run.results_dir) / self.cfg.run.name)
        self.k = args.steps or self.cfg.campaign.steps_per_segment
        self.stop: StopRequest | None = None
        pool = Path(args.pool or self.run_dir / "pool" / "train")
        tasks = pool_tasks(pool)
        seed = self.cfg.run.seed
        self.planner = BatchPlanner(
            order=lambda e: epoch_order(tasks, seed, e),
            launch=self.cfg.rollout.launch,
            carry_dropped=self.cfg.rollout.carry_dropped,
        )

    def steps(self) -> range:
        i = self.args.iter
        return range(i * self.k, (i + 1) * self.k)

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

    def run(self) -> int:
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
                self.args.config, self.prev_of(s), sdir, batch, seed, self.args.tokenizer, critic
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
            self.planner.record_dropped(_dropped_dirs(rollout_json, batch))
            _write_json(
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
            _write_json(
                Path(self.args.out),
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

    def call(self, what: str, cmd: list[str]) -> int:
        """Run one command; its output is a heartbeat; a stop request is passed on."""
        if self.stop is not None and self.stop.requested:
            return EXIT_REQUEUE
        print(f"$ {' '.join(cmd)}", flush=True)
        heartbeat()
        argv = t1_command() + cmd[1:] if cmd[:1] == ["t1"] else cmd
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
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
        keep = max(1, self.cfg.campaign.keep_checkpoints)
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


def main(args: argparse.Namespace) -> int:
    driver = Driver(args)
    if not args.dry_run:
        driver.stop = StopRequest()
    return driver.run()

"""Rollout: sample trajectories of tasks in sandboxes, score them, write them to disk.

    t1 rollout --config workflow/config/tiny.yaml --policy results/tiny/policy/init \\
               --tokenizer results/tiny/tokenizer --out results/tiny/rollout
    t1 rollout --config ... --expert --out results/tiny/expert     # reference solutions (SFT)

Each trajectory runs in a fresh sandbox of its task (t1.oracle.open_task_sandbox): the agent
loop (t1.agent) samples turns from the engine and runs their tool calls; the task's verifier
then runs in the same sandbox and the reward is attached. Over-sampling (t1.oversample)
launches `rollout.launch` trajectories and admits the first `rollout.admit` to complete; the
dropped tail is recorded (task ids, turns so far). `collect()` is the library entry point the
PPO stage calls each step.

Output directory:
  trajectories/NNNN-<task>/   admitted trajectories (t1.trajectory records)
  dropped/NNNN-<task>/        the dropped tail as far as it ran, status ABORTED (a run that
                              finished after the batch was full too), kept for the audit
  rollout.json                summary: schema_version, status, counts, admitted and dropped rows
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from t1.agent import AgentOptions, run_agent
from t1.config import Config, load_config
from t1.engine.base import Engine, SamplingParams
from t1.oversample import oversample
from t1.reward import RewardSpec
from t1.tasks.load import find_tasks, load_task
from t1.tasks.model import Task
from t1.trajectory import Status, Trajectory, save_trajectory

SCHEMA_VERSION = 1


@dataclass
class RolloutBatch:
    """One step's rollout: admitted trajectories in admission order, and the dropped tail."""

    admitted: list[Trajectory] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)  # task, turns, reason
    dropped_trajectories: list[Trajectory] = field(default_factory=list)  # partial, ABORTED
    launched: int = 0
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        by_status: dict[str, int] = {}
        for t in self.admitted:
            by_status[t.status.value] = by_status.get(t.status.value, 0) + 1
        rewards = [t.reward for t in self.admitted if t.reward is not None]
        return {
            "schema_version": SCHEMA_VERSION,
            "status": "complete",
            "launched": self.launched,
            "admitted": len(self.admitted),
            "dropped": len(self.dropped),
            "by_status": by_status,
            "mean_reward": sum(rewards) / len(rewards) if rewards else None,
            "resolved": sum(bool(t.metadata.get("resolved")) for t in self.admitted),
            "seconds": round(self.seconds, 3),
            "trajectories": [
                {
                    "task": t.task_id,
                    "status": t.status.value,
                    "reason": t.reason,
                    "turns": len(t.turns),
                    "reward": t.reward,
                    "passed": t.metadata.get("passed"),
                    "total": t.metadata.get("total"),
                }
                for t in self.admitted
            ],
            "dropped_tasks": self.dropped,
        }


class _Progress:
    def __init__(self, total: int, label: str) -> None:
        self.total, self.done, self.label = total, 0, label
        self.lock = threading.Lock()
        self._draw()

    def tick(self, *_: Any) -> None:
        with self.lock:
            self.done += 1
            self._draw()

    def _draw(self) -> None:
        n = 30 * self.done // max(1, self.total)
        end = "\n" if self.done >= self.total else ""
        print(
            f"\r{self.label} [{'#' * n}{'.' * (30 - n)}] {self.done}/{self.total}",
            end=end,
            file=sys.stderr,
            flush=True,
        )


def sampling_of(cfg: Config, seed: int | None) -> SamplingParams:
    e = cfg.engine
    return SamplingParams(
        temperature=e.temperature, top_p=e.top_p, max_new_tokens=e.max_new_tokens, seed=seed
    )


def reward_of(cfg: Config) -> RewardSpec:
    return RewardSpec(
        kind=cfg.reward.kind, scale=cfg.reward.scale, subtract_noop=cfg.reward.subtract_noop
    )


def run_one(
    task: Task,
    engine: Engine,
    tokenizer,
    cfg: Config,
    seed: int | None,
    cancel: threading.Event | None = None,
    options: AgentOptions | None = None,
) -> Trajectory:
    """One trajectory of `task` in a fresh sandbox; failures become FAILED records."""
    options = options or AgentOptions()
    from t1.oracle import task_spec
    from t1.sandbox import open_sandbox, spec_from_config

    if cancel is not None and cancel.is_set():  # the tail of an over-sampled batch: never started
        return Trajectory(
            task_id=task.id, status=Status.ABORTED, reason="cancelled before it started"
        )
    sb_cfg = cfg.sandbox
    base = spec_from_config(sb_cfg)
    try:
        spec = task_spec(task, sb_cfg.backend, Path(cfg.tasks.env_cache).expanduser(), base.limits)
        spec = dataclasses.replace(
            spec, output_cap_bytes=base.output_cap_bytes, cow=base.cow, provision=base.provision
        )
        with open_sandbox(spec, sb_cfg.backend) as sandbox:
            return run_agent(
                task,
                sandbox,
                engine,
                tokenizer,
                cfg.agent,
                sampling_of(cfg, seed),
                reward_of(cfg),
                cancel,
                options,
            )
    except Exception as e:  # the sandbox would not start, or died under us
        return Trajectory(
            task_id=task.id, status=Status.FAILED, reason=f"sandbox: {type(e).__name__}: {e}"
        )


def collect(
    tasks: list[Task],
    engine: Engine,
    tokenizer,
    cfg: Config,
    admit: int | None = None,
    seed: int | None = None,
    progress: bool = True,
) -> RolloutBatch:
    """Launch one trajectory per task (over-sampling), admit the first `admit` to complete."""
    admit = min(admit or cfg.rollout.admit, len(tasks))
    deterministic = cfg.run.deterministic
    base_seed = seed if (seed is not None or not deterministic) else cfg.run.seed
    bar = _Progress(len(tasks), "rollout") if progress else None
    t0 = time.monotonic()

    def one(indexed: tuple[int, Task], cancel: threading.Event) -> Trajectory:
        i, task = indexed
        s = None if base_seed is None else base_seed * 100_003 + i
        return run_one(task, engine, tokenizer, cfg, s, cancel)

    res = oversample(
        list(enumerate(tasks)),
        one,
        admit=admit,
        workers=cfg.rollout.workers,
        deterministic=deterministic,
        on_done=(bar.tick if bar else None),
        # A FAILED or ABORTED trajectory did not "complete": it must not take an admission
        # slot from one that did (it is recorded among the dropped with its reason).
        admissible=lambda t: t.status in (Status.COMPLETED, Status.TRUNCATED),
    )
    batch = RolloutBatch(launched=len(tasks), seconds=time.monotonic() - t0)
    batch.admitted = [traj for _, traj in res.admitted]
    for d in res.dropped:
        _, task = d.item
        progress_traj = d.progress if isinstance(d.progress, Trajectory) else None
        if progress_traj is not None and progress_traj.status in (
            Status.COMPLETED,
            Status.TRUNCATED,
        ):
            # It finished after the batch was full: dropped all the same, and never trained on.
            progress_traj.metadata.update(
                status_before_drop=progress_traj.status.value,
                reward_before_drop=progress_traj.reward,
            )
            progress_traj.status, progress_traj.reward = Status.ABORTED, None
            progress_traj.reason = (
                f"dropped by over-sampling after it finished ({progress_traj.reason})"
            )
        batch.dropped.append(
            {
                "task": task.id,
                "turns": len(progress_traj.turns) if progress_traj else 0,
                "reason": d.reason,
                "status": progress_traj.status.value if progress_traj else "FAILED",
            }
        )
        if progress_traj is not None:
            batch.dropped_trajectories.append(progress_traj)
    return batch


def write_batch(batch: RolloutBatch, out: Path, tokenizer_dir: Path | None = None) -> None:
    """Trajectories under out/trajectories, the summary as out/rollout.json (atomic).

    `tokenizer_dir` is recorded in each trajectory's metadata (t1 tito-audit needs it to
    recognise retokenized boundaries)."""
    out.mkdir(parents=True, exist_ok=True)
    for sub, trajs in (("trajectories", batch.admitted), ("dropped", batch.dropped_trajectories)):
        for i, traj in enumerate(trajs):
            if tokenizer_dir is not None:
                traj.metadata.setdefault("tokenizer", str(Path(tokenizer_dir).resolve()))
            save_trajectory(traj, out / sub / f"{i:04d}-{traj.task_id}")
    tmp = out / "rollout.json.tmp"
    tmp.write_text(json.dumps(batch.summary(), indent=1))
    tmp.replace(out / "rollout.json")


def expert_batch(tasks: list[Task], tokenizer, cfg: Config, progress: bool = True) -> RolloutBatch:
    """Reference solutions as multi-turn tool calls, one trajectory per task (all admitted)."""
    from t1.expert import ScriptedEngine, solution_commands

    bar = _Progress(len(tasks), "expert") if progress else None
    t0 = time.monotonic()
    batch = RolloutBatch(launched=len(tasks))
    options = AgentOptions(require_routing=False)
    expert_cfg = cfg
    max_turns = (
        max(cfg.agent.max_turns, max(len(solution_commands(t)) for t in tasks) + 2) if tasks else 1
    )
    if max_turns != cfg.agent.max_turns:
        expert_cfg = dataclasses.replace(
            cfg, agent=dataclasses.replace(cfg.agent, max_turns=max_turns, context_tokens=10**9)
        )
    for task in tasks:
        engine = ScriptedEngine(tokenizer, solution_commands(task))
        batch.admitted.append(run_one(task, engine, tokenizer, expert_cfg, None, None, options))
        if bar:
            bar.tick()
    batch.seconds = time.monotonic() - t0
    return batch


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, type=Path, help="campaign config (YAML)")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument(
        "--tokenizer", type=Path, help="tokenizer directory (default: <results>/<run>/tokenizer)"
    )
    parser.add_argument("--policy", type=Path, help="policy directory for the local engine")
    parser.add_argument("--tasks", nargs="+", help="task dirs (default: config tasks.train_dirs)")
    parser.add_argument(
        "--expert", action="store_true", help="execute reference solutions as tool calls"
    )
    parser.add_argument(
        "--launch", type=int, help="trajectories launched (default: rollout.launch)"
    )
    parser.add_argument(
        "--admit", type=int, help="first completed admitted (default: rollout.admit)"
    )
    parser.add_argument(
        "--seed", type=int, help="sampling seed (default: run.seed in deterministic mode)"
    )


def load_tasks(dirs: list[str], seed: int = 0) -> list[Task]:
    """Tasks of task dirs, dirs of tasks, or pools (a dir with a pool manifest.json: its tasks
    in the seeded epoch-0 permutation, never the rank order). A malformed task is an error
    naming its file."""
    from t1.pool import MANIFEST, PoolLoader

    paths: list[Path] = []
    for d in dirs:
        if (Path(d) / MANIFEST).is_file():
            paths += [t.path for t in PoolLoader(d, seed).epoch(0)]
        else:
            paths += find_tasks([d])
    tasks = [load_task(p) for p in paths]
    if not tasks:
        raise SystemExit(f"t1 rollout: no tasks found under {', '.join(map(str, dirs))}")
    return tasks


def main(args: argparse.Namespace) -> int:
    from t1.tokenizer import load_tokenizer

    cfg = load_config(args.config)
    run_dir = Path(cfg.run.results_dir) / cfg.run.name
    tokenizer_dir = args.tokenizer or run_dir / "tokenizer"
    tokenizer = load_tokenizer(tokenizer_dir)
    tasks = load_tasks(args.tasks or cfg.tasks.train_dirs, cfg.run.seed)
    if args.expert:
        batch = expert_batch(tasks, tokenizer, cfg)
    else:
        from t1.engine import make_engine

        launch = args.launch or cfg.rollout.launch
        batch_tasks = [tasks[i % len(tasks)] for i in range(launch)]
        engine = make_engine(cfg, args.policy)
        batch = collect(batch_tasks, engine, tokenizer, cfg, admit=args.admit, seed=args.seed)
    write_batch(batch, args.out, tokenizer_dir)
    s = batch.summary()
    print(
        f"rollout: {s['admitted']} admitted of {s['launched']} launched, {s['dropped']} dropped, "
        f"by status {s['by_status']}, mean reward {s['mean_reward']}, resolved {s['resolved']}, "
        f"{s['seconds']:.1f} s -> {args.out}"
    )
    return 0

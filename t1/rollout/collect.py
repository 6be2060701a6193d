"""Rollout: sample trajectories of tasks in sandboxes, score them, write them to disk.

    t1 rollout --config workflow/config/tiny.yaml --policy results/tiny/policy/init \\
               --tokenizer results/tiny/tokenizer --out results/tiny/rollout
    t1 rollout --config ... --expert --out results/tiny/expert     # reference solutions (SFT)

Each trajectory runs in a fresh sandbox of its task (t1.tasks.env.open_task_sandbox): the agent
loop (t1.agent.loop) samples turns from the engine and runs their tool calls; the task's verifier
then runs in the same sandbox and the reward is attached. Over-sampling (t1.rollout.oversample)
launches `rollout.launch` trajectories and admits the first `rollout.admit` to complete (under
`run.deterministic`, to complete on the trajectories' virtual clocks: t1.rollout.oversample); the
dropped tail is recorded (task ids and paths, turns so far). `collect()` is the library entry
point the PPO stage calls each step.

Admission needs a trainable record: each trajectory is assembled into TITO streams as soon as
the agent stops (t1.tito.assemble_or_abort, in `run_one`, before its verifier runs and before
the over-sampler sees it), so one that cannot be assembled is ABORTED there, frees its
admission slot for the next to complete, and is counted (`tito_aborted` in rollout.json)
instead of surfacing at train time.

Reward (t1.verify.reward): with `--run-manifest FILE` the spec pinned there (by `t1 segment`) is
used, and a config that names another scale is refused; without it, `reward.scale` when > 0,
else the largest assertion count of the pools the tasks come from. With
`reward.subtract_noop` each task's no-op passes come from its pool's manifest; a task
without that record refuses the rollout before anything runs.

Output directory:
  trajectories/NNNN-<task>/   admitted trajectories (t1.agent.trajectory records)
  dropped/NNNN-<task>/        the dropped tail as far as it ran, status ABORTED (a run that
                              finished after the batch was full too), kept for the audit
  rollout.json                summary: schema_version, status, counts, admitted and dropped rows
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from t1.agent.loop import AgentOptions, run_agent
from t1.agent.trajectory import Status, Trajectory, save_trajectory
from t1.config import Config, load_config
from t1.engine.base import Engine, SamplingParams
from t1.progress import Progress
from t1.records import write_json_atomic
from t1.rollout.oversample import CancelToken, oversample
from t1.tasks.load import find_tasks, load_task
from t1.tasks.model import Task
from t1.verify.reward import (
    RewardError,
    RewardSpec,
    pin_reward,
    pool_of,
    pool_records,
    scale_for_pool,
    task_record,
)

SCHEMA_VERSION = 1


@dataclass
class RolloutBatch:
    """One step's rollout: admitted trajectories in admission order, and the dropped tail."""

    admitted: list[Trajectory] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)  # task, turns, reason
    dropped_trajectories: list[Trajectory] = field(default_factory=list)  # partial, ABORTED
    launched: int = 0
    seconds: float = 0.0
    tito_aborted: int = 0  # completed, but not assemblable: aborted before admission

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
            "tito_aborted": self.tito_aborted,
            "by_status": by_status,
            "mean_reward": sum(rewards) / len(rewards) if rewards else None,
            "resolved": sum(bool(t.metadata.get("resolved")) for t in self.admitted),
            "tampered": sum(bool(t.metadata.get("tampered")) for t in self.admitted),
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


def sampling_of(cfg: Config, seed: int | None) -> SamplingParams:
    e = cfg.engine
    return SamplingParams(
        temperature=e.temperature, top_p=e.top_p, max_new_tokens=e.max_new_tokens, seed=seed
    )


def reward_of(
    cfg: Config, tasks: list[Task] = (), manifest: str | Path | None = None
) -> RewardSpec:
    """The reward spec of a rollout of `tasks` (see the module docstring); RewardError when it
    cannot be had (no scale and no pool; subtract_noop on a task without a no-op record)."""
    r = cfg.reward
    if manifest is not None:
        spec = pin_reward(
            manifest, r.kind, r.scale, r.subtract_noop, malformed_calls=r.malformed_calls
        )
    elif r.scale > 0 or r.kind == "binary":
        spec = RewardSpec(r.kind, r.scale or 1.0, r.subtract_noop, r.malformed_calls)
    else:
        pools = {pool_of(t.path) for t in tasks}
        if not tasks or None in pools:
            where = next((str(t.path) for t in tasks if pool_of(t.path) is None), "no tasks")
            raise RewardError(
                f"reward.scale is 0 (derive it from the pool), but {where} is not in a pool "
                "(POOL/tasks/<task> with POOL/manifest.json); set reward.scale in the config, "
                "pass --run-manifest, or roll out pool tasks"
            )
        totals = [rec.assertions for pool in pools for rec in pool_records(pool).values()]
        spec = RewardSpec(r.kind, scale_for_pool(totals), r.subtract_noop, r.malformed_calls)
    if spec.subtract_noop:
        for t in tasks:
            rec = task_record(t.path)
            if rec is None or rec.noop_passed is None:
                raise RewardError(
                    f"reward.subtract_noop is on, but task {t.path} has no measured no-op score "
                    "(roll out pool tasks from a pool built with `t1 pool --noop FILE`)"
                )
    return spec


def noop_of(task: Task) -> tuple[int, int] | None:
    """The task's no-op (passed, total) from its pool's record, None when there is none."""
    rec = task_record(task.path)
    return None if rec is None or rec.noop_passed is None else (rec.noop_passed, rec.noop_total)


def run_one(
    task: Task,
    engine: Engine,
    tokenizer,
    cfg: Config,
    seed: int | None,
    cancel: threading.Event | None = None,
    options: AgentOptions | None = None,
    reward: RewardSpec | None = None,
) -> Trajectory:
    """One trajectory of `task` in a fresh sandbox; failures become FAILED records.

    When the agent stops, the turns are assembled into TITO streams first: a trajectory that
    cannot be assembled is ABORTED (metadata `tito_aborted`) without paying for its verifier;
    otherwise the verifier runs in the same sandbox and the reward is attached. `reward`
    defaults to `reward_of(cfg, [task])`."""
    from t1.agent.loop import attach_reward
    from t1.tito import assemble_or_abort

    options = options or AgentOptions()
    from t1.sandbox import open_sandbox, spec_from_config
    from t1.tasks.env import task_spec

    if cancel is not None and cancel.is_set():  # the tail of an over-sampled batch: never started
        return Trajectory(
            task_id=task.id, status=Status.ABORTED, reason="cancelled before it started"
        )
    reward = reward or reward_of(cfg, [task])
    sb_cfg = cfg.sandbox
    base = spec_from_config(sb_cfg)
    try:
        spec = task_spec(
            task,
            sb_cfg.backend,
            Path(cfg.tasks.env_cache).expanduser(),
            base.limits,
            sb_cfg.network,
        )
        spec = dataclasses.replace(
            spec,
            output_cap_bytes=base.output_cap_bytes,
            cow=base.cow,
            provision=base.provision,
            tty_order=cfg.run.deterministic,  # the same command prints the same bytes
        )
        with open_sandbox(spec, sb_cfg.backend) as sandbox:
            traj = run_agent(
                task,
                sandbox,
                engine,
                tokenizer,
                cfg.agent,
                sampling_of(cfg, seed),
                reward,
                cancel,
                options,
                verify=False,
            )
            if traj.status not in (Status.COMPLETED, Status.TRUNCATED):
                return traj
            t = cfg.tito
            if assemble_or_abort(traj, tokenizer, t.normalized_back, t.normalized_ahead) is None:
                traj.metadata["tito_aborted"] = True
            elif cancel is not None and cancel.is_set():  # dropped anyway: skip the verifier
                traj.status, traj.reason = (
                    Status.ABORTED,
                    f"cancelled before the verifier ({traj.reason})",
                )
            else:
                attach_reward(traj, task, sandbox, reward, noop_of(task))
            return traj
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
    reward: RewardSpec | None = None,
    label: str = "rollout",
) -> RolloutBatch:
    """Launch one trajectory per task (over-sampling), admit the first `admit` to complete
    and assemble into TITO streams (`reward` defaults to `reward_of(cfg, tasks)`); `label`
    names the progress line (t1.progress)."""
    from t1.engine.fleet import run_resampled

    reward = reward or reward_of(cfg, tasks)
    admit = min(admit or cfg.rollout.admit, len(tasks))
    deterministic = cfg.run.deterministic
    base_seed = seed if (seed is not None or not deterministic) else cfg.run.seed
    bar = Progress(len(tasks), label) if progress else None
    t0 = time.monotonic()

    def one(indexed: tuple[int, Task], cancel: CancelToken) -> Trajectory:
        i, task = indexed
        s = None if base_seed is None else base_seed * 100_003 + i

        # on a fleet, a trajectory whose replica died is run again from scratch (t1.engine.fleet)
        # (run_one assembles each trajectory before admission: t1.tito.assemble_or_abort)
        def attempt() -> Trajectory:
            cancel.restart_clock()  # a trajectory run again from scratch is charged from 0
            return run_one(task, engine, tokenizer, cfg, s, cancel, reward=reward)

        return run_resampled(engine, attempt)

    res = oversample(
        list(enumerate(tasks)),
        one,
        admit=admit,
        workers=cfg.rollout.workers,
        deterministic=deterministic,
        clock=cfg.rollout.admission == "clock",
        on_done=((lambda *_: bar.advance()) if bar else None),
        # A FAILED or ABORTED trajectory did not "complete": it must not take an admission
        # slot from one that did (it is recorded among the dropped with its reason).
        admissible=lambda t: t.status in (Status.COMPLETED, Status.TRUNCATED),
    )
    if bar:
        bar.close()
    batch = RolloutBatch(launched=len(tasks), seconds=time.monotonic() - t0)
    batch.admitted = [traj for _, traj in res.admitted]
    for d in res.dropped:
        _, task = d.item
        progress_traj = d.progress if isinstance(d.progress, Trajectory) else None
        if progress_traj is not None and progress_traj.metadata.get("tito_aborted"):
            batch.tito_aborted += 1
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
                "path": str(task.path),
                "turns": len(progress_traj.turns) if progress_traj else 0,
                "reason": d.reason
                if progress_traj is None or d.reason == "truncated-tail"
                else f"{d.reason}: {progress_traj.reason}",
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
            if traj.metadata.get("tampered"):  # the report's incidents (t1.eval.report) list it
                from t1.store.incidents import IncidentLog

                IncidentLog(out / "incidents.jsonl").write(
                    "verifier_tampered", path=f"{sub}/{i:04d}-{traj.task_id}",
                    problem=str(traj.metadata["tampered"])[:500], action="scored as the no-op")  # fmt: skip
    write_json_atomic(out / "rollout.json", batch.summary())


def expert_batch(
    tasks: list[Task],
    tokenizer,
    cfg: Config,
    progress: bool = True,
    reward: RewardSpec | None = None,
) -> RolloutBatch:
    """Reference solutions as multi-turn tool calls, one trajectory per task (all admitted, in
    the order of `tasks`). `rollout.workers` run at once: a trajectory depends only on its task
    (its own sandbox and scripted commands), never on which others run beside it."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from t1.agent.expert import ScriptedEngine, solution_commands

    bar = Progress(len(tasks), "expert") if progress else None
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

    def one(task: Task) -> Trajectory:
        engine = ScriptedEngine(tokenizer, solution_commands(task))
        return run_one(task, engine, tokenizer, expert_cfg, None, None, options, reward)

    workers = max(1, min(cfg.rollout.workers, len(tasks)))
    with ThreadPoolExecutor(workers, thread_name_prefix="expert") as pool:
        futures = {pool.submit(one, task): i for i, task in enumerate(tasks)}
        done: dict[int, Trajectory] = {}
        for fut in as_completed(futures):
            done[futures[fut]] = fut.result()
            if bar:
                bar.advance(note=tasks[futures[fut]].id)
    batch.admitted.extend(done[i] for i in range(len(tasks)))
    if bar:
        bar.close()
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
        "--each",
        action="store_true",
        help="one trajectory per task, every one admitted: an epoch over the tasks (the critic "
        "warm-up's rollout); not with --launch or --admit",
    )
    parser.add_argument(
        "--seed", type=int, help="sampling seed (default: run.seed in deterministic mode)"
    )
    parser.add_argument(
        "--run-manifest",
        type=Path,
        help="the run's manifest: score with the reward spec pinned there (t1 segment pins it)",
    )


def load_tasks(dirs: list[str], seed: int = 0) -> list[Task]:
    """Tasks of task dirs, dirs of tasks, or pools (a dir with a pool manifest.json: its tasks
    in the seeded epoch-0 permutation, never the rank order). A malformed task is an error
    naming its file."""
    from t1.tasks.pool import MANIFEST, PoolLoader

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


def launched_tasks(tasks: list[Task], launch: int | None) -> list[Task]:
    """The tasks a rollout launches, in launch order: every task once (`launch` None, `--each`),
    else `launch` of them, cycling through `tasks` in their order."""
    if launch is None:
        return list(tasks)
    return [tasks[i % len(tasks)] for i in range(launch)]


def main(args: argparse.Namespace) -> int:
    from t1.agent.tokenizer import load_tokenizer
    from t1.store.lock import LockHeld, hold_output

    if args.each and (args.launch or args.admit):
        print("t1 rollout: --each launches every task once and admits all; "
              "it takes no --launch or --admit", file=sys.stderr)  # fmt: skip
        return 2
    try:  # one writer per rollout directory, for this process's whole life
        hold_output(args.out, "t1 rollout")
    except LockHeld as e:
        print(f"t1 rollout: {e}", file=sys.stderr)
        return 4
    cfg = load_config(args.config)
    run_dir = Path(cfg.run.results_dir) / cfg.run.name
    tokenizer_dir = args.tokenizer or run_dir / "tokenizer"
    tokenizer = load_tokenizer(tokenizer_dir)
    tasks = load_tasks(args.tasks or cfg.tasks.train_dirs, cfg.run.seed)
    try:
        reward = reward_of(cfg, tasks, args.run_manifest)
    except RewardError as e:
        print(f"t1 rollout: {e}", file=sys.stderr)
        return 2
    if args.expert:
        batch = expert_batch(tasks, tokenizer, cfg, reward=reward)
    else:
        from t1.engine import make_engine

        batch_tasks = launched_tasks(
            tasks, None if args.each else args.launch or cfg.rollout.launch
        )
        admit = len(batch_tasks) if args.each else args.admit
        from t1.engine.fleet import FleetError, after_rollout, before_rollout

        engine = make_engine(cfg, args.policy)
        try:  # a fleet loads the step's policy into every replica first, or the step stops
            before_rollout(engine, args.policy)
            batch = collect(
                batch_tasks, engine, tokenizer, cfg, admit=admit, seed=args.seed, reward=reward
            )
            after_rollout(engine, args.out)
        except FleetError as e:
            print(f"t1 rollout: {e}; nothing admitted, the step stops", file=sys.stderr)
            return 3
    write_batch(batch, args.out, tokenizer_dir)
    s = batch.summary()
    print(
        f"rollout: {s['admitted']} admitted of {s['launched']} launched, {s['dropped']} dropped, "
        f"by status {s['by_status']}, mean reward {s['mean_reward']}, resolved {s['resolved']}, "
        f"{s['seconds']:.1f} s -> {args.out}"
    )
    return 0

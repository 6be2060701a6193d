"""`t1 oracle`: run each task's reference solution (or nothing) in a fresh sandbox, then its verifier.

    t1 oracle workflow/tasks                          # every task resolved, exit 0
    t1 oracle workflow/tasks --agent noop --json noop.json
    t1 oracle tests/data/broken-tasks                 # each row says what broke, exit 1

Each TASK_DIR is a task directory or a directory of tasks. Per task: build its environment
(t1.sandbox.envbuild, cached by content hash) when its Dockerfile has more than FROM/WORKDIR,
start a fresh sandbox (both in t1.tasks.env), then
* oracle: copy the solution in (v1 /oracle/solution.sh, v2 /solution/) only now, and run it
  in the sandbox's persistent shell from the workdir (solution.yaml: each command in turn),
  within the task's agent timeout; background servers it starts stay alive;
* noop: nothing;
then the verifier in the same sandbox (t1.verify.verifier.score_retrying: once more at twice
the timeout when it errs, as in a rollout, so a loaded machine does not reject a good task;
`verifier_tries` in the row) and the reward (t1.verify.reward, kind and scale from `--config`,
default dense with scale 10).

Prints a table (task, passed/total, resolved, reward, seconds, error) on stdout and progress
with an ETA on stderr (t1.progress); `--json FILE` writes a list of objects with exactly the keys `task`, `agent`,
`passed`, `total`, `resolved`, `reward`, `seconds`, `assertions` ([{name, outcome}]), `error`.
A task that fails to load, build, start, or whose solution times out or whose verifier yields
nothing, or whose report names other assertions than the pool recorded from its reference run
(`tampered: ...`, scored as all failed; t1.verify.verifier), gets an `error` in its row; the other
tasks still run.

Exit code: 0 when no row has an error (unresolved tasks alone are not errors: a noop run
resolves nothing on purpose), 1 when some row has an error, 2 when no task was found.

This module is the command; the sandbox for a task (task_spec, open_task_sandbox,
run_solution), which the rollout and the synthesizer reuse, lives in t1/tasks/env.py.
    row = run_task(task, agent="oracle", backend="bwrap")         # the JSON row as a dict
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from t1.progress import Progress
from t1.records import write_json_atomic
from t1.sandbox import Limits
from t1.tasks import Task, TaskError, check_task, find_tasks, load_task
from t1.tasks.env import open_task_sandbox, run_solution
from t1.verify.result import VerifierResult
from t1.verify.reward import RewardSpec
from t1.verify.verifier import score_retrying

__all__ = ["run_task"]

AGENTS = ("oracle", "noop")
ROW_KEYS = (
    "task",
    "agent",
    "passed",
    "total",
    "resolved",
    "reward",
    "seconds",
    "assertions",
    "error",
    "verifier_tries",
)


# --------------------------------------------------------------------------- one task


def run_task(
    task: Task | str | Path,
    agent: str = "oracle",
    backend: str = "bwrap",
    reward: RewardSpec | None = None,
    cache_dir: Path | None = None,
    limits: Limits | None = None,
    network: str = "never",
) -> dict[str, Any]:
    """One task end to end in a fresh sandbox; the JSON row (never raises for a broken task)."""
    if agent not in AGENTS:
        raise ValueError(f"agent must be one of {', '.join(AGENTS)}, got {agent!r}")
    reward = reward or RewardSpec()
    t0 = time.monotonic()
    name = task.id if isinstance(task, Task) else Path(task).name
    result, error, tries = VerifierResult(), None, 0
    try:
        if not isinstance(task, Task):
            task = load_task(task)
        with open_task_sandbox(task, backend, cache_dir, limits, network) as sb:
            solution_error = run_solution(task, sb) if agent == "oracle" else None
            result, tries, _, _ = score_retrying(task, sb)
        error = result.error or (f"tampered: {result.tampered}" if result.tampered else None)
        if solution_error and (error or not result.resolved or "timed out" in solution_error):
            error = solution_error + (f"; {error}" if error else "")
    except TaskError as e:
        problems = check_task(task) if not isinstance(task, Task) else []
        error = "task does not load: " + ("; ".join(map(str, problems)) or str(e))
    except Exception as e:  # one broken task must not stop the others
        error = f"{type(e).__name__}: {e}"
    return {
        "task": name,
        "agent": agent,
        "passed": result.passed,
        "total": result.total,
        "resolved": result.resolved,
        "reward": reward.score(result.passed, result.total) if result.total else 0.0,
        "seconds": round(time.monotonic() - t0, 3),
        "assertions": [{"name": a.name, "outcome": a.outcome} for a in result.assertions],
        "error": error,
        "verifier_tries": tries,  # 2: the first run erred (t1.verify.verifier.score_retrying)
    }


# --------------------------------------------------------------------------- command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dirs", nargs="+", metavar="TASK_DIR", help="task directory or directory of tasks"
    )
    parser.add_argument(
        "--agent", choices=AGENTS, default="oracle", help="reference solution or nothing"
    )
    parser.add_argument(
        "--sandbox", choices=("bwrap", "apptainer"), default="bwrap", help="sandbox backend"
    )
    parser.add_argument("--jobs", type=int, default=1, help="tasks run in parallel")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the rows as a JSON list")
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="campaign config (reward kind/scale)"
    )


def main(args: argparse.Namespace) -> int:
    paths = find_tasks(args.dirs)
    if not paths:
        print("t1 oracle: no task directories found", file=sys.stderr)
        return 2
    reward, cache_dir, network = RewardSpec(), None, "never"
    if args.config is not None:
        from t1.config import load_config

        cfg = load_config(args.config)
        # reward.scale 0 means "the pool's largest count", which a run over task dirs has not
        # got: the table then scores passed / 10 (the reward column is for reading only)
        scale = cfg.reward.scale if cfg.reward.scale > 0 else RewardSpec().scale
        reward = RewardSpec(kind=cfg.reward.kind, scale=scale, subtract_noop=False)
        cache_dir = Path(cfg.tasks.env_cache).expanduser()
        network = cfg.sandbox.network
    rows = run_many(paths, args.agent, args.sandbox, max(1, args.jobs), reward, cache_dir, network)
    print(format_table(rows))
    if args.json is not None:
        rows_out = [{k: r[k] for k in ROW_KEYS} for r in rows]  # a list: readers expect one
        write_json_atomic(args.json, rows_out, indent=2, schema_version=None, status=None)
    return 1 if any(r["error"] for r in rows) else 0


def run_many(
    paths: list[Path],
    agent: str,
    backend: str,
    jobs: int,
    reward: RewardSpec,
    cache_dir: Path | None = None,
    network: str = "never",
) -> list[dict]:
    """Run every task (in parallel up to `jobs`), rows in the order of `paths`."""
    rows: dict[int, dict] = {}
    label = "oracle" if agent == "oracle" else f"oracle-{agent}"
    bar = Progress(len(paths), label)  # t1.progress: an ETA; plain log lines off a terminal
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {
            pool.submit(run_task, p, agent, backend, reward, cache_dir, None, network): i
            for i, p in enumerate(paths)
        }
        for fut in as_completed(futures):
            row = fut.result()
            rows[futures[fut]] = row
            mark = "ok" if row["resolved"] else ("ERROR" if row["error"] else "unresolved")
            bar.advance(note=f"{row['task']} {mark} ({row['seconds']:.1f} s)")
    bar.close()
    return [rows[i] for i in range(len(paths))]


def format_table(rows: list[dict]) -> str:
    width = max([len("task"), *(len(r["task"]) for r in rows)])
    lines = [
        f"{'task':<{width}}  {'passed/total':>12}  {'resolved':<8}  {'reward':>7}  {'seconds':>8}  error"
    ]
    for r in rows:
        err = (r["error"] or "").replace("\n", " ")
        lines.append(
            f"{r['task']:<{width}}  {str(r['passed']) + '/' + str(r['total']):>12}  "
            f"{'yes' if r['resolved'] else 'no':<8}  {r['reward']:>7.3f}  {r['seconds']:>8.1f}  "
            f"{err[:160] + ('...' if len(err) > 160 else '')}"
        )
    resolved = sum(r["resolved"] for r in rows)
    errors = sum(bool(r["error"]) for r in rows)
    lines.append(f"{resolved} of {len(rows)} resolved, {errors} with errors")
    return "\n".join(lines)

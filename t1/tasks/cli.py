"""`t1 tasks check [--offline] DIR...`: report every problem of each task directory, with file and field.

    t1 tasks check workflow/tasks             exit 0: every task loads
    t1 tasks check tests/data/broken-tasks    one line per problem, exit 1
    t1 tasks check --offline /data/tb2        + ready / NOT READY per task (t1/tasks/ready.py):
                                              each missing item, its source line and the
                                              `t1 provision` line that fixes it

Each DIR is a task directory or a directory of tasks (see `t1.tasks.load.find_tasks`).
Each loadable task whose tests import code the agent can write (t1.tasks.agent_imports:
`sys.path.insert(0, "/app")` then imports, or modules its solution provides; such verifiers
trust the agent's answers, t1.synth.hacks checks them) gets a line `  imports agent code: ...`,
and the count closes the output: `N of M loadable tasks' tests import agent-writable code`.
`--offline` checks against the provision cache (`--provision DIR`, default $T1_PROVISION or
~/.cache/t1/provision) under `--network never|task` (the config's sandbox.network); `--json
FILE` writes the rows ({task, path, ready, missing, notes}).
Exit codes: 0 no problem (and, with --offline, every task ready), 1 some task has a problem or
is not ready, 2 no task found.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from t1.records import write_json_atomic
from t1.tasks.load import check_task, find_tasks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    check = sub.add_parser("check", help="report every problem of each task, with file and field")
    check.add_argument(
        "dirs", nargs="+", metavar="DIR", help="task directory or directory of tasks"
    )
    check.add_argument(
        "--offline",
        action="store_true",
        help="also say per task whether it can run offline with the provision cache",
    )
    check.add_argument("--provision", type=Path, default=None, help="provision cache dir")
    check.add_argument(
        "--network",
        choices=("never", "task"),
        default="never",
        help="sandbox.network: `task` gives tasks with allow_internet a network",
    )
    check.add_argument("--json", type=Path, default=None, help="write the readiness rows")


def main(args: argparse.Namespace) -> int:
    if args.action != "check":  # argparse enforces the choice; kept for clarity
        return 2
    tasks = find_tasks(args.dirs)
    if not tasks:
        print("t1 tasks check: no task directories found", file=sys.stderr)
        return 2
    bad = importing = 0
    for path in tasks:
        problems = check_task(path)
        if problems:
            bad += 1
            print(f"FAIL {path} ({len(problems)} problem{'s' if len(problems) > 1 else ''})")
            for p in problems:
                print(f"  {p}")
            continue
        if not args.offline:
            print(f"ok   {path}")
        line = _agent_imports_line(path)
        if line:
            importing += 1
            print(line)
    print(f"{importing} of {len(tasks) - bad} loadable tasks' tests import agent-writable code")
    print(f"{len(tasks) - bad} of {len(tasks)} tasks ok", file=sys.stderr)
    if not args.offline:
        return 1 if bad else 0
    from t1.tasks.ready import check_dirs, describe

    rows, _ = check_dirs([str(p) for p in tasks], args.provision, args.network)
    for r in rows:
        print(describe(r))
    n_ready = sum(r.ready for r in rows)
    print(f"{n_ready} of {len(rows)} loadable tasks ready offline", file=sys.stderr)
    if args.json:
        rows_out = [r.row() for r in rows]  # a list of rows, as readers expect
        write_json_atomic(args.json, rows_out, schema_version=None, status=None)
    return 1 if bad or n_ready < len(rows) else 0


def _agent_imports_line(path: Path) -> str | None:
    """`  imports agent code: calc (from /app)` for a task whose tests do, else None."""
    from t1.tasks.agent_imports import agent_imports
    from t1.tasks.load import load_task

    try:
        ai = agent_imports(load_task(path))
    except Exception:  # noqa: BLE001 - it loaded a moment ago; a race is not a problem of the task
        return None
    if not ai.writable:
        return None
    where = f" (from {', '.join(ai.dirs)})" if ai.dirs else ""
    return f"  imports agent code: {', '.join(ai.modules + ai.files)}{where}"

"""`t1 tasks check DIR...`: report every problem of each task directory, with file and field.

    t1 tasks check workflow/tasks             exit 0: every task loads
    t1 tasks check tests/data/broken-tasks    one line per problem, exit 1

Each DIR is a task directory or a directory of tasks (see `t1.tasks.load.find_tasks`).
Exit codes: 0 no problem, 1 some task has a problem, 2 no task found.
"""

from __future__ import annotations

import argparse
import sys

from t1.tasks.load import check_task, find_tasks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    check = sub.add_parser("check", help="report every problem of each task, with file and field")
    check.add_argument(
        "dirs", nargs="+", metavar="DIR", help="task directory or directory of tasks"
    )


def main(args: argparse.Namespace) -> int:
    if args.action != "check":  # argparse enforces the choice; kept for clarity
        return 2
    tasks = find_tasks(args.dirs)
    if not tasks:
        print("t1 tasks check: no task directories found", file=sys.stderr)
        return 2
    bad = 0
    for path in tasks:
        problems = check_task(path)
        if problems:
            bad += 1
            print(f"FAIL {path} ({len(problems)} problem{'s' if len(problems) > 1 else ''})")
            for p in problems:
                print(f"  {p}")
        else:
            print(f"ok   {path}")
    print(f"{len(tasks) - bad} of {len(tasks)} tasks ok", file=sys.stderr)
    return 1 if bad else 0

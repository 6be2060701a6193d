"""The "before" column of LOG.md's adversarial table: every task here, verified the old way.

    .venv/bin/python tests/data/attacks/measure_legacy.py [--json FILE]

The old way = the task's script run in the agent's own shell (t1.verify.in_shell._score_in_shell,
still the path of backends without a compartment), reward passed / 10 unclipped.
"""

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from t1.tasks import load_task
from t1.tasks.env import open_task_sandbox, run_solution
from t1.verify.in_shell import _score_in_shell

HERE = Path(__file__).resolve().parent


def one(path: Path) -> dict:
    task = load_task(path)
    with open_task_sandbox(task) as sb:
        solution_error = run_solution(task, sb)
        r = _score_in_shell(task, sb)
    return {"task": path.name, "passed": r.passed, "total": r.total, "reward": r.passed / 10,
            "source": r.source, "error": r.error or solution_error}  # fmt: skip


if __name__ == "__main__":
    with ThreadPoolExecutor(2) as ex:
        rows = list(ex.map(one, sorted(p for p in HERE.iterdir() if p.is_dir())))
    for r in rows:
        print(
            f"{r['task']:<26} {r['passed']:>4}/{r['total']:<4} {r['reward']:>7.3f}  {r['source']:<11} {(r['error'] or '')[:80]}"
        )
    if "--json" in sys.argv:
        Path(sys.argv[sys.argv.index("--json") + 1]).write_text(json.dumps(rows, indent=1) + "\n")

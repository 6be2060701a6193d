"""`t1 bench verifier`: verifier seconds per task with the proxy vs without, side by side.

    t1 bench verifier [--tasks workflow/tasks] [--n 3] [--json FILE]

Per seed task: one sandbox, its reference solution run once, then the hardened verifier
(t1.verify.verifier.score_in_sandbox) n times with the agent-code proxy on and n times with it
off (t1.verify.hardened.PROXY, the harness's --no-proxy: the agent's modules imported inside
pytest, as before the proxy), interleaved. Reports the median verifier seconds of each, their
ratio, and passed/total of each run (the proxy must not change outcomes). Prints one JSON
object (and writes it to --json FILE); timings depend on load, the JSON carries the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

from t1.records import write_json_atomic


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", type=Path, default=Path("workflow/tasks"),
                        help="a task dir or a dir of tasks (default: the seed tasks)")  # fmt: skip
    parser.add_argument("--n", type=int, default=3, help="verifier runs per setting and task")
    parser.add_argument("--json", type=Path, default=None, help="also write the JSON here")


def bench_task(task, n: int) -> dict:
    from t1.tasks.env import open_task_sandbox, run_solution
    from t1.verify import hardened
    from t1.verify.verifier import score_in_sandbox

    runs: dict[str, list[dict]] = {"proxy": [], "no_proxy": []}
    with open_task_sandbox(task) as sb:
        solution_error = run_solution(task, sb)
        for _ in range(n):
            for setting in ("proxy", "no_proxy"):
                hardened.PROXY = setting == "proxy"
                try:
                    r = score_in_sandbox(task, sb)
                finally:
                    hardened.PROXY = True
                runs[setting].append({"seconds": round(r.seconds, 3), "passed": r.passed,
                                      "total": r.total, "error": r.error, "tampered": r.tampered})  # fmt: skip
    out: dict = {"solution_error": solution_error}
    for setting, rs in runs.items():
        out[setting] = {
            "median_s": round(statistics.median(r["seconds"] for r in rs), 3),
            "runs": rs,
        }
    out["ratio"] = round(out["proxy"]["median_s"] / max(out["no_proxy"]["median_s"], 1e-9), 3)
    return out


def main(args: argparse.Namespace) -> int:
    from t1.tasks import find_tasks, load_task

    load0 = os.getloadavg()
    tasks = [load_task(p) for p in find_tasks([args.tasks])]
    result: dict = {"bench": "verifier", "n": args.n, "tasks": {}}
    for task in tasks:
        result["tasks"][task.id] = bench_task(task, args.n)
    per = result["tasks"].values()
    result["median_proxy_s"] = round(statistics.median(t["proxy"]["median_s"] for t in per), 3)
    result["median_no_proxy_s"] = round(
        statistics.median(t["no_proxy"]["median_s"] for t in per), 3
    )
    result["loadavg"] = {"start": load0, "end": os.getloadavg()}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        write_json_atomic(args.json, result)
    return 0

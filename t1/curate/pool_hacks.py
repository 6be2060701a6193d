"""`t1 pool`'s verifier checks: which kept tasks' tests import agent-writable code, and which
verifiers a do-nothing hack fools (t1.synth.hacks), for the manifest.

    annotate(entries, run=True, noops=noop_rows, jobs=2)   # sets e["imports"], e["hacks"]
    fields(entry) -> the manifest keys of one task; summary(tasks) -> counts and the list

The static part (t1.tasks.agent_imports) runs for every kept task; the hacks run (fresh
sandboxes, three per task) only where validation runs (`--validated`, unless `--no-hack-check`)
and only for the tasks whose tests import agent-writable code. A hackable task stays in the
pool; it is listed (manifest `hackable`, `t1 report`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def annotate(
    entries: list[dict[str, Any]],
    run: bool,
    noops: dict[str, dict[str, Any]],
    jobs: int = 1,
    backend: str = "bwrap",
    cache_dir: Path | None = None,
    check=None,  # noqa: ANN001 - t1.synth.hacks.check_hacks's signature (tests inject one)
) -> None:
    """Set `imports` (the static analysis' row, or None: imports nothing the agent writes) and
    `hacks` (check_hacks' record, or None: not checked) on each entry (with its `dir`)."""
    from t1.tasks import load_task
    from t1.tasks.agent_imports import agent_imports

    todo = []
    for e in entries:
        e["imports"], e["hacks"] = None, None
        try:
            task = load_task(e["dir"])
        except Exception:  # noqa: BLE001 - a task that does not load was left out before
            continue
        ai = agent_imports(task)
        if ai.writable:
            e["imports"] = ai.row()
            if run:
                todo.append((e, task))
    if not todo:
        return
    if check is None:
        from functools import partial

        from t1.synth.hacks import check_hacks
        from t1.synth.validate import run_state

        check = partial(check_hacks, runner=run_state)

    def one(item):
        e, task = item
        n = noops.get(e["id"])
        noop = (int(n["passed"]), int(n["total"])) if n and n.get("total") else None
        try:
            return check(task, noop, backend, cache_dir)
        except Exception as ex:  # noqa: BLE001 - recorded, the pool is still built
            return {"applicable": True, "hackable": [], "error": f"{type(ex).__name__}: {ex}"}

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for (e, _), rec in zip(todo, pool.map(one, todo), strict=True):
            e["hacks"] = rec


def fields(e: dict[str, Any]) -> dict[str, Any]:
    """The manifest keys of one task: imports_agent_code, agent_imports, hackable (None: not
    checked; [] none), hack_scores."""
    h = e.get("hacks")
    return {
        "imports_agent_code": e.get("imports") is not None,
        "agent_imports": e.get("imports"),
        "hackable": None if h is None else list(h.get("hackable") or []),
        "hack_scores": None
        if h is None
        else {"noop": h.get("noop_score"), **(h.get("scores") or {})} or None,
    }


def summary(tasks: list[dict[str, Any]]) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """(counts: imports_agent_code, hack_checked, hackable; the hackable tasks' list)."""
    listed = [
        {"id": t["id"], "path": t["path"], "hacks": t["hackable"], "scores": t["hack_scores"]}
        for t in tasks
        if t.get("hackable")
    ]
    counts = {
        "imports_agent_code": sum(bool(t.get("imports_agent_code")) for t in tasks),
        "hack_checked": sum(t.get("hackable") is not None for t in tasks),
        "hackable": len(listed),
    }
    return counts, listed

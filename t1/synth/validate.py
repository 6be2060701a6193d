"""Validate synthesized tasks in fresh sandboxes, in parallel (local processes or Slurm arrays).

    rows = validate_many([task_dir, ...], jobs=2)                 # local worker processes
    rows = validate_many(dirs, jobs=8, executor="slurm", folder=out / "submitit")

One task, three fresh sandboxes, one verifier run each (t1.tasks.env / t1.verify.verifier, the same
path `t1 oracle` takes):
1. reference: the full solution, then the verifier: every assertion must pass;
2. before: the solution of the state before the last extension (the parent's steps only, in
   the child's environment), then the verifier: every NEW assertion must fail;
3. no-op: nothing, then the verifier: its score is recorded (a task the no-op resolves is
   rejected). For a seed (no parent) the "before" state is the no-op state: one run serves both.
4. hacks (t1.synth.hacks), only when the tests import code the agent can write
   (t1.tasks.agent_imports): an always-equal, an exit-0 and a pytest-patching module planted
   where the tests import from, one fresh sandbox each; a verifier that scores any of them
   above the no-op is rejected (`hacks` in the row says which and the scores).

The row (a dict, JSON-ready) says `status` accepted | rejected with `reasons`, and carries the
per-state outcomes, the no-op score, the metrics and the seconds. Nothing here raises for a
bad task: every problem becomes a reason.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1


ORACLE = "oracle"  # _run_state: the task's own solution/solve.sh, as `t1 oracle` runs it


# A digest of the workdir after the solution: file contents, kinds, modes and link targets;
# .git, __pycache__, *.pyc, *.log and *.pid are left out (timestamps and pids, not results).
DIGEST_CMD = (
    "cd {wd} && {{ find . \\( -name .git -o -name __pycache__ \\) -prune -o "
    "\\( ! -name '*.pyc' ! -name '*.log' ! -name '*.pid' \\) -printf '%y %m %p %l\\n' | LC_ALL=C sort; "
    "find . \\( -name .git -o -name __pycache__ \\) -prune -o -type f ! -name '*.pyc' ! -name '*.log' "
    "! -name '*.pid' -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum; }} | sha256sum | cut -c1-16"
)


def run_state(
    task,
    script: str | None,
    backend: str = "bwrap",
    cache_dir: Path | None = None,
    agent_lines: tuple[str, ...] = (),
    digest: bool = False,
) -> dict[str, Any]:
    """One fresh sandbox: `script` (ORACLE, bash text, or None = nothing), then `agent_lines`
    typed into the persistent shell (so `export`s persist, as an agent's would), optionally
    the workdir digest, then the task's verifier."""
    from t1.tasks.env import open_task_sandbox, run_solution
    from t1.verify.verifier import score_in_sandbox

    t0 = time.monotonic()
    error = None
    out: dict[str, Any] = {}
    with open_task_sandbox(task, backend, cache_dir) as sb:
        if script == ORACLE:
            error = run_solution(task, sb)
        elif script is not None:
            with tempfile.TemporaryDirectory(prefix="t1-synth-") as tmp:
                p = Path(tmp) / "before.sh"
                p.write_text(script)
                sb.put(p, "/tmp/t1-before/solve.sh")
            r = sb.exec(
                f"cd {task.workdir} && bash /tmp/t1-before/solve.sh", timeout=task.agent_timeout_s
            )
            if r.timed_out or r.exit_code != 0:
                error = f"solution exited {r.exit_code}: {r.output.strip()[-300:]}"
        for line in agent_lines:
            sb.exec(line, timeout=60)
        if digest:
            r = sb.exec(DIGEST_CMD.format(wd=task.workdir), timeout=120)
            out["digest"] = r.output.strip()[-16:] if r.exit_code == 0 else None
        res = score_in_sandbox(task, sb)
    out.update(
        {
            "outcomes": {a.name: a.outcome for a in res.assertions},
            "passed": res.passed,
            "total": res.total,
            "source": res.source,
            "error": res.error or error,
            "seconds": round(time.monotonic() - t0, 3),
        }
    )
    if res.source != "junit":  # no per-assertion outcomes: keep what the verifier printed
        out["output_tail"] = res.output[-1500:]
    return out


def _passing(outcomes: dict[str, str]) -> set[str]:
    from t1.verify.outcomes import PASSING

    return {n for n, o in outcomes.items() if o in PASSING}


def validate_task(
    task_dir: str | Path, backend: str = "bwrap", cache_dir: str | Path | None = None
) -> dict[str, Any]:
    """Validate one rendered task directory; the row (never raises)."""
    from t1.synth.draft import load_draft, metrics
    from t1.tasks import load_task

    t0 = time.monotonic()
    task_dir = Path(task_dir)
    cache = Path(cache_dir).expanduser() if cache_dir else None
    row: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "task": task_dir.name,
        "path": str(task_dir),
    }
    reasons: list[str] = []
    try:
        d = load_draft(task_dir)
        task = load_task(task_dir)
        new = d.new_assertions
        row["metrics"] = metrics(d)
        row["new_assertions"] = new
        full = run_state(task, ORACLE, backend, cache, digest=True)
        row["reference"] = full
        if full["error"]:
            reasons.append(f"reference: {full['error']}")
        failing = sorted(set(full["outcomes"]) - _passing(full["outcomes"]))
        if failing:
            reasons.append(f"reference fails {len(failing)} assertion(s): {', '.join(failing[:5])}")
        missing = [n for n in new if n not in full["outcomes"]]
        if missing:
            reasons.append(
                f"new assertions absent from the verifier's outcomes: {', '.join(missing[:5])}"
            )
        if not reasons:
            noop = run_state(task, None, backend, cache)
            seedlike = not new or (d.new_from == 0 and d.base is None)
            before = noop if seedlike else run_state(task, d.parent_solution(), backend, cache)
            row["before"] = {k: v for k, v in before.items() if k != "outcomes"}
            row["noop"] = {k: v for k, v in noop.items() if k != "outcomes"}
            row["noop_score"] = noop["passed"] / noop["total"] if noop["total"] else 0.0
            if before is not noop and before["error"] and not before["total"]:
                reasons.append(f"state before the extension: {before['error']}")
            leaked = [n for n in new if n in _passing(before["outcomes"])]
            if leaked:
                reasons.append(
                    f"{len(leaked)} new assertion(s) already pass before the extension: {', '.join(leaked[:5])}"
                )
            if noop["total"] and noop["passed"] == noop["total"]:
                reasons.append("the no-op resolves the task")
        if not reasons:
            from t1.synth.hacks import check_hacks, describe

            hk = check_hacks(
                task, (noop["passed"], noop["total"]), backend, cache, runner=run_state
            )
            row["hacks"] = hk
            if hk["hackable"]:
                reasons.append(describe(hk))
    except Exception as e:  # a broken candidate is a reason, never a crash of the run
        reasons.append(f"{type(e).__name__}: {e}")
        row["traceback"] = traceback.format_exc()[-2000:]
    row["status"] = "rejected" if reasons else "accepted"
    row["reasons"] = reasons
    row["seconds"] = round(time.monotonic() - t0, 3)
    return row


def parallel_map(
    fn: Callable[..., dict[str, Any]],
    items: list[tuple[Any, ...]],
    jobs: int,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """`fn(*item)` for each item in `jobs` worker processes; rows in item order. A worker
    that dies yields a rejected row naming the item (items[i][0] is its task directory)."""
    rows: list[dict[str, Any] | None] = [None] * len(items)
    if jobs <= 1:
        for i, it in enumerate(items):
            rows[i] = fn(*it)
            if on_row:
                on_row(rows[i])
        return rows  # type: ignore[return-value]
    ctx = multiprocessing.get_context("forkserver")
    with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futs = {pool.submit(fn, *it): i for i, it in enumerate(items)}
        for fut in cf.as_completed(futs):
            i = futs[fut]
            try:
                rows[i] = fut.result()
            except Exception as e:  # a worker died (OOM, signal): the candidate is rejected
                rows[i] = _dead_worker_row(str(items[i][0]), e)
            if on_row:
                on_row(rows[i])
    return rows  # type: ignore[return-value]


def validate_many(
    dirs: Iterable[str | Path],
    jobs: int = 1,
    backend: str = "bwrap",
    cache_dir: str | Path | None = None,
    executor: str = "local",
    folder: str | Path | None = None,
    slurm: dict[str, Any] | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Validate task directories; rows in the order given. `on_row` sees each as it completes.

    executor "local": `jobs` worker processes on this machine. "slurm": one Slurm array
    through submitit (at most `jobs` array tasks at once; `slurm` holds extra
    `update_parameters` such as slurm_partition), logs and pickles under `folder`.
    """
    items = [(str(d), backend, str(cache_dir) if cache_dir else None) for d in dirs]
    if not items:
        return []
    if executor == "slurm":
        return _validate_slurm(items, jobs, folder, slurm or {}, on_row)
    if executor != "local":
        raise ValueError(f"executor must be local or slurm, got {executor!r}")
    return parallel_map(validate_task, items, jobs, on_row)


def _dead_worker_row(task_dir: str, e: BaseException) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "task": Path(task_dir).name,
        "path": task_dir,
        "status": "rejected",
        "reasons": [f"validation worker failed: {type(e).__name__}: {e}"],
        "seconds": 0.0,
    }


def _validate_slurm(
    items: list[tuple[str, str, str | None]],
    jobs: int,
    folder: str | Path | None,
    params: dict[str, Any],
    on_row: Callable[[dict[str, Any]], None] | None,
) -> list[dict[str, Any]]:
    import submitit

    if folder is None:
        raise ValueError("the slurm executor needs a folder for submitit's logs")
    ex = submitit.AutoExecutor(folder=str(folder), cluster="slurm")
    ex.update_parameters(
        slurm_array_parallelism=max(1, jobs),
        timeout_min=int(params.pop("timeout_min", 30)),
        cpus_per_task=int(params.pop("cpus_per_task", 1)),
        mem_gb=float(params.pop("mem_gb", 2)),
        name="t1-synth-validate",
        **params,
    )
    paths, backends, caches = zip(*items, strict=True)
    submitted = ex.map_array(validate_task, list(paths), list(backends), list(caches))
    rows = []
    for job, path in zip(submitted, paths, strict=True):
        try:
            row = job.result()
        except Exception as e:  # a failed array task: reject with its reason, keep going
            row = _dead_worker_row(path, e)
        rows.append(row)
        if on_row:
            on_row(row)
    return rows

"""`t1 pool`: rank audited tasks, remove near-duplicates, and materialize a pool with a manifest.

    t1 pool --in results/synth/tasks --out results/pool              # audit.json found beside
    t1 pool --in A B --audit A/audit.json --audit B/audit.json --out POOL --threshold 0.9

Scores come from `t1 audit` reports (`--audit FILE`, else `<in>/audit.json` or
`<in>/../audit.json`): rejected tasks are left out, borderline ones only with
`--include-borderline`, and so are tasks a `--validated FILE` (`t1 oracle --json`) shows
unresolved or in error; tasks without an audit row are ranked after the audited ones by
difficulty (and counted in the manifest as unaudited). Near-duplicates (MinHash Jaccard >=
threshold over 5-word shingles of instruction, solution and tests; t1.synth.dedup) are removed,
keeping the better-ranked task. The pool is written in quality-rank order
(`tasks/00000-<id>/`, repaired instructions applied) with `manifest.json`: schema_version,
status, created, threshold, counts, `binary_outcomes` (every verifier gives only a reward
file: a pool for critic warm-up), and per task rank, id, path, score, category, difficulty,
assertions, binary_only, noop_passed, noop_total; plus the removed duplicates. `assertions` is
the count the oracle measured (`--validated`) when there is one; `noop_*` are what the task
scores with no agent action (`--noop FILE`: `t1 oracle --agent noop --json` rows; null when
not measured), which `reward.subtract_noop` subtracts (t1.verify.reward); `assertion_names` the
names of the oracle's run (`--validated`; null without), against which t1.verify.verifier checks
every later report (other names or count: `tampered`).
Verifier checks (t1.curate.pool_hacks): per task `imports_agent_code` (its tests import code the
agent can write: t1.tasks.agent_imports) with `agent_imports`, and, where validation runs
(`--validated`, unless `--no-hack-check`; fresh sandboxes, `--hack-jobs` at once) for those
tasks, `hackable` (the do-nothing hacks of t1.synth.hacks that score above the no-op; null: not
checked) and `hack_scores`; counts `imports_agent_code`, `hack_checked`, `hackable`, and the
list `hackable` (hackable tasks stay in the pool, listed; `t1 report` shows them).
Exit 0 on success, 1 when no task survives, 2 on bad input.

This is the builder, which needs the audit (t1.curate.audit) and the synthesizer's MinHash
(t1.synth.dedup). Reading a pool - `PoolLoader` and the one epoch order training uses - is
t1/tasks/pool.py, which imports neither, so the rollout does not either.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from t1.records import write_json_atomic
from t1.store.lock import LockHeld, hold_output
from t1.tasks.pool import MANIFEST, SCHEMA_VERSION


def _audit_rows(dirs: list[Path], audits: list[Path]) -> dict[str, dict[str, Any]]:
    """Audit rows keyed by resolved task path (and by task name as a fallback)."""
    files = list(audits)
    for d in dirs:
        for cand in (d / "audit.json", d.parent / "audit.json"):
            if cand.is_file() and cand not in files:
                files.append(cand)
                break
    rows: dict[str, dict[str, Any]] = {}
    for f in files:
        try:
            report = json.loads(Path(f).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{f}: not an audit report: {e}") from None
        if report.get("schema_version") != 1 or "tasks" not in report:
            raise ValueError(f"{f}: not an audit report (schema_version 1 with tasks)")
        for r in report["tasks"]:
            rows[str(Path(r["path"]).resolve())] = r
            rows.setdefault(f"name:{r['task']}", r)
    return rows


def _static_binary(task_dir: Path) -> bool:
    """No per-assertion outcomes: the verifier does not run pytest over a tests file."""
    sh = task_dir / "tests" / "test.sh"
    run = task_dir / "run-tests.sh"
    text = (sh.read_text(errors="replace") if sh.is_file() else "") + (
        run.read_text(errors="replace") if run.is_file() else ""
    )
    has_py = any((task_dir / "tests").glob("test_*.py")) if (task_dir / "tests").is_dir() else False
    return not ("pytest" in text and has_py)


def _validated(files: list[Path]) -> dict[str, dict[str, Any]]:
    """Rows of `t1 oracle --json` files keyed by task name."""
    out: dict[str, dict[str, Any]] = {}
    for f in files:
        try:
            rows = json.loads(Path(f).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{f}: not a t1 oracle --json file: {e}") from None
        if not isinstance(rows, list) or not all(isinstance(r, dict) and "task" in r for r in rows):
            raise ValueError(f"{f}: not a t1 oracle --json file (a list of rows with 'task')")
        out.update({r["task"]: r for r in rows})
    return out


def build_pool(
    in_dirs: list[Path],
    out: Path,
    audits: list[Path] = (),
    threshold: float = 0.9,
    include_borderline: bool = False,
    validated: list[Path] = (),
    noop: list[Path] = (),
    offline: bool = False,
    provision_dir: Path | None = None,
    network: str = "never",
    hack_check: bool | None = None,
    hack_jobs: int = 1,
    backend: str = "bwrap",
    cache_dir: Path | None = None,
    hack_runner=None,  # noqa: ANN001 - t1.synth.hacks.check_hacks (tests inject one)
) -> dict[str, Any]:
    """Rank, deduplicate and materialize; returns the manifest (also written to out/).

    hack_check: run the hack solutions (None: when `validated` is given); see the docstring.

    offline: leave out the tasks that cannot run offline with the provision cache at
    `provision_dir` under sandbox.network `network` (t1.tasks.ready), before anything else
    judges them: they are counted and listed in the manifest's `offline`, never scored.
    """
    from t1.curate.audit import difficulty_of
    from t1.synth.dedup import minhash, shingles, similarity, task_text
    from t1.tasks import check_task, find_tasks

    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out}: exists and is not empty; choose a new --out")
    dirs = [p.resolve() for p in find_tasks(in_dirs)]
    rows = _audit_rows([Path(d) for d in in_dirs], list(audits))
    oracle = _validated(list(validated))
    noops = _validated(list(noop))
    entries, skipped = [], {"rejected": 0, "borderline": 0, "oracle": 0, "invalid": 0}
    not_ready, checked = [], 0
    prov = None
    if offline:
        from t1.sandbox.provision import locate
        from t1.tasks import load_task
        from t1.tasks.ready import readiness

        prov = locate(provision_dir)
    for d in dirs:
        if check_task(d):  # not a loadable task: never materialize it
            skipped["invalid"] += 1
            continue
        if offline:
            checked += 1
            ready = readiness(load_task(d), prov, network)
            if not ready.ready:
                not_ready.append(ready)
                continue
        v = oracle.get(d.name)
        if v is not None and (not v.get("resolved") or v.get("error")):
            skipped["oracle"] += 1
            continue
        r = rows.get(str(d)) or rows.get(f"name:{d.name}")
        if r is not None and r["stage"] == "rejected":
            skipped["rejected"] += 1
            continue
        if r is not None and r["stage"] == "borderline" and not include_borderline:
            skipped["borderline"] += 1
            continue
        assertions = (r or {}).get("assertions") or (v or {}).get("total") or _count_tests(d)
        n = noops.get(d.name)
        n = n if n is not None and not n.get("error") and n.get("total") else None
        entries.append(
            {
                "dir": d,
                "id": d.name,
                "score": r["score"] if r else None,
                "audited": r is not None,
                "category": (r or {}).get("category") or _category(d),
                "difficulty": (r or {}).get("difficulty", difficulty_of(d, assertions)),
                "assertions": assertions,
                "binary_only": bool(r["binary_only"]) if r else _static_binary(d),
                "noop": None if n is None else (int(n["passed"]), int(n["total"])),
                # the reference run's assertion names: t1.verify.verifier marks other names `tampered`
                "names": sorted(x["name"] for x in (v or {}).get("assertions") or []) or None,
                "instruction": (r or {}).get("repaired_instruction")
                if (r or {}).get("repaired")
                else None,
            }
        )
    # quality rank: audited by score, then unaudited by difficulty; ties by id (stable)
    entries.sort(key=lambda e: (not e["audited"], -(e["score"] or 0.0), -e["difficulty"], e["id"]))
    sigs = [minhash(shingles(task_text(e["dir"]))) for e in entries]
    kept: list[int] = []
    removed = []
    bands: dict[tuple[int, tuple[int, ...]], list[int]] = {}
    for i, sig in enumerate(sigs):
        cands = {j for b in range(16) for j in bands.get((b, tuple(sig[b * 4 : b * 4 + 4])), [])}
        best = max(((similarity(sig, sigs[j]), j) for j in cands), default=(0.0, -1))
        if best[0] >= threshold:
            removed.append(
                {
                    "id": entries[i]["id"],
                    "duplicate_of": entries[best[1]]["id"],
                    "similarity": round(best[0], 4),
                }
            )
            continue
        kept.append(i)
        for b in range(16):
            bands.setdefault((b, tuple(sig[b * 4 : b * 4 + 4])), []).append(i)
    from t1.curate.pool_hacks import annotate, fields, summary

    run_hacks = bool(validated) if hack_check is None else hack_check
    annotate([entries[i] for i in kept], run_hacks, noops, hack_jobs, backend, cache_dir,
             hack_runner)  # fmt: skip
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "tasks").mkdir(parents=True)
    tasks = []
    for rank, i in enumerate(kept):
        e = entries[i]
        rel = f"tasks/{rank:05d}-{e['id']}"
        shutil.copytree(e["dir"], tmp / rel, symlinks=True)
        if e["instruction"]:
            (tmp / rel / "instruction.md").write_text(e["instruction"])
        tasks.append(
            {
                "rank": rank,
                "id": e["id"],
                "path": rel,
                "score": e["score"],
                "category": e["category"],
                "difficulty": round(e["difficulty"], 4),
                "assertions": e["assertions"],
                "binary_only": e["binary_only"],
                "noop_passed": None if e["noop"] is None else e["noop"][0],
                "noop_total": None if e["noop"] is None else e["noop"][1],
                "assertion_names": e["names"],
                "audited": e["audited"],
                "source": str(e["dir"]),
                **fields(e),
            }
        )
    hack_counts, hackable = summary(tasks)
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "status": "complete",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "inputs": [str(Path(p).resolve()) for p in in_dirs],
        "threshold": threshold,
        "binary_outcomes": bool(tasks) and all(t["binary_only"] for t in tasks),
        "counts": {
            "found": len(dirs),
            "kept": len(tasks),
            "duplicates_removed": len(removed),
            "rejected_by_audit": skipped["rejected"],
            "borderline_left_out": skipped["borderline"],
            "failed_oracle": skipped["oracle"],
            "invalid": skipped["invalid"],
            "unaudited": sum(not t["audited"] for t in tasks),
            "binary_only": sum(t["binary_only"] for t in tasks),
            **hack_counts,
        },
        "categories": _category_counts(tasks),
        "hackable": hackable,
        "tasks": tasks,
        "removed_duplicates": removed,
    }
    if offline:
        from t1.tasks.ready import manifest_record

        manifest["counts"]["not_ready_offline"] = len(not_ready)
        manifest["offline"] = manifest_record(checked, not_ready, network)
    write_json_atomic(tmp / MANIFEST, manifest)  # inside the directory renamed whole below
    if out.exists():
        out.rmdir()
    os.replace(tmp, out)
    return manifest


def _count_tests(d: Path) -> int:
    p = d / "tests" / "test_outputs.py"
    return p.read_text(errors="replace").count("\ndef test") if p.is_file() else 0


def _category(d: Path) -> str:
    try:
        from t1.tasks import load_task

        return load_task(d).category
    except Exception:  # a task that does not load keeps its place; the category is unknown
        return "unknown"


def _category_counts(tasks: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in tasks:
        out[t["category"]] = out.get(t["category"], 0) + 1
    return dict(sorted(out.items()))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--in",
        dest="inputs",
        nargs="+",
        type=Path,
        required=True,
        metavar="DIR",
        help="task directories or directories of tasks",
    )
    parser.add_argument("--out", type=Path, required=True, help="pool directory (new)")
    parser.add_argument(
        "--audit",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="t1 audit report (repeatable)",
    )
    parser.add_argument(
        "--threshold",
        type=float,
        help="near-duplicate MinHash Jaccard (default: config synth.dedup_threshold)",
    )
    parser.add_argument(
        "--include-borderline", action="store_true", help="keep tasks the audit marked borderline"
    )
    parser.add_argument(
        "--validated",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="t1 oracle --json rows: tasks it did not resolve are left out (repeatable)",
    )
    parser.add_argument(
        "--noop",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="t1 oracle --agent noop --json rows: each task's no-op score (repeatable)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        help="campaign config (synth.dedup_threshold; sandbox.provision_dir and network)",
    )
    parser.add_argument(
        "--no-offline-check",
        dest="offline",
        action="store_false",
        help="keep tasks that cannot run offline (default: leave them out, counted and listed)",
    )
    parser.add_argument(
        "--provision", type=Path, default=None, help="provision cache (default: the config's)"
    )
    parser.add_argument(
        "--no-hack-check",
        dest="hack_check",
        action="store_false",
        default=None,
        help="with --validated: do not run the do-nothing hacks (t1.synth.hacks)",
    )
    parser.add_argument("--hack-jobs", type=int, default=1, help="hack checks run at once")


def writer_lock_dir(out: str | Path) -> Path:
    """Where `t1 pool` holds its one-writer lock (t1/store/lock.py): beside the pool, since the pool
    is built aside and renamed into place whole."""
    out = Path(out)
    return out.with_name(f".{out.name}.writer")


def main(args: argparse.Namespace) -> int:
    from t1.config import Config, load_config

    cfg = load_config(args.config) if args.config else Config()
    threshold = cfg.synth.dedup_threshold if args.threshold is None else args.threshold
    try:
        hold_output(writer_lock_dir(args.out), "t1 pool")
    except LockHeld as e:
        print(f"t1 pool: {e}", file=sys.stderr)
        return 4
    try:
        m = build_pool(
            args.inputs,
            args.out,
            args.audit,
            threshold,
            args.include_borderline,
            args.validated,
            args.noop,
            offline=args.offline,
            provision_dir=args.provision
            or (
                Path(cfg.sandbox.provision_dir).expanduser() if cfg.sandbox.provision_dir else None
            ),
            network=cfg.sandbox.network,
            hack_check=args.hack_check,
            hack_jobs=max(1, args.hack_jobs),
            cache_dir=Path(cfg.tasks.env_cache).expanduser() if args.config else None,
        )
    except (FileExistsError, ValueError) as e:
        print(f"t1 pool: {e}", file=sys.stderr)
        return 2
    c = m["counts"]
    offline = f", {c['not_ready_offline']} not ready offline" if "not_ready_offline" in c else ""
    print(
        f"pool {args.out}: {c['kept']} tasks of {c['found']} ({c['duplicates_removed']} near-duplicates removed, "
        f"{c['rejected_by_audit']} rejected by the audit, {c['borderline_left_out']} borderline left out, "
        f"{c['failed_oracle']} unresolved by the oracle, {c['invalid']} not loadable, "
        f"{c['unaudited']} unaudited{offline}); "
        f"binary outcomes only: {m['binary_outcomes']}"
    )
    print(
        f"  verifiers: {c['imports_agent_code']} import agent-writable code, "
        f"{c['hack_checked']} checked against the hacks, {c['hackable']} hackable"
    )
    for h in m["hackable"]:
        print(f"  hackable: {h['id']}: {', '.join(h['hacks'])} (scores {h['scores']})")
    for r in m.get("offline", {}).get("not_ready", []):
        print(f"  not ready offline: {r['task']}: {'; '.join(r['missing'])}")
    return 0 if c["kept"] else 1

"""`t1 audit DIR`: score tasks with the paper's audit weights, select, repair instructions.

    t1 audit results/synth/tasks --json results/synth/audit.json --jobs 2
    t1 audit workflow/tasks --out results/audited        # accepted tasks copied, repaired

Weights (DESIGN §2): verifier 45%, solution 25%, instruction 20%, task value 10%.
* verifier: the reference resolves the task (a gate: without it the task is rejected); the
  no-op does not; a tampering "agent" gains nothing (it pre-places fake tests and reward
  files, drops conftest.py / pytest.ini where pytest might read them, exports PYTHONPATH,
  PYTEST_PLUGINS and PYTEST_ADDOPTS, shadows python3 / pytest / uv on PATH, and overwrites any
  test file the environment shows it); a trivial agent that only creates empty files at every
  path the task names gains nothing over the no-op.
* solution: two reference runs in fresh sandboxes give the same per-assertion outcomes (0.5)
  and the same workdir digest (0.5; t1.synth.validate.DIGEST_CMD).
* instruction: instruction-verifier alignment, the share of the salient string literals of
  the test file (paths, names, expected values; each line of a multi-line one) that the
  instruction names; values may also come from the environment's files, paths may not.
* task value: difficulty (solution lines, assertions) and novelty, 1 minus the highest
  MinHash Jaccard similarity to another task of the set (5-word shingles).

Stages: accepted (gate passed, score >= 0.8), borderline (gate passed, score >= 0.6),
rejected. The repair pass appends the missing paths and values to the instruction (nothing
else changes, so only the instruction part is re-scored) and re-stages. A task's
validation.json (t1 synth) supplies the first reference run and the no-op run unless
`--fresh`; else each task costs five sandboxes. The JSON report carries schema_version,
status, weights, thresholds, stage counts before and after repair and one row per task.
Exit 0 when at least one task is accepted, 1 otherwise, 2 when no task was found.

Where: the sandbox runs, t1/curate/audit_runs.py; the instruction-verifier alignment and the
repair, t1/curate/audit_alignment.py; the part scores and stages, t1/curate/audit_score.py.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
from pathlib import Path
from typing import Any

from t1.curate.audit_alignment import checked_literals, env_text, repaired_instruction
from t1.curate.audit_runs import audit_runs
from t1.curate.audit_score import ACCEPT, BORDERLINE, WEIGHTS, score_row
from t1.records import write_json_atomic
from t1.synth.dedup import minhash, nearest, shingles, task_text

SCHEMA_VERSION = 1


def difficulty_of(task_dir: Path, assertions: int) -> float:
    """0..1 from solution lines (log scale to 400) and assertions (log scale to 40)."""
    sol = task_dir / "solution" / "solve.sh"
    lines = len(sol.read_text(errors="replace").splitlines()) if sol.is_file() else 0
    return 0.5 * min(1.0, math.log1p(lines) / math.log1p(400)) + 0.5 * min(
        1.0, math.log1p(assertions) / math.log1p(40)
    )


def audit(
    dirs: list[Path],
    jobs: int = 1,
    backend: str = "bwrap",
    cache_dir: Path | None = None,
    fresh: bool = False,
    repair: bool = True,
) -> dict[str, Any]:
    """Audit task directories; the report (see the module docstring)."""
    from t1.synth.validate import parallel_map

    items = [(str(d), backend, str(cache_dir) if cache_dir else None, fresh) for d in dirs]
    done = [0]

    def progress(_row: dict[str, Any]) -> None:
        done[0] += 1
        print(f"\raudit: {done[0]}/{len(items)}", end="", file=sys.stderr, flush=True)

    rows = parallel_map(audit_runs, items, jobs, progress)
    print(file=sys.stderr)
    sigs = [minhash(shingles(task_text(d))) for d in dirs]
    near = nearest(sigs) if sigs else []
    out_rows = []
    for d, row, (sim, j) in zip(dirs, rows, near, strict=True):
        instruction = (
            (d / "instruction.md").read_text(errors="replace")
            if (d / "instruction.md").is_file()
            else ""
        )
        tests_src = (
            (d / "tests" / "test_outputs.py").read_text(errors="replace")
            if (d / "tests" / "test_outputs.py").is_file()
            else ""
        )
        env = env_text(d, row.get("workdir", "/app"))
        solve = d / "solution" / "solve.sh"
        solution = solve.read_text(errors="replace") if solve.is_file() else ""
        literals = checked_literals(tests_src, row.get("workdir", "/app"), solution)
        total = (row.get("runs") or {}).get("reference", {}).get("total", 0) or 0
        diff = difficulty_of(d, total)
        s = score_row(row, 1.0 - sim, instruction, literals, env, diff)
        rec = {
            "task": d.name,
            "path": str(d),
            "category": row.get("category", "unknown"),
            "assertions": total,
            "binary_only": bool(row.get("binary_only")),
            "difficulty": round(diff, 4),
            "novelty": round(1.0 - sim, 4),
            "nearest": dirs[j].name if j >= 0 else None,
            **s,
            "stage_before_repair": s["stage"],
            "score_before_repair": s["score"],
            "repaired": False,
            "runs": row.get("runs"),
        }
        if repair and s["missing"] and row.get("runs"):
            fixed = repaired_instruction(instruction, s["missing"])
            s2 = score_row(row, 1.0 - sim, fixed, literals, env, diff)
            rec.update({k: s2[k] for k in ("parts", "score", "stage", "missing")})
            rec["reasons"] = s2["reasons"]
            rec["repaired"] = True
            rec["repaired_instruction"] = fixed
        out_rows.append(rec)
    return {
        "schema_version": SCHEMA_VERSION,
        "status": "complete",
        "weights": WEIGHTS,
        "thresholds": {"accepted": ACCEPT, "borderline": BORDERLINE},
        "counts": {
            "before_repair": _counts(r["stage_before_repair"] for r in out_rows),
            "after_repair": _counts(r["stage"] for r in out_rows),
        },
        "repaired": sum(r["repaired"] for r in out_rows),
        "tasks": out_rows,
    }


def _counts(stages) -> dict[str, int]:
    out = {"accepted": 0, "borderline": 0, "rejected": 0}
    for s in stages:
        out[s] += 1
    return out


def materialize(report: dict[str, Any], out: Path) -> int:
    """Copy accepted tasks to `out` (repaired instruction.md where repaired) + audit.json."""
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    for r in report["tasks"]:
        if r["stage"] != "accepted":
            continue
        dst = out / r["task"]
        tmp = out / f".{r['task']}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(r["path"], tmp, symlinks=True)
        if r["repaired"]:
            (tmp / "instruction.md").write_text(r["repaired_instruction"])
        shutil.rmtree(dst, ignore_errors=True)
        tmp.rename(dst)
        r["path"] = str(dst)
        n += 1
    write_json_atomic(out / "audit.json", report)
    return n


def format_report(report: dict[str, Any]) -> str:
    rows = report["tasks"]
    width = max([4, *(len(r["task"]) for r in rows)])
    lines = [f"{'task':<{width}}  score  verif  solut  instr  value  stage       reasons"]
    for r in rows:
        p = r["parts"]
        lines.append(
            f"{r['task']:<{width}}  {r['score']:.3f}  {p['verifier']:.2f}   {p['solution']:.2f}   "
            f"{p['instruction']:.2f}   {p['value']:.2f}   {r['stage']:<10}  {'; '.join(r['reasons'])[:120]}"
        )
    b, a = report["counts"]["before_repair"], report["counts"]["after_repair"]
    lines.append(
        f"before repair: {b['accepted']} accepted, {b['borderline']} borderline, {b['rejected']} rejected; "
        f"after repairing {report['repaired']} instruction(s): {a['accepted']} accepted, "
        f"{a['borderline']} borderline, {a['rejected']} rejected"
    )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dirs", nargs="+", type=Path, metavar="DIR", help="task directory or directory of tasks"
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the report here")
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="copy accepted (repaired) tasks here, with audit.json",
    )
    parser.add_argument(
        "--jobs", type=int, help="tasks audited in parallel (default: config synth.workers, or 1)"
    )
    parser.add_argument(
        "--config", type=Path, help="campaign config (synth.workers, tasks.env_cache)"
    )
    parser.add_argument("--sandbox", choices=("bwrap", "apptainer"), default="bwrap")
    parser.add_argument(
        "--env-cache", type=Path, help="environment layer cache (default: t1 oracle's)"
    )
    parser.add_argument(
        "--fresh", action="store_true", help="ignore validation.json; run every check"
    )
    parser.add_argument("--no-repair", action="store_true", help="skip the instruction repair pass")


def main(args: argparse.Namespace) -> int:
    from t1.tasks import find_tasks

    dirs = [p.resolve() for p in find_tasks(args.dirs)]
    if not dirs:
        print("t1 audit: no task directories found", file=sys.stderr)
        return 2
    jobs, cache = args.jobs or 1, args.env_cache
    if args.config is not None:
        from t1.config import load_config

        cfg = load_config(args.config)
        jobs = args.jobs or cfg.synth.workers
        cache = cache or Path(cfg.tasks.env_cache).expanduser()
    report = audit(dirs, max(1, jobs), args.sandbox, cache, args.fresh, not args.no_repair)
    if args.out is not None:
        materialize(report, args.out)
    if args.json is not None:
        write_json_atomic(args.json, report)
    print(format_report(report))
    return 0 if report["counts"]["after_repair"]["accepted"] else 1

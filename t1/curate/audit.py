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
"""

from __future__ import annotations

import argparse
import ast
import base64
import json
import math
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from t1.records import write_json_atomic
from t1.synth.dedup import minhash, nearest, shingles, task_text

SCHEMA_VERSION = 1
WEIGHTS = {"verifier": 0.45, "solution": 0.25, "instruction": 0.20, "value": 0.10}
ACCEPT, BORDERLINE = 0.8, 0.6
REPAIR_HEADER = "## Checked paths and values"

_CONF = (
    "import pytest\n"
    "@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    out = yield\n"
    "    out.get_result().outcome = 'passed'\n"
)
_FAKE = "#!/bin/sh\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; exit 0\n"
_JUNIT = '<testsuite><testcase classname="test_outputs" name="test_ok"/></testsuite>'


def _write(path: str, text: str) -> str:
    """One shell line writing `text` to `path` exactly (base64: no quoting pitfalls)."""
    b64 = base64.b64encode(text.encode()).decode()
    return f"echo {b64} | base64 -d > {path} 2>/dev/null"


def tamper_lines(workdir: str, visible_tests: list[str]) -> tuple[str, ...]:
    """Agent-phase commands that try to pass the verifier without doing the task."""
    passing = "def test_ok():\n    assert True\n"
    lines = [
        "mkdir -p /tests /logs/verifier /tmp/t1evil /tmp/t1evilbin",
        _write("/tests/test.sh", _FAKE) + "; " + _write("/tests/test_outputs.py", passing),
        "echo 1 > /logs/verifier/reward.txt; " + _write("/logs/verifier/junit.xml", _JUNIT),
        _write("/tmp/t1evil/t1evil.py", _CONF),
        f"for d in {workdir} / /tmp /tests; do cp /tmp/t1evil/t1evil.py $d/conftest.py 2>/dev/null;"
        " printf '[pytest]\\naddopts = -p t1evil\\n' > $d/pytest.ini 2>/dev/null; done; true",
        _write("/tmp/t1evilbin/python3", _FAKE)
        + "; for t in python pytest uv uvx; do cp /tmp/t1evilbin/python3 /tmp/t1evilbin/$t; done;"
        " chmod +x /tmp/t1evilbin/*",
        "export PYTHONPATH=/tmp/t1evil PYTEST_PLUGINS=t1evil PYTEST_ADDOPTS='-p t1evil'"
        " PATH=/tmp/t1evilbin:$PATH",
    ]
    for p in visible_tests:  # tests the agent can see: edit them to pass
        lines.append(_write(p, passing) + "; true")
    return tuple(lines)


def trivial_lines(paths: list[str]) -> tuple[str, ...]:
    """Agent-phase commands that create empty files (directories for `x/`) at `paths`."""
    out = []
    for p in paths:
        if p.endswith("/"):
            out.append(f"mkdir -p {json.dumps(p)} 2>/dev/null; true")
        else:
            out.append(
                f'mkdir -p "$(dirname {json.dumps(p)})" && touch {json.dumps(p)} 2>/dev/null; true'
            )
    return tuple(out)


# --------------------------------------------------------------------------- static checks

# words that name tools and syntax, not task values
_GENERIC = {
    "utf-8", "ascii", "rb", "wb", "r:gz", "w:gz", "bash", "python3", "git", "log", "show",
    "cat-file", "rev-parse", "check-ignore", "HEAD", "sha256sum", "pytest", "PATH", "lambda",
    "import", "print", "True", "False", "None", "return",
}  # fmt: skip


def _is_path(s: str) -> bool:
    return " " not in s and ("/" in s or re.fullmatch(r"[\w.-]+\.[A-Za-z]\w{0,4}", s) is not None)


def verifier_literals(tests_src: str) -> list[str]:
    """String constants of the test functions and module-level assignments, minus code run by
    the tests, f-string pieces, flags, globs, URLs and generic words; multi-line strings
    become their lines."""
    try:
        tree = ast.parse(tests_src)
    except SyntaxError:
        return []
    scopes: list[ast.AST] = [
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")
    ]
    scopes += [n for n in tree.body if isinstance(n, ast.Assign | ast.AnnAssign)]
    skip: set[int] = set()
    found: list[str] = []
    for scope in scopes:
        for node in ast.walk(scope):
            if isinstance(node, ast.JoinedStr):
                skip.update(id(v) for v in node.values)
        for node in ast.walk(scope):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in skip
            ):
                found.append(node.value)
    out: list[str] = []
    for s in found:
        if any(w in s for w in ("import ", "def ", "print(", "\n    ")):
            continue  # code the test runs, not a value it checks
        for line in s.splitlines() or [s]:
            line = line.strip()
            if (
                len(line) < 3
                or line.startswith(("-", "%"))
                or line in _GENERIC
                or "*" in line
                or "://" in line
            ):
                continue
            if line not in out:
                out.append(line)
    return out


def checked_literals(tests_src: str, workdir: str, solution: str) -> list[str]:
    """What the instruction must name: every path under the workdir the tests use, and every
    other literal the tests compare that the reference solution also spells out (a value the
    agent has to know, like a commit message or a port; computed answers such as a sum are
    not in the solution, and test-internal scratch values are in neither)."""
    out = []
    for s in verifier_literals(tests_src):
        if s.startswith(workdir + "/") or s == workdir:
            out.append(s)
        elif not s.startswith("/") and re.search(rf"(?<![\w-]){re.escape(s)}(?![\w-])", solution):
            out.append(s)  # spelled out as a whole token, not inside a longer word
    return out


def alignment(instruction: str, literals: list[str], env_text: str) -> tuple[float, list[str]]:
    """(share of literals the instruction names, the missing ones). A literal the agent can
    find in its environment (a file's path or text) counts as named."""
    missing = [s for s in literals if s not in instruction and s not in env_text]
    return (1.0 - len(missing) / len(literals) if literals else 1.0), missing


def repaired_instruction(instruction: str, missing: list[str]) -> str:
    """The instruction with the missing paths and values appended (nothing else changed)."""
    lines = [f"- `{m}`" for m in missing]
    return (
        instruction.rstrip()
        + f"\n\n{REPAIR_HEADER}\n\nThe verifier checks these paths and values exactly:\n"
        + "\n".join(lines)
        + "\n"
    )


def env_text(task_dir: Path, workdir: str = "/app", cap: int = 2_000_000) -> str:
    """What the agent can read in its environment: the paths of the environment's files
    (`files/x` as `<workdir>/x`, the way t1 synth lays them out) and their text, capped."""
    out, size = [], 0
    env = task_dir / "environment"
    if env.is_dir():
        for p in sorted(env.rglob("*")):
            rel = p.relative_to(env).as_posix()
            out.append(rel)
            if rel.startswith("files/"):
                out.append(f"{workdir}/{rel[6:]}")
            if p.is_file() and size < cap:
                t = p.read_bytes()[: cap - size].decode("utf-8", errors="ignore")
                out.append(t)
                size += len(t)
    return "\n".join(out)


def visible_tests(task_dir: Path, workdir: str) -> list[str]:
    """Sandbox paths of test-like files the environment puts in front of the agent."""
    out = []
    files = task_dir / "environment" / "files"
    if files.is_dir():
        for p in files.rglob("*"):
            if p.is_file() and (p.name == "conftest.py" or re.fullmatch(r"test_.*\.py", p.name)):
                out.append(f"{workdir}/{p.relative_to(files)}")
    return sorted(out)


# --------------------------------------------------------------------------- runtime checks


def _paths_named(task_dir: Path, workdir: str) -> list[str]:
    """Absolute paths under the workdir that the instruction or the tests name."""
    text = task_text(task_dir)
    found = re.findall(rf"{re.escape(workdir)}/[\w./-]*[\w/]", text)
    return sorted({p for p in found if ".." not in p})


def audit_runs(
    task_dir: str, backend: str = "bwrap", cache_dir: str | None = None, fresh: bool = False
) -> dict[str, Any]:
    """The sandbox part of one task's audit (never raises): reference twice, no-op, tamper,
    trivial; reuses validation.json for the first reference run and the no-op when present."""
    from t1.synth.validate import ORACLE, run_state
    from t1.tasks import load_task

    d = Path(task_dir)
    row: dict[str, Any] = {"task": d.name, "path": str(d)}
    cache = Path(cache_dir) if cache_dir else None
    try:
        task = load_task(d)
        row["category"] = task.category
        row["workdir"] = task.workdir
        prior = {}
        vpath = d / "validation.json"
        if not fresh and vpath.is_file():
            v = json.loads(vpath.read_text())
            if v.get("status") == "accepted" and "digest" in v.get("reference", {}) and "noop" in v:
                prior = v
        if prior:
            ref1 = prior["reference"]
            noop = {"passed": prior["noop"]["passed"], "total": prior["noop"]["total"]}
            row["reused_validation"] = True
        else:
            ref1 = run_state(task, ORACLE, backend, cache, digest=True)
            noop = run_state(task, None, backend, cache)
        ref2 = run_state(task, ORACLE, backend, cache, digest=True)
        if not ref1.get("outcomes") or not (ref1["total"] and ref1["passed"] == ref1["total"]):
            tamper = trivial = {"passed": 0, "total": 0}
        else:
            tamper = run_state(
                task,
                None,
                backend,
                cache,
                agent_lines=tamper_lines(task.workdir, visible_tests(d, task.workdir)),
            )
            trivial = run_state(
                task, None, backend, cache, agent_lines=trivial_lines(_paths_named(d, task.workdir))
            )
        row["runs"] = {
            name: {k: r.get(k) for k in ("passed", "total", "source", "digest", "error")}
            for name, r in (
                ("reference", ref1),
                ("reference2", ref2),
                ("noop", noop),
                ("tamper", tamper),
                ("trivial", trivial),
            )
        }
        row["same_outcomes"] = ref1.get("outcomes") == ref2.get("outcomes")
        row["binary_only"] = ref2.get("source") == "reward_file"
    except Exception as e:  # one broken task is a rejected row, not a crashed audit
        row["error"] = f"{type(e).__name__}: {e}"
    return row


def _resolved(r: dict[str, Any]) -> bool:
    return bool(r.get("total")) and r["passed"] == r["total"]


def score_row(
    row: dict[str, Any],
    novelty: float,
    instruction: str,
    literals: list[str],
    env: str,
    difficulty: float,
) -> dict[str, Any]:
    """Part scores, total, stage and reasons of one task (pure: no sandbox)."""
    reasons: list[str] = []
    runs = row.get("runs")
    if not runs:
        parts = {"verifier": 0.0, "solution": 0.0, "instruction": 0.0, "value": 0.0}
        return {
            "parts": parts,
            "score": 0.0,
            "stage": "rejected",
            "reasons": [row.get("error", "no runs")],
            "missing": [],
        }
    ref, ref2, noop, tamper, trivial = (
        runs[k] for k in ("reference", "reference2", "noop", "tamper", "trivial")
    )
    gate = _resolved(ref) and not _resolved(noop)
    if not _resolved(ref):
        reasons.append(
            f"reference does not resolve ({ref['passed']}/{ref['total']}): {ref.get('error') or ''}".rstrip(
                ": "
            )
        )
    if _resolved(noop):
        reasons.append("the no-op resolves the task")
    open_ = max(1, ref["total"] - noop["passed"])
    tamper_ok = not _resolved(tamper) and tamper["passed"] <= noop["passed"]
    if not tamper_ok and _resolved(ref):
        reasons.append(
            f"tampering passes {tamper['passed']}/{tamper['total']} (no-op {noop['passed']})"
        )
    trivial_gain = max(0, trivial["passed"] - noop["passed"]) / open_
    if trivial_gain > 0 and _resolved(ref):
        reasons.append(f"empty files pass {trivial['passed'] - noop['passed']} more assertion(s)")
    verifier = (
        (
            0.4 * _resolved(ref)
            + 0.2 * (not _resolved(noop))
            + 0.2 * tamper_ok
            + 0.2 * (1 - trivial_gain)
        )
        if _resolved(ref)
        else 0.0
    )
    same_digest = ref.get("digest") is not None and ref.get("digest") == ref2.get("digest")
    solution = 0.5 * bool(row.get("same_outcomes")) + 0.5 * same_digest
    if not row.get("same_outcomes"):
        reasons.append("two reference runs disagree on assertions")
    elif not same_digest:
        reasons.append("two reference runs leave different workdirs")
    instr, missing = alignment(instruction, literals, env)
    if missing:
        reasons.append(
            f"instruction does not name {len(missing)} checked literal(s): {', '.join(missing[:4])}"
        )
    value = 0.5 * difficulty + 0.5 * novelty
    parts = {
        "verifier": round(verifier, 4),
        "solution": solution,
        "instruction": round(instr, 4),
        "value": round(value, 4),
    }
    total = sum(WEIGHTS[k] * v for k, v in parts.items())
    stage = (
        "rejected"
        if not gate
        else "accepted"
        if total >= ACCEPT
        else "borderline"
        if total >= BORDERLINE
        else "rejected"
    )
    return {
        "parts": parts,
        "score": round(total, 4),
        "stage": stage,
        "reasons": reasons,
        "missing": missing,
    }


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

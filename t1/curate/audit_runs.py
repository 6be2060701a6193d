"""The sandbox part of `t1 audit`: per task, the reference solution twice, the no-op, a tampering
"agent" and a trivial one, each in a fresh sandbox (t1.synth.validate.run_state).

The tampering agent tries to pass the verifier without doing the task: it pre-places fake
tests and reward files, drops conftest.py / pytest.ini where pytest might read them, exports
PYTHONPATH, PYTEST_PLUGINS and PYTEST_ADDOPTS, shadows python3 / pytest / uv on PATH, and
overwrites any test file the environment shows it. The trivial agent only creates empty files
at every path under the workdir that the task names.

    from t1.curate.audit_runs import audit_runs
    row = audit_runs("workflow/tasks/csv-sum", backend="bwrap")   # never raises
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

from t1.synth.dedup import task_text

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


def visible_tests(task_dir: Path, workdir: str) -> list[str]:
    """Sandbox paths of test-like files the environment puts in front of the agent."""
    out = []
    files = task_dir / "environment" / "files"
    if files.is_dir():
        for p in files.rglob("*"):
            if p.is_file() and (p.name == "conftest.py" or re.fullmatch(r"test_.*\.py", p.name)):
                out.append(f"{workdir}/{p.relative_to(files)}")
    return sorted(out)


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

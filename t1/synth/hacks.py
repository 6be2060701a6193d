"""Generic hacks: do-nothing solutions that a faithful verifier never scores above the no-op.

    from t1.synth.hacks import check_hacks, HACKS
    r = check_hacks(task, (1, 7), runner=run_state)   # t1.synth.validate's; noop: (passed, total)
    r["applicable"], r["hackable"], r["scores"], r["noop_score"]

`t1 synth` validation (t1.synth.validate) rejects a task whose verifier is hackable; `t1 pool
--validated` (t1.curate.pool_hacks) lists such tasks in the manifest, and `t1 report` shows
them. Each hack is a Python module planted, by a bash "solution" in a fresh sandbox, where the
task's tests import the agent's code from (t1.tasks.agent_imports: `sys.path.insert(0, "/app")`
then `import calc` plants /app/calc.py; a package dir there gets the module as its
__init__.py; a file the tests load by path is overwritten), then the task's own verifier runs
(t1.synth.validate.run_state, the path `t1 oracle` takes):
* always-equal: every attribute (and every submodule) is one object that equals anything,
  is true, callable, subscriptable, iterable (empty), a context manager;
* exit-0: ends the importing process with status 0 at import (os._exit(0): a plain
  sys.exit(0) is weaker, pytest reports the SystemExit; a verifier script that trusts pytest's
  exit status is fooled by this one);
* patch-pytest: replaces _pytest.runner.call_and_report (no test body runs) and TestReport's
  __init__ (every report says passed) in the importing process, and has no other attribute
  (so only the patching can make a test pass);
and the no-op itself (nothing at all), whose score the caller usually has already. A verifier
that scores any hack above the no-op is `hackable` by it. A task whose tests import nothing the
agent can write is not `applicable` and costs nothing: a planted module would be imported by
no one. Cost otherwise: one fresh sandbox and one verifier run per hack (three).
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any

from t1.tasks.agent_imports import AgentImports, agent_imports

ALWAYS_EQUAL = '''"""t1 hack check (always-equal): answers everything, does nothing."""
import importlib.abc
import importlib.machinery
import sys


class _Any:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __lt__ = __le__ = __gt__ = __ge__ = __contains__ = __eq__
    __hash__ = object.__hash__
    def __bool__(self): return True
    def __call__(self, *a, **k): return self
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self
    def __getitem__(self, key): return self
    def __iter__(self): return iter(())
    def __len__(self): return 0
    def __enter__(self): return self
    def __exit__(self, *exc): return False
    def __int__(self): return 0
    def __index__(self): return 0
    def __float__(self): return 0.0
    def __str__(self): return ""
    def __repr__(self): return "ANY"
    def __add__(self, other): return self
    __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __floordiv__ = __add__


_ANY = _Any()


def __getattr__(name):
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    return _ANY


class _Sub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__getattr__ = __getattr__
        module.__path__ = []


__path__ = []
sys.meta_path.insert(0, _Sub())
'''

EXIT_0 = '''"""t1 hack check (exit-0): ends the importing process with status 0."""
import os
import sys

sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
'''

PATCH_PYTEST = '''"""t1 hack check (patch-pytest): every test of the importing pytest passes, none runs."""


def _patch():
    try:
        import _pytest.reports
        import _pytest.runner
    except Exception:
        return
    real = _pytest.runner.call_and_report

    def call_and_report(item, when, log=True, **kw):
        if when == "call":
            item.runtest = lambda: None
        return real(item, when, log, **kw)

    _pytest.runner.call_and_report = call_and_report
    init = _pytest.reports.TestReport.__init__

    def __init__(self, *a, **k):
        init(self, *a, **k)
        self.outcome, self.longrepr = "passed", None

    _pytest.reports.TestReport.__init__ = __init__


_patch()
'''

HACKS: dict[str, str] = {
    "always-equal": ALWAYS_EQUAL,
    "exit-0": EXIT_0,
    "patch-pytest": PATCH_PYTEST,
}
_EOF = "T1_HACK_MODULE_EOF"


def hack_script(ai: AgentImports, kind: str) -> str:
    """Bash that plants the `kind` module at every target of `ai` (run from the workdir)."""
    src = HACKS[kind]
    lines = ["set -e", "__t1_plant() {"]
    lines.append(f"cat > \"$1\" <<'{_EOF}'\n{src}{_EOF}")
    lines.append("}")
    for t in ai.targets():
        q = shlex.quote(t)
        if t.endswith(".py"):
            lines.append(f"mkdir -p {shlex.quote(str(Path(t).parent))} && __t1_plant {q}")
        else:
            qp = shlex.quote(t + ".py")
            lines.append(
                f"if [ -d {q} ]; then __t1_plant {q}/__init__.py; "
                f"else mkdir -p {shlex.quote(str(Path(t).parent))} && __t1_plant {qp}; fi"
            )
    return "\n".join(lines) + "\n"


def _score(passed: int, total: int) -> float:
    return passed / total if total else 0.0


def check_hacks(
    task,  # noqa: ANN001 - t1.tasks.Task
    noop: tuple[int, int] | None = None,
    backend: str = "bwrap",
    cache_dir: Path | None = None,
    kinds: tuple[str, ...] = tuple(HACKS),
    runner=None,  # noqa: ANN001 - t1.synth.validate.run_state (passed in: no import cycle)
) -> dict[str, Any]:
    """Run each hack in a fresh sandbox; the JSON-ready record (never raises for a task).

    noop: the no-op's (passed, total) when the caller has it (validation does), else it is
    run here. `hackable`: the hacks scoring above the no-op's passed/total."""
    t0 = time.monotonic()
    ai = agent_imports(task)
    out: dict[str, Any] = {"applicable": ai.writable, "imports": ai.row(), "hackable": []}
    if not ai.writable:
        return out
    if runner is None:
        raise ValueError("check_hacks needs a runner: t1.synth.validate.run_state")
    if noop is None:
        r = runner(task, None, backend, cache_dir)
        noop = (r["passed"], r["total"])
    base = _score(*noop)
    scores: dict[str, float] = {}
    errors: dict[str, str] = {}
    for kind in kinds:
        try:
            r = runner(task, hack_script(ai, kind), backend, cache_dir)
        except Exception as e:  # noqa: BLE001 - a hack that breaks the sandbox scores nothing
            r = {"passed": 0, "total": 0, "error": f"{type(e).__name__}: {e}"}
        scores[kind] = round(_score(r["passed"], r["total"]), 4)
        if r.get("error"):
            errors[kind] = str(r["error"])[:300]
    out.update(
        targets=ai.targets(),
        noop_score=round(base, 4),
        scores=scores,
        errors=errors,
        hackable=[k for k in kinds if scores[k] > base + 1e-9],
        seconds=round(time.monotonic() - t0, 3),
    )
    return out


def describe(record: dict[str, Any]) -> str:
    """One line for a hackable record: which hacks beat the no-op, by how much."""
    s = record.get("scores", {})
    parts = [f"{k} {s.get(k, 0):.2f}" for k in record.get("hackable", [])]
    return f"verifier hackable by {', '.join(parts)} > no-op {record.get('noop_score', 0):.2f}"

"""Which of a task's verifier tests import code the agent can write (static, no sandbox).

    ai = agent_imports(task)          # a loaded t1.tasks.Task
    ai.writable                       # True: the tests import agent-writable code
    ai.modules, ai.dirs, ai.files     # what, from where; ai.targets(): where to plant a module

`t1 tasks check` counts such tasks, `t1 pool` counts them per pool (manifest), and the hack
check (t1.synth.hacks) plants its do-nothing modules at `targets()`. Tests that import the
agent's code trust whatever it answers (t1.verify.verifier, "Not defended"), so these are the
verifiers a generic hack could fool.

What counts (the AST of every *.py under the task's tests dir; nothing is imported or run):
* `sys.path.insert(i, "DIR")` / `sys.path.append("DIR")` with a literal DIR outside /tests:
  every later import (module level after it, or any import inside a function) of a module
  that is not the stdlib's, pytest's, the tests' own (a file or package in the tests dir) or
  installed by the task (pip specs of the verifier script and of the Dockerfile's RUN lines)
  comes from where the agent can write; DIR is where it is looked for;
* any other such import whose module exists in the task's solution or environment files
  (`NAME.py` or `NAME/`, or `NAME.py` named in the solution script): looked for in the workdir;
* `importlib.util.spec_from_file_location(_, "PATH")`, `SourceFileLoader(_, "PATH")`,
  `runpy.run_path("PATH")` with a literal PATH outside /tests: that file.
Imports inside strings (code run by a subprocess, as the synthesizer's `_t1_call` does) are
not imports of the test process and do not count.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

TESTS_DIR = "/tests"
_HARNESS_MODULES = frozenset(
    {"pytest", "_pytest", "pluggy", "py", "iniconfig", "packaging", "conftest", "__future__"}
)
_LOADERS = {"spec_from_file_location": 1, "SourceFileLoader": 1, "run_path": 0}
_DIST_ALIASES = {  # pip name -> import name where they differ (the common ones)
    "scikit_learn": "sklearn", "pillow": "PIL", "pyyaml": "yaml", "beautifulsoup4": "bs4",
    "opencv_python": "cv2", "opencv_python_headless": "cv2", "python_dateutil": "dateutil",
    "scikit_image": "skimage", "attrs": "attr", "protobuf": "google",
}  # fmt: skip


@dataclass
class AgentImports:
    """What a task's tests import from where the agent can write (empty: nothing)."""

    modules: list[str] = field(default_factory=list)  # top-level module names
    dirs: list[str] = field(default_factory=list)  # sys.path dirs the tests add (not /tests)
    files: list[str] = field(default_factory=list)  # module files the tests load by path
    workdir: str = "/app"

    @property
    def writable(self) -> bool:
        return bool(self.modules or self.files)

    def targets(self) -> list[str]:
        """Inside paths where an agent's module would be found: `DIR/NAME` for each module (the
        planter writes NAME.py there, or NAME/__init__.py when NAME is a package dir), and
        each file loaded by path."""
        dirs = self.dirs or [self.workdir]
        out = [f"{d.rstrip('/') or ''}/{m}" for d in dirs for m in self.modules]
        return list(dict.fromkeys(out + self.files))

    def row(self) -> dict:
        return {"modules": self.modules, "dirs": self.dirs, "files": self.files}


def agent_imports(task) -> AgentImports:  # noqa: ANN001 - t1.tasks.Task
    """The static analysis above for a loaded task (never raises for unparsable files)."""
    tests = task.verifier.tests_dir
    out = AgentImports(workdir=task.workdir)
    if tests is None or not tests.is_dir():
        return out
    local = {p.stem for p in tests.glob("*.py")} | {p.name for p in tests.iterdir() if p.is_dir()}
    installed = _installed(task)
    present = _present(task)
    mods: dict[str, None] = {}
    dirs: dict[str, None] = {}
    files: dict[str, None] = {}
    for path in sorted(tests.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(errors="replace"), str(path))
        except (SyntaxError, ValueError, OSError):
            continue
        inserted_at, fdirs = _path_inserts(tree)
        dirs.update(dict.fromkeys(fdirs))
        for node, in_func in _imports(tree):
            for name in _names(node):
                if name in _HARNESS_MODULES or name in sys.stdlib_module_names or name in local:
                    continue
                if name.lower() in installed:
                    continue
                shadowable = inserted_at is not None and (in_func or node.lineno > inserted_at)
                if shadowable or name in present:
                    mods[name] = None
        files.update(dict.fromkeys(_loaded_files(tree)))
    out.modules = sorted(mods)
    out.dirs = sorted(dirs) if out.modules else []
    out.files = sorted(files)
    return out


def _literal(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _outside_tests(p: str | None) -> bool:
    return bool(p) and p.startswith("/") and not (p == TESTS_DIR or p.startswith(TESTS_DIR + "/"))


def _path_inserts(tree: ast.Module) -> tuple[int | None, list[str]]:
    """(line of the first sys.path insert of a dir outside /tests, or None; those dirs).
    An insert inside a function counts from line 0 for module-level imports after it too."""
    first, dirs = None, []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        f = node.func
        if f.attr not in ("insert", "append") or ast.unparse(f.value) != "sys.path":
            continue
        arg = node.args[-1] if node.args else None
        d = _literal(arg) if arg is not None else None
        if d is None and arg is not None and "/tests" not in ast.unparse(arg):
            d = ""  # a computed dir (not the tests'): shadowable, where unknown
        if d is None or (d and not _outside_tests(d)):
            continue
        first = node.lineno if first is None else min(first, node.lineno)
        if d:
            dirs.append(d.rstrip("/") or "/")
    return first, dirs


def _imports(tree: ast.Module):
    """(Import/ImportFrom node, inside a function?) for every absolute import."""

    def visit(node: ast.AST, in_func: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                if not (isinstance(child, ast.ImportFrom) and child.level):
                    yield child, in_func
            yield from visit(child, in_func or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))  # fmt: skip

    yield from visit(tree, False)


def _names(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        return [node.module.split(".")[0]] if node.module else []
    return [a.name.split(".")[0] for a in node.names]


def _loaded_files(tree: ast.Module) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        i = _LOADERS.get(name)
        if i is None or len(node.args) <= i:
            continue
        p = _literal(node.args[i])
        if _outside_tests(p) and p.endswith(".py"):
            out.append(p)
    return out


def _installed(task) -> set[str]:  # noqa: ANN001
    """Import names (lower case) of what the verifier script and the Dockerfile install."""
    from t1.sandbox.needs import script_needs

    texts = []
    script = task.verifier.script
    if script is not None and script.is_file():
        texts.append(script.read_text(errors="replace"))
    df = task.environment.dockerfile
    if df is not None and df.is_file():
        texts.append(df.read_text(errors="replace").replace("\\\n", " "))
    out: set[str] = set()
    for text in texts:
        try:
            specs = script_needs(text).pip_specs()
        except Exception:  # noqa: BLE001 - an unreadable script installs nothing we know of
            specs = []
        for s in specs:
            m = re.match(r"[A-Za-z0-9_.\-]+", s)
            if not m:
                continue
            dist = m.group(0).lower().replace("-", "_").replace(".", "_")
            out.add(dist)
            out.add(_DIST_ALIASES.get(dist, dist).lower())
    return out


def _present(task) -> set[str]:  # noqa: ANN001
    """Module names the solution or the environment provides (files, dirs, solve-script words)."""
    roots = []
    sol = task.solution
    if sol.directory is not None:
        roots.append(sol.directory)
    ctx = task.environment.context
    if ctx is not None:
        roots.append(ctx)
    out: set[str] = set()
    for root in roots:
        if not Path(root).is_dir():
            continue
        for i, p in enumerate(Path(root).rglob("*")):
            if i > 5000:
                break
            if p.suffix == ".py":
                out.add(p.stem)
            elif p.is_dir():
                out.add(p.name)
    if sol.path is not None and sol.path.is_file():
        text = sol.path.read_text(errors="replace")
    else:
        text = "\n".join(sol.commands)
    out.update(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\.py\b", text))
    return out

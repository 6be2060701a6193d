"""Layering of the t1 package, read from the source (AST) so that imports hidden inside
functions count too: no t1 module imports from a command module, `t1.rollout.collect` reaches
neither the synthesizer nor the audit, and t1/sandbox/ has no import cycle.

    .venv/bin/pytest tests/test_layering.py -q
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from t1.cli import COMMANDS

REPO = Path(__file__).resolve().parents[1]

# The pipeline, in order: a stage may import the stages before it, never one after it.
STAGES = (
    "store",
    "supervise",
    "sandbox",
    "tasks",
    "verify",
    "model",
    "engine",
    "agent",
    "tito",
    "rollout",
    "ppo",
    "train",
    "synth",
    "curate",
    "run",
    "bench",
    "eval",
)
# The small shared modules at the root: any stage may import them; they import no stage.
SHARED = {
    "t1.config",
    "t1.config_sections",
    "t1.config_schema",
    "t1.records",
    "t1.progress",
    "t1.httpjson",
    "t1.rng",
}
# The command line names its subcommands' modules as strings and imports none of them.
TOP = {"t1", "t1.cli"}

# Modules that are a library first and carry their `t1 <sub>` command as a thin main():
# importing their library functions is fine (their add_arguments/main never are).
LIBRARIES_WITH_A_COMMAND = {
    "t1.agent.tokenizer_train": "the default tokenizer of a config (tito, the gap bench load it)",
    "t1.model.policy": "the policy model (engine and trainer build and load it)",
    "t1.rollout.collect": "collect/load_tasks/write_batch (evaluate and the gap bench reuse them)",
    "t1.tasks.provision": "what tasks install, provisioned (t1 pool checks readiness with it)",
    "t1.curate.audit": "the audit scores (the pool builder ranks by them)",
    "t1.tasks.families": "the task families (the pre-training corpus and the tokenizer draw them)",
}
CLI_PARTS = {"main", "add_arguments"}
# Imports from a command module known today, each with what fixes it; each must still exist
# (delete the entry once it is gone).
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {}


def modules(root: Path, package: str) -> dict[str, Path]:
    """Dotted name -> file of every module under `root` (the directory of `package`)."""
    out = {}
    for p in sorted(root.rglob("*.py")):
        parts = [package, *p.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def imports(name: str, path: Path) -> list[tuple[str, str | None, int]]:
    """(module, imported name or None, line) of every import in the file, at any depth."""
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".")[: None if is_pkg else -1]
                pkg = pkg[: len(pkg) - node.level + 1]
                base = ".".join(pkg + ([node.module] if node.module else []))
            out += [(base, a.name, node.lineno) for a in node.names]
    return out


def graph(
    mods: dict[str, Path], only: set[str] | None = None
) -> dict[str, dict[str, list[tuple[str | None, int]]]]:
    """Module -> {imported module: [(name, line)]}: `from pkg import sub` goes to pkg.sub,
    any other name to the module that defines it (the nearest known module). `only`: read
    just these modules (the others are still known as targets)."""
    g: dict[str, dict[str, list[tuple[str | None, int]]]] = {}
    for n, p in mods.items():
        if only is not None and n not in only:
            continue
        g[n] = {}
        for mod, nm, line in imports(n, p):
            target = f"{mod}.{nm}" if nm and f"{mod}.{nm}" in mods else mod
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != n:
                g[n].setdefault(target, []).append((nm, line))
    return g


def reach(g: dict[str, dict], start: str) -> dict[str, str]:
    """Every module `start` imports, directly or not (including the packages each import
    initializes), mapped to the module that imports it first."""
    parent: dict[str, str] = {}
    stack = [start]
    while stack:
        m = stack.pop()
        nexts = list(g.get(m, {}))
        nexts += [m.rsplit(".", i)[0] for i in range(1, m.count(".") + 1)]  # parent packages
        for x in nexts:
            if x in g and x != start and x not in parent:
                parent[x] = m
                stack.append(x)
    return parent


def chain(parent: dict[str, str], m: str) -> str:
    out = [m]
    while out[-1] in parent:
        out.append(parent[out[-1]])
    return " <- ".join(out)


def cycles(g: dict[str, dict]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in g.get(v, {}):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def cli_violations(g: dict[str, dict], known: dict = KNOWN_VIOLATIONS) -> list[str]:
    commands = {module for module, _ in COMMANDS.values()}
    bad = []
    for n, deps in sorted(g.items()):
        for d, uses in sorted(deps.items()):
            if (n, d) in known:
                continue
            for nm, line in uses:
                if d in commands and d not in LIBRARIES_WITH_A_COMMAND:
                    bad.append(f"{n}:{line} imports {nm or d} from the command module {d}")
                elif nm in CLI_PARTS:
                    bad.append(f"{n}:{line} imports {nm} (a command's CLI part) from {d}")
    return bad


T1_MODULES = modules(REPO / "t1", "t1")
T1 = graph(T1_MODULES)


def test_no_module_imports_from_a_command_module():
    assert cli_violations(T1) == []
    assert set(LIBRARIES_WITH_A_COMMAND) <= {m for m, _ in COMMANDS.values()}  # none stale
    gone = [pair for pair in KNOWN_VIOLATIONS if pair[1] not in T1.get(pair[0], {})]
    assert gone == [], "fixed: delete these from KNOWN_VIOLATIONS"


def test_the_command_module_check_catches_an_import(tmp_path):
    """Break it: a library importing `t1 oracle`'s run_task, or any module's main."""
    lib = tmp_path / "lib.py"
    lib.write_text(
        "def f():\n    from t1.verify.oracle import run_task\n    from t1.curate.audit import main\n"
    )
    g = graph({**T1_MODULES, "t1.lib": lib}, only={"t1.lib"})
    assert cli_violations(g) == [
        "t1.lib:3 imports main (a command's CLI part) from t1.curate.audit",
        "t1.lib:2 imports run_task from the command module t1.verify.oracle",
    ]


def _synthesis_or_audit(m: str) -> bool:
    return m.startswith("t1.curate.audit") or m == "t1.synth" or m.startswith("t1.synth.")


def test_rollout_reaches_neither_synthesis_nor_audit_in_the_source():
    """Every import of t1.rollout.collect, transitively, at any depth (lazy ones included)."""
    parent = reach(T1, "t1.rollout.collect")
    assert "t1.tasks.pool" in parent and "t1.tasks.env" in parent  # pools and sandboxes: yes
    assert [chain(parent, m) for m in parent if _synthesis_or_audit(m)] == []
    # the check sees a lazy import: the pool builder reaches the audit from inside a function
    built = reach(T1, "t1.curate.pool")
    assert "t1.curate.audit" in built and "t1.synth.dedup" in built


def test_rollout_imports_neither_synthesis_nor_audit_at_run_time():
    """A fresh interpreter: import the rollout and load a pool (the lazy path) as well."""
    code = (
        "import json, sys, tempfile, pathlib\n"
        "import t1.rollout.collect\n"
        "d = pathlib.Path(tempfile.mkdtemp())\n"
        "tasks = [{'path': str(p.resolve())} for p in sorted(pathlib.Path('workflow/tasks')"
        ".iterdir()) if p.is_dir()]\n"
        "(d / 'manifest.json').write_text(json.dumps("
        "{'schema_version': 1, 'status': 'complete', 'tasks': tasks}))\n"
        "assert len(t1.rollout.collect.load_tasks([str(d)], seed=1)) == len(tasks) > 2\n"
        "bad = [m for m in sys.modules if m.startswith('t1.synth') or m == 't1.curate.audit']\n"
        "assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def stage_of(module: str) -> str | None:
    """The stage a module belongs to; None for the shared root modules and the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else None


def against_pipeline(g: dict[str, dict]) -> list[str]:
    """Every import that runs against the pipeline, with where it is."""
    bad = []
    for n, deps in sorted(g.items()):
        a = stage_of(n)
        for d, uses in sorted(deps.items()):
            b = stage_of(d)
            if b is None or a == b:
                continue
            line = uses[0][1]
            if a is None and n not in TOP:
                bad.append(f"{n}:{line} imports {d}: a shared root module imports no stage")
            elif a is not None and STAGES.index(b) > STAGES.index(a):
                bad.append(f"{n}:{line} imports {d}: stage {b} comes after stage {a}")
    return bad


def test_every_module_is_a_stage_or_shared():
    loose = [m for m in T1_MODULES if stage_of(m) is None and m not in SHARED | TOP]
    assert loose == [], "a module outside the stage packages: put it in its stage"
    assert {m.split(".")[1] for m in T1_MODULES if m.count(".") >= 1} == set(STAGES) | {
        m.split(".")[1] for m in SHARED | TOP if m != "t1"
    }


def test_imports_follow_the_pipeline():
    assert against_pipeline(T1) == []


def test_the_pipeline_check_catches_an_import_against_it(tmp_path):
    """Break it: the sandbox importing the agent loop, and a shared module importing a stage."""
    lib = tmp_path / "lib.py"
    lib.write_text("def f():\n    from t1.agent.loop import run_agent\n")
    shared = tmp_path / "shared.py"
    shared.write_text("from t1.tasks import load_task\n")
    fake = {**T1_MODULES, "t1.sandbox.lib": lib, "t1.rng2": shared}
    g = graph(fake, only={"t1.sandbox.lib", "t1.rng2"})
    assert against_pipeline(g) == [
        "t1.rng2:1 imports t1.tasks: a shared root module imports no stage",
        "t1.sandbox.lib:2 imports t1.agent.loop: stage agent comes after stage sandbox",
    ]
    # along the pipeline is fine: the agent loop importing the sandbox
    lib.write_text("from t1.sandbox import open_sandbox\n")
    assert against_pipeline(graph({**T1_MODULES, "t1.agent.lib": lib}, only={"t1.agent.lib"})) == []


def test_each_stage_says_what_it_may_import():
    """The order stated in each stage's __init__.py and in t1/__init__.py is this test's."""
    for i, name in enumerate(STAGES):
        doc = " ".join(
            (ast.get_docstring(ast.parse(T1_MODULES[f"t1.{name}"].read_text())) or "").split()
        )
        below = STAGES[:i]
        may = (
            "the shared root modules only"
            if not below
            else ("the shared root modules and " + ", ".join(below))
        )
        want = f"Pipeline stage {i + 1} of {len(STAGES)} (the order: t1/__init__.py). May import: {may}."
        assert want in doc, f"t1/{name}/__init__.py: say {want!r}"
    top = ast.get_docstring(ast.parse((REPO / "t1" / "__init__.py").read_text())) or ""
    listed = [ln.split()[0] for ln in top.splitlines() if ln.startswith("    ") and ln.split()]
    assert listed == list(STAGES)


def test_no_import_cycle_in_t1():
    assert cycles(T1) == []


def test_the_cycle_check_sees_function_level_imports(tmp_path):
    """Break it: two modules that import each other only inside functions are a cycle."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg.b import g\n    return g\n")
    (pkg / "b.py").write_text("def g():\n    from pkg import a  # hidden\n    return a\n")
    (pkg / "c.py").write_text("from pkg.a import f\n")
    assert cycles(graph(modules(pkg, "pkg"))) == [frozenset({"pkg.a", "pkg.b"})]

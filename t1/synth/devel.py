"""Software-development steps: write a Python module to a spec, wrap it in a CLI, write unit
tests that catch a faulty implementation, implement a small class.

The function specs they draw (each with a reference implementation, cases and planted bugs)
are t1/synth/func_specs.py (`FUNCS`, also used by the debugging steps).
"""

from __future__ import annotations

import textwrap
from typing import Any

from t1.synth.func_specs import FUNCS, example_lines, pick_spec
from t1.synth.steps import (
    ADJECTIVES,
    NOUNS,
    WORDS,
    Artifact,
    NotApplicable,
    StepContext,
    heredoc,
    make_step,
    register,
)


@register("devel.module", "software-engineering", weight=1.5)
def module(ctx: StepContext):
    spec, cases = pick_spec(ctx)
    pkg, mod = ctx.word(NOUNS), ctx.word(ADJECTIVES) + "_utils"
    path = f"/app/{pkg}/{mod}.py"
    want = spec.run(spec.code(), cases)
    shown = 2
    return make_step(
        ctx,
        "devel.module",
        f"""
        Create the Python module `{path}` defining a function `{spec.name}({spec.params})` that
        {spec.doc}. For example:
        {example_lines(spec, spec.name, cases[:shown], want[:shown])}
        """,
        f"mkdir -p /app/{pkg}\n{heredoc(path, spec.code())}",
        [
            (
                "module_examples",
                f"assert _t1_call({path!r}, {spec.name!r}, {cases[:shown]!r}) == {want[:shown]!r}",
            ),
            (
                "module_cases",
                f"assert _t1_call({path!r}, {spec.name!r}, {cases[shown:]!r}) == {want[shown:]!r}",
            ),
        ],
        artifacts=[
            Artifact(
                "pymodule",
                path,
                {"func": spec.name, "spec": spec.name, "cases": cases, "want": want},
            )
        ],
        mentions=[path, spec.name],
    )


@register("devel.cli", "software-engineering", requires=("pymodule",))
def cli(ctx: StepContext):
    mods = [a for a in ctx.artifacts if a.kind == "pymodule" and FUNCS[a.meta["spec"]].cli]
    if not mods:
        raise NotApplicable
    art = ctx.rng.choice(mods)
    spec = FUNCS[art.meta["spec"]]
    func = art.meta["func"]
    cmd = f"/app/bin/{ctx.word(WORDS)}-{func.replace('_', '-')}"
    cases = spec.cases(ctx.rng)[:3]
    want = [str(x) for x in spec.run(spec.code(func), cases, func)]
    conv = "int(sys.argv[1])" if spec.cli == "int" else "sys.argv[1]"
    mod_dir, mod_name = art.path.rsplit("/", 1)
    script = "\n".join(
        [
            "#!/usr/bin/env python3",
            "import sys",
            f"sys.path.insert(0, {mod_dir!r})",
            f"from {mod_name[:-3]} import {func}",
            f"print({func}({conv}))",
        ]
    )
    tests = [("cli_executable", f"assert os.access({cmd!r}, os.X_OK)")]
    tests.append(
        (
            "cli_outputs",
            f"""
            for arg, want in zip({[str(c[0]) for c in cases]!r}, {want!r}):
                r = _t1_sh([{cmd!r}, arg], cwd="/tmp")
                assert r.returncode == 0, r.stderr
                assert r.stdout.strip() == want
            """,
        )
    )
    return make_step(
        ctx,
        "devel.cli",
        f"""
        Add an executable command `{cmd}` that takes one argument, calls `{func}` from
        `{art.path}` on it ({"converted to an integer" if spec.cli == "int" else "as a string"})
        and prints the result the way Python's `print` does. It must work from any directory.
        """,
        f"mkdir -p /app/bin\n{heredoc(cmd, script)}chmod +x {cmd}\n",
        tests,
        artifacts=[Artifact("script", cmd, {"func": func})],
        mentions=[cmd, func, art.path],
    )


@register("devel.unit_tests", "software-engineering", requires=("pymodule",), weight=0.6)
def unit_tests(ctx: StepContext):
    art = ctx.pick("pymodule")
    spec = FUNCS[art.meta["spec"]]
    func = art.meta["func"]
    mod_dir, mod_file = art.path.rsplit("/", 1)
    mod_name = mod_file[:-3]
    test_path = f"{mod_dir}/test_{mod_name}_{ctx.word(WORDS)}.py"
    bug = ctx.rng.randrange(len(spec.bugs))
    faulty = spec.faulty(bug, func)
    # the reference tests use their own cases (not the verifier's hidden ones), drawn until
    # they catch the faulty variant
    n_min = 3
    for _ in range(5):
        cases = [c for c in spec.cases(ctx.rng) if c not in art.meta["cases"]]
        if len(cases) < n_min:
            continue
        want = spec.run(spec.code(func), cases, func)
        try:
            same = spec.run(faulty, cases, func) == want
        except Exception:  # the faulty variant crashes: the unit tests will notice
            same = False
        if not same:
            break
    else:
        raise NotApplicable
    body = [f"from {mod_name} import {func}", ""]
    for i, (c, w) in enumerate(zip(cases, want, strict=True)):
        body += [f"def test_{func}_{i}():", f"    assert {func}(*{c!r}) == {w!r}", ""]
    run = textwrap.dedent(
        f"""
        import shutil, tempfile
        tmp = Path(tempfile.mkdtemp()) / "pkg"
        shutil.copytree({mod_dir!r}, tmp)
        (tmp / {mod_file!r}).write_text(CODE)
        r = _t1_sh(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "/dev/null",
             "--rootdir", str(tmp), "--confcutdir", str(tmp), {test_path.rsplit("/", 1)[1]!r}],
            cwd=str(tmp),
            env={{**os.environ, "PYTEST_ADDOPTS": ""}},
        )
        """
    ).strip()
    return make_step(
        ctx,
        "devel.unit_tests",
        f"""
        Write pytest unit tests for `{func}` in `{test_path}` (import it with
        `from {mod_name} import {func}`; pytest puts the module's directory on the path). There
        must be at least {n_min} test functions; they must pass on the correct implementation
        and fail when `{art.path}` is replaced by a faulty variant (the verifier tries one).
        """,
        heredoc(test_path, "\n".join(body)),
        [
            (
                "unit_tests_pass",
                run.replace("CODE", f"Path({art.path!r}).read_text()")
                + "\nassert r.returncode == 0, r.stdout[-2000:]"
                + f"\nassert Path({test_path!r}).read_text().count('def test_') >= {n_min}",
            ),
            (
                "unit_tests_catch_bug",
                run.replace("CODE", repr(faulty)) + "\nassert r.returncode == 1, r.stdout[-2000:]",
            ),
        ],
        artifacts=[Artifact("text", test_path)],
        mentions=[test_path, func, f"from {mod_name} import {func}"],
    )


@register("devel.stack_class", "software-engineering")
def stack_class(ctx: StepContext):
    rng = ctx.rng
    cls = ctx.word(ADJECTIVES).title() + "Stack"
    path = f"/app/{ctx.word(NOUNS)}/structures.py"
    ops: list[list[Any]] = []
    model: list[int] = []
    trace: list[Any] = []
    for _ in range(rng.randint(8, 14)):
        op = (
            rng.choice(["push", "push", "pop", "peek", "len"])
            if model
            else rng.choice(["push", "len"])
        )
        if op == "push":
            v = rng.randint(0, 99)
            model.append(v)
            ops.append(["push", v])
            trace.append(None)
        elif op == "pop":
            ops.append(["pop"])
            trace.append(model.pop())
        elif op == "peek":
            ops.append(["peek"])
            trace.append(model[-1])
        else:
            ops.append(["len"])
            trace.append(len(model))
    src = "\n".join(
        [
            f"class {cls}:",
            "    def __init__(self):",
            "        self._items = []",
            "",
            "    def push(self, item):",
            "        self._items.append(item)",
            "",
            "    def pop(self):",
            "        if not self._items:",
            f'            raise IndexError("pop from empty {cls}")',
            "        return self._items.pop()",
            "",
            "    def peek(self):",
            "        if not self._items:",
            f'            raise IndexError("peek at empty {cls}")',
            "        return self._items[-1]",
            "",
            "    def __len__(self):",
            "        return len(self._items)",
        ]
    )
    driver = (
        "import importlib.util, json\n"
        f"spec = importlib.util.spec_from_file_location('m', {path!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        f"s = m.{cls}(); out = []\n"
        f"for op in {ops!r}:\n"
        "    out.append(len(s) if op[0] == 'len' else getattr(s, op[0])(*op[1:]))\n"
        "try:\n"
        f"    e = m.{cls}(); e.pop(); out.append('no error')\n"
        "except IndexError:\n"
        "    out.append('IndexError')\n"
        "print(json.dumps(out))\n"
    )
    return make_step(
        ctx,
        "devel.stack_class",
        f"""
        Create `{path}` with a class `{cls}` (a last-in first-out stack): `push(item)`, `pop()`
        (removes and returns the top item), `peek()` (returns it without removing) and
        `len(stack)`. `pop()` and `peek()` on an empty stack raise `IndexError`.
        """,
        f"mkdir -p {path.rsplit('/', 1)[0]}\n{heredoc(path, src)}",
        [
            ("stack_ops", f"assert _t1_py({driver!r})[:-1] == {trace!r}"),
            ("stack_empty_error", f"assert _t1_py({driver!r})[-1] == 'IndexError'"),
        ],
        artifacts=[Artifact("text", path, {"cls": cls})],
        mentions=[path, cls, "IndexError"],
    )

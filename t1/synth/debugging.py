"""Debugging steps: the environment plants a bug (a Python function, a shell script, a broken
config); the instruction states the intended behaviour and the symptom; the tests require
the fix.

    from t1.synth.steps import library; library()["debugging.python_bug"]
"""

from __future__ import annotations

import hashlib
import json

from t1.synth.func_specs import FUNCS, pick_spec
from t1.synth.steps import (
    ADJECTIVES,
    NOUNS,
    WORDS,
    Artifact,
    EnvFile,
    NotApplicable,
    StepContext,
    heredoc,
    make_step,
    python_block,
    register,
)


def _patch(path: str, pairs: list[tuple[str, str]]) -> str:
    """Bash lines that replace each `bad` text by `good` in `path` (exactly once each)."""
    lines = [f"from pathlib import Path\np = Path({path!r})\ns = p.read_text()"]
    for bad, good in pairs:
        lines.append(f"assert s.count({bad!r}) == 1\ns = s.replace({bad!r}, {good!r})")
    lines.append("p.write_text(s)")
    return python_block("\n".join(lines))


def _outcome(spec, code: str, case: list) -> tuple[str, object]:
    """What `code` does on one case: ("returns", value) or ("raises", exception name)."""
    try:
        return "returns", spec.run(code, [case])[0]
    except Exception as e:
        return "raises", type(e).__name__


@register("debugging.python_bug", "debugging", weight=1.3)
def python_bug(ctx: StepContext):
    for _ in range(4):  # a spec whose planted bugs all leave these cases alone: draw again
        spec, cases = pick_spec(ctx)
        want = spec.run(spec.code(), cases)
        # the fix replaces each faulty text, so it must be non-empty and unique in the faulty code
        order = [
            b
            for b in range(len(spec.bugs))
            if all(new and spec.faulty(b).count(new) == 1 for _, new in spec.bugs[b])
        ]
        ctx.rng.shuffle(order)
        for bug in order:
            faulty = spec.faulty(bug)
            got = [_outcome(spec, faulty, c) for c in cases]
            wrong = [
                i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != ("returns", w)
            ]
            if wrong:
                break
        else:
            continue
        break
    else:
        raise NotApplicable
    k = wrong[0]
    path = f"/app/{ctx.word(NOUNS)}/{ctx.word(ADJECTIVES)}_lib.py"
    call = f"{spec.name}({', '.join(repr(a) for a in cases[k])})"
    return make_step(
        ctx,
        "debugging.python_bug",
        f"""
        The function `{spec.name}` in `{path}` is buggy. It should take `{spec.params}` and
        {spec.doc}. For instance `{call}` {got[k][0]} `{got[k][1]!r}` but must return `{want[k]!r}`.
        Fix the bug in place (keep the module's path and the function's name).
        """,
        _patch(path, [(new, old) for old, new in spec.bugs[bug]]),
        [
            (
                "bug_symptom",
                f"assert _t1_call({path!r}, {spec.name!r}, {[cases[k]]!r}) == {[want[k]]!r}",
            ),
            ("bug_all_cases", f"assert _t1_call({path!r}, {spec.name!r}, {cases!r}) == {want!r}"),
        ],
        files=[EnvFile(path, faulty)],
        artifacts=[
            Artifact(
                "pymodule",
                path,
                {"func": spec.name, "spec": spec.name, "cases": cases, "want": want},
            )
        ],
        mentions=[path, spec.name],
        params={"bug": bug},
    )


_SHELL_BUGS = {
    "top": (
        "FILE N",
        "prints the N largest numbers of FILE (one number per line), largest first",
        'sort -rn "$1" | head -n "$2"',
        'sort -r "$1" | head -n "$2"',
    ),
    "count-level": (
        "FILE LEVEL",
        "prints how many lines of the log FILE have LEVEL as their second field",
        'awk -v l="$2" \'$2 == l\' "$1" | wc -l',
        'grep -c "$2" "$1"',
    ),
    "sum-column": (
        "FILE COL",
        "prints the sum of the integer column number COL (1-based) of the CSV FILE, skipping its header line",
        'tail -n +2 "$1" | cut -d, -f"$2" | paste -sd+ - | bc',
        'cut -d, -f"$2" "$1" | paste -sd+ - | bc',
    ),
    "count-files": (
        "DIR",
        "prints the number of regular files anywhere below DIR (directories do not count)",
        'find "$1" -type f | wc -l',
        'ls -R "$1" | grep -v -e "^$" -e ":$" | wc -l',
    ),
}


def _shell_case(ctx: StepContext, kind: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(files to create under /tmp/case, argv) for one test case of the script `kind`."""
    rng = ctx.rng
    if kind == "top":
        nums = rng.sample(range(1, 5000), rng.randint(6, 10)) + [7, 80, 900]
        rng.shuffle(nums)
        return [("nums.txt", "".join(f"{n}\n" for n in nums))], ["nums.txt", str(rng.randint(2, 4))]
    if kind == "count-level":
        lv = rng.choice(["ERROR", "WARN"])
        lines = [
            f"t{i} {rng.choice(['INFO', 'ERROR', 'WARN'])} {rng.choice(WORDS)}" for i in range(10)
        ]
        lines.append(f"t99 INFO retry after {lv} in {rng.choice(NOUNS)}")
        return [("app.log", "\n".join(lines) + "\n")], ["app.log", lv]
    if kind == "sum-column":
        rows = ["id,Qty,Cost"] + [
            f"{i},{rng.randint(0, 99)},{rng.randint(0, 99)}" for i in range(rng.randint(4, 8))
        ]
        return [("t.csv", "\n".join(rows) + "\n")], ["t.csv", str(rng.choice([2, 3]))]
    files = [(f"d/{w}.txt", "x\n") for w in rng.sample(WORDS, 3)]
    files += [(f"d/{rng.choice(NOUNS)}/{w}.md", "y\n") for w in rng.sample(WORDS, 2)]
    return files, ["d"]


def _shell_expected(kind: str, files: list[tuple[str, str]], argv: list[str]) -> str:
    if kind == "top":
        nums = sorted((int(x) for x in files[0][1].split()), reverse=True)
        return "\n".join(str(n) for n in nums[: int(argv[1])])
    if kind == "count-level":
        return str(sum(1 for line in files[0][1].splitlines() if line.split()[1] == argv[1]))
    if kind == "sum-column":
        col = int(argv[1]) - 1
        return str(sum(int(r.split(",")[col]) for r in files[0][1].splitlines()[1:]))
    return str(len(files))


@register("debugging.shell_bug", "debugging")
def shell_bug(ctx: StepContext):
    kind = ctx.rng.choice(sorted(_SHELL_BUGS))
    usage, doc, good, bad = _SHELL_BUGS[kind]
    path = f"/app/scripts/{ctx.word(ADJECTIVES)}-{kind}.sh"
    script = f"#!/bin/bash\n# usage: {path.rsplit('/', 1)[1]} {usage}\n# {doc}\nset -eu\n{bad}\n"
    cases = [_shell_case(ctx, kind) for _ in range(2)]
    tests = []
    for i, (files, argv) in enumerate(cases):
        want = _shell_expected(kind, files, argv)
        tests.append(
            (
                f"script_case{i}",
                f"""
                import shutil, tempfile
                root = Path(tempfile.mkdtemp())
                for name, text in {files!r}:
                    (root / name).parent.mkdir(parents=True, exist_ok=True)
                    (root / name).write_text(text)
                r = _t1_sh(["bash", {path!r}, *{argv!r}], cwd=str(root))
                assert r.returncode == 0, r.stderr
                assert r.stdout.strip() == {want!r}
                """,
            )
        )
    return make_step(
        ctx,
        "debugging.shell_bug",
        f"""
        The script `{path}` (usage: `{usage}`) should do this: it {doc}. It gives wrong
        results on some inputs. Find and fix the bug in place; keep its usage unchanged.
        """,
        _patch(path, [(bad, good)]),
        tests,
        files=[EnvFile(path, script, 0o755)],
        artifacts=[Artifact("script", path, {"usage": usage})],
        mentions=[path, usage],
    )


@register("debugging.broken_config", "debugging")
def broken_config(ctx: StepContext):
    rng = ctx.rng
    app = ctx.word(NOUNS)
    d = f"/app/{app}_service"
    name, host = f"{ctx.word(ADJECTIVES)}-{app}", rng.choice(["127.0.0.1", "0.0.0.0", "localhost"])
    port, workers = rng.randint(2000, 9000), rng.randint(2, 16)
    good = {"name": name, "host": host, "port": port, "workers": workers}
    broken = (
        "{\n"
        f'  "name": "{name}",\n  "host": "{host}",\n'
        f'  "port": "{port + rng.randint(1, 50)}",\n'
        f'  "wokers": {workers},\n'
        "}\n"
    )
    code = "\n".join(
        [
            "import json, pathlib",
            "cfg = json.loads((pathlib.Path(__file__).parent / 'config.json').read_text())",
            "assert isinstance(cfg['port'], int), 'port must be an integer'",
            "print(f\"{cfg['name']} listening on {cfg['host']}:{cfg['port']} with {cfg['workers']} workers\")",
        ]
    )
    line = f"{name} listening on {host}:{port} with {workers} workers"
    digest = hashlib.sha256((code + "\n").encode()).hexdigest()
    return make_step(
        ctx,
        "debugging.broken_config",
        f"""
        `python3 {d}/app.py` crashes because `{d}/config.json` is broken. Fix the config
        only (do not modify `app.py`) so the app prints exactly:
        `{line}`
        """,
        heredoc(f"{d}/config.json", json.dumps(good, indent=2)),
        [
            (
                "config_runs",
                f"""
                r = _t1_sh(["python3", "{d}/app.py"])
                assert r.returncode == 0, r.stderr
                assert r.stdout.strip() == {line!r}
                """,
            ),
            (
                "config_app_unchanged",
                f"""
                json.loads(Path("{d}/config.json").read_text())
                assert hashlib.sha256(Path("{d}/app.py").read_bytes()).hexdigest() == {digest!r}
                """,
            ),
        ],
        files=[EnvFile(f"{d}/app.py", code + "\n"), EnvFile(f"{d}/config.json", broken)],
        artifacts=[Artifact("json", f"{d}/config.json")],
        mentions=[f"{d}/app.py", f"{d}/config.json", line],
    )


__all__ = ["FUNCS"]

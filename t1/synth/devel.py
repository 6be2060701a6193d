"""Software-development steps: write a Python module to a spec, wrap it in a CLI, write unit
tests that catch a faulty implementation, implement a small class.

    from t1.synth.devel import FUNCS      # the function specs (also used by debugging steps)

Each `FuncSpec` carries a reference implementation (run at generation time to compute the
expected values), a case generator and planted bugs (line replacements) that change outputs.
"""

from __future__ import annotations

import random
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from t1.synth.steps import (
    ADJECTIVES,
    NOUNS,
    WORDS,
    Artifact,
    NotApplicable,
    StepContext,
    heredoc,
    jsonable,
    make_step,
    register,
)


@dataclass(frozen=True)
class FuncSpec:
    name: str
    params: str  # "text" / "n" / "a, b"
    doc: str  # what it returns, for the instruction
    source: str  # reference implementation; `{name}` is the function name
    cases: Callable[[random.Random], list[list[Any]]]
    bugs: tuple[tuple[tuple[str, str], ...], ...]  # each bug: (correct, faulty) replacements
    cli: str | None = None  # how a CLI parses argv into args: "str" | "int" | None

    def code(self, name: str | None = None) -> str:
        return self.source.replace("{name}", name or self.name)

    def faulty(self, bug: int, name: str | None = None) -> str:
        code = self.code(name)
        for old, new in self.bugs[bug]:
            if code.count(old) != 1:
                raise AssertionError(f"{self.name}: bug text {old!r} not unique in source")
            code = code.replace(old, new)
        return code

    def run(self, code: str, cases: list[list[Any]], name: str | None = None) -> list[Any]:
        ns: dict[str, Any] = {}
        exec(code, ns)  # our own reference source, at generation time
        return [jsonable(ns[name or self.name](*c)) for c in cases]


def _phrases(rng: random.Random) -> list[list[Any]]:
    seps = [" ", "  ", ", ", " - ", "!", "__", "/"]
    out = []
    for _ in range(5):
        words = [rng.choice(WORDS + ADJECTIVES).title() for _ in range(rng.randint(2, 4))]
        s = (
            rng.choice(["", " ", "--", "#"])
            + rng.choice(seps).join(words)
            + rng.choice(["", "!", " ", "?"])
        )
        out.append([s])
    out.append([f"Caf\u00e9 {rng.choice(WORDS)} D\u00e9j\u00e0 vu"])
    return out


def _durations(rng: random.Random) -> list[list[Any]]:
    out = []
    for _ in range(6):
        parts = []
        for unit, hi in (("h", 30), ("m", 59), ("s", 59)):
            if rng.random() < 0.7:
                parts.append(f"{rng.randint(1, hi)}{unit}")
        out.append(["".join(parts) or "45s"])
    out.append(["1h30m"])
    return out


def _runs(rng: random.Random) -> list[list[Any]]:
    return [
        ["".join(rng.choice("abc") * rng.randint(1, 4) for _ in range(rng.randint(2, 5)))]
        for _ in range(5)
    ]


def _romans(rng: random.Random) -> list[list[Any]]:
    return [[n] for n in [4, 9, 14, 40, 1994, *rng.sample(range(1, 4000), 4)]]


def _luhn_cases(rng: random.Random) -> list[list[Any]]:
    out = []
    for _ in range(6):
        body = [rng.randint(0, 9) for _ in range(rng.randint(8, 15))]
        total = 0
        for i, d in enumerate(reversed(body)):
            if i % 2 == 0:
                d = d * 2 - 9 if d * 2 > 9 else d * 2
            total += d
        digits = "".join(map(str, body)) + str((10 - total % 10) % 10)
        if rng.random() < 0.4:
            k = rng.randrange(len(digits))
            digits = digits[:k] + str((int(digits[k]) + 1) % 10) + digits[k + 1 :]
        out.append([digits])
    out.append(["79927398713"])
    return out


def _caesar_cases(rng: random.Random) -> list[list[Any]]:
    return [
        [
            f"{rng.choice(WORDS).title()} {rng.choice(NOUNS)}, {rng.choice(ADJECTIVES)}!",
            rng.randint(1, 25),
        ]
        for _ in range(5)
    ] + [["xyz XYZ", 3]]


def _versions(rng: random.Random) -> list[list[Any]]:
    def v() -> str:
        return ".".join(str(rng.randint(0, 12)) for _ in range(rng.randint(1, 3)))

    return [[v(), v()] for _ in range(5)] + [
        ["1.10", "1.9"],
        ["2.0", "2"],
        ["3", "3.0"],
        ["1.2.3", "1.2.10"],
    ]


def _chunks(rng: random.Random) -> list[list[Any]]:
    return [
        [[rng.randint(-9, 30) for _ in range(rng.randint(5, 11))], rng.randint(2, 4)]
        for _ in range(5)
    ]


def _brackets(rng: random.Random) -> list[list[Any]]:
    out = []
    for _ in range(6):
        s = ""
        for _ in range(rng.randint(2, 5)):
            o, c = rng.choice(["()", "[]", "{}"])
            s = rng.choice([o + s + c, s + o + c])
        if rng.random() < 0.5:
            k = rng.randrange(len(s))
            s = s[:k] + s[k + 1 :]
        out.append([s])
    return out + [["(("], ["([)]"]]


FUNCS: dict[str, FuncSpec] = {
    f.name: f
    for f in [
        FuncSpec(
            "slugify",
            "text",
            "returns `text` lower-cased, with every run of characters that are not ASCII letters or digits replaced by a single `-`, and without leading or trailing `-`",
            'def {name}(text):\n    out = []\n    prev_dash = False\n    for ch in text.lower():\n        if ch.isascii() and ch.isalnum():\n            out.append(ch)\n            prev_dash = False\n        elif not prev_dash:\n            out.append("-")\n            prev_dash = True\n    return "".join(out).strip("-")\n',
            _phrases,
            (
                (('.strip("-")', '.rstrip("-")'),),
                (("if ch.isascii() and ch.isalnum():", "if ch.isalnum():"),),
                (("elif not prev_dash:", "else:"),),
            ),
            cli="str",
        ),
        FuncSpec(
            "parse_duration",
            "text",
            "returns the number of seconds in a duration like `1h30m15s` (hours `h`, minutes `m`, seconds `s`; each part optional, in that order)",
            'def {name}(text):\n    total, num = 0, ""\n    units = {"h": 3600, "m": 60, "s": 1}\n    for ch in text:\n        if ch.isdigit():\n            num += ch\n        else:\n            total += int(num) * units[ch]\n            num = ""\n    return total\n',
            _durations,
            ((('"m": 60', '"m": 100'),), (('            num = ""\n', "            pass\n"),)),
            cli="str",
        ),
        FuncSpec(
            "run_length",
            "text",
            "returns the run-length encoding of `text`: each maximal run of one character as the character followed by the run length (`aaabcc` -> `a3b1c2`)",
            'def {name}(text):\n    out = []\n    i = 0\n    while i < len(text):\n        j = i\n        while j < len(text) and text[j] == text[i]:\n            j += 1\n        out.append(f"{text[i]}{j - i}")\n        i = j\n    return "".join(out)\n',
            _runs,
            (
                (('out.append(f"{text[i]}{j - i}")', 'out.append(f"{j - i}{text[i]}")'),),
                (('return "".join(out)', 'return ",".join(out)'),),
            ),
            cli="str",
        ),
        FuncSpec(
            "to_roman",
            "n",
            "returns the Roman numeral of the integer `n` (1 to 3999) in standard subtractive form (`4` -> `IV`, `1994` -> `MCMXCIV`)",
            'def {name}(n):\n    table = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),\n             (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]\n    out = ""\n    for value, sym in table:\n        while n >= value:\n            out += sym\n            n -= value\n    return out\n',
            _romans,
            (
                (
                    (
                        '(50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]',
                        '(50, "L"), (10, "X"), (5, "V"), (1, "I")]',
                    ),
                ),
                (("while n >= value:", "while n > value:"),),
            ),
            cli="int",
        ),
        FuncSpec(
            "luhn_valid",
            "digits",
            "returns True if the digit string `digits` passes the Luhn checksum (double every second digit from the right, subtract 9 from results above 9, the sum must be divisible by 10), else False",
            "def {name}(digits):\n    total = 0\n    for i, ch in enumerate(reversed(digits)):\n        d = int(ch)\n        if i % 2 == 1:\n            d *= 2\n            if d > 9:\n                d -= 9\n        total += d\n    return total % 10 == 0\n",
            _luhn_cases,
            ((("if i % 2 == 1:", "if i % 2 == 0:"),), (("if d > 9:", "if d > 10:"),)),
            cli="str",
        ),
        FuncSpec(
            "caesar",
            "text, shift",
            "returns `text` with every ASCII letter shifted `shift` places forward in the alphabet, wrapping around and keeping its case; other characters unchanged",
            'def {name}(text, shift):\n    out = []\n    for ch in text:\n        if "a" <= ch <= "z":\n            out.append(chr((ord(ch) - 97 + shift) % 26 + 97))\n        elif "A" <= ch <= "Z":\n            out.append(chr((ord(ch) - 65 + shift) % 26 + 65))\n        else:\n            out.append(ch)\n    return "".join(out)\n',
            _caesar_cases,
            (
                (("+ shift) % 26 + 97", "+ shift) % 25 + 97"),),
                (("(ord(ch) - 65 + shift) % 26 + 65", "(ord(ch) - 65 + shift) % 26 + 97"),),
            ),
        ),
        FuncSpec(
            "version_compare",
            "a, b",
            "compares two dotted version strings numerically part by part (missing parts count as 0) and returns -1, 0 or 1 as `a` is lower than, equal to or higher than `b`",
            'def {name}(a, b):\n    pa = [int(x) for x in a.split(".")]\n    pb = [int(x) for x in b.split(".")]\n    n = max(len(pa), len(pb))\n    pa += [0] * (n - len(pa))\n    pb += [0] * (n - len(pb))\n    return (pa > pb) - (pa < pb)\n',
            _versions,
            (
                (
                    ('pa = [int(x) for x in a.split(".")]', 'pa = a.split(".")'),
                    ('pb = [int(x) for x in b.split(".")]', 'pb = b.split(".")'),
                ),
                (("    pa += [0] * (n - len(pa))\n", ""),),
            ),
        ),
        FuncSpec(
            "chunk_sums",
            "nums, k",
            "returns the list of sums of consecutive chunks of `k` items of the list `nums` (the last chunk may be shorter)",
            "def {name}(nums, k):\n    return [sum(nums[i:i + k]) for i in range(0, len(nums), k)]\n",
            _chunks,
            (
                (("range(0, len(nums), k)", "range(0, len(nums) - k, k)"),),
                (("nums[i:i + k]", "nums[i:i + k - 1]"),),
            ),
        ),
        FuncSpec(
            "balanced",
            "text",
            "returns True if the brackets `()`, `[]` and `{}` in `text` are balanced and properly nested, else False",
            'def {name}(text):\n    pairs = {")": "(", "]": "[", "}": "{"}\n    stack = []\n    for ch in text:\n        if ch in "([{":\n            stack.append(ch)\n        elif ch in pairs:\n            if not stack or stack.pop() != pairs[ch]:\n                return False\n    return not stack\n',
            _brackets,
            ((("return not stack", "return True"),), (('if ch in "([{":', 'if ch in "([":'),)),
            cli="str",
        ),
    ]
}


def pick_spec(ctx: StepContext) -> tuple[FuncSpec, list[list[Any]]]:
    spec = FUNCS[ctx.rng.choice(sorted(FUNCS))]
    return spec, spec.cases(ctx.rng)


def example_lines(spec: FuncSpec, name: str, cases: list[list[Any]], results: list[Any]) -> str:
    return "\n".join(
        f"- `{name}({', '.join(repr(a) for a in c)})` returns `{r!r}`"
        for c, r in zip(cases, results, strict=True)
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

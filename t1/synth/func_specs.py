"""Small Python functions to a spec, for the software-development and debugging steps.

    from t1.synth.func_specs import FUNCS, pick_spec
    spec, cases = pick_spec(ctx)
    want = spec.run(spec.code(), cases)          # the reference outputs
    bad = spec.faulty(0)                         # the source with planted bug 0

Each `FuncSpec` carries a reference implementation (run at generation time to compute the
expected values), a case generator and planted bugs (line replacements) that change outputs.
Used by t1/synth/devel.py (module, CLI, unit tests) and t1/synth/debugging.py.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from t1.synth.steps import ADJECTIVES, NOUNS, WORDS, StepContext, jsonable


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

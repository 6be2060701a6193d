"""Verifier report formats -> per-assertion outcomes: JUnit XML, pytest's -rA summary, reward files.

    from t1.verify.outcomes import outcomes_from, parse_junit, parse_summary
    assertions, source, reward_value, problem = outcomes_from(junit, output, reward_txt, None)

Pure functions (no sandbox); t1.verify.verifier uses them and says which source it trusts when.
Tested on the output of a real pytest run: .venv/bin/python -m pytest tests/test_verifier.py

Names are `<test file stem>::<class>::<test>[<params>]`. JUnit: every <testcase> is one
assertion (parametrized cases count separately); <failure>/<error> = failed; <skipped> =
passed (DESIGN: skipped and xfail count as passed); a non-strict XPASS is written by pytest
as a plain pass. Summary: PASSED, SKIPPED, XFAIL, XPASS = passed; FAILED, ERROR = failed
(XPASS counts as passed so both sources agree; terminal-bench's own parser counts it failed).
Reward files: reward.txt (a number) or reward.json ({"reward": x} or one value): one
assertion named "reward", passed iff the value is >= 1.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import PurePosixPath

PASSING = frozenset({"passed", "skipped", "xfail", "xpass"})
OUTCOMES = frozenset({"passed", "failed", "error", "skipped", "xfail", "xpass"})


@dataclass(frozen=True)
class Assertion:
    name: str
    outcome: str  # passed | failed | error | skipped | xfail | xpass

    @property
    def ok(self) -> bool:
        return self.outcome in PASSING


# --------------------------------------------------------------------------- parsers


def parse_junit(text: str) -> list[Assertion]:
    """Assertions from pytest JUnit XML (either family); raises ValueError if it is not XML."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ValueError(f"invalid JUnit XML: {e}") from None
    merged: dict[str, str] = {}
    for case in root.iter("testcase"):
        name = _junit_name(case.get("classname", ""), case.get("name", ""), case.get("file"))
        outcome = "passed"
        for child in case:
            if child.tag == "failure":
                outcome = "failed"
            elif child.tag == "error":
                outcome = "error"
            elif child.tag == "skipped" and outcome == "passed":
                outcome = "xfail" if child.get("type") == "pytest.xfail" else "skipped"
        # A case reported twice (e.g. call failed, then teardown errored) fails if either did.
        previous = merged.get(name)
        if previous is None or (previous in PASSING and outcome not in PASSING):
            merged[name] = outcome
    return [Assertion(n, o) for n, o in merged.items()]


def _junit_name(classname: str, name: str, file: str | None) -> str:
    parts = classname.split(".") if classname else []
    if file:  # xunit1: the module's dotted path is the file path without .py
        mod = PurePosixPath(file.replace("\\", "/"))
        prefix = ".".join(p for p in mod.with_suffix("").parts if p not in ("..", "."))
        rest = classname[len(prefix) :].lstrip(".") if classname.startswith(prefix) else ""
        return "::".join([mod.stem, *filter(None, rest.split(".")), name])
    # xunit2: guess where the module ends: the first part that looks like a class name.
    cut = next((i for i, p in enumerate(parts) if p[:1].isupper()), len(parts))
    module = parts[cut - 1] if cut > 0 else ""
    return "::".join(filter(None, [module, *parts[cut:], name]))


_SUMMARY_HEADER = re.compile(r"^=+ short test summary info =+\s*$")
_SUMMARY_LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(.*?)\s*$")
_SKIPPED_COUNT = re.compile(r"^\[(\d+)\]\s+(\S+?):(\d+):")


def parse_summary(output: str) -> list[Assertion]:
    """Assertions from pytest's `-rA` short test summary (every such section in the output)."""
    out: list[Assertion] = []
    in_summary = False
    for line in output.splitlines():
        line = line.rstrip("\r")
        if _SUMMARY_HEADER.match(line):
            in_summary = True
            continue
        if not in_summary:
            continue
        if line.startswith("="):
            in_summary = False
            continue
        m = _SUMMARY_LINE.match(line)
        if not m:
            continue
        word, rest = m.groups()
        if word == "SKIPPED":
            s = _SKIPPED_COUNT.match(rest)
            count, where = (
                (int(s.group(1)), f"{_stem(s.group(2))}:{s.group(3)}") if s else (1, rest)
            )
            out += [
                Assertion(f"{where}#{i}" if count > 1 else where, "skipped") for i in range(count)
            ]
            continue
        out.append(Assertion(_nodeid_name(_nodeid_of(rest, word)), word.lower()))
    return out


_PARAM_NODEID = re.compile(r"^([^\[\s]*\[.*?\])(?: - |$)")


def _nodeid_of(rest: str, word: str) -> str:
    """The node id of a summary line; all but PASSED may end in " - <message>"."""
    if word == "PASSED":
        return rest
    m = _PARAM_NODEID.match(rest)  # parameters may themselves contain " - "
    return m.group(1) if m else rest.split(" - ", 1)[0].strip()


def _stem(path: str) -> str:
    return PurePosixPath(path).stem


def _nodeid_name(nodeid: str) -> str:
    file, sep, rest = nodeid.partition("::")
    return f"{_stem(file)}::{rest}" if sep else nodeid


def parse_reward_file(text: str, kind: str) -> float:
    """The aggregate reward in reward.txt (a number) or reward.json ({"reward": x} or one value)."""
    if kind == "txt":
        try:
            return float(text.strip())
        except ValueError:
            raise ValueError(
                f"reward.txt must hold one number, got {text.strip()[:80]!r}"
            ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"reward.json is not JSON: {e}") from None
    if isinstance(data, int | float) and not isinstance(data, bool):
        return float(data)
    if isinstance(data, dict):
        if isinstance(data.get("reward"), int | float):
            return float(data["reward"])
        numbers = [
            v for v in data.values() if isinstance(v, int | float) and not isinstance(v, bool)
        ]
        if len(numbers) == 1:
            return float(numbers[0])
    raise ValueError(f"reward.json needs a 'reward' number, got {text.strip()[:80]!r}")


def outcomes_from(
    junit: str | None, output: str, reward_txt: str | None, reward_json: str | None
) -> tuple[list[Assertion], str, float | None, str | None]:
    """Pick the first source that yields outcomes: (assertions, source, reward_value, problem)."""
    problems: list[str] = []
    reward_value = None
    for text, kind in ((reward_txt, "txt"), (reward_json, "json")):
        if text is not None and reward_value is None:
            try:
                reward_value = parse_reward_file(text, kind)
            except ValueError as e:
                problems.append(str(e))
    if junit is not None:
        try:
            assertions = parse_junit(junit)
            if assertions:
                return assertions, "junit", reward_value, None
            problems.append("junit.xml holds no test cases")
        except ValueError as e:
            problems.append(str(e))
    assertions = parse_summary(output)
    if assertions:
        return assertions, "summary", reward_value, None
    if reward_value is not None:
        outcome = "passed" if reward_value >= 1.0 else "failed"
        return [Assertion("reward", outcome)], "reward_file", reward_value, None
    problems.append("no JUnit XML, no -rA summary and no reward file")
    return [], "none", reward_value, "; ".join(problems)

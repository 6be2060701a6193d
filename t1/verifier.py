"""The held-out verifier: run a task's own test script in its sandbox, read per-assertion outcomes.

    from t1.verifier import score_in_sandbox
    result = score_in_sandbox(task, sandbox)     # after the agent (or the oracle) acted
    result.passed, result.total, result.assertions, result.source

There is no command of its own; `t1 oracle` and the rollout call `score_in_sandbox`.

How the script runs (as the Terminal-Bench harnesses run it):
* /tests and /logs/verifier are wiped and made fresh, then the tests are copied in; they are
  never inside the sandbox before this point.
* v1: `tests/*` and `run-tests.sh` go to /tests; `bash /tests/run-tests.sh` runs from the
  workdir with TEST_DIR=/tests. With `run_tests_in_same_shell: true` it runs in the agent's
  shell as the agent left it (cwd, exported variables); otherwise in a subshell that starts
  in the workdir (TB opens a new session there). Background processes survive either way.
* v2: `tests/` goes to /tests; `bash /tests/test.sh` runs from the workdir with the task's
  `[verifier] env`.
* Both get PYTEST_ADDOPTS="--junitxml=/logs/verifier/junit.xml -o junit_family=xunit1 -rA"
  (xunit1 adds the file of each case, so names agree with the -rA summary) and the script's
  output goes to /logs/verifier/test-output.txt.

Where the outcomes come from, first that exists wins (`VerifierResult.source`):
1. "junit": /logs/verifier/junit.xml. Every <testcase> is one assertion (parametrized cases
   count separately). <failure>/<error> = failed; <skipped> = passed (DESIGN: skipped and
   xfail count as passed); a non-strict XPASS is written by pytest as a plain pass.
2. "summary": the `-rA` short test summary in the output. PASSED, SKIPPED, XFAIL, XPASS =
   passed; FAILED, ERROR = failed. XPASS counts as passed so that both sources agree (pytest
   writes a non-strict XPASS into JUnit as a pass; a strict one is FAILED in both). Note that
   terminal-bench's own parser counts XPASS as failed.
3. "reward_file": /logs/verifier/reward.txt or reward.json (aggregate only): one assertion
   named "reward", passed iff the value is >= 1.
Names are `<test file stem>::<class>::<test>[<params>]`.

A verifier that times out, crashes or yields no outcomes gives a result with `error` set (and
total 0 when nothing was read); it never raises into the caller's run loop.
"""

from __future__ import annotations

import json
import re
import shlex
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from t1.tasks.model import Task

PASSING = frozenset({"passed", "skipped", "xfail", "xpass"})
OUTCOMES = frozenset({"passed", "failed", "error", "skipped", "xfail", "xpass"})
LOG_DIR = "/logs/verifier"
TESTS_DIR = "/tests"
JUNIT_PATH = f"{LOG_DIR}/junit.xml"
OUTPUT_PATH = f"{LOG_DIR}/test-output.txt"
PYTEST_ADDOPTS = f"--junitxml={JUNIT_PATH} -o junit_family=xunit1 -rA"
OUTPUT_KEEP_CHARS = 8000  # tail of the verifier output kept in the result
_MAX_READ_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Assertion:
    name: str
    outcome: str  # passed | failed | error | skipped | xfail | xpass

    @property
    def ok(self) -> bool:
        return self.outcome in PASSING


@dataclass(frozen=True)
class VerifierResult:
    assertions: list[Assertion] = field(default_factory=list)
    source: str = "none"  # junit | summary | reward_file | none
    exit_code: int | None = None
    output: str = ""  # tail of the verifier's output
    error: str | None = None
    reward_value: float | None = None  # what reward.txt / reward.json said, if present
    seconds: float = 0.0

    @property
    def passed(self) -> int:
        return sum(a.ok for a in self.assertions)

    @property
    def total(self) -> int:
        return len(self.assertions)

    @property
    def resolved(self) -> bool:
        return self.total > 0 and self.passed == self.total


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


# --------------------------------------------------------------------------- running


def verifier_command(task: Task, base_env: dict[str, str] | None = None) -> str:
    """The shell line that runs the task's verifier inside its sandbox (output to a log file).

    `base_env` is the environment the sandbox started with (`sandbox.base_env`). When given,
    the verifier runs under `env -i` with exactly that environment, so nothing the agent
    exported (PATH to a fake `python3` or `uvx`, PYTHONPATH, PYTEST_PLUGINS ...) reaches it —
    the files and processes the agent left behind do, as in a harness that execs a new shell
    into the same container. v1 tasks with `run_tests_in_same_shell` run in the agent's shell
    as they ask.
    """
    env = {"PYTEST_ADDOPTS": PYTEST_ADDOPTS, **dict(task.verifier.env)}
    if task.layout == "v1":
        env["TEST_DIR"] = TESTS_DIR
        script = f"{TESTS_DIR}/run-tests.sh"
    else:
        script = f"{TESTS_DIR}/{task.verifier.script.name}"
    redirect = f"> {OUTPUT_PATH} 2>&1 < /dev/null"
    same_shell = task.layout == "v1" and task.run_tests_in_same_shell
    if base_env is not None and not same_shell:
        env = {**base_env, **env}
        assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        return f"(cd {shlex.quote(task.workdir)} && env -i {assigns} bash {script}) {redirect}"
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    run = f"env {assigns} bash {script}"
    if same_shell:
        return f"{run} {redirect}"
    return f"(cd {shlex.quote(task.workdir)} && {run}) {redirect}"


def copy_tests_in(task: Task, sandbox) -> None:
    """Fresh /tests and /logs/verifier, then the task's tests (and v1 run-tests.sh) into /tests."""
    r = sandbox.exec(f"rm -rf {TESTS_DIR} {LOG_DIR} && mkdir -p {TESTS_DIR} {LOG_DIR}", timeout=60)
    if r.exit_code != 0:
        raise RuntimeError(
            f"could not prepare {TESTS_DIR} and {LOG_DIR}: {r.output.strip()[-500:]}"
        )
    tests = task.verifier.tests_dir
    if tests is not None and tests.is_dir():
        for item in sorted(tests.iterdir()):
            sandbox.put(item, f"{TESTS_DIR}/{item.name}")
    if task.layout == "v1":
        sandbox.put(task.verifier.script, f"{TESTS_DIR}/run-tests.sh")


def score_in_sandbox(task: Task, sandbox, timeout: float | None = None) -> VerifierResult:
    """Verify what was done in `sandbox` (agent or oracle already acted): never raises."""
    t0 = time.monotonic()
    timeout = timeout or task.verifier_timeout_s
    try:
        copy_tests_in(task, sandbox)
        r = sandbox.exec(verifier_command(task, getattr(sandbox, "base_env", None)), timeout=timeout)
    except Exception as e:  # the sandbox died or refused: a verifier error, not a crash
        return VerifierResult(error=f"verifier could not run: {e}", seconds=time.monotonic() - t0)
    files = _fetch(
        sandbox, [JUNIT_PATH, OUTPUT_PATH, f"{LOG_DIR}/reward.txt", f"{LOG_DIR}/reward.json"]
    )
    output = files[OUTPUT_PATH] or r.output
    assertions, source, reward_value, problem = outcomes_from(
        files[JUNIT_PATH], output, files[f"{LOG_DIR}/reward.txt"], files[f"{LOG_DIR}/reward.json"]
    )
    error = None
    if r.timed_out:
        error = f"verifier timed out after {timeout:g} s"
    elif problem:
        error = f"verifier produced no outcomes (exit {r.exit_code}): {problem}"
    if error:
        tail = output.strip()[-400:]
        error += f"; output tail: {tail}" if tail else "; no output"
    return VerifierResult(
        assertions=assertions,
        source=source,
        exit_code=r.exit_code,
        output=output[-OUTPUT_KEEP_CHARS:],
        error=error,
        reward_value=reward_value,
        seconds=time.monotonic() - t0,
    )


def _fetch(sandbox, paths: list[str]) -> dict[str, str | None]:
    """Read files out of the sandbox (None for a file that is not there)."""
    out: dict[str, str | None] = {}
    with tempfile.TemporaryDirectory(prefix="t1-verifier-") as tmp:
        for i, src in enumerate(paths):
            dst = Path(tmp) / f"{i}-{PurePosixPath(src).name}"
            try:
                sandbox.get(src, dst)
            except Exception:
                out[src] = None
                continue
            if not dst.is_file():
                out[src] = None
                continue
            with dst.open("rb") as fh:
                out[src] = fh.read(_MAX_READ_BYTES).decode("utf-8", errors="replace")
    return out

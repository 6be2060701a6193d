"""The verifier in the agent's own shell: backends without a compartment (NOT hardened).

    r = _score_in_shell(task, sandbox)     # via t1.verify.verifier.score_in_sandbox
    verifier_command(task, sandbox.base_env)   # the shell line it runs

The shell path (other backends), as the Terminal-Bench harnesses run it: /tests and
/logs/verifier are made fresh, the tests copied in; v1 `bash /tests/run-tests.sh` from the
workdir with TEST_DIR=/tests (`run_tests_in_same_shell: true`: in the agent's shell), v2
`bash /tests/test.sh` with the task's `[verifier] env`; both with PYTEST_ADDOPTS=
"--junitxml=/logs/verifier/junit.xml -o junit_family=xunit1 -rA", output to
/logs/verifier/test-output.txt; outcomes from junit.xml, else the -rA summary (XPASS passed,
where terminal-bench's own parser counts it failed), else reward.txt / reward.json (one
assertion "reward", passed iff >= 1).

t1.verify.hardened keeps the same /tests layout for the bwrap backend.
"""

from __future__ import annotations

import shlex
import tempfile
import time
from pathlib import Path, PurePosixPath

from t1.tasks.model import Task
from t1.verify.outcomes import outcomes_from
from t1.verify.result import _MAX_READ_BYTES, OUTPUT_KEEP_CHARS, VerifierResult

LOG_DIR = "/logs/verifier"
TESTS_DIR = "/tests"
JUNIT_PATH = f"{LOG_DIR}/junit.xml"
OUTPUT_PATH = f"{LOG_DIR}/test-output.txt"
PYTEST_ADDOPTS = f"--junitxml={JUNIT_PATH} -o junit_family=xunit1 -rA"


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


def _score_in_shell(task: Task, sandbox, timeout: float | None = None) -> VerifierResult:
    """The verifier in the agent's own shell (backends without a compartment): NOT hardened."""
    t0 = time.monotonic()
    timeout = timeout or task.verifier_timeout_s
    try:
        copy_tests_in(task, sandbox)
        r = sandbox.exec(
            verifier_command(task, getattr(sandbox, "base_env", None)), timeout=timeout
        )
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

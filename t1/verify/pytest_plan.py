"""How the harness runs a task's pytest in the compartment: targets, packages, ini, environment.

    plan = pytest_plan(task)      # (targets under /tests, pip specs), or None: run the script
    env = harness_env(task, sandbox.base_env)
    _ini(tests_dir, HARNESS_INSIDE), _tail_paths(task)   # -c and --tail-path arguments

Pure reading of the task; t1.verify.hardened builds the harness's argv from it.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from t1.tasks.model import Task
from t1.verify.in_shell import TESTS_DIR

_TEST_FILE = re.compile(r"(?:^|/)(?:test_[^/]*|[^/]*_test)\.py$")
_DROP_ENV = ("PYTEST_", "LD_", "BASH_ENV", "ENV", "BASH_FUNC_")


def pytest_plan(task: Task) -> tuple[list[str], list[str]] | None:
    """(pytest targets inside /tests, pip specs) when the verifier is pytest over test files.

    None: no test_*.py / *_test.py in the tests dir, or a script that never names pytest; such a
    verifier is run as its script (its reward file is the outcome). Targets are the script's
    arguments that name files or dirs under /tests ($TEST_DIR too); none named = /tests.
    """
    tests = task.verifier.tests_dir
    script = task.verifier.script
    text = script.read_text(errors="replace") if script is not None and script.is_file() else ""
    has_py = (
        tests is not None
        and tests.is_dir()
        and any(_TEST_FILE.search(p.name) for p in tests.rglob("*.py"))
    )
    if not has_py or "pytest" not in text:
        return None
    targets: list[str] = []
    for word in re.findall(r"[^\s;&|'\"()<>]+", text.replace("${TEST_DIR}", "$TEST_DIR")):
        word = word.replace("$TEST_DIR", TESTS_DIR)
        if word.startswith(TESTS_DIR + "/") and (word.endswith(".py") or "::" in word):
            path = word.split("::", 1)[0]
            if (tests / path[len(TESTS_DIR) + 1 :]).exists() and word not in targets:
                targets.append(word)
    specs = [s for s in script_pip_and_pythons(text)[0] if not s.startswith(("-", "."))]
    if not any(re.match(r"pytest\b(?![-_])", s) for s in specs):
        specs.append("pytest")
    return targets or [TESTS_DIR], specs


@functools.lru_cache(maxsize=256)
def script_pip_and_pythons(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(pip specs, Python versions) a verifier script asks for (t1.sandbox.needs), parsed once
    per script text: the shell parse took ~3 ms, twice per verifier run."""
    from t1.sandbox.needs import script_needs

    needs = script_needs(text)
    return tuple(needs.pip_specs()), tuple(needs.python_versions())


def _ini(tests_dir: Path, harness_inside: str) -> str:
    """The task's own /tests/pytest.ini (markers, options: it is the task's, like its
    conftest.py), else ours; never one found by pytest's search above /tests or in the cwd."""
    if (tests_dir / "pytest.ini").is_file() and not (tests_dir / "pytest.ini").is_symlink():
        return f"{TESTS_DIR}/pytest.ini"
    return f"{harness_inside}/pytest.ini"


def _tail_paths(task: Task) -> list[str]:
    """`--tail-path` args: the agent's site dirs when the script runs the system Python's pytest
    (plain `pytest`, `python -m pytest`); none under uv / uvx, whose envs are isolated too."""
    script = task.verifier.script
    text = script.read_text(errors="replace") if script is not None and script.is_file() else ""
    if re.search(r"\buvx\b|\buv\s+run\b", text):
        return []
    return [x for d in tail_dirs() for x in ("--tail-path", d)]


def tail_dirs() -> list[str]:
    """The agent's site dirs (t1.verify.script_runner appends them to sys.path of a harness run
    for `pytest` / `python -m pytest`, never for `uv run` / `uvx`)."""
    ver = re.search(r"python(3\.\d+)$", os.path.realpath("/usr/bin/python3"))
    v = ver.group(1) if ver else "3"
    dirs = [f"/usr/local/lib/python{v}/dist-packages", "/usr/lib/python3/dist-packages",
            f"/usr/local/lib/python{v}/site-packages"]  # fmt: skip
    return dirs


def harness_env(task: Task, base_env: dict[str, str] | None) -> dict[str, str]:
    """The compartment's environment: the sandbox's start env and the task's verifier env,
    without PYTEST_*, LD_*, BASH_ENV (they change how pytest reports or what every process
    loads), with a PATH of our tools first and the harness's own TMPDIR."""
    from t1.sandbox.bwrap_plan import BASE_PATH
    from t1.sandbox.compartment import TMP_INSIDE
    from t1.sandbox.hostview import HOST_VIEW

    env = {**(base_env or {}), **dict(task.verifier.env)}
    env = {k: v for k, v in env.items() if not k.startswith(_DROP_ENV)}
    start = (base_env or {}).get("PATH", BASE_PATH).split(":")  # ours and the task's
    path = ["/opt/t1/bin", *(d for d in start if d and d != "/opt/t1/bin")]
    env.update(
        PATH=":".join(dict.fromkeys(path)),
        TEST_DIR=TESTS_DIR,
        HOME="/root",
        USER="root",
        LOGNAME="root",
        TMPDIR=TMP_INSIDE,
        OPENSSL_CONF=f"{HOST_VIEW}/etc/ssl/openssl.cnf",
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
    )
    return env

"""Verifier outcome parsers on output of a real pytest run: JUnit XML, -rA summary, reward files.

.venv/bin/pytest tests/test_verifier.py -q
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from t1.tasks import load_task
from t1.verifier import (
    PYTEST_ADDOPTS,
    Assertion,
    VerifierResult,
    outcomes_from,
    parse_junit,
    parse_reward_file,
    parse_summary,
    verifier_command,
)

REPO = Path(__file__).resolve().parents[1]

TEST_FILE = """
import pytest

def test_ok():
    assert True

@pytest.mark.parametrize("x", [1, 2, "a b", "c - d"])
def test_param(x):
    assert x != 2

class TestGroup:
    def test_in_class(self):
        assert False, "boom"

    @pytest.mark.skip(reason="not today")
    def test_skip(self):
        pass

    @pytest.mark.xfail(reason="known")
    def test_xfail(self):
        assert 0

    @pytest.mark.xfail(reason="surprise")
    def test_xpass(self):
        pass

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

def test_error(broken):
    pass
"""

EXPECTED = {
    "test_outputs::test_ok": "passed",
    "test_outputs::test_param[1]": "passed",
    "test_outputs::test_param[2]": "failed",
    "test_outputs::test_param[a b]": "passed",
    "test_outputs::test_param[c - d]": "passed",
    "test_outputs::TestGroup::test_in_class": "failed",
    "test_outputs::TestGroup::test_xfail": "xfail",
    "test_outputs::test_error": "error",
}


@pytest.fixture(scope="module")
def pytest_run(tmp_path_factory):
    """Run real pytest the way a verifier does: tests outside the cwd, our PYTEST_ADDOPTS."""
    root = tmp_path_factory.mktemp("verifier")
    (root / "tests").mkdir()
    (root / "app").mkdir()
    (root / "tests" / "test_outputs.py").write_text(TEST_FILE)
    junit = root / "junit.xml"
    env = {
        **os.environ,
        "PYTEST_ADDOPTS": PYTEST_ADDOPTS.replace("/logs/verifier/junit.xml", str(junit)),
    }
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            str(root / "tests" / "test_outputs.py"),
        ],
        cwd=root / "app",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r.stdout + r.stderr  # some tests fail on purpose
    return junit.read_text(), r.stdout


def test_junit_counts_every_case_and_parametrization(pytest_run):
    junit, _ = pytest_run
    got = {a.name: a.outcome for a in parse_junit(junit)}
    # a non-strict XPASS is a plain pass in JUnit; a skip is "skipped"
    assert got == {
        **EXPECTED,
        "test_outputs::TestGroup::test_skip": "skipped",
        "test_outputs::TestGroup::test_xpass": "passed",
    }
    r = VerifierResult(assertions=parse_junit(junit), source="junit")
    assert (r.passed, r.total, r.resolved) == (7, 10, False)


def test_summary_agrees_with_junit(pytest_run):
    _, output = pytest_run
    got = {a.name: a.outcome for a in parse_summary(output)}
    assert got == {
        **EXPECTED,
        "test_outputs:15": "skipped",
        "test_outputs::TestGroup::test_xpass": "xpass",
    }
    r = VerifierResult(assertions=parse_summary(output), source="summary")
    assert (r.passed, r.total) == (7, 10)  # XPASS, XFAIL and SKIPPED count as passed


def test_junit_first_then_summary_then_reward_file(pytest_run):
    junit, output = pytest_run
    assert outcomes_from(junit, output, "0\n", None)[1:] == ("junit", 0.0, None)
    assert outcomes_from(None, output, None, None)[1] == "summary"
    assert outcomes_from("<broken", output, None, None)[1] == "summary"
    assertions, source, value, problem = outcomes_from(None, "no pytest here", "1\n", None)
    assert (assertions, source, value, problem) == (
        [Assertion("reward", "passed")],
        "reward_file",
        1.0,
        None,
    )
    assertions, source, _, _ = outcomes_from(None, "", None, '{"reward": 0.5}')
    assert source == "reward_file" and assertions == [Assertion("reward", "failed")]


def test_no_source_is_a_problem_not_an_exception():
    assertions, source, value, problem = outcomes_from(None, "Traceback ...", "oops", None)
    assert (assertions, source, value) == ([], "none", None)
    assert "reward.txt must hold one number" in problem and "no JUnit XML" in problem


def test_skipped_group_lines_expand_to_their_count():
    out = "=== short test summary info ===\nSKIPPED [3] tests/test_x.py:7: no network\n=== 3 skipped ==="
    assert [a.name for a in parse_summary(out)] == ["test_x:7#0", "test_x:7#1", "test_x:7#2"]


def test_summary_sections_of_two_runs_are_both_read():
    one = "== short test summary info ==\nPASSED a.py::t1\n== 1 passed in 0.01s ==\n"
    two = "== short test summary info ==\nFAILED b.py::t2 - assert 0\n== 1 failed in 0.01s ==\n"
    assert parse_summary(one + "PASSED not/in/summary.py::t\n" + two) == [
        Assertion("a::t1", "passed"),
        Assertion("b::t2", "failed"),
    ]


def test_junit_case_reported_twice_fails_if_either_failed():
    xml = (
        '<testsuite><testcase classname="tests.test_a" name="t" file="tests/test_a.py"/>'
        '<testcase classname="tests.test_a" name="t" file="tests/test_a.py"><error/></testcase>'
        "</testsuite>"
    )
    assert parse_junit(xml) == [Assertion("test_a::t", "error")]


def test_junit_xunit2_names_without_file():
    xml = (
        '<testsuites><testsuite><testcase classname="tests.test_a.TestX" name="t[1]"/>'
        '<testcase classname="test_b" name="u"><skipped type="pytest.xfail"/></testcase>'
        "</testsuite></testsuites>"
    )
    assert parse_junit(xml) == [
        Assertion("test_a::TestX::t[1]", "passed"),
        Assertion("test_b::u", "xfail"),
    ]


@pytest.mark.parametrize(
    "text,kind,value",
    [
        ("1\n", "txt", 1.0),
        (" 0.25 ", "txt", 0.25),
        ('{"reward": 1}', "json", 1.0),
        ('{"accuracy": 0.5}', "json", 0.5),
        ("0", "json", 0.0),
    ],
)
def test_reward_files(text, kind, value):
    assert parse_reward_file(text, kind) == value


@pytest.mark.parametrize(
    "text,kind", [("", "txt"), ("yes", "txt"), ("{", "json"), ('{"a": 1, "b": 2}', "json")]
)
def test_bad_reward_files(text, kind):
    with pytest.raises(ValueError):
        parse_reward_file(text, kind)


def test_verifier_commands_follow_each_harness():
    v1 = verifier_command(load_task(REPO / "workflow/tasks/static-site-server"))
    assert (
        v1.startswith("(cd /app && env PYTEST_ADDOPTS=")
        and "TEST_DIR=/tests bash /tests/run-tests.sh)" in v1
    )
    assert v1.endswith("> /logs/verifier/test-output.txt 2>&1 < /dev/null")
    v2 = verifier_command(load_task(REPO / "workflow/tasks/csv-summary"))
    assert "TEST_DIR" not in v2 and "bash /tests/test.sh" in v2
    assert "--junitxml=/logs/verifier/junit.xml" in v2 and "-rA" in v2


def test_v1_same_shell_runs_where_the_agent_left_off(tmp_path):
    import shutil

    task_dir = tmp_path / "word-frequency"
    shutil.copytree(REPO / "workflow/tasks/word-frequency", task_dir)
    text = (
        (task_dir / "task.yaml")
        .read_text()
        .replace("run_tests_in_same_shell: false", "run_tests_in_same_shell: true")
    )
    (task_dir / "task.yaml").write_text(text)
    cmd = verifier_command(load_task(task_dir))
    assert cmd.startswith("env PYTEST_ADDOPTS=") and "cd " not in cmd

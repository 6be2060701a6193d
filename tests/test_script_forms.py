"""The task's own verifier script runs (cp, export, cd, uvx -p, python -m pytest -k, services),
its pytest calls replaced by our harness; the agent's services keep the pids it saw.

One `t1 oracle` run over every fixture of tests/data/script_forms/ with the reference solution
and one with the no-op (both --jobs 2): each fixture resolves with its solution, none with the
no-op. What each fixture checks: its tests/test.sh and tests/test_outputs.py.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from shared_fixtures import requires_bwrap

from t1.verify.script_runner import parse, pytest_args

REPO = Path(__file__).resolve().parents[1]
FORMS = REPO / "tests" / "data" / "script_forms"
NAMES = sorted(p.name for p in FORMS.iterdir() if (p / "task.toml").is_file())


def _provisioned() -> bool:
    from t1.sandbox.provision import locate

    return locate() is not None


def _oracle(out: Path, *args: str) -> dict[str, dict]:
    cmd = [sys.executable, "-m", "t1.cli", "oracle", str(FORMS), *args, "--jobs", "2",
           "--json", str(out)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO)
    assert out.is_file(), r.stdout + r.stderr
    return {row["task"]: row for row in json.loads(out.read_text())}


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    d = tmp_path_factory.mktemp("forms")
    return _oracle(d / "oracle.json"), _oracle(d / "noop.json", "--agent", "noop")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.integration
@pytest.mark.slow
@requires_bwrap
@pytest.mark.skipif(not _provisioned(), reason="no offline provision cache (run `t1 provision`)")
def test_each_script_form_resolves_with_its_solution_and_not_with_noop(rows, name):
    oracle, noop = rows
    assert oracle[name]["error"] is None and oracle[name]["resolved"], oracle[name]
    assert not noop[name]["resolved"], noop[name]


def test_fixtures_cover_every_form():
    assert {"cp-helper", "export-env", "cd-workdir", "uvx-python", "python-m-k",
            "script-service", "agent-service"} <= set(NAMES)  # fmt: skip


def test_pytest_invocations_are_recognised_in_every_form():
    assert parse("pytest", ["-rA", "/tests/t.py"])["args"] == ["-rA", "/tests/t.py"]
    assert parse("python3", ["-m", "pytest", "-k", "x"])["args"] == ["-k", "x"]
    assert parse("python", ["-B", "-m", "pytest"])["form"] == "python-m"
    assert parse("python3", ["-c", "import pytest"]) is None
    assert parse("python3", ["/app/run.py", "-m", "pytest"]) is None
    assert parse("uv", ["run", "pytest", "/tests/t.py"])["args"] == ["/tests/t.py"]
    assert parse("uv", ["run", "--with", "x", "python", "-m", "pytest", "-q"])["args"] == ["-q"]
    assert parse("uv", ["add", "pytest==8.4.1"]) is None
    got = parse("uvx", ["-p", "3.13", "-w", "pytest==8.4.1", "pytest", "--ctrf", "f", "/tests"])
    assert got["python"] == "3.13" and got["args"] == ["--ctrf", "f", "/tests"]
    assert parse("uvx", ["--with", "pytest", "ruff", "check"]) is None


def test_pytest_options_kept_dropped_and_targets_only_under_tests(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_a.py").write_text("def test_x(): pass\n")
    copy = tmp_path / "app" / "test_a.py"
    copy.parent.mkdir()
    copy.write_text("def test_x(): pass\n")
    (tmp_path / "app" / "test_mine.py").write_text("def test_y(): pass\n")
    args, notes = pytest_args(["-k", "not slow", "--ctrf", "/logs/x.json", "-rA", "-p", "agent",
                               "test_a.py::test_x", "--junitxml=j.xml", "-x"],
                              str(tmp_path / "app"), str(tests))  # fmt: skip
    assert args == [f"{tests}/test_a.py::test_x", "-k", "not slow", "-rA", "-x"], args
    assert any("--ctrf" in n for n in notes) and any("-p" in n for n in notes)
    assert pytest_args([], "/", str(tests))[0] == [str(tests)]
    assert pytest_args(["test_mine.py"], str(tmp_path / "app"), str(tests))[0] is None


def test_a_shims_call_imports_none_of_the_runners_modules(tmp_path):
    """A shim's `call` (twice per verifier run) exits before the runner's own imports: the
    command it passes through runs (here: not found, 127) without ctypes, subprocess or
    threading ever imported (`-X importtime` lists every import)."""
    runner = REPO / "t1" / "verify" / "script_runner.py"
    cmd = [sys.executable, "-I", "-S", "-X", "importtime", str(runner), "call", "t1-no-such-tool"]
    r = subprocess.run(cmd, capture_output=True, text=True, env={"PATH": str(tmp_path)})
    assert r.returncode == 127 and "t1-no-such-tool: command not found" in r.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if "|" in line}
    assert "os" in imported or "posixpath" in imported  # the listing is there
    assert not imported & {"ctypes", "subprocess", "threading", "socket", "json"}


def test_the_pytest_probe_answers_yes_in_bash_and_nothing_else_does():
    """`python3 -c 'import pytest'` (a script's check before it installs pytest) is answered in
    the compartment's bash: its `python3 -m pytest` is the harness's whatever the image has.
    Any other python3 call, and the probe under another tool, still goes to the client."""
    from t1.verify.script_plan import PROBE

    script = PROBE + (
        'for call in "python3|-c|import pytest" "python|-c|import pytest" '
        '"python3.12|-c|import pytest" "python3|-c|import pytest; print(1)" '
        '"python3|-m|pytest" "uv|-c|import pytest" "python3|-c" '
        '"python3|-c|import pytest|x"; do\n'
        "  IFS='|' read -r -a argv <<< \"$call\"\n"
        '  if _t1_probe "${argv[@]}"; then echo yes; else echo no; fi\n'
        "done\n"
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["yes", "yes", "yes", "no", "no", "no", "no", "no"]


def test_native_tracebacks_unless_the_script_or_the_tasks_ini_choose_a_style(tmp_path):
    from t1.verify.script_runner import _default_tb

    ours = tmp_path / "pytest.ini"
    ours.write_text("[pytest]\n")
    assert _default_tb(["-q", "/tests/test_a.py"], str(ours)) == ["--tb=native"]
    assert _default_tb(["--tb", "short"], str(ours)) == []
    assert _default_tb(["--tb=line", "-q"], str(ours)) == []
    theirs = tmp_path / "task.ini"
    theirs.write_text("[pytest]\naddopts = -ra --tb=long\n")
    assert _default_tb([], str(theirs)) == []
    assert _default_tb([], str(tmp_path / "missing.ini")) == ["--tb=native"]

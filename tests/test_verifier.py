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
from t1.verify.in_shell import PYTEST_ADDOPTS, verifier_command
from t1.verify.outcomes import (
    Assertion,
    outcomes_from,
    parse_junit,
    parse_reward_file,
    parse_summary,
)
from t1.verify.result import VerifierResult

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


# --------------------------------------------------------------------------- the hardened harness

HARNESS = REPO / "t1" / "verify" / "harness.py"


@pytest.fixture(scope="module")
def harness_run(tmp_path_factory):
    """The compartment's runner on the same test file: outcomes through its pipe only."""
    import sysconfig

    from t1.verify.hardened import merge_records

    root = tmp_path_factory.mktemp("harness")
    (root / "tests").mkdir()
    (root / "tests" / "test_outputs.py").write_text(
        TEST_FILE + "\ndef test_fixture_ok(tmp_path):\n    pass\n"
    )
    (root / "tests" / "conftest.py").write_text(
        "import pytest\n\n@pytest.fixture\ndef own():\n    return 1\n"
    )
    (root / "conftest.py").write_text(  # a planted conftest above the tests: must not load
        "import pytest\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
        "    o = yield\n    r = o.get_result()\n    r.outcome = 'passed'\n    r.longrepr = None\n"
    )
    (root / "pytest.ini").write_text("[pytest]\naddopts = -p no:nonexistent\n")  # must not be read
    (root / "ini.ini").write_text("[pytest]\n")
    r_fd, w_fd = os.pipe()
    site = sysconfig.get_paths()["purelib"]
    cmd = [sys.executable, "-I", "-S", str(HARNESS), "--fd", str(w_fd), "--site", site,
           "--trust", str(root / "tests"), "--",
           str(root / "tests" / "test_outputs.py"), "-c", str(root / "ini.ini"), "--rootdir",
           str(root / "tests"), "--confcutdir", str(root / "tests"), "-p", "no:cacheprovider", "-rA"]  # fmt: skip
    env = {"PATH": os.environ["PATH"], "PYTEST_ADDOPTS": "-p nonexistent_plugin", "HOME": str(root)}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env.pop("PYTEST_ADDOPTS")  # the compartment's env has none (harness_env drops them)
    proc = subprocess.Popen(
        cmd, cwd=root, env=env, pass_fds=[w_fd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    os.close(w_fd)
    data = b""
    while chunk := os.read(r_fd, 65536):
        data += chunk
    os.close(r_fd)
    out = proc.communicate(timeout=120)[0].decode()
    import json

    from t1.verify.hardened import check_signed

    records, tampered = check_signed([json.loads(line) for line in data.decode().splitlines()])
    assert tampered is None, tampered
    return records, merge_records(records), out


def test_harness_channel_gives_every_outcome_and_an_end_line(harness_run):
    records, (assertions, problem), out = harness_run
    assert problem is None, out
    assert records[-1] == {"end": True, "exitstatus": 1, "collected": 11}
    got = {a.name: a.outcome for a in assertions}
    assert got == {
        **EXPECTED,
        "test_outputs::TestGroup::test_skip": "skipped",
        "test_outputs::TestGroup::test_xpass": "xpass",
        "test_outputs::test_fixture_ok": "passed",
    }, out


def test_merge_records_teardown_error_fails_a_pass_and_a_missing_end_is_a_problem():
    from t1.verify.hardened import merge_records

    recs = [
        {"name": "test_a.py::t", "when": "call", "outcome": "passed"},
        {"name": "test_a.py::t", "when": "teardown", "outcome": "error"},
        {"name": "test_a.py::u", "when": "setup", "outcome": "skipped"},
    ]
    assertions, problem = merge_records([*recs, {"end": True, "exitstatus": 1}])
    assert assertions == [Assertion("test_a::t", "error"), Assertion("test_a::u", "skipped")]
    assert problem is None
    assert "without its end record" in merge_records(recs)[1]
    # records after the end line are not read (nothing may append to a finished report)
    late = merge_records(
        [*recs, {"end": True}, {"name": "x.py::y", "when": "call", "outcome": "passed"}]
    )
    assert len(late[0]) == 2
    assert "malformed" in merge_records([{"name": 3, "outcome": "passed"}])[1]


def test_reports_with_other_names_or_counts_are_tampered():
    from t1.verify.result import check_against

    want = ["test_outputs::test_a", "test_outputs::test_b", "test_outputs::test_c"]
    honest = VerifierResult([Assertion(n, "passed") for n in want], source="junit")
    assert check_against(honest, want) is honest
    assert check_against(honest, None) is honest
    forged = VerifierResult(
        [Assertion(n, "passed") for n in [*want, *(f"test_outputs::test_{i}" for i in range(997))]],
        source="junit",
    )
    assert forged.passed == 1000  # what the forged report claims ...
    t = check_against(forged, want)
    assert t.tampered and "reported 1000 assertions" in t.tampered and "recorded 3" in t.tampered
    assert (t.passed, t.total, t.resolved) == (0, 3, False)  # ... and what it is worth
    assert len(t.reported) == 1000
    renamed = VerifierResult([Assertion("test_outputs::test_x", "passed")] * 3, source="summary")
    t = check_against(renamed, want)
    assert t.tampered and "missing: test_outputs::test_a" in t.tampered and t.passed == 0


def test_recorded_names_come_from_the_pool_manifest(tmp_path):
    import json
    import shutil

    from t1.verify.result import recorded_names

    pool = tmp_path / "pool"
    shutil.copytree(REPO / "workflow/tasks/csv-summary", pool / "tasks" / "00000-csv-summary")
    names = ["test_outputs::test_total_revenue", "test_outputs::test_top_product"]
    manifest = {"schema_version": 1, "status": "complete", "tasks": [
        {"rank": 0, "id": "csv-summary", "path": "tasks/00000-csv-summary", "assertions": 2,
         "assertion_names": names}]}  # fmt: skip
    (pool / "manifest.json").write_text(json.dumps(manifest))
    assert recorded_names(load_task(pool / "tasks" / "00000-csv-summary")) == names
    assert recorded_names(load_task(REPO / "workflow/tasks/csv-summary")) is None


def test_pytest_plan_reads_targets_and_specs_from_the_script():
    from t1.verify.pytest_plan import pytest_plan

    targets, specs = pytest_plan(load_task(REPO / "workflow/tasks/csv-summary"))
    assert targets == ["/tests/test_outputs.py"]
    assert "pytest==8.4.1" in specs and "pytest-json-ctrf==0.3.5" in specs
    targets, specs = pytest_plan(load_task(REPO / "workflow/tasks/git-release"))  # $TEST_DIR/...
    assert targets == ["/tests/test_outputs.py"] and "pytest==8.4.1" in specs
    assert pytest_plan(load_task(REPO / "tests/data/attacks/honest-reward-file")) is None


def test_harness_env_drops_what_changes_reporting_and_keeps_the_task_env():
    """`base_env` is the sandbox's START environment (ours and the Dockerfile's), never what
    the agent exported in its shell."""
    from t1.verify.pytest_plan import harness_env

    base = {
        "PATH": "/opt/t1/python/3.12/bin:/usr/local/bin:/usr/bin",
        "PYTEST_ADDOPTS": "-p evil",
        "PYTEST_PLUGINS": "evil",
        "LD_PRELOAD": "/x.so",
        "BASH_ENV": "/x.sh",
        "PYTHONPATH": "/app/lib",
        "REPORT_DIR": "/r",
    }
    env = harness_env(load_task(REPO / "workflow/tasks/csv-summary"), base)
    assert not {"PYTEST_ADDOPTS", "PYTEST_PLUGINS", "LD_PRELOAD", "BASH_ENV"} & set(env)
    assert env["PATH"] == "/opt/t1/bin:/opt/t1/python/3.12/bin:/usr/local/bin:/usr/bin"
    # the harness runs with -I (PYTHON* ignored); the tests' subprocesses still get them
    assert env["PYTHONPATH"] == "/app/lib" and env["REPORT_DIR"] == "/r"
    assert env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1" and env["TEST_DIR"] == "/tests"
    assert harness_env(load_task(REPO / "workflow/tasks/csv-summary"), None)["PATH"].startswith(
        "/opt/t1/bin:/usr/local/sbin:"
    )


def test_bwrap_shares_tmp_root_home_from_host_dirs_for_the_compartment(tmp_path):
    from t1.sandbox.base import SandboxSpec
    from t1.sandbox.bwrap_plan import Plan, bwrap_args

    plan = Plan(root=tmp_path, workdir_host=tmp_path / "wd", logs_host=tmp_path / "logs")
    plan.shared = {d: tmp_path / "shared" / d.strip("/") for d in ("/tmp", "/root", "/home")}
    a = bwrap_args(SandboxSpec(workdir="/app"), plan, as_root=True)
    binds = {(a[i + 1], a[i + 2]) for i in range(len(a) - 2) if a[i] == "--bind"}
    for d in ("/tmp", "/root", "/home"):
        assert (str(tmp_path / "shared" / d.strip("/")), d) in binds
    assert ("--tmpfs", "/tmp") not in set(zip(a, a[1:], strict=False))
    plan.shared = {}
    a = bwrap_args(SandboxSpec(workdir="/app"), plan, as_root=True)
    assert ("--tmpfs", "/tmp") in set(zip(a, a[1:], strict=False))


def test_compartment_args_private_tests_logs_harness_and_loader(tmp_path):
    from t1.sandbox.base import SandboxSpec
    from t1.sandbox.bwrap_plan import Plan
    from t1.sandbox.compartment import compartment_args
    from t1.sandbox.hostview import HOST_VIEW
    from t1.sandbox.overlay import Overlay

    plan = Plan(root=tmp_path, workdir_host=tmp_path / "wd", logs_host=tmp_path / "logs")
    plan.overlays = {d: Overlay(lowers=[Path("/" + d)], merged=tmp_path / "mnt" / d, upper=tmp_path / "u" / d)
                     for d in ("usr", "etc", "var")}  # fmt: skip
    spec = SandboxSpec(workdir="/app")
    a = compartment_args(
        plan, spec, True, tmp_path / "T", tmp_path / "L", tmp_path / "H", share_net=True
    )
    pairs = {(a[i], a[i + 2]): a[i + 1] for i in range(len(a) - 2) if a[i].startswith("--")}
    assert a[:3] == ["bwrap", "--die-with-parent", "--cap-drop"] and "ALL" in a
    assert "--unshare-pid" in a and "--unshare-net" not in a  # the agent's services answer
    assert pairs[("--ro-bind", "/tests")] == str(tmp_path / "T")  # read-only: nothing writes it
    assert pairs[("--bind", "/logs/verifier")] == str(tmp_path / "L")
    assert a.index("/logs/verifier") > a.index("/logs")  # bound over the agent's /logs
    assert pairs[("--ro-bind", f"{HOST_VIEW}/usr")] == "/usr"
    assert pairs[("--ro-bind", "/etc/ld.so.preload")] == "/dev/null"
    assert pairs[("--bind", "/usr")] == str(tmp_path / "mnt" / "usr")  # tests see the agent's /usr
    a = compartment_args(
        plan, spec, True, tmp_path / "T", tmp_path / "L", tmp_path / "H", share_net=False
    )
    assert "--unshare-net" in a


def test_pristine_argv_runs_the_hosts_python_by_its_own_loader():
    from t1.sandbox.hostview import HOST_VIEW, Pristine

    argv = Pristine.detect().argv("/usr/bin/python3")
    assert argv[0].startswith(HOST_VIEW + "/usr/") and "ld-linux" in argv[0]
    assert argv[1] == "--library-path" and all(p.startswith(HOST_VIEW) for p in argv[2].split(":"))
    assert argv[3] == HOST_VIEW + os.path.realpath("/usr/bin/python3")


def test_system_python_verifiers_see_the_agents_site_packages_last():
    from t1.verify.pytest_plan import _tail_paths

    assert _tail_paths(load_task(REPO / "workflow/tasks/csv-summary")) == []  # uvx: isolated
    assert _tail_paths(load_task(REPO / "workflow/tasks/git-release")) == []  # uv run
    task = load_task(REPO / "tests/data/broken-tasks/verifier-crash")  # plain python3
    tail = _tail_paths(task)
    assert tail[::2] == ["--tail-path"] * 3 and "/usr/lib/python3/dist-packages" in tail


def test_pool_records_the_reference_runs_assertion_names(tmp_path):
    import json

    from t1.curate.pool import build_pool
    from t1.verify.result import recorded_names

    names = ["test_outputs::test_a", "test_outputs::test_b"]
    row = {"task": "csv-summary", "agent": "oracle", "passed": 2, "total": 2, "resolved": True,
           "reward": 0.2, "seconds": 1.0, "error": None,
           "assertions": [{"name": n, "outcome": "passed"} for n in reversed(names)]}  # fmt: skip
    (tmp_path / "oracle.json").write_text(json.dumps([row]))
    m = build_pool(
        [REPO / "workflow/tasks/csv-summary"],
        tmp_path / "pool",
        validated=[tmp_path / "oracle.json"],
    )
    assert m["tasks"][0]["assertion_names"] == names
    assert recorded_names(load_task(tmp_path / "pool" / m["tasks"][0]["path"])) == names


def test_ini_is_the_tasks_own_or_ours_never_a_planted_one(tmp_path):
    from t1.verify.pytest_plan import _ini

    assert _ini(tmp_path, "/run/t1/harness") == "/run/t1/harness/pytest.ini"
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers = slow\n")
    assert _ini(tmp_path, "/run/t1/harness") == "/tests/pytest.ini"


def test_an_interrupted_run_fails_the_tests_it_never_reported():
    """SIGINT to the harness from a test's subprocess ends pytest early, with an end line;
    without the collected names the one passing test would be all there is (resolved)."""
    from t1.verify.hardened import merge_records

    ran = [{"name": "test_a.py::t1", "when": "call", "outcome": "passed"}]
    end = [{"end": True, "exitstatus": 2, "collected": 3}]
    assert VerifierResult(merge_records(ran + end)[0]).resolved  # the guard removed
    names = {"collected": ["test_a.py::t1", "test_a.py::t2", "test_a.py::t3"]}
    assertions, problem = merge_records([names, *ran, *end])
    r = VerifierResult(assertions)
    assert problem is None and (r.passed, r.total, r.resolved) == (1, 3, False)


# --------------------------------------------------------------------------- the proxy

CALC = """
import gc, sys
import numpy as np

class CalcError(ValueError):
    pass

def minmax(values):
    if not values:
        raise CalcError("empty input")
    return (min(values), max(values))

class Counter:
    def __init__(self):
        self.c = {}
    def add(self, k):
        self.c[k] = self.c.get(k, 0) + 1
    def count(self, k):
        return self.c.get(k, 0)
    def __len__(self):
        return len(self.c)
    def __iter__(self):
        return iter(sorted(self.c))

class AlwaysEqual:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__

def scale(a, k=2.0):
    return np.asarray(a, dtype=float) * k

def apply(fn, xs):
    return [fn(x) for x in xs]

def squares(n):
    yield from (i * i for i in range(n))

def liar():
    return AlwaysEqual()

def skipper():
    import pytest
    pytest.skip("from the agent")

def leave():
    import os
    os._exit(0)

PLUGINS = sum(type(o).__name__ == "PytestPluginManager" for o in gc.get_objects())
"""

PROXIED = """
import inspect, sys
import numpy as np
import pytest
sys.path.insert(0, {app!r})
import calc

def test_values_cross_by_value():
    r = calc.minmax([3, 1, 2])
    assert isinstance(r, tuple) and r == (1, 3)
    out = calc.scale([1, 2])
    assert isinstance(out, np.ndarray) and out.dtype == np.float64 and np.allclose(out, [2, 4])

def test_exceptions_and_signatures():
    with pytest.raises(ValueError, match="empty"):
        calc.minmax([])
    with pytest.raises(calc.CalcError):
        calc.minmax([])
    assert str(inspect.signature(calc.scale)) == "(a, k=2.0)"

def test_instances_callbacks_generators():
    c = calc.Counter()
    for w in "aba":
        c.add(w)
    assert isinstance(c, calc.Counter) and c.count("a") == 2 and len(c) == 2 and "b" in c
    assert calc.apply(lambda x: x * 10, [1, 2]) == [10, 20]
    assert list(calc.squares(4)) == [0, 1, 4, 9]

def test_the_agents_code_runs_elsewhere():
    assert type(sys.modules["calc"]).__name__ == "RemoteModule"
    assert calc.PLUGINS == 0  # no pytest plugin manager in the agent's process

def test_always_equal_is_unequal():
    assert calc.liar() == 1

def test_skip_from_agent_code_fails():
    calc.skipper()

def test_os_exit_fails():
    calc.leave()

def test_after_the_agents_process_died():
    assert calc.minmax([1]) == (1, 1)
"""


def _harness(root: Path, *opts: str) -> tuple[list[dict], str | None, str]:
    import json
    import sysconfig

    from t1.verify.hardened import check_signed

    r_fd, w_fd = os.pipe()
    cmd = [sys.executable, "-I", "-S", str(HARNESS), "--fd", str(w_fd), "--site",
           sysconfig.get_paths()["purelib"], "--trust", str(root / "tests"), *opts, "--",
           str(root / "tests"), "--rootdir", str(root / "tests"), "-p", "no:cacheprovider", "-rA"]  # fmt: skip
    env = {"PATH": os.environ["PATH"], "HOME": str(root), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.Popen(cmd, cwd=root, env=env, pass_fds=[w_fd], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)  # fmt: skip
    os.close(w_fd)
    data = b""
    while chunk := os.read(r_fd, 65536):
        data += chunk
    os.close(r_fd)
    out = proc.communicate(timeout=120)[0].decode()
    records, tampered = check_signed([json.loads(line) for line in data.decode().splitlines()])
    return records, tampered, out


def test_the_agents_module_runs_behind_the_proxy(tmp_path):
    """Tests import the agent's module: values by value (numpy too), handles for the rest;
    always-equal, pytest.skip and os._exit from the agent's code fail the test."""
    from t1.verify.hardened import merge_records

    (tmp_path / "tests").mkdir()
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "calc.py").write_text(CALC)
    (tmp_path / "tests" / "test_calc.py").write_text(PROXIED.format(app=str(tmp_path / "app")))
    records, tampered, out = _harness(tmp_path)
    assert tampered is None, out
    got = {a.name: a.outcome for a in merge_records(records)[0]}
    bad = ("always_equal", "skip_from", "os_exit", "after_the")
    assert {n for n, o in got.items() if o != "passed"} == {
        n for n in got if any(b in n for b in bad)
    }, out
    assert all(o == "failed" for n, o in got.items() if any(b in n for b in bad)), got
    # the same tests with the proxy off: the agent's skip passes, its liar is equal
    records, tampered, out = _harness(tmp_path, "--no-proxy")
    got = {a.name: a.outcome for a in merge_records(records)[0]}
    assert got["test_calc::test_always_equal_is_unequal"] == "passed", out
    assert got["test_calc::test_skip_from_agent_code_fails"] == "skipped", out


def test_stale_pyc_is_never_loaded_in_the_agents_process(tmp_path):
    import py_compile

    (tmp_path / "tests").mkdir()
    app = tmp_path / "app"
    app.mkdir()
    (app / "mod.py").write_text("VALUE = 'from the pyc'\n")
    py_compile.compile(str(app / "mod.py"), cfile=str(app / "__pycache__" / f"mod.{sys.implementation.cache_tag}.pyc"),
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)  # fmt: skip
    (app / "mod.py").write_text("VALUE = 'from the source'\n")
    (tmp_path / "tests" / "test_m.py").write_text(
        f"import sys\nsys.path.insert(0, {str(app)!r})\nimport mod\n\n"
        "def test_source():\n    assert mod.VALUE == 'from the source'\n"
    )
    records, tampered, out = _harness(tmp_path)
    assert tampered is None and {r.get("outcome") for r in records if "name" in r} == {"passed"}, (
        out
    )


def test_records_the_harness_did_not_write_are_tampering():
    import hashlib
    import hmac
    import json

    from t1.verify.hardened import check_signed

    key = os.urandom(32)

    def signed(seq, rec):
        body = {**rec, "seq": seq}
        mac = hmac.new(key, json.dumps(body, sort_keys=True).encode(), hashlib.sha256).hexdigest()
        return {**body, "mac": mac}

    good = [{"key": key.hex()}, signed(1, {"collected": ["t.py::a"]}),
            signed(2, {"name": "t.py::a", "when": "call", "outcome": "failed"}),
            signed(3, {"end": True, "exitstatus": 1, "collected": 1})]  # fmt: skip
    records, tampered = check_signed(good)
    assert tampered is None and records[1] == {
        "name": "t.py::a",
        "when": "call",
        "outcome": "failed",
    }
    forged = {"name": "t.py::a", "when": "call", "outcome": "passed", "seq": 3, "mac": "00"}
    assert "did not write" in check_signed([*good[:3], forged, good[3]])[1]
    assert "reordered" in check_signed([good[0], good[2], good[1], good[3]])[1]
    assert "key record" in check_signed(good[1:])[1]
    assert "not records" in check_signed(good, bad_lines=2)[1]
    assert "telemetry: gc" in check_signed([*good[:3], signed(3, {"tamper": "gc.get_objects"})])[1]


def test_pty_drain_reads_the_terminal_and_its_stop_joins_the_reader():
    """What services write to the agent's terminal during a verifier run is read and dropped
    (a full pty would block them); stop() wakes its reader through a pipe and joins it."""
    import time
    import types

    from t1.verify.hardened import _PtyDrain

    master, slave = os.openpty()
    try:
        drain = _PtyDrain(types.SimpleNamespace(master=master))
        os.set_blocking(slave, False)
        written = 0
        for _ in range(64):  # 64 x 4 KiB: more than a pty buffers unread
            try:
                written += os.write(slave, b"x" * 4096)
            except BlockingIOError:
                time.sleep(0.01)
        assert written >= 64 * 4096 // 2
        thread = drain.thread
        drain.stop()
        assert not thread.is_alive() and drain.thread is None
        drain.stop()  # twice is harmless
    finally:
        os.close(slave)
        os.close(master)

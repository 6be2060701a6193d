"""`t1 oracle`: the oracle resolves every example task, noop none, broken tasks report errors.

    .venv/bin/pytest tests/test_oracle.py -q                     # unit part (no sandbox)
    .venv/bin/pytest tests/test_oracle.py -q -m integration      # real bubblewrap sandboxes

The integration part needs bubblewrap and the offline provision cache (`t1 provision`), since
the example verifiers install uv and pytest the way Terminal-Bench tasks do.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from shared_fixtures import requires_bwrap

from t1.cli import main
from t1.sandbox import Limits
from t1.tasks import find_tasks, load_task
from t1.tasks.env import needs_build, open_task_sandbox, run_solution, task_spec
from t1.verify.oracle import ROW_KEYS, format_table, run_many, run_task
from t1.verify.reward import RewardSpec
from t1.verify.verifier import score_in_sandbox

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "workflow" / "tasks"
BROKEN = REPO / "tests" / "data" / "broken-tasks"
SPEC = RewardSpec(kind="dense", scale=10.0)


# --------------------------------------------------------------------------- unit


def test_which_tasks_need_an_environment_build():
    assert needs_build(load_task(TASKS / "csv-summary"))  # ENV, COPY, RUN
    assert needs_build(load_task(TASKS / "git-release"))  # RUN
    assert not needs_build(load_task(TASKS / "word-frequency"))  # FROM + WORKDIR only


def test_task_spec_takes_workdir_and_resources():
    spec = task_spec(load_task(TASKS / "word-frequency"), limits=Limits(memory_mb=4096, cpus=2))
    assert spec.workdir == "/app" and spec.env_layer is None and not spec.network
    assert (spec.limits.memory_mb, spec.limits.cpus) == (4096, 2)
    spec = task_spec(load_task(BROKEN / "verifier-crash"))
    assert spec.limits.memory_mb == Limits().memory_mb


def test_json_rows_have_exactly_the_keys(tmp_path, capsys):
    out = tmp_path / "rows.json"
    rc = main(
        ["oracle", str(BROKEN / "invalid-toml"), str(BROKEN / "missing-files"), "--json", str(out)]
    )
    assert rc == 1
    rows = json.loads(out.read_text())
    assert [tuple(r) for r in rows] == [ROW_KEYS, ROW_KEYS]
    assert rows[0]["task"] == "invalid-toml" and "invalid TOML" in rows[0]["error"]
    assert rows[1]["error"].count("missing file") == 3  # every problem, not just the first
    assert (rows[0]["passed"], rows[0]["total"], rows[0]["resolved"], rows[0]["assertions"]) == (
        0,
        0,
        False,
        [],
    )
    table = capsys.readouterr().out
    assert "passed/total" in table and "0 of 2 resolved, 2 with errors" in table


def test_no_tasks_found_exits_two(tmp_path):
    assert main(["oracle", str(tmp_path / "nothing-here")]) in (1, 2)


def test_table_lists_every_row():
    rows = [
        {
            "task": "a",
            "passed": 3,
            "total": 3,
            "resolved": True,
            "reward": 0.3,
            "seconds": 1.25,
            "error": None,
        },
        {
            "task": "bb",
            "passed": 0,
            "total": 0,
            "resolved": False,
            "reward": 0.0,
            "seconds": 0.0,
            "error": "boom",
        },
    ]
    lines = format_table(rows).splitlines()
    assert lines[1].split() == ["a", "3/3", "yes", "0.300", "1.2"]
    assert lines[2].split() == ["bb", "0/0", "no", "0.000", "0.0", "boom"]
    assert lines[-1] == "1 of 2 resolved, 1 with errors"


# --------------------------------------------------------------------------- integration


def _provisioned() -> bool:
    from t1.sandbox import provision

    return provision.locate() is not None


requires_provision = pytest.mark.skipif(
    not _provisioned(), reason="no offline provision cache: run `t1 provision` first"
)
VALID = sorted(p.name for p in find_tasks([TASKS]))


@pytest.fixture(scope="module")
def oracle_rows(tmp_path_factory):
    rows = run_many(find_tasks([TASKS]), "oracle", "bwrap", 2, SPEC)
    print("oracle seconds:", {r["task"]: r["seconds"] for r in rows})
    return {r["task"]: r for r in rows}


@pytest.fixture(scope="module")
def noop_rows():
    rows = run_many(find_tasks([TASKS]), "noop", "bwrap", 2, SPEC)
    return {r["task"]: r for r in rows}


@pytest.mark.integration
@requires_bwrap
@requires_provision
@pytest.mark.parametrize("name", VALID)
def test_oracle_resolves_every_example(oracle_rows, name):
    row = oracle_rows[name]
    assert row["error"] is None, row["error"]
    assert row["resolved"] and row["passed"] == row["total"] >= 6, row["assertions"]
    assert row["reward"] == pytest.approx(min(row["total"], 10) / 10.0)  # clipped at the scale
    assert all(a["outcome"] in ("passed", "skipped", "xfail", "xpass") for a in row["assertions"])


@pytest.mark.integration
@requires_bwrap
@requires_provision
def test_noop_resolves_none_but_scores_some(noop_rows):
    assert all(r["error"] is None for r in noop_rows.values()), noop_rows
    assert not any(r["resolved"] for r in noop_rows.values())
    # some tasks already pass assertions before anyone acts (their no-op score)
    assert {n for n, r in noop_rows.items() if r["passed"] > 0} >= {
        "csv-summary",
        "stats-debug",
        "git-release",
    }


@pytest.mark.integration
@requires_bwrap
@requires_provision
def test_server_started_by_the_solution_answers_the_verifier(oracle_rows):
    outcomes = {a["name"]: a["outcome"] for a in oracle_rows["static-site-server"]["assertions"]}
    for name in (
        "test_index_served",
        "test_health_json",
        "test_draft_served",
        "test_missing_page_is_404",
    ):
        assert outcomes[f"test_outputs::{name}"] == "passed"


@pytest.mark.integration
@requires_bwrap
@requires_provision
def test_broken_rows_carry_errors_and_the_others_still_run():
    paths = find_tasks([BROKEN]) + [TASKS / "word-frequency"]
    rows = {r["task"]: r for r in run_many(paths, "oracle", "bwrap", 2, SPEC)}
    assert rows["word-frequency"]["resolved"] and rows["word-frequency"]["error"] is None
    expect = {
        "bad-fields": "task.yaml: max_agent_timeout_sec: must be a positive number",
        "invalid-toml": "task.toml: -: invalid TOML",
        "invalid-yaml": "task.yaml: -: invalid YAML at line 8",
        "missing-files": "tests/test.sh: -: missing file",
        "verifier-crash": "verifier produced no outcomes",
        "solution-hangs": "reference solution timed out after 3 s",
    }
    for name, text in expect.items():
        assert text in (rows[name]["error"] or ""), rows[name]
        assert not rows[name]["resolved"]


@pytest.mark.integration
@requires_bwrap
def test_tests_arrive_only_with_the_verifier():
    """Before scoring, neither /tests nor the solution is in the sandbox; after, the outcome is read."""

    task = load_task(BROKEN / "verifier-crash")
    with open_task_sandbox(task) as sb:
        assert sb.exec("ls /tests /solution /oracle 2>&1; true").output.count("No such file") == 3
        assert run_solution(task, sb) is None
        result = score_in_sandbox(task, sb)
        # the tests went into the verifier's compartment only, never into the agent's view
        assert sb.exec("test -f /tests/test.sh").exit_code != 0
    assert (
        result.total == 0
        and result.source == "none"
        and "verifier_helpers_that_do_not_exist" in result.error
    )


@pytest.mark.skipif(
    __import__("shutil").which("apptainer") is not None, reason="apptainer is installed here"
)
def test_apptainer_without_the_binary_is_a_clear_row_error():
    row = run_task(load_task(TASKS / "word-frequency"), backend="apptainer")
    assert "apptainer is not installed" in row["error"] and row["total"] == 0


@pytest.mark.integration
@requires_bwrap
def test_agent_exports_do_not_reach_the_verifier(tmp_path):
    """An exported PATH with a fake `curl` (whose "uv installer" plants a `uvx` that passes
    everything) must not fool the verifier: it runs under the sandbox's starting environment.
    Files and processes the agent left behind still reach it, as in any harness."""
    from t1.verify.verifier import score_in_sandbox

    task = load_task(TASKS / "stats-debug")
    fake_uvx = "#!/bin/sh\nexit 0\n"
    installer = (
        "mkdir -p $HOME/.local/bin; printf %s " + shlex.quote(fake_uvx) + " > $HOME/.local/bin/uvx;"
        " chmod +x $HOME/.local/bin/uvx; echo 'export PATH=$HOME/.local/bin:$PATH' > $HOME/.local/bin/env"
    )
    fake_curl = "#!/bin/sh\necho " + shlex.quote(installer) + "\n"
    with open_task_sandbox(task) as sb:
        sb.exec(
            f"mkdir -p /tmp/evil && printf %s {shlex.quote(fake_curl)} > /tmp/evil/curl && chmod +x /tmp/evil/curl"
        )
        sb.exec("export PATH=/tmp/evil:$PATH")
        assert sb.exec("command -v curl").output.strip() == "/tmp/evil/curl"
        result = score_in_sandbox(task, sb)
    assert result.source == "junit" and result.total > 1
    assert not result.resolved

"""`t1 tasks check DIR...`: output names file and field; exit codes.

.venv/bin/pytest tests/tasks/test_cli.py -q
"""

from __future__ import annotations

from pathlib import Path

from t1.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_check_valid_examples_exits_zero(capsys):
    assert main(["tasks", "check", str(REPO / "workflow" / "tasks")]) == 0
    assert "FAIL" not in capsys.readouterr().out


def test_check_broken_lists_every_problem_and_exits_one(capsys):
    assert main(["tasks", "check", str(REPO / "tests" / "data" / "broken-tasks")]) == 1
    out = capsys.readouterr().out
    assert "FAIL " in out and "ok   " in out  # the runtime-broken ones load fine
    assert "bad-fields/task.yaml: max_agent_timeout_sec: must be a positive number" in out
    assert "missing-files/tests/test.sh: -: missing file" in out
    assert "invalid-toml/task.toml: -: invalid TOML" in out


def test_check_missing_dir_is_a_problem(tmp_path, capsys):
    assert main(["tasks", "check", str(tmp_path / "absent")]) == 1  # reported as not a directory
    assert "not a directory" in capsys.readouterr().out

"""Tests that import agent-writable code (t1.tasks.agent_imports), counted by `t1 tasks check`.

.venv/bin/pytest tests/tasks/test_agent_imports.py -q
"""

from __future__ import annotations

import shutil
from pathlib import Path

from t1.cli import main
from t1.tasks import load_task
from t1.tasks.agent_imports import agent_imports

REPO = Path(__file__).resolve().parents[2]
ATTACKS = REPO / "tests" / "data" / "attacks"


def _task(tmp_path: Path, name: str, test_src: str, script: str = "pytest /tests\n",
          solution: str = "true\n", dockerfile: str = "FROM python:3.11-slim\nWORKDIR /app\n"):  # fmt: skip
    d = tmp_path / name
    shutil.copytree(ATTACKS / "honest", d)
    (d / "tests" / "test_outputs.py").write_text(test_src)
    (d / "tests" / "test.sh").write_text("#!/bin/bash\n" + script)
    (d / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solution)
    (d / "environment" / "Dockerfile").write_text(dockerfile)
    return d


def test_path_insert_then_import_counts_but_not_imports_before_it(tmp_path):
    ai = agent_imports(load_task(ATTACKS / "a22-always-equal"))
    assert ai.modules == ["calc"] and ai.dirs == ["/app"]  # numpy is imported before the insert
    assert ai.targets() == ["/app/calc"]
    assert not agent_imports(load_task(ATTACKS / "honest")).writable


def test_solution_modules_count_installed_and_local_ones_do_not(tmp_path):
    src = "import json\nimport requests\nimport helper\nimport solver\nimport pytest\n"
    d = _task(tmp_path, "t", src, script="uvx -w pytest -w requests pytest /tests\n",
              solution="cat > solver.py <<EOF\nx = 1\nEOF\n")  # fmt: skip
    (d / "tests" / "helper.py").write_text("")
    (d / "solution" / "requests.py").write_text("")  # installed by the verifier: not the agent's
    ai = agent_imports(load_task(d))
    assert ai.modules == ["solver"] and ai.dirs == [] and ai.targets() == ["/app/solver"]


def test_files_loaded_by_path_count_strings_do_not(tmp_path):
    src = (
        "import importlib.util\n"
        "spec = importlib.util.spec_from_file_location('m', '/app/tool.py')\n"
        "CODE = 'import sys; sys.path.insert(0, \"/srv\"); import thing'\n"
        "import runpy\nrunpy.run_path('/tests/own.py')\n"
    )
    ai = agent_imports(load_task(_task(tmp_path, "t", src)))
    assert ai.files == ["/app/tool.py"] and ai.modules == [] and ai.targets() == ["/app/tool.py"]


def test_tasks_check_counts_tasks_importing_agent_code(capsys):
    assert main(["tasks", "check", str(ATTACKS / "honest"), str(ATTACKS / "a22-always-equal"),
                 str(ATTACKS / "honest-imports")]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "2 of 3 loadable tasks' tests import agent-writable code" in out
    assert out.count("  imports agent code: calc (from /app)") == 2

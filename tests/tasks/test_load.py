"""Loading both task layouts into `Task`, and every problem of the broken examples.

.venv/bin/pytest tests/tasks -q
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from t1.tasks import TaskError, check_task, dockerfile_workdir, find_tasks, load_task

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "workflow" / "tasks"
BROKEN = REPO / "tests" / "data" / "broken-tasks"
VALID = sorted(p.name for p in TASKS.iterdir() if p.is_dir())


@pytest.mark.parametrize("name", VALID)
def test_every_example_task_loads_cleanly(name):
    assert check_task(TASKS / name) == []
    task = load_task(TASKS / name)
    assert task.id == name and task.instruction.strip()
    assert task.verifier.script.is_file() and task.solution.path.is_file()
    assert task.environment.dockerfile is not None and task.environment.dockerfile.is_file()


def test_examples_mix_both_layouts():
    layouts = {load_task(TASKS / n).layout for n in VALID}
    assert layouts == {"v1", "v2"}


def test_v1_fields():
    t = load_task(TASKS / "static-site-server")
    assert (t.layout, t.category, t.difficulty) == ("v1", "system-administration", "easy")
    assert t.tags == ("http", "background-process")
    assert (t.agent_timeout_s, t.verifier_timeout_s) == (60.0, 120.0)
    assert t.workdir == "/app" and t.parser_name == "pytest" and not t.run_tests_in_same_shell
    assert t.verifier.script.name == "run-tests.sh" and t.verifier.tests_dir.name == "tests"
    assert t.solution.kind == "script" and t.solution.path.name == "solution.sh"
    assert t.environment.context == t.path


def test_v1_solution_yaml_is_a_list_of_commands():
    t = load_task(TASKS / "word-frequency")
    assert t.solution.kind == "commands" and len(t.solution.commands) == 2
    assert t.solution.commands[1] == "chmod +x /app/wordfreq.sh"
    assert "cat > /app/wordfreq.sh" in t.solution.commands[0]


def test_workdir_is_the_last_dockerfile_workdir():
    assert load_task(TASKS / "git-release").workdir == "/app/repo"


def test_v2_fields():
    t = load_task(TASKS / "csv-summary")
    assert (t.layout, t.category, t.difficulty) == ("v2", "data-processing", "easy")
    assert (t.agent_timeout_s, t.verifier_timeout_s) == (120.0, 120.0)
    assert (t.resources.cpus, t.resources.memory_mb, t.resources.allow_internet) == (
        1.0,
        1024,
        False,
    )
    assert t.environment.context == t.path / "environment"
    assert t.verifier.script == t.path / "tests" / "test.sh"
    assert t.solution.directory == t.path / "solution"
    assert "REPORT_DIR" in t.instruction


def test_v2_memory_as_size_string():
    assert load_task(TASKS / "stats-debug").resources.memory_mb == 1024


# --------------------------------------------------------------------------- broken


def _problems(name):
    return {
        (p.file.relative_to(BROKEN / name).as_posix(), p.field) for p in check_task(BROKEN / name)
    }


def test_missing_files_each_reported():
    assert _problems("missing-files") == {
        ("environment/Dockerfile", "-"),
        ("tests/test.sh", "-"),
        ("solution/solve.sh", "-"),
    }


def test_invalid_toml_names_the_line():
    (p,) = check_task(BROKEN / "invalid-toml")
    assert p.file.name == "task.toml" and "invalid TOML" in p.message and "line 8" in p.message


def test_invalid_yaml_is_one_problem_with_the_line():
    (p,) = check_task(BROKEN / "invalid-yaml")
    assert p.file.name == "task.yaml" and "invalid YAML at line 8" in p.message


def test_bad_fields_reports_every_field():
    assert _problems("bad-fields") == {
        ("task.yaml", "instruction"),
        ("task.yaml", "difficulty"),
        ("task.yaml", "tags"),
        ("task.yaml", "max_agent_timeout_sec"),
        ("task.yaml", "run_tests_in_same_shell"),
    }


@pytest.mark.parametrize("name", ["verifier-crash", "solution-hangs"])
def test_runtime_broken_tasks_load(name):
    assert check_task(BROKEN / name) == []


def test_load_task_raises_with_file_and_field():
    with pytest.raises(TaskError) as e:
        load_task(BROKEN / "bad-fields")
    assert e.value.file.name == "task.yaml" and e.value.field == "instruction"
    assert "task.yaml: instruction: is empty" in str(e.value)


def test_find_tasks_takes_task_dirs_and_dirs_of_tasks():
    found = find_tasks([TASKS, BROKEN / "invalid-toml"])
    assert [p.name for p in found] == VALID + ["invalid-toml"]
    assert {p.name for p in find_tasks([BROKEN])} == {
        "bad-fields",
        "invalid-toml",
        "invalid-yaml",
        "missing-files",
        "solution-hangs",
        "verifier-crash",
    }


# --------------------------------------------------------------------------- built here


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root


def test_v1_descriptions_format_and_compose_image(tmp_path):
    t = _write(
        tmp_path / "old-style",
        {
            "task.yaml": """\
            descriptions:
              - key: base
                description: Do the thing.
            """,
            "docker-compose.yaml": "services:\n  client:\n    image: ghcr.io/example/img:1\n",
            "run-tests.sh": "exit 0\n",
            "solution.sh": "true\n",
        },
    )
    task = load_task(t)
    assert task.instruction == "Do the thing."
    assert task.environment.docker_image == "ghcr.io/example/img:1" and task.workdir == "/app"
    assert (task.agent_timeout_s, task.verifier_timeout_s) == (360.0, 60.0)
    assert task.verifier.tests_dir is None


def test_v1_templated_compose_image_is_not_an_environment(tmp_path):
    t = _write(
        tmp_path / "t",
        {
            "task.yaml": "instruction: x\n",
            "docker-compose.yaml": "services:\n  client:\n    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}\n",
            "run-tests.sh": "",
            "solution.sh": "",
        },
    )
    assert [(p.file.name, p.field) for p in check_task(t)] == [("Dockerfile", "-")]


def test_v1_bad_solution_yaml_entries(tmp_path):
    t = _write(
        tmp_path / "t",
        {
            "task.yaml": "instruction: x\n",
            "Dockerfile": "FROM x\n",
            "run-tests.sh": "",
            "solution.yaml": "- command: ls\n- {min_timeout_sec: 1}\n- ''\n",
        },
    )
    assert [(p.file.name, p.field) for p in check_task(t)] == [
        ("solution.yaml", "[1].command"),
        ("solution.yaml", "[2].command"),
    ]


def test_v2_image_without_dockerfile_and_bad_values(tmp_path):
    t = _write(
        tmp_path / "t",
        {
            "task.toml": """\
            [agent]
            timeout_sec = -1
            [verifier]
            env = { A = "1" }
            [environment]
            docker_image = "alpine:3"
            cpus = "two"
            memory = "lots"
            allow_internet = 1
            """,
            "instruction.md": "x",
            "tests/test.sh": "",
            "solution/solve.sh": "",
        },
    )
    assert {p.field for p in check_task(t)} == {
        "agent.timeout_sec",
        "environment.cpus",
        "environment.memory",
        "environment.allow_internet",
    }
    (t / "task.toml").write_text(
        '[verifier]\nenv = { A = "1" }\n[environment]\ndocker_image = "alpine:3"\n'
    )
    task = load_task(t)
    assert task.environment.docker_image == "alpine:3" and task.environment.dockerfile is None
    assert task.verifier.env == (("A", "1"),)


def test_v2_without_task_toml_still_checks_the_rest(tmp_path):
    t = _write(tmp_path / "t", {"instruction.md": "x"})
    assert {p.file.relative_to(t).as_posix() for p in check_task(t)} == {
        "task.toml",
        "environment/Dockerfile",
        "tests/test.sh",
        "solution/solve.sh",
    }


def test_not_a_task(tmp_path):
    (p,) = check_task(tmp_path)
    assert "neither task.yaml (v1) nor task.toml (v2)" in p.message


@pytest.mark.parametrize(
    "text,workdir",
    [
        ("FROM x\n", "/app"),
        ("FROM x\nWORKDIR /srv\nRUN true\n", "/srv"),
        ("FROM x\nWORKDIR /srv\nWORKDIR data\n", "/srv/data"),
        ("FROM x\n# WORKDIR /nope\nRUN echo \\\n  WORKDIR /nope\nworkdir /opt/w\n", "/opt/w"),
    ],
)
def test_dockerfile_workdir(tmp_path, text, workdir):
    (tmp_path / "Dockerfile").write_text(text)
    assert dockerfile_workdir(tmp_path / "Dockerfile") == workdir


def test_copy_of_a_valid_task_breaks_when_a_file_goes(tmp_path):
    t = tmp_path / "stats-debug"
    shutil.copytree(TASKS / "stats-debug", t)
    (t / "instruction.md").write_text("  \n")
    (t / "tests" / "test.sh").unlink()
    assert {(p.file.name, p.message) for p in check_task(t)} == {
        ("instruction.md", "is empty"),
        ("test.sh", "missing file (the v2 verifier script)"),
    }

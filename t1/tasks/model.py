"""The `Task` record: one Terminal-Bench task, whichever layout it came from.

    from t1.tasks import load_task
    task = load_task("workflow/tasks/csv-summary")
    task.instruction, task.workdir, task.verifier.script

Both layouts (v1 `task.yaml`, v2/Harbor `task.toml`) load into the same frozen record; see
`t1/tasks/load.py` for the field mapping. Paths in the record are absolute host paths inside
the task directory. A task that cannot load raises `TaskError`, naming the file and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a task: the file, the field in it ("-" for the whole file), why."""

    file: Path
    field: str
    message: str

    def __str__(self) -> str:
        return f"{_shown(self.file)}: {self.field}: {self.message}"


def _shown(path: Path) -> str:
    """A path relative to the current directory when it lies below it, else as it is."""
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class TaskError(ValueError):
    """A task directory does not load; `file`, `field` and `problem` say where and why."""

    def __init__(self, file: Path, field: str, problem: str):
        self.file, self.field, self.problem = Path(file), field, problem
        super().__init__(f"{_shown(self.file)}: {field}: {problem}")

    @classmethod
    def of(cls, p: Problem) -> TaskError:
        return cls(p.file, p.field, p.message)


@dataclass(frozen=True)
class Environment:
    """Where the task's machine comes from: a Dockerfile (with its build context) or an image.

    v1: `Dockerfile` in the task directory (context = the task directory).
    v2: `environment/Dockerfile` (context = `environment/`), or `[environment] docker_image`.
    """

    dockerfile: Path | None = None
    context: Path | None = None
    docker_image: str | None = None


@dataclass(frozen=True)
class Resources:
    """What the task asks of its sandbox; None means the sandbox's default."""

    cpus: float | None = None
    memory_mb: int | None = None
    allow_internet: bool = False


@dataclass(frozen=True)
class Solution:
    """The reference solution.

    kind "script": `path` is a bash script (v1 `solution.sh`, v2 `solution/solve.sh`); for v2 the
    whole `solution/` directory travels with it (`directory`).
    kind "commands": v1 `solution.yaml`, a list of commands typed into the shell one by one.
    """

    kind: str  # script | commands
    path: Path
    commands: tuple[str, ...] = ()
    directory: Path | None = None


@dataclass(frozen=True)
class Verifier:
    """The held-out verifier: the script the harness runs, and the tests directory it uses.

    v1: `run-tests.sh` (copied to /tests/run-tests.sh) and `tests/` (copied into /tests).
    v2: `tests/test.sh` inside `tests/` (the whole directory is copied to /tests).
    """

    script: Path
    tests_dir: Path | None
    env: tuple[tuple[str, str], ...] = ()  # v2 `[verifier] env`, passed to the script


@dataclass(frozen=True)
class Task:
    id: str
    layout: str  # v1 | v2
    path: Path
    instruction: str
    category: str
    difficulty: str
    tags: tuple[str, ...]
    agent_timeout_s: float
    verifier_timeout_s: float
    workdir: str
    environment: Environment
    resources: Resources
    solution: Solution
    verifier: Verifier
    run_tests_in_same_shell: bool = False
    parser_name: str = "pytest"

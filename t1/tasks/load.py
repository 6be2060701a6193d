"""Load Terminal-Bench task directories of both layouts into `Task` records, or list problems.

    t1 tasks check workflow/tasks tests/data/broken-tasks   (the command: t1/tasks/cli.py)

    load_task(dir) -> Task            raises TaskError on the first problem
    check_task(dir) -> list[Problem]  every problem, each with file and field
    find_tasks(paths) -> list[Path]   task directories under the given paths

v1 (terminal-bench 1): `task.yaml` (instruction, difficulty, category, tags,
max_agent_timeout_sec [360], max_test_timeout_sec [60], run_tests_in_same_shell [false],
parser_name [pytest]), `Dockerfile` (or a docker-compose.yaml whose `client` service names an
image), `run-tests.sh`, `tests/`, `solution.sh` or `solution.yaml`.
v2 (Harbor): `task.toml` ([metadata] difficulty/category/tags, [agent] timeout_sec [600],
[verifier] timeout_sec [600] and env, [environment] cpus, memory_mb (or memory = "2G"),
allow_internet, docker_image), `instruction.md`, `environment/Dockerfile`, `solution/solve.sh`,
`tests/test.sh`. Values in brackets are the defaults when a file leaves a key out.

The working directory is the last WORKDIR of the Dockerfile (relative ones resolved against
the previous one), else /app. Keys we do not use (author_name, ...) are ignored.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from t1.sandbox.dockerfile import read_instructions
from t1.tasks.model import (
    Environment,
    Problem,
    Resources,
    Solution,
    Task,
    TaskError,
    Verifier,
)

V1_DIFFICULTIES = ("easy", "medium", "hard", "unknown")
V1_AGENT_TIMEOUT_S, V1_VERIFIER_TIMEOUT_S = 360.0, 60.0
V2_AGENT_TIMEOUT_S, V2_VERIFIER_TIMEOUT_S = 600.0, 600.0
DEFAULT_WORKDIR = "/app"
_MARKERS = ("task.yaml", "task.toml", "instruction.md", "run-tests.sh", "tests")


def find_tasks(paths: list[str | Path]) -> list[Path]:
    """Task directories named by `paths`: each path is a task, or a directory of tasks.

    A path is a task if it holds a layout file (task.yaml, task.toml, instruction.md,
    run-tests.sh, tests/); otherwise each non-hidden subdirectory is taken as a task (so a
    broken task without its task.yaml is still found and reported, not skipped).
    """
    out: list[Path] = []
    for p in map(Path, paths):
        if not p.is_dir() or any((p / m).exists() for m in _MARKERS):
            out.append(p)
            continue
        subs = sorted(d for d in p.iterdir() if d.is_dir() and not d.name.startswith((".", "_")))
        out.extend(subs or [p])
    return out


def load_task(path: str | Path) -> Task:
    """Load one task directory; raise TaskError naming the file and field of the first problem."""
    task, problems = _load(Path(path))
    if problems:
        raise TaskError.of(problems[0])
    assert task is not None
    return task


def check_task(path: str | Path) -> list[Problem]:
    """Every problem of one task directory (empty when it loads cleanly)."""
    return _load(Path(path))[1]


def _load(path: Path) -> tuple[Task | None, list[Problem]]:
    path = path.resolve()
    if not path.is_dir():
        return None, [Problem(path, "-", "not a directory")]
    if (path / "task.toml").exists():
        return _V2(path).load()
    if (path / "task.yaml").exists():
        return _V1(path).load()
    # No metadata file: guess the layout from the other files so that the rest is checked too.
    if any((path / m).exists() for m in ("instruction.md", "environment", "tests/test.sh")):
        return _V2(path).load()
    if any((path / m).exists() for m in ("run-tests.sh", "solution.sh", "solution.yaml")):
        return _V1(path).load()
    return None, [
        Problem(path / "task.yaml", "-", "missing file: neither task.yaml (v1) nor task.toml (v2)")
    ]


class _Fields:
    """Typed access to a parsed mapping that records a Problem for every bad value."""

    def __init__(self, file: Path, data: dict[str, Any], problems: list[Problem]):
        self.file, self.data, self.problems = file, data, problems

    def problem(self, field: str, message: str) -> None:
        self.problems.append(Problem(self.file, field, message))

    def get(self, dotted: str) -> Any:
        node: Any = self.data
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def table(self, name: str) -> None:
        """Record a problem if `name` exists but is not a table/mapping."""
        value = self.data.get(name)
        if value is not None and not isinstance(value, dict):
            self.problem(name, f"must be a table, got {type(value).__name__}")

    def string(self, key: str, default: str, *, required: bool = False) -> str:
        value = self.get(key)
        if value is None:
            if required:
                self.problem(key, "missing")
            return default
        if not isinstance(value, str):
            self.problem(key, f"must be a string, got {value!r}")
            return default
        if required and not value.strip():
            self.problem(key, "is empty")
        return value

    def seconds(self, key: str, default: float) -> float:
        value = self.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            self.problem(key, f"must be a positive number of seconds, got {value!r}")
            return default
        return float(value)

    def boolean(self, key: str, default: bool) -> bool:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.problem(key, f"must be true or false, got {value!r}")
            return default
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.get(key)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.problem(key, f"must be a list of strings, got {value!r}")
            return ()
        return tuple(value)


def _require_file(path: Path, problems: list[Problem], what: str) -> bool:
    if path.is_file():
        return True
    problems.append(Problem(path, "-", f"missing file ({what})"))
    return False


def dockerfile_workdir(dockerfile: Path) -> str:
    """The last WORKDIR of a Dockerfile (relative ones joined to the previous), else /app."""
    workdir: str | None = None
    for ins in read_instructions(dockerfile):
        if ins.cmd == "WORKDIR" and ins.args:
            arg = ins.args.strip("\"'")
            base = PurePosixPath(workdir or "/")
            workdir = str(base / arg) if not arg.startswith("/") else arg
    return workdir or DEFAULT_WORKDIR


def dockerfile_instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of each instruction of a Dockerfile (t1.sandbox.dockerfile)."""
    return [(ins.cmd, ins.args) for ins in read_instructions(dockerfile)]


def _parse_memory_mb(value: Any) -> int | None:
    """Harbor's `memory = "2G"` / "512M" / "1024" (MB) -> MB; None if unreadable."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", str(value), re.I)
    if not m:
        return None
    scale = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[m.group(2).upper()]
    mb = int(float(m.group(1)) * scale)
    return mb if mb > 0 else None


class _Layout:
    """What both layouts share: the metadata fields (each layout names their keys and
    defaults) and the one place a `Task` is built."""

    layout = ""
    KEYS: dict[str, str] = {}  # Task field -> the key in this layout's metadata file
    TIMEOUTS: tuple[float, float] = (0.0, 0.0)  # agent, verifier defaults (s)
    DIFFICULTIES: tuple[str, ...] = ()  # the allowed values, () = any string

    def __init__(self, path: Path):
        self.path = path
        self.problems: list[Problem] = []

    def load(self) -> tuple[Task | None, list[Problem]]:
        task = self._load()
        return (None if self.problems else task), self.problems

    def _load(self) -> Task | None:
        raise NotImplementedError

    def _metadata(self, f: _Fields) -> dict[str, Any]:
        """difficulty, category, tags and the two timeouts, defaults where the file is silent."""
        k = self.KEYS
        difficulty = f.string(k["difficulty"], "unknown")
        if self.DIFFICULTIES and difficulty not in self.DIFFICULTIES:
            f.problem(
                k["difficulty"],
                f"must be one of {', '.join(self.DIFFICULTIES)}, got {difficulty!r}",
            )
        return {
            "difficulty": difficulty,
            "category": f.string(k["category"], "software_engineering"),
            "tags": f.strings(k["tags"]),
            "agent_timeout_s": f.seconds(k["agent_timeout_s"], self.TIMEOUTS[0]),
            "verifier_timeout_s": f.seconds(k["verifier_timeout_s"], self.TIMEOUTS[1]),
        }

    def _task(self, env: Environment, **fields: Any) -> Task | None:
        """The Task of this directory (None once any problem is recorded): id, layout, path
        and workdir come from here, the rest from the layout."""
        if self.problems:
            return None
        return Task(
            id=self.path.name,
            layout=self.layout,
            path=self.path,
            workdir=self._workdir(env),
            environment=env,
            **fields,
        )

    def _workdir(self, env: Environment) -> str:
        if env.dockerfile is not None and env.dockerfile.is_file():
            return dockerfile_workdir(env.dockerfile)
        return DEFAULT_WORKDIR


class _V1(_Layout):
    layout = "v1"
    KEYS = {
        "difficulty": "difficulty",
        "category": "category",
        "tags": "tags",
        "agent_timeout_s": "max_agent_timeout_sec",
        "verifier_timeout_s": "max_test_timeout_sec",
    }
    TIMEOUTS = (V1_AGENT_TIMEOUT_S, V1_VERIFIER_TIMEOUT_S)
    DIFFICULTIES = V1_DIFFICULTIES

    def _load(self) -> Task | None:
        p, problems = self.path, self.problems
        meta_file = p / "task.yaml"
        data = self._yaml(meta_file, "task.yaml")
        f = _Fields(meta_file, data if isinstance(data, dict) else {}, problems)
        if data is not None and not isinstance(data, dict):
            f.problem("-", f"must be a mapping of keys, got {type(data).__name__}")
        # A task.yaml that is missing or does not parse is one problem, not one per field.
        instruction = self._instruction(f) if data is not None else ""
        meta = self._metadata(f)
        same_shell = f.boolean("run_tests_in_same_shell", False)
        parser = f.string("parser_name", "pytest")

        env = self._environment()
        script = p / "run-tests.sh"
        _require_file(script, problems, "the v1 verifier script")
        tests = p / "tests"
        solution = self._solution()
        return self._task(
            env,
            instruction=instruction,
            **meta,
            resources=Resources(),
            solution=solution,
            verifier=Verifier(script=script, tests_dir=tests if tests.is_dir() else None),
            run_tests_in_same_shell=same_shell,
            parser_name=parser,
        )

    def _yaml(self, file: Path, what: str) -> Any:
        if not _require_file(file, self.problems, what):
            return None
        try:
            return yaml.safe_load(file.read_text())
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            why = getattr(e, "problem", None) or str(e)
            self.problems.append(Problem(file, "-", f"invalid YAML{where}: {why}"))
            return None

    def _instruction(self, f: _Fields) -> str:
        if f.get("instruction") is None and isinstance(f.get("descriptions"), list):
            # Early terminal-bench tasks: descriptions: [{key: base, description: ...}]
            for d in f.get("descriptions"):
                if isinstance(d, dict) and d.get("key") == "base":
                    if isinstance(d.get("description"), str) and d["description"].strip():
                        return d["description"]
            f.problem("descriptions", "has no entry with key 'base' and a description")
            return ""
        return f.string("instruction", "", required=True)

    def _environment(self) -> Environment:
        dockerfile = self.path / "Dockerfile"
        if dockerfile.is_file():
            return Environment(dockerfile=dockerfile, context=self.path)
        compose = self.path / "docker-compose.yaml"
        if compose.is_file():
            data = self._yaml(compose, "docker-compose.yaml")
            image = _Fields(compose, data if isinstance(data, dict) else {}, []).get(
                "services.client.image"
            )
            if isinstance(image, str) and image and "${" not in image:
                return Environment(docker_image=image)
        self.problems.append(
            Problem(
                dockerfile,
                "-",
                "missing file (the v1 environment; or a docker-compose.yaml "
                "whose services.client.image names a fixed image)",
            )
        )
        return Environment()

    def _solution(self) -> Solution | None:
        sh, yml = self.path / "solution.sh", self.path / "solution.yaml"
        if sh.is_file():
            return Solution(kind="script", path=sh)
        if not yml.is_file():
            self.problems.append(Problem(sh, "-", "missing file (solution.sh or solution.yaml)"))
            return None
        data = self._yaml(yml, "solution.yaml")
        if data is None:
            if not any(pr.file == yml for pr in self.problems):
                self.problems.append(Problem(yml, "-", "is empty: expected a list of commands"))
            return None
        if not isinstance(data, list) or not data:
            self.problems.append(Problem(yml, "-", "must be a non-empty list of commands"))
            return None
        commands = []
        for i, item in enumerate(data):
            cmd = item.get("command") if isinstance(item, dict) else item
            if not isinstance(cmd, str) or not cmd.strip():
                self.problems.append(
                    Problem(yml, f"[{i}].command", f"must be a non-empty string, got {cmd!r}")
                )
                continue
            commands.append(cmd)
        return Solution(kind="commands", path=yml, commands=tuple(commands))


class _V2(_Layout):
    layout = "v2"
    KEYS = {
        "difficulty": "metadata.difficulty",
        "category": "metadata.category",
        "tags": "metadata.tags",
        "agent_timeout_s": "agent.timeout_sec",
        "verifier_timeout_s": "verifier.timeout_sec",
    }
    TIMEOUTS = (V2_AGENT_TIMEOUT_S, V2_VERIFIER_TIMEOUT_S)

    def _load(self) -> Task | None:
        p, problems = self.path, self.problems
        meta_file = p / "task.toml"
        data: dict[str, Any] = {}
        if _require_file(meta_file, problems, "the v2 task metadata"):
            try:
                data = tomllib.loads(meta_file.read_text())
            except tomllib.TOMLDecodeError as e:
                problems.append(Problem(meta_file, "-", f"invalid TOML: {e}"))
        f = _Fields(meta_file, data, problems)
        for name in ("metadata", "agent", "verifier", "environment"):
            f.table(name)
        meta = self._metadata(f)
        verifier_env = self._verifier_env(f)
        resources = self._resources(f)
        image = f.string("environment.docker_image", "") or None

        instruction = ""
        ins_file = p / "instruction.md"
        if _require_file(ins_file, problems, "the task instruction"):
            instruction = ins_file.read_text()
            if not instruction.strip():
                problems.append(Problem(ins_file, "-", "is empty"))

        dockerfile = p / "environment" / "Dockerfile"
        if dockerfile.is_file():
            env = Environment(dockerfile=dockerfile, context=dockerfile.parent, docker_image=image)
        elif image:
            env = Environment(docker_image=image)
        else:
            env = Environment()
            problems.append(
                Problem(
                    dockerfile, "-", "missing file (or set [environment] docker_image in task.toml)"
                )
            )

        script = p / "tests" / "test.sh"
        _require_file(script, problems, "the v2 verifier script")
        solve = p / "solution" / "solve.sh"
        _require_file(solve, problems, "the reference solution")
        return self._task(
            env,
            instruction=instruction,
            **meta,
            resources=resources,
            solution=Solution(kind="script", path=solve, directory=solve.parent),
            verifier=Verifier(script=script, tests_dir=script.parent, env=verifier_env),
        )

    def _verifier_env(self, f: _Fields) -> tuple[tuple[str, str], ...]:
        env = f.get("verifier.env")
        if env is None:
            return ()
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            f.problem("verifier.env", f"must be a table of strings, got {env!r}")
            return ()
        return tuple(sorted(env.items()))

    def _resources(self, f: _Fields) -> Resources:
        cpus = f.get("environment.cpus")
        if cpus is not None and (
            isinstance(cpus, bool) or not isinstance(cpus, int | float) or cpus <= 0
        ):
            f.problem("environment.cpus", f"must be a positive number, got {cpus!r}")
            cpus = None
        memory_mb = None
        for key in ("environment.memory_mb", "environment.memory"):
            raw = f.get(key)
            if raw is None:
                continue
            if key.endswith("_mb") and (isinstance(raw, bool) or not isinstance(raw, int)):
                f.problem(key, f"must be a positive integer (MB), got {raw!r}")
                continue
            memory_mb = _parse_memory_mb(raw)
            if memory_mb is None:
                f.problem(key, f'must be a size such as 2048 or "2G", got {raw!r}')
            break
        allow = f.boolean("environment.allow_internet", False)
        return Resources(
            cpus=float(cpus) if cpus is not None else None,
            memory_mb=memory_mb,
            allow_internet=allow,
        )

"""What a task installs at build, solve and test time, read from its shell (heuristic, pure).

    from t1.sandbox.needs import task_needs
    tn = task_needs(load_task("task-dir"))           # a TaskNeeds (t1.sandbox.need_records)
    tn.pip_specs(), tn.apt_packages(), tn.python_versions(), tn.unparsed, tn.unsupported

    t1 provision --tasks DIR...       (t1/tasks/provision.py) provisions what this finds
    t1 tasks check --offline DIR...   (t1/tasks/ready.py) says what is still missing

Read: the Dockerfile's FROM and RUN instructions (t1.sandbox.dockerfile; phase "build"), the
verifier script and the other `*.sh` of its tests directory ("verifier"), the solution script
or solution.yaml commands ("solution"; their install commands: t1.sandbox.install_commands). The FROM image (or v2 `[environment] docker_image`) gives the base image and,
for `python:X.Y*` and `.../python-3-13:tag` images, its Python version.

Forms recognised, as real Terminal-Bench tasks write them (tests/sandbox/test_needs.py has one
fixture of each):

    pip|pip3|pipX.Y|python[3[.Y]] -m pip|"$PY" -m pip|uv pip  install [opts] SPEC... [-r FILE]
    uv add [--dev] [-p V] SPEC...           uv tool install SPEC [--with SPEC]
    uvx [-p|--python V] [--with|-w SPEC]... [--from SPEC] TOOL[@VER] ...
    uv run --with SPEC ...                  uv venv -p V / uv python install V (Python needs)
    apt-get|apt [opts] install PKG[=VER]... curl|wget .../uv[/VER]/install.sh (the uv installer)

Options that take a value (`--retries 3`, `-o Dpkg::...`, `--index-url URL`) are skipped with
their value; redirections, `sudo`, `env VAR=x`, leading `VAR=x` assignments are ignored; `\\`
continuations are joined. Requirements files (`-r requirements.txt`) are looked up in the task
(the script's directory, the build context, then anywhere in the task by path suffix) and read.

What is NOT guessed: a spec with a shell variable (`pip install $PKG`), a line the shell lexer
cannot split, a requirements file the task does not hold, `uv sync`/`pip install -e .`/local
paths -> `unparsed` (reported, never provisioned). Installers we do not provision offline
(npm, cargo, go, gem, conda, a curl/wget of any other URL in the verifier or solution) and
`add-apt-repository` (a third-party apt source; the host's distribution stands in for FROM)
-> `unsupported` (the task is not ready offline).
"""

from __future__ import annotations

import re
from pathlib import Path

from t1.sandbox.dockerfile import from_line, image_python, read_instructions
from t1.sandbox.install_commands import _Reader, _rel
from t1.sandbox.need_records import TaskNeeds


def task_image_python(task) -> str | None:  # noqa: ANN001 - t1.tasks.Task
    """The Python version of a task's base image (first FROM of its Dockerfile, else its
    docker_image): "3.12" for python:3.12-slim; None for other images."""
    df = task.environment.dockerfile
    image = task.environment.docker_image
    if df is not None and Path(df).is_file():
        for ins in read_instructions(Path(df)):
            if ins.cmd == "FROM":
                image = from_line(ins.args)
                break
    return image_python(image)


def script_needs(text: str, name: str = "script.sh", phase: str = "verifier",
                 task_dir: Path | None = None) -> TaskNeeds:  # fmt: skip
    """Needs of one shell script (for tests and one-off use)."""
    out = TaskNeeds(task=name)
    _Reader(out, task_dir, [task_dir] if task_dir else []).script(text, name, phase)
    return out


def task_needs(task) -> TaskNeeds:  # noqa: ANN001 - t1.tasks.Task (no import cycle)
    """Everything `task` (a loaded t1.tasks.Task) installs, per phase, with sources."""
    root = Path(task.path)
    out = TaskNeeds(task=task.id)
    env = task.environment
    out.from_image = env.docker_image
    df = env.dockerfile
    if df is not None and Path(df).is_file():
        ctx = Path(env.context or df.parent)
        reader = _Reader(out, root, [ctx, root])
        name = _rel(Path(df), root)
        for ins in read_instructions(Path(df)):
            if ins.cmd == "FROM" and out.from_image in (None, env.docker_image):
                out.from_image = from_line(ins.args)
            elif ins.cmd == "RUN":
                reader.script(ins.args, f"{name}:{ins.line}", "build")
        out.needs[:] = [_relabel(n) for n in out.needs]
        out.unparsed[:] = [_relabel(i) for i in out.unparsed]
        out.unsupported[:] = [_relabel(i) for i in out.unsupported]
    out.from_python = image_python(out.from_image)
    ver = task.verifier
    vdir = Path(ver.tests_dir) if ver.tests_dir else Path(ver.script).parent
    reader = _Reader(out, root, [vdir, root])
    scripts = [Path(ver.script)]
    if ver.tests_dir and Path(ver.tests_dir).is_dir():
        scripts += sorted(p for p in Path(ver.tests_dir).rglob("*.sh") if p != Path(ver.script))
    for s in scripts:
        if s.is_file():
            reader.script(s.read_text(errors="replace"), _rel(s, root), "verifier")
    sol = task.solution
    sdir = Path(sol.directory) if sol.directory else root
    reader = _Reader(out, root, [sdir, root])
    if sol.kind == "commands":
        for k, c in enumerate(sol.commands, 1):
            reader.script(c, f"{_rel(Path(sol.path), root)}:cmd{k}", "solution")
    elif Path(sol.path).is_file():
        reader.script(
            Path(sol.path).read_text(errors="replace"), _rel(Path(sol.path), root), "solution"
        )
    return out


def _relabel(x):  # noqa: ANN001, ANN202 - Need | Issue
    """Dockerfile sources read `Dockerfile:RUNLINE:1`: keep `Dockerfile:RUNLINE`."""
    src = re.sub(r"^(.*:\d+):\d+$", r"\1", x.source)
    return type(x)(**{**x.__dict__, "source": src})

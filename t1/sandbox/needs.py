"""What a task installs at build, solve and test time, read from its shell (heuristic, pure).

    from t1.sandbox.needs import task_needs
    tn = task_needs(load_task("task-dir"))
    tn.pip_specs(), tn.apt_packages(), tn.python_versions(), tn.unparsed, tn.unsupported

    t1 provision --tasks DIR...       (t1/tasks/provision.py) provisions what this finds
    t1 tasks check --offline DIR...   (t1/tasks/ready.py) says what is still missing

Read: the Dockerfile's FROM and RUN lines (phase "build"), the verifier script and the other
`*.sh` of its tests directory ("verifier"), the solution script or solution.yaml commands
("solution"). The FROM image (or v2 `[environment] docker_image`) gives the base image and,
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
from dataclasses import dataclass, field
from pathlib import Path

from t1.sandbox.shellwords import logical_lines, simple_commands, strip_prefix, tool_name

PHASES = ("build", "solution", "verifier")
_PIP_VALUE_OPTS = {
    "-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url",
    "-f", "--find-links", "-t", "--target", "--prefix", "--root", "--python", "-p",
    "--platform", "--python-version", "--implementation", "--abi", "--only-binary",
    "--no-binary", "--trusted-host", "--timeout", "--retries", "--cache-dir", "--src",
    "--upgrade-strategy", "--progress-bar", "--log", "--proxy", "--cert", "--client-cert",
    "--exists-action", "--global-option", "--config-settings", "-C", "--python-platform",
    "--index", "--default-index", "--group", "--extra", "--optional", "--package",
    "--directory", "--project", "--resolution", "--prerelease", "--index-strategy",
    "--keyring-provider", "--link-mode", "--exclude-newer", "--refresh-package",
    "--reinstall-package", "--upgrade-package", "-P", "--no-binary-package", "--tag",
    "--branch", "--rev", "--script", "--bounds", "--raw-sources", "--marker", "-m",
    "--with", "-w", "--with-requirements", "--from", "--with-editable", "--env-file",
}  # fmt: skip
_APT_VALUE_OPTS = {"-o", "--option", "-t", "--target-release", "-c", "--config-file", "-a"}
_UNSUPPORTED = {"npm": "npm", "pnpm": "npm", "yarn": "npm", "cargo": "cargo", "go": "go",
                "gem": "gem", "conda": "conda", "mamba": "conda", "micromamba": "conda"}  # fmt: skip
_UV_INSTALLER = re.compile(r"https?://\S*/uv(/[0-9][^/\s]*)?/install\.sh")
_URL = re.compile(r"https?://[^\s'\"|;&)]+")
_PY_IMAGE = re.compile(r"(?:^|/)python(?::|-)(3)[.-](\d+)")
_SPEC = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._ -]+\])?\s*((===?|~=|!=|<=?|>=?)\s*[A-Za-z0-9.*+!_-]+\s*,?\s*)*(;.*)?$")  # fmt: skip


@dataclass(frozen=True)
class Need:
    """One thing a task installs. kind: pip | apt | python | uv; spec as written (normalised
    spaces); python: the interpreter version the install targets when the command names one
    (`uvx -p 3.13`), else None (the image's / the host's); source: `file:line`; phase."""

    kind: str
    spec: str
    source: str
    phase: str
    python: str | None = None


@dataclass(frozen=True)
class Issue:
    """A line we did not turn into needs: `why` says what it was and why not."""

    source: str
    phase: str
    text: str
    why: str

    def __str__(self) -> str:
        return f"{self.source}: {self.why}: {self.text[:120]}"


@dataclass
class TaskNeeds:
    task: str
    from_image: str | None = None
    from_python: str | None = None  # "3.12" for python:3.12-slim
    needs: list[Need] = field(default_factory=list)
    unparsed: list[Issue] = field(default_factory=list)
    unsupported: list[Issue] = field(default_factory=list)

    def pip_specs(self) -> list[str]:
        return sorted({n.spec for n in self.needs if n.kind == "pip"})

    def apt_packages(self) -> list[str]:
        return sorted({n.spec for n in self.needs if n.kind == "apt"})

    def python_versions(self) -> list[str]:
        """Python versions the task asks for: the FROM image's and every `-p V`/`--python V`."""
        vs = {n.spec for n in self.needs if n.kind == "python"}
        vs |= {n.python for n in self.needs if n.kind == "pip" and n.python}
        if self.from_python:
            vs.add(self.from_python)
        return sorted(vs)

    def record(self) -> dict:
        """The per-task record of the provision manifest (JSON-able)."""
        return {
            "from": self.from_image,
            "python": self.python_versions(),
            "pip": self.pip_specs(),
            "apt": self.apt_packages(),
            "uv": sorted({n.spec for n in self.needs if n.kind == "uv"}),
            "unparsed": [str(i) for i in self.unparsed],
            "unsupported": [str(i) for i in self.unsupported],
        }


# -- images -----------------------------------------------------------------------------------


def image_python(image: str | None) -> str | None:
    """`python:3.12-slim` -> "3.12"; `ghcr.io/.../python-3-13:20250620` -> "3.13"; else None."""
    if not image:
        return None
    m = _PY_IMAGE.search(image.split("@")[0])
    return f"{m.group(1)}.{m.group(2)}" if m else None


def from_line(args: str) -> str:
    """The image of a FROM instruction's arguments (`--platform=...` and `AS name` dropped)."""
    words = [w for w in args.split() if not w.startswith("--")]
    return words[0] if words else ""


def task_image_python(task) -> str | None:  # noqa: ANN001 - t1.tasks.Task
    """The Python version of a task's base image (first FROM of its Dockerfile, else its
    docker_image): "3.12" for python:3.12-slim; None for other images."""
    df = task.environment.dockerfile
    image = task.environment.docker_image
    if df is not None and Path(df).is_file():
        for line in Path(df).read_text(errors="replace").splitlines():
            word, _, rest = line.strip().partition(" ")
            if word.upper() == "FROM":
                image = from_line(rest)
                break
    return image_python(image)


class _Reader:
    """Collects needs from the commands of one script."""

    def __init__(self, out: TaskNeeds, task_dir: Path | None, search: list[Path]):
        self.out, self.task_dir, self.search = out, task_dir, search
        self.read_files: set[Path] = set()

    def script(self, text: str, name: str, phase: str) -> None:
        for lineno, line in logical_lines(text):
            src = f"{name}:{lineno}"
            if phase != "build":
                m = _UV_INSTALLER.search(line)
                if m:
                    ver = (m.group(1) or "").strip("/")
                    self.out.needs.append(Need("uv", ver or "latest", src, phase))
                    line_wo = _UV_INSTALLER.sub("", line)
                else:
                    line_wo = line
                for url in _URL.findall(line_wo):
                    if (
                        re.search(r"\b(curl|wget)\b", line_wo)
                        and "localhost" not in url
                        and "127.0.0.1" not in url
                    ):
                        self.out.unsupported.append(
                            Issue(src, phase, line, f"downloads {url} at run time")
                        )
                        break
            try:
                cmds = simple_commands(line)
            except ValueError as e:
                if re.search(r"\b(pip3?|uvx?|apt-get|apt)\b", line):
                    self.out.unparsed.append(Issue(src, phase, line, f"shell lexer: {e}"))
                continue
            for words in cmds:
                self.command(strip_prefix(words), src, phase, line)

    def command(self, w: list[str], src: str, phase: str, line: str) -> None:
        if not w:
            return
        t = tool_name(w[0])
        if re.fullmatch(r"pip(3(\.\d+)?)?", t) and len(w) > 1:
            self.pip(w[1:], src, phase, line)
        elif re.fullmatch(r"python(3(\.\d+)?)?", t) and w[1:3] == ["-m", "pip"]:
            self.pip(w[3:], src, phase, line, python=_py_of(t))
        elif w[1:3] == ["-m", "pip"]:  # "$PY" -m pip / /opt/venv/bin/python -m pip
            self.pip(w[3:], src, phase, line)
        elif t == "uv" and len(w) > 1:
            self.uv(w[1:], src, phase, line)
        elif t == "uvx":
            self.uvx(w[1:], src, phase, line)
        elif t in ("apt-get", "apt") and "install" in w[1:]:
            self.apt(w[1:], src, phase, line)
        elif t == "add-apt-repository":
            repo = next((a for a in w[1:] if not a.startswith("-")), "?")
            self.out.unsupported.append(
                Issue(src, phase, line, f"adds the apt repository {repo} (not provisioned; "
                      "the host's distribution stands in for FROM)")
            )  # fmt: skip
        elif t in _UNSUPPORTED and len(w) > 1 and w[1] in ("install", "i", "add", "get", "ci"):
            self.out.unsupported.append(
                Issue(src, phase, line, f"{_UNSUPPORTED[t]} packages are not provisioned offline")
            )

    # -- pip / uv ---------------------------------------------------------------------------

    def pip(self, w: list[str], src: str, phase: str, line: str, python: str | None = None) -> None:
        if not w or w[0] != "install":
            return
        self.specs(w[1:], src, phase, line, python)

    def specs(self, w: list[str], src: str, phase: str, line: str, python: str | None) -> None:
        """Requirement specs and -r/-c files in an install-like argument list."""
        i = 0
        while i < len(w):
            a = w[i]
            if a in ("-r", "--requirement", "-c", "--constraint", "--with-requirements"):
                if i + 1 < len(w):
                    self.requirements(w[i + 1], src, phase, line, python)
                i += 2
                continue
            if a.startswith(("--requirement=", "--constraint=")):
                self.requirements(a.split("=", 1)[1], src, phase, line, python)
            elif a in ("-p", "--python"):
                python = _py_spec(w[i + 1]) if i + 1 < len(w) else python
                i += 2
                continue
            elif a.startswith("--python="):
                python = _py_spec(a.split("=", 1)[1])
            elif a in ("-e", "--editable"):
                self.out.unparsed.append(
                    Issue(
                        src,
                        phase,
                        line,
                        f"editable install of {w[i + 1] if i + 1 < len(w) else '?'} (local)",
                    )
                )
                i += 2
                continue
            elif a in _PIP_VALUE_OPTS:
                i += 2
                continue
            elif a.startswith("-"):
                pass
            else:
                self.spec(a, src, phase, line, python)
            i += 1

    def spec(self, a: str, src: str, phase: str, line: str, python: str | None) -> None:
        if "$" in a or "`" in a:
            self.out.unparsed.append(Issue(src, phase, line, f"spec {a!r} has a shell variable"))
        elif a.startswith((".", "/", "~")) or a.endswith((".whl", ".tar.gz", ".zip")) or "://" in a:
            self.out.unparsed.append(Issue(src, phase, line, f"{a!r} is a local path or URL"))
        elif _SPEC.match(a):
            self.out.needs.append(Need("pip", re.sub(r"\s+", "", a), src, phase, python))
        else:
            self.out.unparsed.append(Issue(src, phase, line, f"{a!r} is not a requirement spec"))

    def requirements(self, name: str, src: str, phase: str, line: str, python: str | None) -> None:
        path = self.find(name)
        if path is None:
            self.out.unparsed.append(
                Issue(src, phase, line, f"requirements file {name!r} is not in the task")
            )
            return
        if path in self.read_files:
            return
        self.read_files.add(path)
        rel = _rel(path, self.task_dir)
        for n, raw in enumerate(path.read_text(errors="replace").splitlines(), 1):
            s = raw.split(" #")[0].strip()
            if not s or s.startswith("#"):
                continue
            if s.startswith(("-r ", "-c ", "--requirement", "--constraint")):
                self.requirements(
                    s.split(None, 1)[1].split("=", 1)[-1].strip(), f"{rel}:{n}", phase, s, python
                )
            elif s.startswith("-"):
                continue
            else:
                self.spec(s.replace(" ", ""), f"{rel}:{n}", phase, s, python)

    def find(self, name: str) -> Path | None:
        if "$" in name:
            return None
        for base in self.search:
            p = base / name.lstrip("/") if not name.startswith("/") else None
            if p is not None and p.is_file():
                return p
        if self.task_dir is None:
            return None
        suffix = Path(name.lstrip("/")).parts
        for p in sorted(self.task_dir.rglob(Path(name).name)):
            if p.is_file() and p.parts[-len(suffix) :] == suffix:
                return p
        for p in sorted(self.task_dir.rglob(Path(name).name)):
            if p.is_file():
                return p
        return None

    def uv(self, w: list[str], src: str, phase: str, line: str) -> None:
        sub = w[0]
        if sub == "pip" and len(w) > 1 and w[1] == "install":
            self.specs(w[2:], src, phase, line, None)
        elif sub == "pip" and len(w) > 1 and w[1] == "sync":
            self.specs(
                ["-r", *[a for a in w[2:] if not a.startswith("-")][:1]], src, phase, line, None
            )
        elif sub == "add":
            self.specs(w[1:], src, phase, line, None)
        elif sub == "tool" and len(w) > 2 and w[1] == "install":
            self.uvx(w[2:], src, phase, line, run_tool=False)
        elif sub == "run":
            self.with_opts(w[1:], src, phase, line)
        elif sub == "venv" or (sub == "python" and w[1:2] == ["install"]):
            vs = [_py_spec(a) for a in w[1:] if re.fullmatch(r"(cpython-)?3(\.\d+)*", a)]
            py = _opt(w, ("-p", "--python"))
            for v in [*vs, *([_py_spec(py)] if py else [])]:
                self.out.needs.append(Need("python", v, src, phase))
        elif sub == "sync":
            self.out.unparsed.append(
                Issue(src, phase, line, "uv sync reads the project's lock (not read here)")
            )

    def with_opts(
        self, w: list[str], src: str, phase: str, line: str
    ) -> tuple[str | None, list[str]]:
        """`--with SPEC`/`-w SPEC`/`--with=SPEC` and `-p V` before the command.

        -> (the Python version named, the words after the options: the command or tool)."""
        python = None
        i = 0
        while i < len(w) and w[i].startswith("-"):
            a = w[i]
            if a in ("--with", "-w", "--from") and i + 1 < len(w):
                for s in w[i + 1].split(","):
                    self.spec(s, src, phase, line, python)
                i += 2
                continue
            if a.startswith(("--with=", "--from=")):
                for s in a.split("=", 1)[1].split(","):
                    self.spec(s, src, phase, line, python)
            elif a in ("-p", "--python") and i + 1 < len(w):
                python = _py_spec(w[i + 1])
                i += 2
                continue
            elif a.startswith("--python="):
                python = _py_spec(a.split("=", 1)[1])
            elif a in ("--with-requirements",) and i + 1 < len(w):
                self.requirements(w[i + 1], src, phase, line, python)
                i += 2
                continue
            elif a in _PIP_VALUE_OPTS:
                i += 2
                continue
            i += 1
        if python:  # -p before --with: re-tag the needs of this line
            self.out.needs[:] = [
                Need(n.kind, n.spec, n.source, n.phase, python)
                if n.source == src and n.kind == "pip" and n.python is None else n
                for n in self.out.needs
            ]  # fmt: skip
            self.out.needs.append(Need("python", python, src, phase))
        return python, w[i:]

    def uvx(self, w: list[str], src: str, phase: str, line: str, run_tool: bool = True) -> None:
        has_from = any(a == "--from" or a.startswith("--from=") for a in w)
        python, rest = self.with_opts(w, src, phase, line)
        named = {_name(n.spec) for n in self.out.needs if n.source == src and n.kind == "pip"}
        if rest and not has_from and _name(rest[0].split("@")[0]) not in named:
            tool = rest[0]
            if "@" in tool:
                name, ver = tool.split("@", 1)
                tool = name if ver == "latest" else f"{name}=={ver}"
            self.spec(tool, src, phase, line, python)
        if not run_tool:  # uv tool install SPEC --with X: options may follow the spec
            self.with_opts([a for a in rest[1:]], src, phase, line)

    # -- apt --------------------------------------------------------------------------------

    def apt(self, w: list[str], src: str, phase: str, line: str) -> None:
        i = w.index("install") + 1
        pre = w[: i - 1]
        j = 0
        while j < len(pre):  # options before `install` may take values too
            j += 2 if pre[j] in _APT_VALUE_OPTS else 1
        while i < len(w):
            a = w[i]
            if a in _APT_VALUE_OPTS:
                i += 2
                continue
            if a.startswith("-"):
                pass
            elif "$" in a or "`" in a:
                self.out.unparsed.append(
                    Issue(src, phase, line, f"apt package {a!r} has a shell variable")
                )
            elif a.startswith(("/", ".")) or a.endswith(".deb"):
                self.out.unparsed.append(Issue(src, phase, line, f"{a!r} is a local .deb"))
            elif re.fullmatch(r"[a-z0-9][a-z0-9+.-]*(:[a-z0-9]+)?(=[A-Za-z0-9.+:~-]+)?", a):
                self.out.needs.append(Need("apt", a, src, phase))
            else:
                self.out.unparsed.append(
                    Issue(src, phase, line, f"{a!r} is not an apt package name")
                )
            i += 1


def _name(spec: str) -> str:
    """The normalised distribution name of a requirement spec."""
    m = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", spec)
    return re.sub(r"[-_.]+", "-", m.group(0)).lower() if m else spec


def _py_of(tool: str) -> str | None:
    m = re.fullmatch(r"python(3\.\d+)", tool)
    return m.group(1) if m else None


def _py_spec(v: str) -> str:
    """`3.13` / `python3.13` / `cpython-3.13.1` / `3.12.4` -> "3.13" / ... (major.minor)."""
    m = re.search(r"(3)\.(\d+)", v)
    return f"{m.group(1)}.{m.group(2)}" if m else v


def _opt(w: list[str], names: tuple[str, ...]) -> str | None:
    for i, a in enumerate(w):
        if a in names and i + 1 < len(w):
            return w[i + 1]
        for n in names:
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


def _rel(p: Path, base: Path | None) -> str:
    try:
        return str(p.relative_to(base)) if base else str(p)
    except ValueError:
        return str(p)


# -- tasks ------------------------------------------------------------------------------------


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
        for lineno, line in logical_lines(Path(df).read_text(errors="replace")):
            word, _, args = line.partition(" ")
            if word.upper() == "FROM" and out.from_image in (None, env.docker_image):
                out.from_image = from_line(args)
            elif word.upper() == "RUN":
                reader.script(args, f"{name}:{lineno}", "build")
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

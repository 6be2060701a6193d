"""Install commands of a shell script read into needs: pip, uv, uvx, apt and what we refuse.

    reader = _Reader(out, task_dir, search=[script_dir, task_dir])   # out: a TaskNeeds
    reader.script(text, "tests/test.sh", "verifier")   # appends to out.needs / unparsed / unsupported

The forms recognised and what is not guessed: t1.sandbox.needs (the entry point: script_needs,
task_needs). Words come from t1.sandbox.shellwords.
"""

from __future__ import annotations

import re
from pathlib import Path

from t1.sandbox.need_records import Issue, Need, TaskNeeds
from t1.sandbox.shellwords import logical_lines, simple_commands, strip_prefix, tool_name

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
_SPEC = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._ -]+\])?\s*((===?|~=|!=|<=?|>=?)\s*[A-Za-z0-9.*+!_-]+\s*,?\s*)*(;.*)?$")  # fmt: skip


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

"""What a task needs, as records: one install (`Need`), a line not read (`Issue`), all of a task.

tn = task_needs(task)            # t1.sandbox.needs reads them; t1.sandbox.install_commands
tn.pip_specs(), tn.apt_packages(), tn.python_versions(), tn.record()   # fills them in
"""

from __future__ import annotations

from dataclasses import dataclass, field

PHASES = ("build", "solution", "verifier")


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

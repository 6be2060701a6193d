"""Dockerfile text as instructions: the one parser every reader of a task's Dockerfile uses (pure).

    from t1.sandbox.dockerfile import from_line, image_python, read_instructions
    for ins in read_instructions(Path("task/environment/Dockerfile")):
        ins.cmd, ins.args, ins.line     # "RUN", "apt-get update && apt-get install -y jq", 9
    image_python(from_line("--platform=linux/amd64 python:3.12-slim AS base"))   # "3.12"

Continuation lines (a trailing `\\`) are joined with single spaces; comment lines are dropped,
inside a continuation too (as docker drops them); a blank line ends an instruction. `cmd` is
the keyword upper-cased (`run` -> RUN), `args` the rest, stripped, `line` the keyword's line;
a line that does not start with a word gets cmd "" and the whole text in `args`.

Readers: t1.sandbox.envbuild applies the instructions (and rejects those it does not
support), t1.sandbox.needs reads FROM and RUN (what a task installs), t1.tasks.load reads
WORKDIR (the task's working directory) and what changes the machine (t1.tasks.env).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_PY_IMAGE = re.compile(r"(?:^|/)python(?::|-)(3)[.-](\d+)")


@dataclass(frozen=True)
class Instruction:
    cmd: str  # upper case ("" when the line does not start with a keyword)
    args: str  # raw argument text, continuation lines joined
    line: int  # 1-based line of the instruction keyword


def parse_instructions(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped."""
    out: list[Instruction] = []
    buf: list[str] = []
    start = 0
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        stripped = line.lstrip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # comment lines inside a continuation are dropped
        if not buf:
            start = no
        if line.endswith("\\"):
            buf.append(line[:-1])
            continue
        buf.append(line)
        out.append(_split(" ".join(s.strip() for s in buf if s.strip()), start))
        buf = []
    if buf:
        out.append(_split(" ".join(s.strip() for s in buf if s.strip()), start))
    return out


def _split(text: str, line: int) -> Instruction:
    m = re.match(r"(\w+)\s*(.*)", text, re.S)
    if not m:
        return Instruction("", text, line)
    return Instruction(m.group(1).upper(), m.group(2).strip(), line)


def read_instructions(path: Path) -> list[Instruction]:
    """`parse_instructions` of a Dockerfile on disk (bytes that are not UTF-8 replaced)."""
    return parse_instructions(Path(path).read_text(errors="replace"))


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

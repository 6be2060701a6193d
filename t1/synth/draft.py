"""A synthesized task as an ordered list of steps over one workdir, and its v2 (Harbor) layout.

    d = seed_draft(rng, round_=0)              # one library step
    child = extend(d, rng, n_steps=2, round_=1)  # the parent's steps + new ones
    render(child, Path("out/tasks") / child.id)  # task.toml, instruction.md, environment/,
                                                 # solution/solve.sh, tests/, synth.json
    again = load_draft(Path("out/tasks") / child.id)

A draft may sit on a foreign seed (`base`: any v2 task whose tests/test.sh runs
tests/test_outputs.py): its environment, solution and tests come first, the library steps
follow. `synth.json` in every rendered task records the steps, the lineage and which
assertions the last extension added, so the task can be extended again or re-validated.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from t1.records import write_json_atomic
from t1.synth.steps import (
    WORKDIR,
    Artifact,
    NotApplicable,
    Step,
    StepContext,
    choose_kind,
    library,
    rel,
)
from t1.tasks.runner import TEST_FILE, TEST_SH

SCHEMA_VERSION = 1
TEST_STEM = "test_outputs"


TEST_HEADER = '''
import configparser
import csv
import base64
import hashlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
import tarfile
from pathlib import Path


def _t1_sh(cmd, cwd=None, env=None, timeout=60, stdin=None):
    """Run a command (a list, or a string for bash) and return the CompletedProcess."""
    if isinstance(cmd, str):
        cmd = ["bash", "-c", cmd]
    return subprocess.run(
        cmd, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=timeout
    )


def _t1_git(repo, *args):
    return _t1_sh(["git", "-c", "safe.directory=*", "-C", repo, *args])


def _t1_py(code, timeout=60):
    """Run Python code in a fresh interpreter; its last stdout line is JSON."""
    r = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=timeout
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _t1_call(path, func, cases, timeout=60):
    """Call `func(*args)` of the module file at `path` for each args list, in a subprocess."""
    code = (
        "import importlib.util, json\\n"
        f"spec = importlib.util.spec_from_file_location('m', {str(path)!r})\\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\\n"
        f"print(json.dumps([m.{func}(*a) for a in {cases!r}]))"
    )
    return _t1_py(code, timeout)


def _t1_mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)
'''


@dataclass
class Base:
    """A foreign seed task under the library steps (its directory and texts)."""

    dir: str
    instruction: str
    solution: str
    tests: str
    steps: int = 1  # counts as one step in the metrics


@dataclass
class Draft:
    id: str
    steps: list[Step]
    round: int = 0
    parent: str | None = None
    lineage: list[str] = field(default_factory=list)
    origin: str = "library"  # library | llm | seed
    base: Base | None = None
    new_from: int = 0  # index of the first step the last extension added
    used: set[str] = field(default_factory=set)

    @property
    def artifacts(self) -> list[Artifact]:
        return [a for s in self.steps for a in s.artifacts]

    @property
    def new_assertions(self) -> list[str]:
        """Verifier names of the assertions the last extension added."""
        return [f"{TEST_STEM}::{n}" for s in self.steps[self.new_from :] for n in s.assertions]

    def parent_solution(self) -> str:
        """solve.sh of the state before the last extension (parent's steps only)."""
        return solution_text(self, upto=self.new_from)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "id": self.id,
            "round": self.round,
            "parent": self.parent,
            "lineage": self.lineage,
            "origin": self.origin,
            "base": None if self.base is None else self.base.__dict__,
            "new_from": self.new_from,
            "used": sorted(self.used),
            "steps": [s.to_json() for s in self.steps],
            "new_assertions": self.new_assertions,
            "metrics": metrics(self),
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> Draft:
        return Draft(
            id=d["id"],
            steps=[Step.from_json(s) for s in d["steps"]],
            round=d.get("round", 0),
            parent=d.get("parent"),
            lineage=list(d.get("lineage", [])),
            origin=d.get("origin", "library"),
            base=Base(**d["base"]) if d.get("base") else None,
            new_from=d.get("new_from", 0),
            used=set(d.get("used", [])),
        )


# ---------------------------------------------------------------------------------------------
# growing drafts


def _draft_id(round_: int, parent: str | None, salt: str) -> str:
    h = hashlib.sha1(f"{parent}|{salt}".encode()).hexdigest()[:10]
    return f"rst-r{round_:02d}-{h}"


def add_steps(draft: Draft, rng: random.Random, n_steps: int, max_tries: int = 20) -> list[Step]:
    """Make `n_steps` new library steps that fit after `draft`'s steps (not yet added)."""
    artifacts = list(draft.artifacts)
    counts: dict[str, int] = {}
    for s in draft.steps:
        counts[s.kind] = counts.get(s.kind, 0) + 1
    used = set(draft.used)
    offset = 1 if draft.base else 0
    new: list[Step] = []
    for _ in range(n_steps):
        for _attempt in range(max_tries):
            kind = choose_kind(rng, artifacts, counts)
            trial_used = set(used)
            ctx = StepContext(rng, offset + len(draft.steps) + len(new) + 1, artifacts, trial_used)
            try:
                step = kind.make(ctx)
            except NotApplicable:
                continue
            used = trial_used
            break
        else:
            raise RuntimeError(f"no step kind applied after {max_tries} tries")
        new.append(step)
        artifacts += step.artifacts
        counts[step.kind] = counts.get(step.kind, 0) + 1
    draft.used |= used
    return new


def seed_draft(rng: random.Random, round_: int = 0, n_steps: int = 1) -> Draft:
    """A fresh library task of `n_steps` steps (round 0 seeds)."""
    d = Draft(id="", steps=[], round=round_, origin="library")
    d.steps = add_steps(d, rng, n_steps)
    d.id = _draft_id(round_, None, f"{rng.random()}|{[s.kind for s in d.steps]}")
    d.lineage = [d.id]
    return d


def extend(parent: Draft, rng: random.Random, n_steps: int, round_: int) -> Draft:
    """A child of `parent`: its steps plus `n_steps` new ones (the parent is not modified)."""
    child = Draft(
        id="",
        steps=list(parent.steps),
        round=round_,
        parent=parent.id,
        lineage=[*parent.lineage],
        origin=parent.origin,
        base=parent.base,
        new_from=len(parent.steps),
        used=set(parent.used),
    )
    child.steps += add_steps(child, rng, n_steps)
    child.id = _draft_id(round_, parent.id, f"{rng.random()}|{[s.kind for s in child.steps]}")
    child.lineage.append(child.id)
    return child


def with_step(parent: Draft, step: Step, round_: int, origin: str) -> Draft:
    """A child of `parent` with one given step (the language-model path)."""
    child = Draft(
        id=_draft_id(round_, parent.id, f"{origin}|{step.instruction}|{step.solution}"),
        steps=[*parent.steps, step],
        round=round_,
        parent=parent.id,
        lineage=[*parent.lineage],
        origin=origin,
        base=parent.base,
        new_from=len(parent.steps),
        used=set(parent.used),
    )
    child.lineage.append(child.id)
    return child


# ---------------------------------------------------------------------------------------------
# rendering


def instruction_text(d: Draft) -> str:
    cats = []
    for s in d.steps:
        if s.category not in cats:
            cats.append(s.category)
    parts = []
    if d.base is not None:
        parts.append(d.base.instruction.rstrip())
        parts.append("## Further steps\n\nAfter that, continue with these steps in order.")
    else:
        title = ", ".join(cats[:3]) + (" and more" if len(cats) > 3 else "")
        parts.append(
            f"# Workflow: {title}\n\nYou work in `{WORKDIR}`. Complete the steps below in order; "
            "later steps build on the results of earlier ones. Keep every file an earlier step "
            "produced in place."
        )
    offset = 1 if d.base else 0
    for i, s in enumerate(d.steps):
        parts.append(f"## Step {i + 1 + offset} ({s.category})\n\n{s.instruction.strip()}")
    return "\n\n".join(parts) + "\n"


def solution_text(d: Draft, upto: int | None = None) -> str:
    steps = d.steps if upto is None else d.steps[:upto]
    out = [
        "#!/bin/bash",
        "# Reference solution (written by t1 synth); one block per step.",
        "set -euo pipefail",
    ]
    out.append(
        "export GIT_AUTHOR_DATE='2024-01-01T00:00:00+00:00' GIT_COMMITTER_DATE='2024-01-01T00:00:00+00:00'"
    )
    offset = 0
    if d.base is not None:
        offset = 1
        body = re.sub(r"^#!.*\n", "", d.base.solution)
        out += ["", "# --- step 1: the seed task's own solution", "(", body.rstrip(), ")"]
    for i, s in enumerate(steps):
        out += [
            "",
            f"# --- step {i + 1 + offset}: {s.kind}",
            "(",
            f"cd {WORKDIR}",
            s.solution.rstrip(),
            ")",
        ]
    return "\n".join(out) + "\n"


def tests_text(d: Draft) -> str:
    n = sum(len(s.assertions) for s in d.steps)
    doc = f'"""Verifier of {d.id}: {len(d.steps)} library steps, {n} assertions (t1 synth)."""\n'
    parts = []
    if d.base is not None:
        parts += [d.base.tests.rstrip(), "\n# --- steps added by t1 synth", TEST_HEADER]
    else:
        parts += [doc, TEST_HEADER]
    for s in d.steps:
        parts.append(f"\n# --- {s.kind} ({s.category})\n{s.tests.strip()}\n")
    return "\n".join(parts).rstrip() + "\n"


def task_toml(d: Draft) -> str:
    cats = sorted({s.category for s in d.steps})
    m = metrics(d)
    difficulty = "easy" if m["steps"] <= 2 else "medium" if m["steps"] <= 5 else "hard"
    tags = json.dumps(["synthetic", "rst", f"round-{d.round}", *cats])
    main_cat = d.steps[-1].category if d.steps else "scripting"
    return (
        'version = "1.0"\n\n[metadata]\n'
        f'category = "{main_cat}"\ndifficulty = "{difficulty}"\ntags = {tags}\n'
        'author_name = "t1 synth"\n\n'
        f"[verifier]\ntimeout_sec = {120 + 30 * m['steps']}\n\n"
        f"[agent]\ntimeout_sec = {600 + 120 * m['steps']}\n\n"
        "[environment]\ncpus = 1\nmemory_mb = 2048\nallow_internet = false\n"
    )


def dockerfile(d: Draft, base_dockerfile: str | None = None) -> str:
    lines = []
    if base_dockerfile is not None:
        lines.append(base_dockerfile.rstrip())
        lines.append("# --- environment of the steps added by t1 synth")
    else:
        lines += ["FROM python:3.11-slim-bookworm", f"WORKDIR {WORKDIR}"]
    # One COPY per top-level entry: `COPY files/ /app/` would need the destination's contents
    # semantics for an existing directory, which the bwrap env build does not give.
    tops = sorted({rel(f.path).split("/", 1)[0] for s in d.steps for f in s.files})
    for top in tops:
        lines.append(f"COPY files/{top} {WORKDIR}/{top}")
    return "\n".join(lines) + "\n"


def render(d: Draft, out: Path) -> Path:
    """Write `d` in the v2 layout into `out` (a fresh directory; written aside, then renamed)."""
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    (tmp / "environment").mkdir(parents=True)
    base_df = None
    if d.base is not None:
        src = Path(d.base.dir) / "environment"
        if src.is_dir():
            shutil.copytree(src, tmp / "environment", dirs_exist_ok=True)
        if (src / "Dockerfile").is_file():
            base_df = (src / "Dockerfile").read_text()
    for s in d.steps:
        for f in s.files:
            if not f.path.startswith(WORKDIR + "/"):
                raise ValueError(f"{d.id}: environment file {f.path} is outside {WORKDIR}")
            p = tmp / "environment" / "files" / rel(f.path)
            p.parent.mkdir(parents=True, exist_ok=True)
            if f.binary:
                p.write_bytes(base64.b64decode(f.content))
            else:
                p.write_text(f.content)
            p.chmod(f.mode)
    (tmp / "environment" / "Dockerfile").write_text(dockerfile(d, base_df))
    (tmp / "solution").mkdir()
    solve = tmp / "solution" / "solve.sh"
    solve.write_text(solution_text(d))
    solve.chmod(0o755)
    (tmp / "tests").mkdir()
    if d.base is not None:
        for item in (Path(d.base.dir) / "tests").iterdir():
            if item.name != TEST_FILE and item.is_file():
                shutil.copy2(item, tmp / "tests" / item.name)
    if not (tmp / "tests" / "test.sh").exists():
        (tmp / "tests" / "test.sh").write_text(TEST_SH)
    (tmp / "tests" / "test.sh").chmod(0o755)
    (tmp / "tests" / TEST_FILE).write_text(tests_text(d))
    (tmp / "instruction.md").write_text(instruction_text(d))
    (tmp / "task.toml").write_text(task_toml(d))
    write_json_atomic(tmp / "synth.json", d.to_json())
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def load_draft(task_dir: Path) -> Draft:
    """The draft of a rendered task (synth.json), or a foreign v2 seed wrapped as a base."""
    task_dir = Path(task_dir)
    meta = task_dir / "synth.json"
    if meta.is_file():
        try:
            return Draft.from_json(json.loads(meta.read_text()))
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{meta}: not a synth record: {e}") from None
    return foreign_seed(task_dir)


def foreign_seed(task_dir: Path) -> Draft:
    """Wrap a v2 task that is not ours; raise ValueError saying why it cannot be extended."""
    toml = task_dir / "task.toml"
    test_py = task_dir / "tests" / TEST_FILE
    test_sh = task_dir / "tests" / "test.sh"
    solve = task_dir / "solution" / "solve.sh"
    for p in (toml, test_py, test_sh, solve, task_dir / "instruction.md"):
        if not p.is_file():
            raise ValueError(f"{p}: missing (a seed must be a v2 task with tests/{TEST_FILE})")
    try:
        tomllib.loads(toml.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{toml}: invalid TOML: {e}") from None
    if TEST_FILE not in test_sh.read_text():
        raise ValueError(f"{test_sh}: does not run {TEST_FILE}; cannot append assertions")
    workdir = WORKDIR
    df = task_dir / "environment" / "Dockerfile"
    if df.is_file():
        for line in df.read_text().splitlines():
            if line.strip().upper().startswith("WORKDIR"):
                workdir = line.split(None, 1)[1].strip()
    if workdir != WORKDIR:
        raise ValueError(f"{df}: workdir {workdir} (library steps work in {WORKDIR})")
    base = Base(
        dir=str(task_dir.resolve()),
        instruction=(task_dir / "instruction.md").read_text(),
        solution=solve.read_text(),
        tests=test_py.read_text(),
    )
    d = Draft(id=task_dir.name, steps=[], round=0, origin="seed", base=base)
    d.lineage = [d.id]
    return d


# ---------------------------------------------------------------------------------------------
# metrics


def count_commands(script: str) -> int:
    """Executed commands in a bash script: simple commands outside heredoc bodies and comments,
    counting each part of a pipeline or `&&`/`||`/`;` list (a heredoc counts as its command)."""
    n = 0
    tag = None
    for line in script.splitlines():
        s = line.strip()
        if tag is not None:
            if s == tag:
                tag = None
            continue
        if (
            not s
            or s.startswith("#")
            or s in ("(", ")", "{", "}", "fi", "done", "then", "else", "do")
        ):
            continue
        m = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", s)
        if m:
            tag = m.group(1)
        bare = re.sub(r"'[^']*'|\"[^\"]*\"", "", s)
        n += 1 + len(re.findall(r"\|\||&&|(?<![|>])\|(?!\|)|;", bare))
    return n


def metrics(d: Draft) -> dict[str, Any]:
    sol = solution_text(d)
    n_assert = sum(len(s.assertions) for s in d.steps)
    if d.base is not None:  # the seed's own assertions (one per test function)
        n_assert += len(re.findall(r"^def test\w*\(", d.base.tests, re.M))
    return {
        "steps": len(d.steps) + (d.base.steps if d.base else 0),
        "solution_lines": len(sol.splitlines()),
        "commands": count_commands(sol),
        "assertions": n_assert,
        "new_assertions": len(d.new_assertions),
        "categories": sorted({s.category for s in d.steps}),
    }


def kinds() -> list[str]:
    return sorted(library())

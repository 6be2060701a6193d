"""The programmatic step library: every kind generates consistent, composable steps."""

from __future__ import annotations

import ast
import random
import subprocess

import pytest

from t1.curate.audit_alignment import alignment, checked_literals
from t1.synth import draft
from t1.synth.func_specs import FUNCS
from t1.synth.steps import CATEGORIES, NotApplicable, StepContext, library


def _drafts(n: int, depth: int, seed: int = 0) -> list[draft.Draft]:
    out = []
    for i in range(n):
        rng = random.Random(f"{seed}:{i}")
        d = draft.seed_draft(rng, 0)
        for r in range(depth):
            d = draft.extend(d, rng, rng.randint(1, 2), r + 1)
        out.append(d)
    return out


def test_library_covers_every_category():
    kinds = library()
    assert {k.category for k in kinds.values()} == set(CATEGORIES)
    assert len(kinds) >= 30


def test_every_kind_generates_a_consistent_step():
    """Each kind, made after a rich prefix, yields parseable tests whose names it declares,
    an instruction naming every path and value its tests check, and bash that parses."""
    prefix = [
        "data.jsonl_to_csv",
        "data.sqlite_load",
        "devel.module",
        "vcs.init_commit",
        "scripting.top_words",
    ]
    lib = library()
    for name in sorted(lib):
        rng = random.Random(name)
        d = draft.Draft(id="t", steps=[])
        for pre in prefix:
            ctx = StepContext(rng, len(d.steps) + 1, d.artifacts, d.used)
            d.steps.append(lib[pre].make(ctx))
        ctx = StepContext(rng, len(d.steps) + 1, d.artifacts, d.used)
        try:
            step = lib[name].make(ctx)
        except NotApplicable:
            pytest.fail(f"{name} not applicable after {prefix}")
        tree = ast.parse(step.tests)
        defined = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
        assert defined == list(step.assertions), name
        assert all(a.startswith(f"test_s{len(prefix) + 1:02d}_") for a in step.assertions)
        r = subprocess.run(["bash", "-n"], input=step.solution, capture_output=True, text=True)
        assert r.returncode == 0, (name, r.stderr)
        env = "\n".join(
            [f.content for f in step.files if not f.binary] + [f.path for f in step.files]
        )
        _, missing = alignment(
            step.instruction, checked_literals(step.tests, "/app", step.solution), env
        )
        assert missing == [], (name, missing)
        assert all(f.path.startswith("/app/") for f in step.files)


def test_generation_is_seeded():
    a = [x.to_json() for x in _drafts(3, 3, seed=7)]
    b = [x.to_json() for x in _drafts(3, 3, seed=7)]
    c = [x.to_json() for x in _drafts(3, 3, seed=8)]
    assert a == b
    assert a != c


def test_composed_drafts_keep_paths_and_names_apart():
    """No step's environment file lands on what an earlier step provided or produced."""
    for d in _drafts(20, 5):
        names = [a for s in d.steps for a in s.assertions]
        assert len(names) == len(set(names))
        earlier: set[str] = set()
        for s in d.steps:
            mine = {f.path for f in s.files}
            assert not mine & earlier, (d.id, s.kind, mine & earlier)
            earlier |= mine | {a.path for a in s.artifacts}


def test_later_steps_consume_earlier_artifacts():
    """Composition happens: some steps read what an earlier step of the same task produced."""
    consumed = 0
    for d in _drafts(30, 4, seed=3):
        made: list[str] = []
        for s in d.steps:
            if any(p in s.solution for p in made):
                consumed += 1
            made += [a.path for a in s.artifacts]
    assert consumed >= 10


def test_function_specs_bugs_change_results():
    for name, spec in FUNCS.items():
        cases = spec.cases(random.Random(1))
        want = spec.run(spec.code(), cases)
        for b in range(len(spec.bugs)):
            try:
                got = spec.run(spec.faulty(b), cases)
            except Exception:
                continue
            assert got != want, (name, b)


def test_planted_bugs_can_be_fixed_by_replacement():
    """Each bug the debugging steps plant is undone by replacing unique texts."""
    usable = 0
    for spec in FUNCS.values():
        for b, pairs in enumerate(spec.bugs):
            faulty = spec.faulty(b)
            if all(new and faulty.count(new) == 1 for _, new in pairs):
                usable += 1
                fixed = faulty
                for old, new in pairs:
                    fixed = fixed.replace(new, old)
                assert fixed == spec.code(), (spec.name, b)
    assert usable >= len(FUNCS)


def test_metrics_grow_with_extensions():
    d = _drafts(1, 0, seed=5)[0]
    rng = random.Random(0)
    prev = draft.metrics(d)
    for r in range(1, 4):
        d = draft.extend(d, rng, 2, r)
        m = draft.metrics(d)
        assert m["steps"] == prev["steps"] + 2
        assert m["solution_lines"] > prev["solution_lines"]
        assert m["assertions"] > prev["assertions"]
        assert m["new_assertions"] == len(d.new_assertions) > 0
        prev = m


def test_count_commands():
    script = "#!/bin/bash\n# c\nset -e\ncat > f <<'EOF'\nnot | a && command\nEOF\nls | wc -l && echo 'a|b'\n(\ncd /app\n)\n"
    assert draft.count_commands(script) == 1 + 1 + 3 + 1

"""Validation in fresh bubblewrap sandboxes: what is accepted, and why candidates are rejected."""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest
from shared_fixtures import requires_bwrap

from t1.synth import draft
from t1.synth.steps import Step
from t1.synth.validate import validate_many, validate_task

pytestmark = [pytest.mark.integration, requires_bwrap]


def _custom(parent: draft.Draft, name: str, solution: str, test_body: str, files=()) -> draft.Draft:
    idx = len(parent.steps) + 1
    fn = f"test_s{idx:02d}_{name}"
    step = Step(
        kind="custom",
        category="scripting",
        instruction=f"Custom step {name}: see /app/custom_{name}.txt",
        solution=solution,
        tests=f"def {fn}():\n    {test_body}\n",
        assertions=(fn,),
        files=tuple(files),
    )
    return draft.with_step(parent, step, parent.round + 1, origin="test")


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    root = tmp_path_factory.mktemp("validate")
    rng = random.Random(4)
    seed = draft.seed_draft(rng, 0)
    good = draft.extend(seed, rng, 2, 1)
    cases = {
        "good": good,
        "seed": seed,
        "leak": _custom(good, "leak", "true", "assert True"),
        "wrong": _custom(
            good,
            "wrong",
            "echo no > /app/custom_wrong.txt",
            "assert open('/app/custom_wrong.txt').read() == 'yes\\n'",
        ),
        "crash": _custom(
            good, "crash", "exit 3", "assert open('/app/custom_crash.txt').read() == 'yes\\n'"
        ),
    }
    trivial = draft.Draft(id="trivial", steps=[])
    cases["noop"] = _custom(trivial, "noop", "true", "assert True")
    dirs = {k: draft.render(d, root / k) for k, d in cases.items()}
    rows = validate_many(list(dirs.values()), jobs=2)
    return {k: r for k, r in zip(dirs, rows, strict=True)}, cases


def test_good_candidate_is_accepted(validated):
    rows, cases = validated
    r = rows["good"]
    assert r["status"] == "accepted", r["reasons"]
    assert r["reference"]["passed"] == r["reference"]["total"] == r["metrics"]["assertions"]
    assert r["noop_score"] == 0.0
    assert r["before"]["passed"] == r["reference"]["total"] - len(cases["good"].new_assertions)
    assert r["reference"]["digest"] and len(r["reference"]["digest"]) == 16
    assert rows["seed"]["status"] == "accepted" and "before" in rows["seed"]


def test_rejections_carry_reasons(validated):
    rows, _ = validated
    assert rows["leak"]["status"] == "rejected"
    assert "already pass before the extension" in rows["leak"]["reasons"][0]
    assert any("reference fails 1 assertion" in x for x in rows["wrong"]["reasons"])
    assert any("exited 3" in x for x in rows["crash"]["reasons"])
    assert rows["noop"]["status"] == "rejected"
    assert any("no-op resolves" in x for x in rows["noop"]["reasons"])


def test_a_broken_task_directory_is_a_reason(tmp_path):
    (tmp_path / "x").mkdir()
    r = validate_task(tmp_path / "x")
    assert r["status"] == "rejected" and r["reasons"]


def _slurm_up() -> bool:
    if not shutil.which("sinfo"):
        return False
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.slurm
@pytest.mark.skipif(not _slurm_up(), reason="no local Slurm cluster answers sinfo")
def test_validation_as_a_slurm_array(tmp_path):
    rng = random.Random(9)
    seed = draft.seed_draft(rng, 0)
    dirs = [draft.render(d, tmp_path / d.id) for d in (seed, draft.extend(seed, rng, 1, 1))]
    rows = validate_many(
        dirs, jobs=2, executor="slurm", folder=tmp_path / "submitit", slurm={"timeout_min": 10}
    )
    assert [r["status"] for r in rows] == ["accepted", "accepted"], [r["reasons"] for r in rows]
    assert any((tmp_path / "submitit").glob("*_0_log.out"))

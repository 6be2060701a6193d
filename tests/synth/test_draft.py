"""Drafts: rendering in the v2 (Harbor) layout, reloading, foreign seeds."""

from __future__ import annotations

import json
import random
import shutil
import subprocess

import pytest

from t1.synth import draft
from t1.tasks import check_task, load_task


@pytest.fixture
def child():
    rng = random.Random(11)
    d = draft.seed_draft(rng, 0)
    d = draft.extend(d, rng, 2, 1)
    return draft.extend(d, rng, 1, 2)


def test_render_is_a_valid_v2_task(tmp_path, child):
    out = draft.render(child, tmp_path / child.id)
    assert check_task(out) == []
    task = load_task(out)
    assert task.layout == "v2" and task.workdir == "/app"
    assert task.instruction == (out / "instruction.md").read_text()
    for rel in (
        "environment/Dockerfile",
        "solution/solve.sh",
        "tests/test.sh",
        "tests/test_outputs.py",
        "synth.json",
    ):
        assert (out / rel).is_file(), rel
    assert (out / "tests/test.sh").stat().st_mode & 0o111
    assert subprocess.run(["bash", "-n", str(out / "solution/solve.sh")]).returncode == 0
    compile((out / "tests/test_outputs.py").read_text(), "test_outputs.py", "exec")
    # every environment file is placed by the Dockerfile, with its mode
    df = (out / "environment/Dockerfile").read_text()
    for s in child.steps:
        for f in s.files:
            top = f.path.removeprefix("/app/").split("/")[0]
            assert f"COPY files/{top} /app/{top}" in df
            assert (
                out / "environment/files" / f.path.removeprefix("/app/")
            ).stat().st_mode & 0o777 == f.mode


def test_synth_json_round_trip(tmp_path, child):
    out = draft.render(child, tmp_path / child.id)
    meta = json.loads((out / "synth.json").read_text())
    assert meta["schema_version"] == draft.SCHEMA_VERSION
    again = draft.load_draft(out)
    assert again.to_json() == child.to_json()
    assert again.new_assertions == child.new_assertions
    assert all(n.startswith("test_outputs::test_s04_") for n in child.new_assertions)


def test_parent_solution_is_the_state_before_the_extension(child):
    before = child.parent_solution()
    full = draft.solution_text(child)
    assert full.startswith(before.rstrip("\n"))
    assert f"# --- step {len(child.steps)}:" in full
    assert f"# --- step {len(child.steps)}:" not in before
    assert f"# --- step {child.new_from}:" in before


def test_render_replaces_atomically(tmp_path, child):
    out = draft.render(child, tmp_path / "t")
    (out / "stray").write_text("x")
    draft.render(child, tmp_path / "t")
    assert not (out / "stray").exists()
    assert not (tmp_path / "t.tmp").exists()


def test_foreign_seed_is_extended(tmp_path, repo_root):
    src = repo_root / "workflow" / "tasks" / "csv-summary"
    if not src.is_dir():
        pytest.skip("example task csv-summary is not in this checkout")
    seed = draft.load_draft(src)
    assert seed.base is not None and seed.steps == []
    child = draft.extend(seed, random.Random(0), 1, 1)
    out = draft.render(child, tmp_path / child.id)
    assert check_task(out) == []
    tests = (out / "tests/test_outputs.py").read_text()
    assert tests.startswith((src / "tests/test_outputs.py").read_text().rstrip())
    assert (src / "instruction.md").read_text().strip() in (out / "instruction.md").read_text()
    assert "# --- step 2:" in (out / "solution/solve.sh").read_text()
    assert child.parent_solution().count("# --- step") == 1  # only the seed's own solution


def test_foreign_seed_refusals(tmp_path, repo_root):
    src = repo_root / "workflow" / "tasks" / "csv-summary"
    if not src.is_dir():
        pytest.skip("example task csv-summary is not in this checkout")
    bad = tmp_path / "bad"
    shutil.copytree(src, bad)
    (bad / "tests/test_outputs.py").unlink()
    with pytest.raises(ValueError, match="test_outputs.py"):
        draft.load_draft(bad)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "synth.json").write_text("{not json")
    with pytest.raises(ValueError, match="synth.json"):
        draft.load_draft(tmp_path / "broken")

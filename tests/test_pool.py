"""t1 pool and PoolLoader: ranking, near-duplicate removal, manifest, per-epoch shuffling."""

from __future__ import annotations

import json
import random
import shutil

import pytest

from t1.curate.pool import add_arguments, build_pool, main, writer_lock_dir
from t1.synth import draft
from t1.tasks.pool import PoolLoader, epoch_order


@pytest.fixture
def tasks(tmp_path):
    """Five rendered tasks (no sandbox needed), a near-duplicate copy, and an audit report."""
    root = tmp_path / "in"
    dirs = []
    for i in range(5):
        rng = random.Random(100 + i)
        d = draft.extend(draft.seed_draft(rng, 0), rng, 2, 1)
        dirs.append(draft.render(d, root / f"t{i}"))
    dup = root / "t0-copy"
    shutil.copytree(dirs[0], dup)
    (dup / "instruction.md").write_text(
        (dup / "instruction.md").read_text() + "\nPlease be careful.\n"
    )
    scores = {"t0": 0.9, "t1": 0.95, "t2": 0.5, "t3": 0.7, "t4": 0.85, "t0-copy": 0.88}
    stages = {"t2": "rejected", "t3": "borderline"}
    rows = [
        {
            "task": name,
            "path": str(root / name),
            "score": s,
            "stage": stages.get(name, "accepted"),
            "category": "data-processing",
            "assertions": 4,
            "difficulty": 0.3,
            "binary_only": False,
            "repaired": name == "t4",
            "repaired_instruction": "REPAIRED\n" if name == "t4" else None,
        }
        for name, s in scores.items()
    ]
    (root / "audit.json").write_text(
        json.dumps({"schema_version": 1, "status": "complete", "tasks": rows})
    )
    return root


def test_pool_ranks_dedups_and_writes_a_manifest(tasks, tmp_path):
    m = build_pool([tasks], tmp_path / "pool", threshold=0.9)
    ids = [t["id"] for t in m["tasks"]]
    assert ids == ["t1", "t0", "t4"]  # by score; t2 rejected, t3 borderline, t0-copy duplicate
    assert m["removed_duplicates"] == [
        {
            "id": "t0-copy",
            "duplicate_of": "t0",
            "similarity": m["removed_duplicates"][0]["similarity"],
        }
    ]
    assert m["removed_duplicates"][0]["similarity"] >= 0.9
    assert m["counts"] == {
        "found": 6, "kept": 3, "duplicates_removed": 1, "rejected_by_audit": 1,
        "borderline_left_out": 1, "failed_oracle": 0, "invalid": 0, "unaudited": 0,
        "binary_only": 0, "imports_agent_code": 0, "hack_checked": 0, "hackable": 0,
    }  # fmt: skip
    on_disk = json.loads((tmp_path / "pool" / "manifest.json").read_text())
    assert on_disk == m and m["schema_version"] == 1 and m["status"] == "complete"
    assert m["binary_outcomes"] is False
    for rank, t in enumerate(m["tasks"]):
        assert t["rank"] == rank and t["path"] == f"tasks/{rank:05d}-{t['id']}"
        assert (tmp_path / "pool" / t["path"] / "task.toml").is_file()
        assert set(t) >= {"score", "category", "assertions", "binary_only"}
    assert (tmp_path / "pool" / "tasks" / "00002-t4" / "instruction.md").read_text() == "REPAIRED\n"


def test_borderline_on_request_and_threshold(tasks, tmp_path):
    m = build_pool([tasks], tmp_path / "p1", threshold=0.9, include_borderline=True)
    assert [t["id"] for t in m["tasks"]] == ["t1", "t0", "t4", "t3"]
    m2 = build_pool([tasks], tmp_path / "p2", threshold=1.01)  # nothing counts as a duplicate
    assert "t0-copy" in [t["id"] for t in m2["tasks"]]


def test_oracle_failures_are_left_out(tasks, tmp_path):
    rows = [
        {"task": "t1", "resolved": False, "error": None},
        {"task": "t0", "resolved": True, "error": None},
        {"task": "t4", "resolved": True, "error": "verifier timed out"},
    ]
    (tmp_path / "oracle.json").write_text(json.dumps(rows))
    m = build_pool([tasks], tmp_path / "pv", threshold=0.9, validated=[tmp_path / "oracle.json"])
    assert [t["id"] for t in m["tasks"]] == ["t0"] and m["counts"]["failed_oracle"] == 2
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="oracle"):
        build_pool([tasks], tmp_path / "pw", validated=[tmp_path / "bad.json"])


def test_binary_outcome_pool_is_marked(tasks, tmp_path):
    """Unaudited tasks whose verifier only writes a reward file make a binary pool."""
    src = tmp_path / "binary"
    for name in ("t1", "t4"):
        shutil.copytree(tasks / name, src / name)
        (src / name / "tests" / "test.sh").write_text(
            "#!/bin/bash\n[ -f /app/x ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
        )
        (src / name / "tests" / "test_outputs.py").unlink()
    m = build_pool([src], tmp_path / "pb", threshold=0.99)
    assert m["binary_outcomes"] is True
    assert m["counts"]["unaudited"] == 2 and all(t["binary_only"] for t in m["tasks"])
    assert PoolLoader(tmp_path / "pb", 0).binary_outcomes


def test_existing_pool_is_refused(tasks, tmp_path):
    (tmp_path / "pool").mkdir()
    (tmp_path / "pool" / "x").write_text("keep me")
    with pytest.raises(FileExistsError):
        build_pool([tasks], tmp_path / "pool")
    assert (tmp_path / "pool" / "x").read_text() == "keep me"


def test_cli(tasks, tmp_path, capsys):
    import argparse

    p = argparse.ArgumentParser()
    add_arguments(p)
    assert main(p.parse_args(["--in", str(tasks), "--out", str(tmp_path / "pc")])) == 0
    assert "3 tasks of 6" in capsys.readouterr().out


def test_a_second_pool_writer_is_refused_naming_the_holder(tasks, tmp_path, capsys):
    """One writer per pool directory: while another process holds it, `t1 pool` exits 4 and
    names that process; once it is gone the same command builds the pool."""
    import argparse
    import subprocess
    import sys

    out = tmp_path / "pool"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from t1.store.lock import hold_output; "
         f"hold_output({str(writer_lock_dir(out))!r}, 'other writer'); print('held', flush=True); "
         "time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        p = argparse.ArgumentParser()
        add_arguments(p)
        args = p.parse_args(["--in", str(tasks), "--out", str(out)])
        assert main(args) == 4
        assert f"pid {holder.pid}" in capsys.readouterr().err
        assert not (out / "manifest.json").exists()
    finally:
        holder.kill()
        holder.wait()
    assert main(args) == 0 and (out / "manifest.json").is_file()


def test_loader_shuffles_per_epoch_reproducibly(tasks, tmp_path):
    build_pool([tasks], tmp_path / "pool", threshold=1.01, include_borderline=True)
    a, b = PoolLoader(tmp_path / "pool", seed=7), PoolLoader(tmp_path / "pool", seed=7)
    n = len(a)
    assert n == 5
    orders = [a.order(e) for e in range(6)]
    assert orders == [b.order(e) for e in range(6)]  # reproducible from (seed, epoch)
    assert all(sorted(o) == list(range(n)) for o in orders)  # permutations
    assert all(o != list(range(n)) for o in orders)  # never the quality ranking itself
    assert len({tuple(o) for o in orders}) > 3  # epochs differ
    assert (
        PoolLoader(tmp_path / "pool", seed=8).order(0) != orders[0]
        or PoolLoader(tmp_path / "pool", seed=9).order(0) != orders[0]
    )
    assert [t.rank for t in a.epoch(2)] == orders[2]
    assert orders == [epoch_order(n, 7, e) for e in range(6)]  # the one epoch order
    with pytest.raises(TypeError):
        iter(a)


def test_epoch_order_never_hands_out_the_ranking():
    """The guard: where the seeded shuffle alone gives the ranking, the order reshuffles."""
    hits = []
    for seed in range(200):
        idx = [0, 1, 2]
        random.Random(f"t1-pool:{seed}:0").shuffle(idx)  # the first draw, unguarded
        if idx == [0, 1, 2]:
            hits.append(seed)
    assert len(hits) > 10  # about 1 in 6 draws is the ranking itself
    assert all(epoch_order(3, seed, 0) != [0, 1, 2] for seed in hits)
    assert all(sorted(epoch_order(3, seed, 0)) == [0, 1, 2] for seed in hits)
    # two tasks have two orders only: the ranking stays allowed, or epochs could not differ
    assert {tuple(epoch_order(2, s, 0)) for s in range(20)} == {(0, 1), (1, 0)}


def test_loader_refuses_incomplete_manifest(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "manifest.json").write_text(
        json.dumps({"schema_version": 1, "status": "partial", "tasks": []})
    )
    with pytest.raises(ValueError, match="not a complete pool manifest"):
        PoolLoader(tmp_path / "p", 0)


def test_loader_reads_minimal_entries_and_names_a_bad_one(tmp_path):
    """A manifest task needs only its path (relative to the pool, or absolute)."""
    p = tmp_path / "p"
    p.mkdir()
    tasks = [{"path": "tasks/a"}, {"path": str(tmp_path / "elsewhere" / "b")}, {"path": "c"}]
    (p / "manifest.json").write_text(
        json.dumps({"schema_version": 1, "status": "complete", "tasks": tasks})
    )
    loader = PoolLoader(p, 5)
    by_rank = sorted(loader.epoch(0), key=lambda t: t.rank)
    assert [t.path for t in by_rank] == [p / "tasks/a", tmp_path / "elsewhere/b", p / "c"]
    assert [t.id for t in by_rank] == ["a", "b", "c"] and by_rank[0].category == "unknown"
    tasks.append({"id": "no-path"})
    (p / "manifest.json").write_text(
        json.dumps({"schema_version": 1, "status": "complete", "tasks": tasks})
    )
    with pytest.raises(ValueError, match=r"manifest.json: tasks\[3\] has no path"):
        PoolLoader(p, 5)

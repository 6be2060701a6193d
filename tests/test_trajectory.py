"""Trajectory records: round trip, atomic overwrite, validation errors that name the file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from t1.agent.trajectory import (
    Status,
    Trajectory,
    TrajectoryError,
    Turn,
    find_trajectories,
    load_trajectory,
    save_trajectory,
)


def _traj(routing: bool = True, dtype=np.uint8) -> Trajectory:
    rng = np.random.default_rng(0)
    p0 = rng.integers(0, 500, 20)
    g0 = rng.integers(0, 500, 5)
    a0 = rng.integers(0, 500, 7)
    p1 = np.concatenate([p0, g0, a0])
    g1 = rng.integers(0, 500, 4)
    r0 = rng.integers(0, 8, (24, 3, 2)).astype(dtype) if routing else None
    r1 = rng.integers(0, 8, (len(p1) + 4 - 1 - 24, 3, 2)).astype(dtype) if routing else None
    turns = [
        Turn(p0, g0, rng.normal(size=5), r0, 0, a0, observation="out\n", command="ls"),
        Turn(p1, g1, rng.normal(size=4), r1, 24, [], finish_reason="stop"),
    ]
    return Trajectory(
        task_id="hello",
        status=Status.COMPLETED,
        turns=turns,
        assertions=[("test_a", "passed"), ("test_b", "failed")],
        reward=0.1,
        metadata={"seed": 3},
    )


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_round_trip(tmp_path, dtype):
    t = _traj(dtype=dtype)
    save_trajectory(t, tmp_path / "hello-0")
    u = load_trajectory(tmp_path / "hello-0")
    assert (u.task_id, u.status, u.reward, u.assertions, u.metadata) == (
        "hello",
        Status.COMPLETED,
        0.1,
        [("test_a", "passed"), ("test_b", "failed")],
        {"seed": 3},
    )
    for a, b in zip(t.turns, u.turns, strict=True):
        assert np.array_equal(a.prompt_ids, b.prompt_ids)
        assert np.array_equal(a.sampled_ids, b.sampled_ids)
        assert np.array_equal(a.appended_ids, b.appended_ids)
        assert np.allclose(a.logprobs, b.logprobs)
        assert b.routing.dtype == dtype and np.array_equal(a.routing, b.routing)
        assert (a.routing_start, a.observation, a.command) == (
            b.routing_start,
            b.observation,
            b.command,
        )
    # the shared prefix is stored once: turn 1's prompt adds no tokens
    lines = (tmp_path / "hello-0" / "trajectory.jsonl").read_text().splitlines()
    assert json.loads(lines[2])["prompt_tail"] == 0


def test_no_routing_and_empty(tmp_path):
    save_trajectory(_traj(routing=False), tmp_path / "a")
    assert all(t.routing is None for t in load_trajectory(tmp_path / "a").turns)
    save_trajectory(Trajectory("x", Status.ABORTED, reason="cancelled"), tmp_path / "b")
    b = load_trajectory(tmp_path / "b")
    assert (b.status, b.reason, b.turns) == (Status.ABORTED, "cancelled", [])
    assert find_trajectories(tmp_path) == [tmp_path / "a", tmp_path / "b"]


def test_overwrite_is_atomic_and_leaves_no_temp(tmp_path):
    save_trajectory(_traj(), tmp_path / "t")
    t = _traj()
    t.status, t.reason = Status.TRUNCATED, "max turns"
    save_trajectory(t, tmp_path / "t")
    assert load_trajectory(tmp_path / "t").status == Status.TRUNCATED
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]


def test_length_mismatch_is_refused_before_writing(tmp_path):
    t = _traj()
    t.turns[0].logprobs = t.turns[0].logprobs[:-1]
    with pytest.raises(TrajectoryError, match="turn 0: 5 sampled ids but 4 logprobs"):
        save_trajectory(t, tmp_path / "t")
    assert not (tmp_path / "t").exists()
    t = _traj()
    t.turns[1].routing = np.zeros((100, 3, 2), np.uint8)
    with pytest.raises(TrajectoryError, match="routing rows"):
        save_trajectory(t, tmp_path / "t")


def test_schema_version_and_shapes_checked_on_load(tmp_path):
    save_trajectory(_traj(), tmp_path / "t")
    head = tmp_path / "t" / "trajectory.jsonl"
    lines = head.read_text().splitlines()
    h = json.loads(lines[0])
    h["schema_version"] = 99
    head.write_text("\n".join([json.dumps(h), *lines[1:]]) + "\n")
    with pytest.raises(TrajectoryError, match=r"trajectory.jsonl: schema_version 99"):
        load_trajectory(tmp_path / "t")
    save_trajectory(_traj(), tmp_path / "t")
    np.save(tmp_path / "t" / "logprobs.npy", np.zeros(3, np.float32))
    with pytest.raises(TrajectoryError, match=r"logprobs.npy: logprobs is float32 \[3\]"):
        load_trajectory(tmp_path / "t")


def test_status_members_are_the_four_outcomes():
    assert [s.value for s in Status] == ["COMPLETED", "TRUNCATED", "ABORTED", "FAILED"]
    assert "over-sampling" in Status.__doc__


def test_engine_ids_round_trip_apart_from_sampled_ids(tmp_path):
    """The engine's raw output ids are their own sidecar: a record whose sampled ids were
    rewritten still carries what the engine returned (TITO's drift reference)."""
    t = _traj()
    t.turns[0].engine_ids = t.turns[0].sampled_ids.copy()
    t.turns[1].engine_ids = np.array([9, 9, 9, 9, 9], np.int32)  # differs, and longer
    u = load_trajectory(save_trajectory(t, tmp_path / "e"))
    assert np.array_equal(u.turns[0].engine_ids, t.turns[0].sampled_ids)
    assert np.array_equal(u.turns[1].engine_ids, [9] * 5) and len(u.turns[1].sampled_ids) == 4
    assert (tmp_path / "e" / "engine_ids.npy").is_file()
    header = json.loads((tmp_path / "e" / "trajectory.jsonl").read_text().splitlines()[0])
    assert header["schema_version"] == 2
    # a version-1 record (no engine ids) still loads, without them
    v1 = save_trajectory(_traj(), tmp_path / "v1")
    lines = (v1 / "trajectory.jsonl").read_text().splitlines()
    head = json.loads(lines[0])
    head["schema_version"] = 1
    del head["sidecars"]["engine_ids"]
    (v1 / "trajectory.jsonl").write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    assert all(turn.engine_ids is None for turn in load_trajectory(v1).turns)

"""Reward math against hand-computed values, and the run manifest that fixes the scale.

.venv/bin/pytest tests/test_reward.py -q
"""

from __future__ import annotations

import json

import pytest

from t1.reward import (
    RewardError,
    RewardSpec,
    binary,
    dense,
    read_reward_spec,
    read_scale,
    record_reward_spec,
    resolved,
    scale_for_pool,
)


@pytest.mark.parametrize(
    "passed,scale,noop,expected",
    [
        (0, 10, 0, 0.0),
        (7, 10, 0, 0.7),
        (3, 12, 0, 0.25),
        (12, 12, 0, 1.0),
        (15, 12, 0, 1.25),  # above the scale: not clipped
        (7, 10, 3, 0.4),
        (2, 10, 3, -0.1),
    ],  # no-op subtraction, not clipped at 0
)
def test_dense(passed, scale, noop, expected):
    assert dense(passed, scale, noop) == pytest.approx(expected)


def test_dense_rejects_bad_inputs():
    with pytest.raises(RewardError):
        dense(1, 0)
    with pytest.raises(RewardError):
        dense(-1, 10)


@pytest.mark.parametrize(
    "passed,total,noop_resolved,expected",
    [
        (5, 5, False, 1.0),
        (4, 5, False, 0.0),
        (0, 0, False, 0.0),
        (5, 5, True, 0.0),
        (1, 2, True, -1.0),
    ],
)
def test_binary(passed, total, noop_resolved, expected):
    assert binary(passed, total, noop_resolved) == expected


def test_resolved_needs_an_assertion():
    assert resolved(3, 3) and not resolved(0, 0) and not resolved(2, 3)


def test_more_assertions_carry_more_signal():
    spec = RewardSpec(kind="dense", scale=12)
    assert spec.score(passed=12, total=12) > spec.score(passed=4, total=4)  # both resolved
    assert spec.score(4, 4) == pytest.approx(1 / 3)


def test_spec_scores_with_and_without_noop():
    plain, sub = RewardSpec("dense", 10), RewardSpec("dense", 10, subtract_noop=True)
    assert plain.score(8, 10, noop_passed=3, noop_total=10) == pytest.approx(0.8)
    assert sub.score(8, 10, noop_passed=3, noop_total=10) == pytest.approx(0.5)
    b = RewardSpec("binary", subtract_noop=True)
    assert b.score(10, 10, noop_passed=3, noop_total=10) == 1.0
    assert b.score(10, 10, noop_passed=10, noop_total=10) == 0.0


def test_spec_validates():
    with pytest.raises(RewardError):
        RewardSpec(kind="sparse")
    with pytest.raises(RewardError):
        RewardSpec(kind="dense", scale=0)


def test_scale_for_pool_is_the_largest_count():
    assert scale_for_pool([11, 9, 13, 8]) == 13.0
    with pytest.raises(RewardError):
        scale_for_pool([])


def test_manifest_records_the_scale_once(tmp_path):
    m = tmp_path / "run" / "manifest.json"
    spec = record_reward_spec(m, kind="dense", scale=13)
    assert read_scale(m) == 13.0 and read_reward_spec(m) == spec
    data = json.loads(m.read_text())
    assert data["schema_version"] == 1 and data["status"] == "running"
    # recording the same spec again is fine; another scale is refused, file unchanged
    assert record_reward_spec(m, kind="dense", scale=13.0) == spec
    before = m.read_bytes()
    with pytest.raises(RewardError, match="refusing to change"):
        record_reward_spec(m, kind="dense", scale=20)
    assert m.read_bytes() == before
    assert [p.name for p in m.parent.iterdir()] == ["manifest.json"]  # no temp file left


def test_manifest_keeps_other_sections(tmp_path):
    m = tmp_path / "manifest.json"
    m.write_text(json.dumps({"schema_version": 1, "status": "running", "pool": {"tasks": 7}}))
    record_reward_spec(m, kind="binary", scale=1)
    data = json.loads(m.read_text())
    assert data["pool"] == {"tasks": 7} and data["reward"]["kind"] == "binary"


def test_manifest_errors_name_the_file(tmp_path):
    with pytest.raises(RewardError, match="no such run manifest"):
        read_scale(tmp_path / "absent.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(RewardError, match="bad.json: invalid JSON"):
        read_scale(bad)
    bad.write_text("{}")
    with pytest.raises(RewardError, match="no 'reward' section"):
        read_scale(bad)

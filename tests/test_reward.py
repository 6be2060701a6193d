"""Reward math against hand-computed values, the run manifest that fixes the scale (pinned by
`t1 segment`, refused when a resumed run names another), the pool's no-op record, and
`reward.subtract_noop` changing a real rollout's reward (integration: bwrap).

.venv/bin/pytest tests/test_reward.py -q
"""

from __future__ import annotations

import json

import pytest
from shared_fixtures import requires_bwrap

from t1.verify.reward import (
    RewardError,
    RewardSpec,
    binary,
    dense,
    pin_reward,
    pool_records,
    read_reward_spec,
    read_scale,
    record_reward_spec,
    resolved,
    scale_for_pool,
    task_record,
)


@pytest.mark.parametrize(
    "passed,scale,noop,expected",
    [
        (0, 10, 0, 0.0),
        (7, 10, 0, 0.7),
        (3, 12, 0, 0.25),
        (12, 12, 0, 1.0),
        (15, 12, 0, 1.0),  # above the scale (a forged report): clipped
        (7, 10, 3, 0.4),  # no-op subtraction
        (2, 10, 3, 0.0),  # below the no-op: clamped at 0
        (3, 10, 3, 0.0),
    ],
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
        (1, 2, True, 0.0),  # clamped at 0
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


def test_malformed_calls_zero_gives_no_reward_to_a_trajectory_with_one():
    score, zero = RewardSpec("dense", 10), RewardSpec("dense", 10, malformed_calls="zero")
    assert score.score(7, 13, malformed=2) == zero.score(7, 13) == pytest.approx(0.7)
    assert zero.score(7, 13, malformed=1) == 0.0
    assert RewardSpec("binary", malformed_calls="zero").score(9, 9, malformed=1) == 0.0
    with pytest.raises(RewardError, match="malformed_calls must be one of score, zero"):
        RewardSpec("dense", 10, malformed_calls="halve")
    with pytest.raises(RewardError, match=">= 0"):
        zero.score(7, 13, malformed=-1)


def test_a_resumed_run_with_another_malformed_rule_names_both(tmp_path):
    m = tmp_path / "manifest.json"
    pin_reward(m, "dense", 12, False, malformed_calls="zero")
    assert read_reward_spec(m).malformed_calls == "zero"
    with pytest.raises(RewardError, match="malformed_calls 'zero'.*malformed_calls 'score'"):
        pin_reward(m, "dense", 12, False)
    old = tmp_path / "old.json"  # a manifest pinned before the key existed reads as `score`
    old.write_text(json.dumps({"reward": {"kind": "dense", "scale": 3.0, "subtract_noop": False}}))
    assert pin_reward(old, "dense", 3, False) == RewardSpec("dense", 3.0)


def test_the_config_key_reaches_the_rollouts_reward(tmp_path):
    import dataclasses

    from t1.config import Config
    from t1.rollout.collect import reward_of

    base = Config()
    cfg = dataclasses.replace(
        base, reward=dataclasses.replace(base.reward, scale=3.0, malformed_calls="zero")
    )
    assert reward_of(cfg, []).malformed_calls == "zero"
    assert reward_of(cfg, [], tmp_path / "m.json").malformed_calls == "zero"
    plain = dataclasses.replace(base, reward=dataclasses.replace(base.reward, scale=3.0))
    assert reward_of(plain, []).malformed_calls == "score"  # the recipe's default
    with pytest.raises(ValueError, match="malformed_calls must be score or zero"):
        dataclasses.replace(base.reward, malformed_calls="halve")


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


def _pool(root, counts):
    """A pool manifest (as t1 pool writes it) of tasks with (assertions, noop_passed)."""
    tasks = []
    for i, (n, noop) in enumerate(counts):
        (root / "tasks" / f"{i:05d}-t{i}").mkdir(parents=True)
        tasks.append(
            {"path": f"tasks/{i:05d}-t{i}", "assertions": n, "noop_passed": noop,
             "noop_total": None if noop is None else n}
        )  # fmt: skip
    m = {"schema_version": 1, "status": "complete", "tasks": tasks}
    (root / "manifest.json").write_text(json.dumps(m))
    return root


def test_pool_records_give_assertions_and_noop(tmp_path):
    pool = _pool(tmp_path / "pool", [(13, 8), (9, None)])
    recs = pool_records(pool)
    assert sorted(r.assertions for r in recs.values()) == [9, 13]
    rec = task_record(pool / "tasks/00000-t0")
    assert (rec.assertions, rec.noop_passed, rec.noop_total) == (13, 8, 13)
    assert task_record(pool / "tasks/00001-t1").noop_passed is None  # not measured: None, not 0
    assert task_record(tmp_path) is None  # not in a pool


def test_pin_derives_the_scale_from_the_pool_once(tmp_path):
    pool = _pool(tmp_path / "pool", [(13, 8), (9, 1)])
    m = tmp_path / "run" / "manifest.json"
    spec = pin_reward(m, "dense", 0, True, pool=pool)
    assert spec == RewardSpec("dense", 13.0, True) and read_scale(m) == 13.0
    # later segments: the pinned spec, whatever the pool says now; the same explicit scale is fine
    _pool(tmp_path / "pool2", [(40, 0)])
    assert pin_reward(m, "dense", 0, True, pool=tmp_path / "pool2").scale == 13.0
    assert pin_reward(m, "dense", 13, True).scale == 13.0


def test_a_resumed_run_with_another_scale_names_both(tmp_path):
    m = tmp_path / "manifest.json"
    pin_reward(m, "dense", 12, False)
    with pytest.raises(RewardError, match=r"pinned at 12.*reward\.scale 20"):
        pin_reward(m, "dense", 20, False)
    with pytest.raises(RewardError, match="subtract_noop"):
        pin_reward(m, "dense", 12, True)
    with pytest.raises(RewardError, match="no pool was given"):
        pin_reward(tmp_path / "other.json", "dense", 0, False)


def test_segment_pins_the_scale_and_a_resume_with_another_scale_stops(tmp_path):
    """`t1 segment` pins the pool-derived scale before its first step; rerun with a config
    naming another scale, it stops (exit 2) before any step, naming both scales."""
    import subprocess
    import sys

    run = tmp_path / "run"
    _pool(run / "pool" / "train", [(13, 8), (9, 1)])
    for f in ("train/DONE.json", "data.json"):  # step 0 finished already: nothing else runs
        p = run / "ppo/steps/step_000000" / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("{}")
    (tmp_path / "sft/actor").mkdir(parents=True)  # an input the segment pins (t1.store.pinning)
    cfg = tmp_path / "config.yaml"

    def segment(scale):
        cfg.write_text(
            f"run: {{name: r}}\ncampaign: {{steps_per_segment: 1}}\nreward: {{scale: {scale}}}\n"
        )
        cmd = [sys.executable, "-m", "t1.cli", "segment", "--config", str(cfg), "--iter", "0"]
        cmd += ["--run-dir", str(run), "--from", str(tmp_path / "sft"), "--out", str(run / "DONE")]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    r = segment(0)
    assert r.returncode == 0, r.stdout + r.stderr
    assert read_reward_spec(run / "manifest.json") == RewardSpec("dense", 13.0, False)
    assert segment(0).returncode == 0  # the same config again: goes on
    (run / "DONE").unlink()
    r = segment(20)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "pinned at 13" in r.stderr and "reward.scale 20" in r.stderr
    assert not (run / "DONE").exists()


@pytest.mark.integration
@pytest.mark.slow
@requires_bwrap
def test_subtract_noop_changes_the_rewards_of_a_rollout_on_a_seed_task(tmp_path):
    """The campaign's path: the no-op measured by `t1 oracle --agent noop`, recorded by `t1 pool
    --noop`, read by the rollout for the pool's task; the agent (a random tiny MoE that only
    answers) leaves the task as the no-op does, so subtracting the no-op takes its reward to 0."""
    import dataclasses

    import torch
    from agent_helpers import EXAMPLES, random_policy

    from t1.agent.tokenizer_train import bpe_tokenizer
    from t1.config import Config
    from t1.curate.pool import build_pool
    from t1.engine.local import LocalEngine
    from t1.rollout.collect import collect, load_tasks
    from t1.verify.oracle import run_task

    torch.set_num_threads(2)
    row = run_task(EXAMPLES / "stats-debug", agent="noop")
    assert row["error"] is None and row["passed"] > 0  # 8 of 13 hold untouched (measured)
    (tmp_path / "noop.json").write_text(json.dumps([row]))
    build_pool([EXAMPLES / "stats-debug"], tmp_path / "pool", noop=[tmp_path / "noop.json"])
    (task,) = load_tasks([str(tmp_path / "pool")])
    assert task_record(task.path).noop_passed == row["passed"]
    tok = bpe_tokenizer()
    base = Config()
    base = dataclasses.replace(
        base,
        run=dataclasses.replace(base.run, deterministic=True, seed=1),
        engine=dataclasses.replace(base.engine, max_new_tokens=8),
        agent=dataclasses.replace(base.agent, max_turns=1),
        rollout=dataclasses.replace(base.rollout, launch=1, admit=1, workers=1),
    )
    out = {}
    for sub in (False, True):
        cfg = dataclasses.replace(base, reward=dataclasses.replace(base.reward, subtract_noop=sub))
        engine = LocalEngine(random_policy(tok), dtype="bfloat16")
        (traj,) = collect([task], engine, tok, cfg, progress=False).admitted
        out[sub] = traj
    plain, sub = out[False], out[True]
    scale = float(pool_records(tmp_path / "pool")[task.path.resolve()].assertions)
    passed = plain.metadata["passed"]
    assert passed == sub.metadata["passed"] >= row["passed"]  # the same rollout, both times
    assert plain.reward == pytest.approx(min(passed, scale) / scale) and plain.reward > 0
    assert sub.reward == pytest.approx(max(0, passed - row["passed"]) / scale)
    assert sub.reward < plain.reward and sub.metadata["noop_passed"] == row["passed"]

"""The segment driver (t1/run/segment.py): its plan - batches from the pool with the epoch
permutation and carry-over, step chaining, critic only at step 0, idempotent skipping.

    .venv/bin/pytest tests/test_segment.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from t1.rollout.oversample import BatchPlanner
from t1.tasks.pool import epoch_order

TASKS = [f"task-{c}" for c in "abcde"]


@pytest.fixture
def run(tmp_path) -> Path:
    (tmp_path / "pool/train").mkdir(parents=True)
    manifest = {"schema_version": 1, "status": "complete", "tasks": [{"path": t} for t in TASKS]}
    (tmp_path / "pool/train/manifest.json").write_text(json.dumps(manifest))
    cfg = "run: {name: t, seed: 3}\nrollout: {launch: 3}\ncampaign: {steps_per_segment: 2}\n"
    cfg += "reward: {scale: 10}\n"  # the hand-made pool records no assertion counts
    (tmp_path / "config.yaml").write_text(cfg)
    return tmp_path


def plan(run: Path, iter_: int) -> tuple[int, list[dict], str]:
    cmd = [
        sys.executable,
        "-m",
        "t1.cli",
        "segment",
        "--config",
        str(run / "config.yaml"),
        "--iter",
        str(iter_),
    ]
    cmd += [
        "--run-dir",
        str(run),
        "--from",
        str(run / "sft"),
        "--critic",
        str(run / "warm"),
        "--out",
        str(run / "DONE"),
        "--dry-run",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True)
    steps = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    return r.returncode, steps, r.stdout + r.stderr


def test_plan_of_the_first_segment(run):
    rc, steps, out = plan(run, 0)
    assert rc == 0, out
    pool = [str(run / "pool/train" / t) for t in TASKS]

    def order(e: int) -> list[str]:  # the pool's one epoch order (t1.tasks.pool), as dirs
        return [pool[i] for i in epoch_order(len(pool), 3, e)]

    planner = BatchPlanner(order=order, launch=3)
    assert [s["batch"] for s in steps] == [planner.next_batch(), planner.next_batch()]
    assert steps[1]["batch"][2] == order(1)[0]  # the epoch rolled over
    assert order(0) != order(1)  # reshuffled every epoch
    assert order(0) != pool and order(1) != pool  # never the rank order
    s0, s1 = steps
    assert s0["prev"] == str(run / "sft") and s1["prev"] == str(run / "ppo/steps/step_000000/train")
    assert s0["train"][-2:] == ["--critic", str(run / "warm")] and "--critic" not in s1["train"]
    assert s0["rollout"][s0["rollout"].index("--policy") + 1] == str(run / "sft/actor")
    assert s1["train"][s1["train"].index("--out") + 1] == str(run / "ppo/steps/step_000001/train")
    assert not (run / "DONE").exists()  # a dry run writes nothing


def test_finished_steps_are_skipped_and_the_saved_planner_state_is_used(run):
    step0 = run / "ppo/steps/step_000000"
    (step0 / "train").mkdir(parents=True)
    (step0 / "train/DONE.json").write_text('{"status": "complete"}')
    carried = str(run / "pool/train/task-e")
    state = {"epoch": 0, "cursor": 3, "carry": [carried]}  # task-e was dropped at step 0
    (step0 / "data.json").write_text(
        json.dumps({"schema_version": 1, "status": "complete", "planner": state})
    )
    rc, steps, out = plan(run, 0)
    assert rc == 0 and "step 0: done already" in out, out
    (s1,) = steps
    assert s1["step"] == 1 and s1["batch"][0] == carried  # carry-over first


def test_a_later_segment_needs_the_previous_steps_state(run):
    cmd = [
        sys.executable,
        "-m",
        "t1.cli",
        "segment",
        "--config",
        str(run / "config.yaml"),
        "--iter",
        "1",
    ]
    cmd += ["--run-dir", str(run), "--from", str(run / "sft"), "--out", str(run / "DONE")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode != 0 and "step_000001/data.json missing" in r.stderr, r.stderr


def test_a_bad_pool_manifest_is_named(run):
    (run / "pool/train/manifest.json").write_text("{")
    rc, _, out = plan(run, 0)
    assert rc != 0 and "pool/train/manifest.json" in out

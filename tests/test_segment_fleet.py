"""The fleet segment's lines and guards without Slurm (t1/run/segment_fleet.py, t1/run/plan.py).

    .venv/bin/pytest tests/test_segment_fleet.py -q

The colocated split and its srun lines (`t1 serve` replica step and trainer step, both
`--overlap`) are pinned; refused options are named; a replica step that keeps exiting is
restarted `MAX_RESTARTS` times and then stops the segment naming its log, and one that never
answers /health stops it at `fleet.start_timeout_s` (real processes; the Slurm run is
tests/slurm/test_fleet_segment.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from t1.config import load_config
from t1.engine import allocation
from t1.run import plan, segment_fleet
from t1.run.segment_fleet import FleetStepError, ReplicaSteps, fleet_steps_wanted, localize

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "workflow/config/tiny.yaml"
OVERLAY = REPO / "tests/slurm/fleet.yaml"
PRESET = REPO / "workflow/config/qwen3.5-122b-a10b.yaml"


def fleet_cfg(tmp_path: Path, **sets):
    import yaml

    merged = yaml.safe_load(TINY.read_text())
    for k, v in yaml.safe_load(OVERLAY.read_text()).items():
        merged.setdefault(k, {}).update(v)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(merged))
    return load_config(path, sets or None), str(path)


def test_colocated_split_and_its_job_step_lines_are_pinned(tmp_path):
    cfg, path = fleet_cfg(tmp_path, **{"fleet.replicas": 2})
    split = allocation.split_allocation(cfg, ["localhost"])
    assert split["trainer"] == ["localhost"]
    assert [(r["nodes"], r["url"]) for r in split["replicas"]] == [
        (["localhost"], "http://localhost:30400"),
        (["localhost"], "http://localhost:30401"),
    ]
    line = plan.replica_command(cfg, split["replicas"][1], "/sft/actor", path)
    assert line == [
        "srun", "--nodes=1", "--ntasks-per-node=1", "--nodelist=localhost", "--job-name=replica1",
        "--kill-on-bad-exit=1", "--overlap", "python", "-m", "t1.engine.launch", "watch",
        "--url", "http://localhost:30401", "--interval", "1", "--",
        "python", "-m", "t1.cli", "serve", "--config", path, "--model", "/sft/actor",
        "--host", "0.0.0.0", "--port", "30401", "--weight-version", "/sft/actor",
    ]  # fmt: skip
    lay = plan.trainer_layout(cfg, 1)["layout"]
    _, train = plan.trainer_command(cfg, ["localhost"], lay, ["t1", "train", "--x"], "r")
    assert train == [
        "srun", "--nodes=1", "--ntasks-per-node=1", "--nodelist=localhost", "--job-name=trainer",
        "--kill-on-bad-exit=1", "--overlap", "t1", "train", "--x",
    ]  # fmt: skip
    runnable = localize(train)
    assert runnable[7] in (str(Path(sys.executable).with_name("t1")), sys.executable)
    assert "python" not in localize(line) and sys.executable in localize(line)


def test_the_split_across_nodes_is_unchanged_and_refusals_are_named(tmp_path):
    cfg = load_config(PRESET)
    split = allocation.split_allocation(cfg, [f"n{i}" for i in range(8)])
    assert split["trainer"] == ["n0", "n1", "n2", "n3"]
    assert [r["url"] for r in split["replicas"]][0] == "http://n4:30000"
    assert "--overlap" not in plan.replica_command(cfg, split["replicas"][0], "/a")
    with pytest.raises(ValueError, match="fleet.colocate needs one node per replica"):
        allocation.split_allocation(
            load_config(PRESET, {"fleet.colocate": True, "fleet.tp": 16}), ["a"]
        )
    bad, path = fleet_cfg(tmp_path, **{"fleet.server": "vllm"})
    with pytest.raises(ValueError, match="fleet.server is 'vllm'"):
        plan.replica_command(
            bad, allocation.split_allocation(bad, ["h"])["replicas"][0], "/a", path
        )
    cfg, _ = fleet_cfg(tmp_path)
    with pytest.raises(ValueError, match="needs the config path"):
        plan.replica_command(cfg, allocation.split_allocation(cfg, ["h"])["replicas"][0], "/a")


def test_fleet_steps_only_inside_an_allocation_without_fixed_urls(tmp_path, monkeypatch):
    cfg, _ = fleet_cfg(tmp_path)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert not fleet_steps_wanted(cfg)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    assert fleet_steps_wanted(cfg)
    fixed, _ = fleet_cfg(tmp_path, **{"fleet.urls": ["http://h:1"]})
    assert not fleet_steps_wanted(fixed)
    none, _ = fleet_cfg(tmp_path, **{"fleet.replicas": 0})
    assert not fleet_steps_wanted(none)


def test_a_replica_step_that_keeps_exiting_is_restarted_then_stops_the_segment(
    tmp_path, monkeypatch
):
    cfg, path = fleet_cfg(tmp_path)
    # the segment's heartbeat is not the replica's: a healthy server must not keep it fresh
    monkeypatch.setenv("T1_HEARTBEAT_FILE", str(tmp_path / "beat"))
    steps = ReplicaSteps(cfg, path, tmp_path / "iter", ["localhost"])
    code = "import os; print('replica boom', os.environ.get('T1_HEARTBEAT_FILE')); exit(4)"
    steps.lines = {0: [sys.executable, "-c", code]}
    steps.spawn_lines()
    try:
        with pytest.raises(FleetStepError) as e:
            steps.wait_healthy(60)
    finally:
        steps.stop()
    msg = str(e.value)
    assert "replica 0 step exited 3 times (last rc 4)" in msg and "replica0.log" in msg, msg
    assert "replica boom None" in msg  # the log's tail; no heartbeat file for the replica
    started = [ev for ev in steps.events if ev["event"] == "started"]
    assert len(started) == segment_fleet.MAX_RESTARTS + 1


def test_a_replica_step_that_never_answers_health_times_out_naming_its_log(tmp_path):
    cfg, path = fleet_cfg(tmp_path)
    steps = ReplicaSteps(cfg, path, tmp_path / "iter", ["localhost"])
    steps.lines = {0: [sys.executable, "-c", "import time; print('slow'); time.sleep(60)"]}
    steps.spawn_lines()
    try:
        with pytest.raises(FleetStepError, match=r"did not answer /health within .* 2 s"):
            steps.wait_healthy(2)
    finally:
        steps.stop()
    assert steps.events[-1]["event"] == "stopped" and steps.events[-1]["rc"] == -15

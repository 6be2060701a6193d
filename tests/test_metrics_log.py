"""JSON-lines event log: schema fields, nan handling, torn lines, TensorBoard files."""

import json
import math

import pytest
import torch

from t1.store.metrics_log import SCHEMA_VERSION, MetricsLog, last_attempt, read_events


def test_events_round_trip_with_schema_and_nan_as_null(tmp_path):
    with MetricsLog(tmp_path, tensorboard=False) as log:
        log.write("ppo_step", step=1, gap=0.02, explained_variance=math.nan, loss=torch.tensor(1.5))
        log.write("ppo_step", step=2, resolved_by_category={"files": 0.5, "net": 1.0})
        log.write("sft_step", step=1, loss=3.0)
    events = read_events(tmp_path, "ppo_step")
    assert [e["step"] for e in events] == [1, 2]
    assert events[0]["schema_version"] == SCHEMA_VERSION and events[0]["time"] > 0
    assert events[0]["explained_variance"] is None and events[0]["loss"] == 1.5
    assert events[1]["resolved_by_category"] == {"files": 0.5, "net": 1.0}
    assert len(read_events(tmp_path)) == 3


def test_torn_last_line_is_skipped_but_corruption_inside_is_an_error(tmp_path):
    p = tmp_path / "metrics.jsonl"
    good = json.dumps({"schema_version": 1, "event": "x", "step": 1, "time": 0.0})
    p.write_text(good + "\n" + '{"schema_version": 1, "ev')
    assert len(read_events(p)) == 1
    p.write_text('{"bad\n' + good + "\n")
    with pytest.raises(ValueError, match="metrics.jsonl:1"):
        read_events(p)


def test_tensorboard_scalars_written(tmp_path):
    pytest.importorskip("tensorboard")
    with MetricsLog(tmp_path, tensorboard=True) as log:
        log.write("ppo_step", step=0, gap=0.1, per={"a": 1})
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_a_resumed_stage_writes_a_new_attempt_and_readers_keep_the_last(tmp_path):
    with MetricsLog(tmp_path, tensorboard=False) as log:
        for step in (1, 2, 3):
            log.write("sft_step", step, loss=float(step))
    with open(tmp_path / "metrics.jsonl", "a") as f:  # killed mid-line
        f.write('{"schema_version": 1, "event": "sft_st')
    with MetricsLog(tmp_path, tensorboard=False) as log:  # resumed from the step-1 checkpoint
        assert log.attempt == 2
        for step in (2, 3, 4):
            log.write("sft_step", step, loss=10.0 * step)
    events = read_events(tmp_path)  # the torn line was cut off, nothing malformed inside
    assert [(e["step"], e["attempt"]) for e in events] == [
        (1, 1),
        (2, 1),
        (3, 1),
        (2, 2),
        (3, 2),
        (4, 2),
    ]
    kept = last_attempt(events)
    assert [(e["step"], e["loss"], e.get("redone")) for e in kept] == [
        (1, 1.0, None), (2, 20.0, 1), (3, 30.0, 1), (4, 40.0, None)
    ]  # fmt: skip

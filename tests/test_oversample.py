"""Over-sampling: admission order, cancellation of the tail, carry-over of dropped tasks."""

from __future__ import annotations

import json
import threading
import time

import pytest

from t1.rollout.oversample import BatchPlanner, oversample


def _runner(durations, log):
    def run(item, cancel: threading.Event):
        # A "trajectory" of 20 short turns that polls its cancel flag between turns.
        turns = 0
        for _ in range(20):
            if cancel.is_set():
                log.append(("cancelled", item))
                return {"item": item, "turns": turns, "cancelled": True}
            time.sleep(durations[item] / 20)
            turns += 1
        return {"item": item, "turns": turns, "cancelled": False}

    return run


def test_admits_first_k_by_completion_and_cancels_tail():
    durations = {"a": 0.4, "b": 0.02, "c": 0.04, "d": 0.6}
    log: list = []
    res = oversample(list(durations), _runner(durations, log), admit=2, workers=4)
    assert [v["item"] for _, v in res.admitted] == ["b", "c"]
    assert sorted(d.item for d in res.dropped) == ["a", "d"]
    # The tail was cancelled mid-trajectory, not run to the end.
    assert all(d.progress["cancelled"] and d.progress["turns"] < 20 for d in res.dropped)
    assert {x for _, x in log} == {"a", "d"}


def test_deterministic_admits_in_launch_order():
    durations = {"a": 0.3, "b": 0.02, "c": 0.02, "d": 0.02}
    res = oversample(
        list(durations), _runner(durations, []), admit=2, workers=4, deterministic=True
    )
    assert [i for i, _ in res.admitted] == [0, 1]
    assert [d.item for d in res.dropped] == ["c", "d"]


def test_failed_run_is_dropped_with_reason_not_admitted():
    def run(item, cancel):
        if item == "bad":
            raise RuntimeError("sandbox died")
        return item

    res = oversample(["bad", "x", "y"], run, admit=2, workers=1)
    assert sorted(v for _, v in res.admitted) == ["x", "y"]
    assert res.dropped[0].reason == "failed: RuntimeError: sandbox died"


def test_admit_bounds_checked():
    with pytest.raises(ValueError):
        oversample([1, 2], lambda i, c: i, admit=3)


def test_batch_planner_carries_dropped_to_front_and_round_trips():
    order = lambda epoch: [f"t{epoch}-{i}" for i in range(5)]  # noqa: E731
    p = BatchPlanner(order=order, launch=3)
    assert p.next_batch() == ["t0-0", "t0-1", "t0-2"]
    p.record_dropped(["t0-1"])
    state = p.state_dict()
    b2 = p.next_batch()
    assert b2 == ["t0-1", "t0-3", "t0-4"]
    assert p.next_batch() == ["t1-0", "t1-1", "t1-2"]  # epoch rolls over
    q = BatchPlanner(order=order, launch=3)
    q.load_state_dict(state)
    assert q.next_batch() == b2


def test_inadmissible_results_do_not_take_admission_slots():
    res = oversample(
        ["bad", "x", "y", "z"],
        lambda i, c: i,
        admit=2,
        workers=1,
        admissible=lambda v: v != "bad",
        deterministic=True,
    )
    assert [v for _, v in res.admitted] == ["x", "y"]
    bad = [d for d in res.dropped if d.item == "bad"][0]
    assert bad.reason == "not admissible" and bad.progress == "bad"


def test_carry_over_gives_up_after_max_carry_drops_in_a_row():
    """A task that always fails is carried 2 times, then goes back to the pool's order; the
    streak survives a state round trip and is broken by one admitted run."""
    order = lambda epoch: ["bad", "a", "b", "c", "d", "e"]  # noqa: E731
    p = BatchPlanner(order=order, launch=2, max_carry=3)
    fronts = []
    for _ in range(5):
        batch = p.next_batch()
        fronts.append(batch[0])
        given_up = p.record_dropped([x for x in batch if x == "bad"])
        p.load_state_dict(json.loads(json.dumps(p.state_dict())))  # as data.json does
    # launched at 0, carried to steps 1 and 2, given up after its third drop in a row; it comes
    # again where the pool's order puts it (first of epoch 1), with a fresh streak
    assert fronts == ["bad", "bad", "bad", "d", "bad"] and given_up == []
    p = BatchPlanner(order=order, launch=2, max_carry=3)
    for dropped in (["bad"], ["bad"], []):  # admitted at the third try: the streak ends
        assert p.next_batch()[0] == "bad"
        assert p.record_dropped(dropped) == []
    assert p.streak == {}
    # without the limit (the old behaviour) it would lead every batch forever
    p = BatchPlanner(order=order, launch=2, max_carry=10**9)
    for _ in range(5):
        assert p.next_batch()[0] == "bad"
        p.record_dropped(["bad"])


def test_carry_over_is_keyed_by_path_not_name(tmp_path):
    """Two tasks with the same name in different directories are carried as themselves."""
    from t1.run.segment import _dropped_dirs

    a, b = str(tmp_path / "x" / "same"), str(tmp_path / "y" / "same")
    rollout = tmp_path / "rollout.json"
    rows = [{"task": "same", "path": b, "reason": "failed: sandbox"}]
    rollout.write_text(json.dumps({"dropped_tasks": rows}))
    assert _dropped_dirs(rollout, [a, b]) == [b]
    rows.append({"task": "same", "path": a, "reason": "truncated-tail"})
    rollout.write_text(json.dumps({"dropped_tasks": rows}))
    assert _dropped_dirs(rollout, [a, b]) == [b, a]


def test_each_launches_every_task_once_and_a_launch_count_cycles_through_them():
    from t1.rollout.collect import launched_tasks

    tasks = ["a", "b", "c"]
    assert launched_tasks(tasks, None) == ["a", "b", "c"]  # --each: an epoch over the tasks
    assert launched_tasks(tasks, 5) == ["a", "b", "c", "a", "b"]
    assert launched_tasks(tasks, 2) == ["a", "b"]


@pytest.mark.parametrize(("launch", "admit"), [(5, None), (None, 4)])
def test_rollout_refuses_each_beside_a_launch_or_admit_count(tmp_path, capsys, launch, admit):
    import argparse

    from t1.rollout.collect import main

    args = argparse.Namespace(each=True, launch=launch, admit=admit, out=tmp_path / "out")
    assert main(args) == 2
    assert "--each" in capsys.readouterr().err and not (tmp_path / "out").exists()

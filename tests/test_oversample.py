"""Over-sampling: admission order, cancellation of the tail, carry-over of dropped tasks."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest

from t1.rollout.oversample import BatchPlanner, CancelToken, oversample


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


def test_deterministic_admits_in_launch_order_when_no_run_ticks():
    durations = {"a": 0.3, "b": 0.02, "c": 0.02, "d": 0.02}
    res = oversample(
        list(durations), _runner(durations, []), admit=2, workers=4, deterministic=True
    )
    assert [i for i, _ in res.admitted] == [0, 1]
    assert [d.item for d in res.dropped] == ["c", "d"]


def _clocked(costs, sleeps, log=None):
    """A run of item k: one turn per cost in costs[k] (its clock ticks by it), each turn
    taking sleeps[k] wall seconds; it polls its cancel flag between turns."""

    def run(item, cancel):
        done = 0
        for cost in costs[item]:
            if cancel.is_set():
                if log is not None:
                    log.append(item)
                return {"item": item, "turns": done, "cancelled": True}
            time.sleep(sleeps[item])
            cancel.tick(cost)
            done += 1
        return {"item": item, "turns": done, "cancelled": False}

    return run


# virtual completion times: a 45, b 100, c 40, d 600 (six turns), e 45, f 300
COSTS = {
    "a": [20, 25],
    "b": [50, 50],
    "c": [40],
    "d": [100] * 6,
    "e": [45],
    "f": [150, 150],
}


@pytest.mark.parametrize("seed", range(4))
def test_deterministic_admits_the_first_k_on_the_virtual_clock_whatever_the_timing(seed):
    """Each run's turns take random wall times; the admitted set is the K smallest virtual
    completion times (ties by launch index) every time, in launch order, and a run whose clock
    passes the K-th is cancelled there, before its last turn."""
    r = random.Random(seed)
    sleeps = {k: r.uniform(0.0, 0.03) for k in COSTS}
    sleeps["d"] = 0.05  # six turns: 0.3 s on the wall, if it were let run
    log: list = []
    res = oversample(list(COSTS), _clocked(COSTS, sleeps, log), admit=3, workers=3,
                     deterministic=True)  # fmt: skip
    assert [(i, v["item"]) for i, v in res.admitted] == [(0, "a"), (2, "c"), (4, "e")]
    dropped = {d.item: d for d in res.dropped}
    assert set(dropped) == {"b", "d", "f"} and all(
        x.reason == "truncated-tail" for x in dropped.values()
    )
    # d's clock passes 45 (the third smallest) at its first turn: it never runs six
    assert dropped["d"].progress["cancelled"] and dropped["d"].progress["turns"] < 6
    assert "d" in log


def test_completion_order_is_what_deterministic_mode_replaces():
    """Negative control: the same runs admitted by wall-clock completion (deterministic off)
    take the fast expensive run and leave a slow cheap one: the admitted set follows the
    machine's timing, not the trajectories."""
    sleeps = {"a": 0.15, "b": 0.0, "c": 0.0, "d": 0.0, "e": 0.0, "f": 0.0}
    res = oversample(list(COSTS), _clocked(COSTS, sleeps), admit=3, workers=6)
    admitted = {v["item"] for _, v in res.admitted}
    assert "a" not in admitted  # a is among the 3 cheapest, but the slowest on the wall
    res = oversample(list(COSTS), _clocked(COSTS, sleeps), admit=3, workers=6, deterministic=True)
    assert {v["item"] for _, v in res.admitted} == {"a", "c", "e"}


def test_launch_admission_ignores_the_clocks():
    """rollout.admission: launch - the K lowest launch indices, whatever the runs' clocks."""
    sleeps = dict.fromkeys(COSTS, 0.0)
    res = oversample(list(COSTS), _clocked(COSTS, sleeps), admit=3, workers=6,
                     deterministic=True, clock=False)  # fmt: skip
    assert [i for i, _ in res.admitted] == [0, 1, 2]


@pytest.mark.parametrize("admission,clock", [("clock", True), ("launch", False)])
def test_the_rollout_passes_its_admission_to_the_over_sampler(monkeypatch, admission, clock):
    from t1.config import Config, RolloutConfig, RunConfig
    from t1.rollout import collect as collect_mod
    from t1.rollout.oversample import OversampleResult
    from t1.verify.reward import RewardSpec

    seen = {}

    def fake(items, run_one, **kw):
        seen.update(kw)
        return OversampleResult(launched=len(items))

    monkeypatch.setattr(collect_mod, "oversample", fake)
    cfg = Config(run=RunConfig(deterministic=True), rollout=RolloutConfig(admission=admission))
    collect_mod.collect(
        [object()], None, None, cfg, progress=False, reward=RewardSpec("dense", 1.0)
    )
    assert seen["deterministic"] is True and seen["clock"] is clock


def test_admission_is_checked(tmp_path):
    from t1.config import ConfigError, load_config

    bad = tmp_path / "c.yaml"
    bad.write_text("rollout:\n  admission: wall\n")
    with pytest.raises(ConfigError, match=r"c.yaml: rollout: admission must be clock \| launch"):
        load_config(bad)
    bad.write_text("run:\n  deterministic: false\nrollout:\n  admission: launch\n")
    with pytest.raises(ConfigError, match="under run.deterministic only.*rollout.admission: clock"):
        load_config(bad)
    bad.write_text("run:\n  deterministic: true\nrollout:\n  admission: launch\n")
    assert load_config(bad).rollout.admission == "launch"


def test_a_run_started_again_is_charged_from_zero():
    token = CancelToken()
    token.tick(30)
    token.restart_clock()
    token.tick(5)
    assert token.clock == 5
    with pytest.raises(ValueError, match="only moves forward"):
        token.tick(-1)


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

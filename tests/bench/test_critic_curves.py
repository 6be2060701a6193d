"""Curve extraction of the critic warm-up bench (t1/bench/critic.py), by hand values.

.venv/bin/pytest tests/bench/test_critic_curves.py -q
"""

from __future__ import annotations

import json
import math

import pytest

from t1.bench.critic import ev_curve, from_metrics, reward_stats, summarize
from t1.store.metrics_log import MetricsLog


def _ev(step, ev, event="ppo_step", **kw):
    return {"event": event, "step": step, "explained_variance": ev, **kw}


def test_ev_curve_orders_steps_keeps_last_and_drops_other_events():
    events = [
        _ev(2, 0.5, actor_updated=True),
        _ev(0, -3.0, actor_updated=False, value_loss=1.25),
        _ev(1, 0.1),
        _ev(1, 0.2),  # step 1 logged again by a resumed run: the last one counts
        _ev(5, 9.0, event="critic_warmup_step"),
    ]
    curve = ev_curve(events)
    assert [p["step"] for p in curve] == [0, 1, 2]
    assert [p["explained_variance"] for p in curve] == [-3.0, 0.2, 0.5]
    assert curve[0]["value_loss"] == 1.25 and curve[0]["actor_updated"] is False


def test_ev_curve_undefined_values_become_none():
    curve = ev_curve([_ev(0, None), _ev(1, float("nan")), _ev(2, float("-inf")), _ev(3, 1)])
    assert [p["explained_variance"] for p in curve] == [None, None, None, 1.0]


def test_summarize_by_hand():
    s = summarize([None, -33.6, -2.0, 0.25, -0.5, 0.8])
    assert s["opens_at"] == -33.6 and s["opens_step"] == 1
    assert s["negative_steps"] == 3 and s["defined_steps"] == 5 and s["steps"] == 6
    assert s["first_nonnegative_step"] == 3 and s["last_negative_step"] == 4
    assert s["min"] == -33.6 and s["max"] == 0.8 and s["last"] == 0.8


def test_summarize_never_negative_and_empty():
    s = summarize([0.0, 0.7, 0.86])
    assert s["negative_steps"] == 0 and s["last_negative_step"] is None
    assert s["first_nonnegative_step"] == 0
    e = summarize([None, None])
    assert e["opens_at"] is None and e["negative_steps"] == 0 and e["min"] is None


def test_reward_stats_by_hand():
    s = reward_stats([0.0, 0.5, 1.0, 0.5])
    assert s["rows"] == 4 and s["nonzero"] == 3
    assert s["reward_mean"] == 0.5
    assert math.isclose(s["reward_std"], math.sqrt(0.125))


def test_from_metrics_reads_every_step_file_of_a_campaign(tmp_path):
    # a campaign's layout: one metrics.jsonl per step directory
    for step, ev in ((0, -1.5), (1, 0.25)):
        with MetricsLog(tmp_path / f"step_{step:06d}" / "train", tensorboard=False) as log:
            log.write("ppo_step", step, explained_variance=ev, actor_updated=True)
    out = from_metrics([f"cold={tmp_path}"])
    arm = out["arms"]["cold"]
    assert arm["explained_variance"] == [-1.5, 0.25]
    assert arm["summary"]["negative_steps"] == 1
    json.dumps(out)  # serialisable as written
    with pytest.raises(SystemExit):
        from_metrics([str(tmp_path)])  # no ARM=


def test_value_stats_rebuilds_the_explained_variance():
    import torch

    from t1.bench.critic import value_stats
    from t1.ppo.metrics import explained_variance

    # two rows, loss tokens marked; padding (mask 0) must not count
    values = torch.tensor([[0.0, 1.0, 9.0], [2.0, 3.0, 9.0]])
    returns = torch.tensor([[1.0, 1.0, 5.0], [3.0, 3.0, 5.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    s = value_stats(values, returns, mask)
    # V = [0, 1, 2, 3]: mean 1.5, var 1.25; R = [1, 1, 3, 3]: mean 2, var 1; cov 1
    assert s["value_mean"] == 1.5 and s["return_mean"] == 2.0
    assert math.isclose(s["var_ratio"], 1.25)
    assert math.isclose(s["corr"], 1.0 / math.sqrt(1.25))
    ev = 2 * s["corr"] * math.sqrt(s["var_ratio"]) - s["var_ratio"]
    assert math.isclose(ev, explained_variance(values, returns, mask))
    assert math.isclose(ev, 0.75)  # 1 - Var(R - V) / Var(R) = 1 - 0.25 / 1

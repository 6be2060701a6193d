"""`t1 bench train`'s loss_region section: both paths run on the same batch, side by side."""

from __future__ import annotations

import dataclasses

from t1.bench.train import bench_loss_region, synthetic_batch
from t1.config import Config


def test_loss_region_bench_times_both_paths_side_by_side(monkeypatch):
    import t1.train.hf as hf

    calls = {"loss_region": 0, "full": 0}
    real_region, real_full = hf.loss_region_logp, hf.token_logp

    def region(*a, **k):
        calls["loss_region"] += 1
        return real_region(*a, **k)

    def full(*a, **k):
        calls["full"] += 1
        return real_full(*a, **k)

    monkeypatch.setattr(hf, "loss_region_logp", region)
    monkeypatch.setattr(hf, "token_logp", full)
    cfg = Config()
    r = bench_loss_region(cfg, rows=2, seq=24, repeats=2, loss=0.25)
    assert calls == {"loss_region": 3, "full": 3}  # each path once per pair, warm-up pair too
    assert r["loss_fraction"] == 0.25
    assert len(r["samples"]["full"]) == len(r["samples"]["loss_region"]) == 2
    assert r["full_s"] > 0 and r["loss_region_s"] > 0 and r["speedup"] > 0


def test_synthetic_batch_puts_the_asked_share_of_each_row_in_the_loss_region():
    from t1.model.policy import build_policy

    cfg = Config()
    model = dataclasses.replace(cfg.model, layers=1)
    policy = build_policy(model, 64, seed=0)
    batch = synthetic_batch(policy, 64, rows=3, seq=20, loss=0.25)
    assert batch.loss_mask.sum(1).tolist() == [5, 5, 5]
    assert not batch.loss_mask[:, :15].any()


def test_picked_logp_bench_times_both_picks_and_compares_their_weights(monkeypatch):
    import t1.train.hf as hf
    from t1.bench.train import bench_picked_logp

    calls = {"picked": 0, "autograd": 0}
    real_picked, real_autograd = hf.picked_logp, hf.autograd_picked_logp

    def picked(*a):
        calls["picked"] += 1
        return real_picked(*a)

    def autograd(*a):
        calls["autograd"] += 1
        return real_autograd(*a)

    monkeypatch.setattr(hf, "picked_logp", picked)
    monkeypatch.setattr(hf, "autograd_picked_logp", autograd)
    r = bench_picked_logp(Config(), rows=2, seq=24, repeats=2, loss=0.25)
    assert calls == {"picked": 4, "autograd": 4}  # the weights' update, then 3 pairs
    assert hf.picked_logp is picked  # put back
    assert r["bit_identical"] is True
    assert len(r["samples"]["picked"]) == len(r["samples"]["autograd"]) == 2
    assert r["picked_s"] > 0 and r["autograd_s"] > 0


def test_picked_logp_bench_sees_a_pick_that_changes_the_weights(monkeypatch):
    """The negative control: a pick off by a rounding step is not bit-identical."""
    import t1.train.hf as hf
    from t1.bench.train import bench_picked_logp

    real = hf.picked_logp
    monkeypatch.setattr(hf, "picked_logp", lambda lg, t: real(lg, t) * (1 + 2**-20))
    assert (
        bench_picked_logp(Config(), rows=2, seq=24, repeats=1, loss=0.25)["bit_identical"] is False
    )


def test_length_groups_bench_runs_the_batch_whole_and_in_groups(monkeypatch):
    import t1.train.hf as hf
    from t1.bench.train import bench_length_groups

    shapes = []  # (rows, length) of every trimmed group the actor ran on
    real = hf.loss_region_logp

    def region(model, ids, mask):
        shapes.append(tuple(ids.shape))
        return real(model, ids, mask)

    monkeypatch.setattr(hf, "loss_region_logp", region)
    monkeypatch.setattr(hf, "GROUP_OVERHEAD", 8)  # tokens: 6 rows of 24-96 split at this size
    r = bench_length_groups(Config(), rows=6, seq=96, repeats=2, loss=0.25)
    assert r["lengths"] == [24, 38, 53, 67, 82, 96] and r["group_overhead"] == 8
    assert len(r["groups"]) > 1 and sum(r["groups"]) == 6
    assert abs(r["padding_share"] - (1 - 360 / 576)) < 1e-9
    # both arms ran: whole batches (6, 96) and trimmed groups of fewer rows
    assert (6, 96) in shapes and any(rows < 6 and t < 96 for rows, t in shapes)
    assert r["logp_max_abs_diff"] < 1e-4
    assert len(r["samples"]["whole"]) == len(r["samples"]["grouped"]) == 2

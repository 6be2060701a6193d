"""Rows in groups of like length: the cheapest split, and the hf trainer's grouped forwards and
updates agreeing with the whole batch run at once."""

from __future__ import annotations

import itertools
import random

import torch

from t1.train.batch import collate, length_groups
from t1.train.sft import nll


def _cost(lengths, groups, overhead):
    return sum(len(g) * max(lengths[i] for i in g) + overhead for g in groups)


def _partitions(items):
    """Every set partition of `items` (Bell(n) of them)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        yield [[first], *part]
        for k in range(len(part)):
            yield [*part[:k], [first, *part[k]], *part[k + 1 :]]


def test_length_groups_is_the_cheapest_of_every_partition():
    rnd = random.Random(0)
    for _ in range(60):
        n = rnd.randint(1, 6)
        lengths = [rnd.randint(1, 40) for _ in range(n)]
        overhead = rnd.choice([0, 3, 10, 40, 200])
        groups = length_groups(lengths, overhead)
        assert sorted(i for g in groups for i in g) == list(range(n))
        best = min(_cost(lengths, p, overhead) for p in _partitions(list(range(n))))
        assert _cost(lengths, groups, overhead) == best, (lengths, overhead, groups)


def test_length_groups_caps_rows_orders_and_ties():
    lengths = [30, 5, 31, 6, 29, 5, 7, 32]
    assert length_groups(lengths, overhead=10**9) == [list(range(8))]
    assert length_groups(lengths, 10) == [[1, 3, 5, 6], [0, 2, 4, 7]]  # shortest first
    capped = length_groups(lengths, 10, max_rows=3)
    assert max(len(g) for g in capped) <= 3 and sorted(sum(capped, [])) == list(range(8))
    # overhead 0: rows of one length share a group (no cheaper split), the others stand alone
    assert length_groups([4, 4, 9], 0) == [[0, 1], [2]]
    assert length_groups([], 5) == []


def _varied_rows(actor, make_rows):
    rows = make_rows(actor, n=6)
    for r, keep in zip(rows, [12, 28, 13, 28, 14, 28], strict=True):  # two length classes
        r.ids, r.loss_mask = r.ids[:keep], r.loss_mask[:keep]
        r.logprobs, r.routing = r.logprobs[:keep], r.routing[:keep]
    return rows


def test_grouped_update_is_the_whole_batch_update(make_trainer, make_rows):
    whole, grouped = make_trainer(), make_trainer()
    whole.group_overhead = 1 << 30
    grouped.group_overhead = 8
    batch = collate(_varied_rows(whole.actor, make_rows))
    assert length_groups(batch.lengths.tolist(), 8) == [[0, 2, 4], [1, 3, 5]]
    seen = []  # the shapes the grouped actor's backbone ran on
    hook = grouped.actor.model.embed_tokens.register_forward_pre_hook(
        lambda m, a: seen.append(tuple(a[0].shape))
    )
    a = whole._actor_loss_logp(batch)
    b = grouped._actor_loss_logp(batch)
    hook.remove()
    assert sorted(seen) == [(3, 14), (3, 28)]
    assert torch.allclose(a, b, atol=1e-5)
    # rows differ from each other, so rows put back in the wrong order could not pass
    assert not torch.allclose(b[1], b[3], atol=1e-2)

    def vloss(values, mb):
        return ((values - 1.0) ** 2 * mb.loss_mask).sum() / mb.loss_mask.sum(), {}

    for t in (whole, grouped):
        t.actor_update(batch, nll)
        t.critic_update(batch, vloss)
    for m in ("actor", "critic"):  # this step's gradients (Adam's first step is their sign)
        for (name, p), q in zip(
            getattr(whole, m).named_parameters(), getattr(grouped, m).parameters(), strict=True
        ):
            assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-7), (m, name)
    # the step did move the weights, so equal weights are not two untouched models
    fresh = make_trainer()
    assert not all(
        torch.equal(p, q)
        for p, q in zip(fresh.actor.parameters(), grouped.actor.parameters(), strict=True)
    )


def test_no_grad_forwards_in_length_groups_match_one_forward(make_trainer, make_rows):
    t = make_trainer()
    batch = collate(_varied_rows(t.actor, make_rows))
    t.forward_rows, t.group_overhead = batch.size, 1 << 30
    one, one_v = t.actor_forward(batch, entropy=True), t.critic_values(batch)
    t.forward_rows, t.group_overhead = 2, 8
    assert t._chunks(batch) == [[0], [2, 4], [1], [3, 5]]
    many, many_v = t.actor_forward(batch, entropy=True), t.critic_values(batch)
    assert torch.allclose(one.logp, many.logp, atol=1e-5)
    assert torch.allclose(one.entropy, many.entropy, atol=1e-5)
    assert torch.allclose(one_v, many_v, atol=1e-5)
    real = torch.arange(batch.input_ids.shape[1])[None, :] < batch.lengths[:, None]
    assert torch.equal(many.logp[~real], torch.zeros_like(many.logp[~real]))


def test_length_groups_depend_on_lengths_only():
    lengths = [17, 3, 3, 40, 18, 2]
    runs = {tuple(map(tuple, length_groups(lengths, 12))) for _ in range(3)}
    assert len(runs) == 1
    for perm in itertools.islice(itertools.permutations(range(6)), 5):
        shuffled = [lengths[i] for i in perm]
        got = length_groups(shuffled, 12)
        assert sorted(len(g) for g in got) == sorted(len(g) for g in length_groups(lengths, 12))

"""A materialized task pool and its one epoch order: the order training sees the pool in.

    loader = PoolLoader("results/pool", seed=cfg.run.seed)
    for task in loader.epoch(3): ...        # a permutation fixed by (seed, epoch)
    epoch_order(len(loader), seed, 3)       # the same permutation, as indices into the ranking

A pool is a directory `tasks/NNNNN-<id>/` in quality-rank order plus `manifest.json`
(schema_version 1, status "complete", and `tasks`: one object per task in rank order with its
`path`, relative to the pool or absolute, and the builder's rank, id, score, category,
assertions, binary_only; `binary_outcomes` when every verifier gives only a reward file).
`t1 pool` (t1/curate/pool.py) writes it from audited tasks.

Because the order on disk is the quality ranking, training must shuffle: a pool hands its tasks
out only per epoch, in the permutation `epoch_order` draws from (seed, epoch) - reproducible,
so a run resumes at any epoch; different every epoch; and never the ranking itself for pools of
more than two tasks. Both consumers use it: `t1 rollout --tasks POOL` (epoch 0,
t1.rollout.collect.load_tasks) and the campaign's batch planner (t1/run/segment.py, through
t1.rollout.oversample.BatchPlanner). This module imports neither the audit nor the synthesizer.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MANIFEST", "SCHEMA_VERSION", "PoolLoader", "PoolTask", "epoch_order"]

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The permutation of ranks 0..n-1 for `epoch`: a pure function of (n, seed, epoch).

    Reshuffled while it equals the ranking (n > 2), so the best-ranked tasks never come first
    in rank order; for n <= 2 the identity is one of only two orders and stays allowed.
    """
    idx = list(range(n))
    rng = random.Random(f"t1-pool:{int(seed)}:{int(epoch)}")
    rng.shuffle(idx)
    while n > 2 and idx == sorted(idx):  # never hand out the ranking itself
        rng.shuffle(idx)
    return idx


@dataclass(frozen=True)
class PoolTask:
    rank: int
    id: str
    path: Path
    score: float | None
    category: str
    assertions: int
    binary_only: bool


class PoolLoader:
    """A materialized pool, handed out one epoch at a time in `epoch_order`.

    The directory order is the quality ranking, so there is deliberately no way to iterate in
    that order: `epoch(e)` returns the tasks permuted by (seed, e).
    """

    def __init__(self, pool_dir: str | Path, seed: int) -> None:
        self.dir = Path(pool_dir)
        path = self.dir / MANIFEST
        try:
            m = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: cannot read the pool manifest: {e}") from None
        if (
            not isinstance(m, dict)
            or m.get("schema_version") != SCHEMA_VERSION
            or m.get("status") != "complete"
            or not isinstance(m.get("tasks"), list)
        ):
            raise ValueError(
                f"{path}: not a complete pool manifest (schema_version {SCHEMA_VERSION}, "
                'status "complete", a list of tasks)'
            )
        self.manifest = m
        self.seed = int(seed)
        self.binary_outcomes = bool(m.get("binary_outcomes"))
        self._tasks = [self._task(path, i, t) for i, t in enumerate(m["tasks"])]

    def _task(self, manifest: Path, i: int, t: object) -> PoolTask:
        if not isinstance(t, dict) or not isinstance(t.get("path"), str) or not t["path"]:
            raise ValueError(f"{manifest}: tasks[{i}] has no path: {t!r}")
        path = self.dir / t["path"]  # an absolute path stays as it is
        return PoolTask(
            rank=int(t.get("rank", i)),
            id=str(t.get("id") or path.name),
            path=path,
            score=t.get("score"),
            category=str(t.get("category", "unknown")),
            assertions=int(t.get("assertions", 0)),
            binary_only=bool(t.get("binary_only", False)),
        )

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self):
        raise TypeError("a pool is stored in quality-rank order; iterate PoolLoader.epoch(e)")

    def order(self, epoch: int) -> list[int]:
        """The permutation of ranks for `epoch` (epoch_order of this pool's size and seed)."""
        return epoch_order(len(self._tasks), self.seed, epoch)

    def epoch(self, epoch: int) -> list[PoolTask]:
        return [self._tasks[i] for i in self.order(epoch)]

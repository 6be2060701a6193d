"""Over-sampling with tail truncation: launch N trajectories, admit the first K, cancel the rest.

The paper launches 560 and admits the first 512 that complete: step time is bounded by the
K-th fastest trajectory instead of the slowest. That biases each batch against long trials,
so the dropped tasks are recorded (task ids, turns so far) and, by default, carried to the
front of the next batch (`BatchPlanner`) - but only `max_carry` times in a row: a task dropped
(or failed) in that many consecutive steps goes back to the pool's normal order, so a task
that always fails cannot take the front of every batch forever.

Deterministic mode admits the first K to complete on a VIRTUAL clock instead of the wall
clock, so a run is reproducible whatever the thread timing and the machine's load, and the
tail is still cut. Each launch's `CancelToken` carries a clock that its run advances with
what it has done (`tick`; the agent loop charges each sampled token 1, each command it runs
`TURN_COST`, a command that ran into its timeout its seconds x `TOKENS_PER_S`: a trajectory's
cost in sampled-token units, t1.agent.loop). A finished run's final clock is its virtual
completion time V; the K runs of smallest (V, launch index) are admitted, in launch order.
The clock only grows, so a running launch whose clock already passes the K-th smallest
finished (V, index) cannot be admitted any more: it is cancelled there, whatever its wall
time, and a launch below that mark always runs on. So the admitted set is a function of the
trajectories alone. With no ticks (every V = 0) this is launch order, the K lowest indices.

The other deterministic rule (`clock=False`, `rollout.admission: launch`) admits the K lowest
launch indices: every step waits for the longest of them (a 6-turn trajectory of a synthesized
task, ~700 sampled tokens, against ~50 for a family task on the tiny config) and the N - K
launched last are cancelled unused. On a CPU-bound machine that is the cheaper of the two: the
clock runs every launch up to its mark (LOG.md, 2026-12-06).

    result = oversample(tasks, run_one, admit=8, workers=2)
    result.admitted  # [(launch_index, value)] in admission order
    result.dropped   # [Dropped(index, item, progress)]

`run_one(item, cancel: CancelToken) -> value` must poll `cancel` between turns (the agent
loop does, and aborts generation in the engine) and return promptly once it is set; in
deterministic mode it advances `cancel.tick(cost)` as it goes (a run that never ticks is
admitted by launch order).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# how often the over-sampler looks at the running launches' clocks, seconds
CLOCK_POLL_S = 0.02


class CancelToken(threading.Event):
    """An Event that also runs callbacks when set (the agent loop registers an engine abort,
    so a cancelled trajectory stops mid-generation, not only between turns)."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[Callable[[], None]] = []
        self._cb_lock = threading.Lock()
        self.clock = 0.0  # virtual time this launch's run has used (see the module docstring)

    def tick(self, cost: float) -> None:
        """Advance the run's virtual clock by `cost` (>= 0) units of work it has done."""
        if cost < 0:
            raise ValueError(f"a virtual clock only moves forward, got {cost!r}")
        self.clock += cost

    def restart_clock(self) -> None:
        """The run starts again from scratch (a fleet replica was lost): from 0."""
        self.clock = 0.0

    def on_cancel(self, callback: Callable[[], None]) -> None:
        with self._cb_lock:
            self._callbacks.append(callback)
        if self.is_set():
            callback()

    def set(self) -> None:
        super().set()
        with self._cb_lock:
            callbacks = list(self._callbacks)
        for cb in callbacks:
            try:
                cb()
            except Exception:  # an abort that fails must not stop the other cancellations
                pass


@dataclass(frozen=True)
class Dropped(Generic[T]):
    index: int
    item: T
    progress: Any  # what the cancelled run returned (e.g. its partial trajectory), or None
    reason: str  # "truncated-tail" | "failed: ..."


@dataclass
class OversampleResult(Generic[T, R]):
    admitted: list[tuple[int, R]] = field(default_factory=list)
    dropped: list[Dropped[T]] = field(default_factory=list)
    launched: int = 0

    @property
    def dropped_items(self) -> list[T]:
        return [d.item for d in self.dropped]


def oversample(
    items: Sequence[T],
    run_one: Callable[[T, CancelToken], R],
    admit: int,
    workers: int = 2,
    deterministic: bool = False,
    on_done: Callable[[int, R | None], None] | None = None,
    admissible: Callable[[R], bool] | None = None,
    clock: bool = True,
) -> OversampleResult[T, R]:
    """Run `run_one` over `items` with `workers` threads; admit the first `admit` to finish.

    A run that raises is dropped with reason "failed: ..." (it never counts as admitted); a
    run whose value fails `admissible` (e.g. a FAILED trajectory) is dropped with reason
    "not admissible" and its value kept as the progress. Fewer than `admit` may be admitted
    when too many runs fail.
    Completion order decides admission unless `deterministic`, where completion on the runs'
    virtual clocks does (the module docstring), or with `clock` False launch order.
    """
    if admit <= 0 or admit > len(items):
        raise ValueError(f"admit must be in 1..{len(items)}, got {admit}")
    cancels = [CancelToken() for _ in items]
    result: OversampleResult[T, R] = OversampleResult(launched=len(items))
    finished: dict[int, R] = {}
    done_at: dict[int, float] = {}  # a finished run's virtual completion time
    failed: dict[int, str] = {}
    finished_inadmissible: dict[int, R] = {}
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="rollout") as pool:
        futures: dict[Future, int] = {
            pool.submit(_guarded, run_one, item, cancels[i]): i for i, item in enumerate(items)
        }
        pending = set(futures)
        # only running clocks can move the mark between completions
        poll = CLOCK_POLL_S if deterministic and clock else None

        def now(i: int) -> float:  # launch order: every clock reads 0, ties go by index
            return cancels[i].clock if clock else 0.0

        while pending:
            done, pending = wait(pending, timeout=poll, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: futures[f]):
                i = futures[fut]
                ok, value = fut.result()
                if ok and admissible is not None and not admissible(value):
                    failed[i] = "not admissible"
                    finished_inadmissible[i] = value
                elif ok:
                    finished[i] = value
                    done_at[i] = now(i)  # final: the run has returned
                else:
                    failed[i] = value
                if on_done:
                    on_done(i, value if ok else None)
            if deterministic:
                # Past the K-th smallest finished (V, index), a running launch is the tail.
                mark = _virtual_mark(done_at, admit)
                if mark is not None:
                    for fut in pending:
                        j = futures[fut]
                        if (now(j), j) > mark:
                            cancels[j].set()
            elif _admit(finished, admit, result):
                # Once K are admitted, the rest are the tail: cancel them (they return promptly).
                for j, ev in enumerate(cancels):
                    if j not in _admission_set(result):
                        ev.set()
    if deterministic:
        first = sorted(done_at, key=lambda i: (done_at[i], i))[:admit]
        result.admitted = [(i, finished[i]) for i in sorted(first)]
    admitted_ids = _admission_set(result)
    for i, item in enumerate(items):
        if i in admitted_ids:
            continue
        if i in finished_inadmissible:
            result.dropped.append(Dropped(i, item, finished_inadmissible[i], "not admissible"))
        elif i in failed:
            result.dropped.append(Dropped(i, item, None, f"failed: {failed[i]}"))
        else:
            result.dropped.append(Dropped(i, item, finished.get(i), "truncated-tail"))
    return result


def _guarded(fn: Callable[[T, CancelToken], R], item: T, cancel: CancelToken) -> tuple[bool, Any]:
    try:
        return True, fn(item, cancel)
    except Exception as e:  # a failed trajectory is dropped with its reason, never fatal
        return False, f"{type(e).__name__}: {e}"


def _admission_set(result: OversampleResult) -> set[int]:
    return {i for i, _ in result.admitted}


def _virtual_mark(done_at: dict[int, float], admit: int) -> tuple[float, int] | None:
    """The K-th smallest (virtual completion time, launch index) of the finished runs; None
    while fewer than K have finished."""
    if len(done_at) < admit:
        return None
    ranked = sorted((v, i) for i, v in done_at.items())
    return ranked[admit - 1]


def _admit(finished: dict, admit: int, result: OversampleResult) -> bool:
    """Move newly finished runs into `result.admitted` in completion order; True once `admit`
    are admitted."""
    taken = _admission_set(result)
    for i in finished:  # dict order = completion order
        if len(result.admitted) >= admit:
            break
        if i not in taken:
            result.admitted.append((i, finished[i]))
    return len(result.admitted) >= admit


@dataclass
class BatchPlanner:
    """Plans each step's launch list: carried-over (dropped) tasks first, then fresh ones.

    `order(epoch)` returns the epoch's task permutation (reproducible from the run seed; pools
    are materialized in rank order, so shuffling is mandatory). The state round-trips through
    `state_dict()` so a resumed campaign plans exactly the batches it would have.
    """

    order: Callable[[int], Sequence[Any]]
    launch: int
    carry_dropped: bool = True
    max_carry: int = 3  # consecutive drops after which a task is no longer carried
    epoch: int = 0
    cursor: int = 0
    carry: list[Any] = field(default_factory=list)
    # item -> how many steps in a row it was dropped (items are keys: task paths in a campaign)
    streak: dict[Any, int] = field(default_factory=dict)
    last_batch: list[Any] = field(default_factory=list)

    def next_batch(self) -> list[Any]:
        batch = self._next()
        self.last_batch = list(batch)
        return batch

    def _next(self) -> list[Any]:
        batch = list(self.carry[: self.launch])
        self.carry = self.carry[len(batch) :]
        while len(batch) < self.launch:
            perm = self.order(self.epoch)
            if not perm:
                raise ValueError("the task pool is empty")
            if self.cursor >= len(perm):
                self.epoch, self.cursor = self.epoch + 1, 0
                continue
            batch.append(perm[self.cursor])
            self.cursor += 1
        return batch

    def record_dropped(self, items: Sequence[Any]) -> list[Any]:
        """Record the last batch's dropped (or failed) items; returns those given up on.

        An item of the last batch that was not dropped ends its streak. A dropped item is
        carried to the front of the next batch unless this is its `max_carry`-th drop in a
        row: then it is given up on (streak reset) and comes again in the pool's own order."""
        dropped = set(items)
        for item in set(self.last_batch) - dropped:
            self.streak.pop(item, None)
        given_up = set()
        for item in dropped:
            self.streak[item] = self.streak.get(item, 0) + 1
            if self.streak[item] >= self.max_carry:
                given_up.add(item)
                del self.streak[item]
        if self.carry_dropped:
            self.carry = [x for x in items if x not in given_up] + self.carry
        else:
            self.streak.clear()
        return sorted(given_up, key=list(items).index)

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "cursor": self.cursor,
            "carry": list(self.carry),
            "streak": [[k, v] for k, v in self.streak.items()],
            "last_batch": list(self.last_batch),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.cursor, self.carry = state["epoch"], state["cursor"], list(state["carry"])
        self.streak = {k: int(v) for k, v in state.get("streak", [])}
        self.last_batch = list(state.get("last_batch", []))

"""TITO: stitch a trajectory's turns into training streams the sampler actually produced.

    pytest tests/tito
    t1 tito-audit DIR [--json FILE]            (t1/tito/audit.py)

    asm = assemble(traj.turns, tokenizer)       # or text_log.assemble_text_log(messages, tok)
    for seg in asm.segments:                    # usually one; a split starts a new one
        seg.ids, seg.loss_mask, seg.logprobs, seg.routing   # [T], [T], [T], int16 [T, L, k]
    asm.relations, asm.audit                    # per boundary; counters (Audit)

Modules: this one assembles (and holds the provenance checks); the segments, counters and
`TitoError` are t1/tito/segment.py, text-level logs t1/tito/text_log.py, the synthetic
trajectory and the assembly benchmark t1/tito/synthetic.py.

Invariants and relations: DESIGN §8; the relation tests live in t1/tito/relations.py. Each
turn's prompt P is matched against the stream S so far (which ends with the turn before's
sampled ids and the ids our loop appended after them): strict -> normalized -> retokenized ->
split. Then the turn's sampled ids are appended as the loss region (logprobs kept, 0 elsewhere)
and its appended ids as context.

Routing. A turn's capture holds rows for positions [routing_start, routing_start + rows) of
the engine's sequence X = P + sampled (t1.engine.base). A stream position takes the row of the
first capture whose position maps onto it: identically where the stream equals X (strict,
normalized, split, and the common prefix in every case); after a retokenized boundary, the
appended P[c':] + sampled map onto X[c':], and the common suffix of S and P[:c'] (e.g. the
`<|im_end|>` that closed the turn) onto its counterpart in P[:c']; a segment started by a split
takes the earlier segment's rows for the prefix they share. Positions nothing maps onto
hold -1 ("placeholder: use live routing"). Every loss position must have a row, except the last
position of a segment (no prediction in the segment depends on its routing; engines never
capture it): a missing one raises TitoError, which the rollout turns into status ABORTED.

Hard checks, raised as TitoError: lengths that disagree (ids, logprobs, routing rows), turns
that disagree on having a capture, a missing capture at a loss position, and the provenance
check run on every finished segment: every position's id equals the id at its recorded source
(a turn's prompt, sampled or appended ids), prompt ids come only from P[keep:] where keep is
what the relation decided (never from a retokenized prefix P[:c'], invariant 3), and loss
positions are exactly the sampled ones (drift 0, invariant 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from t1.agent.trajectory import Status, Trajectory, TrajectoryError, Turn
from t1.tito import relations as R
from t1.tito import segment as tito_segment
from t1.tito.segment import PROMPT, SAMPLED, Assembly, Audit, Segment, TitoError

DEFAULT_BACK, DEFAULT_AHEAD = 96, 16


class _Stream:
    """A growable segment under construction, with per-position provenance runs."""

    def __init__(self, route_shape: tuple[int, int] | None, cap: int = 4096) -> None:
        self.n = 0
        self.ids = np.zeros(cap, np.int32)
        self.mask = np.zeros(cap, bool)
        self.logp = np.zeros(cap, np.float32)
        self.filled = np.zeros(cap, bool)
        # Rows are valid only where `filled`; `routing_out` writes -1 everywhere else.
        self.routing = None if route_shape is None else np.empty((cap, *route_shape), np.int16)
        self.runs: list[tuple[int, int, int, int, int]] = []  # kind, turn, src, dst, length

    def _reserve(self, extra: int) -> None:
        cap = len(self.ids)
        if self.n + extra <= cap:
            return
        new = max(2 * cap, self.n + extra)
        for name, fill in (("ids", 0), ("mask", False), ("logp", 0.0), ("filled", False)):
            arr = getattr(self, name)
            grown = np.full(new, fill, arr.dtype)
            grown[: self.n] = arr[: self.n]
            setattr(self, name, grown)
        if self.routing is not None:
            grown = np.empty((new, *self.routing.shape[1:]), np.int16)
            grown[: self.n] = self.routing[: self.n]
            self.routing = grown

    def view(self) -> np.ndarray:
        return self.ids[: self.n]

    def append(
        self, ids: np.ndarray, kind: int, turn: int, src: int, logp: np.ndarray | None = None
    ) -> None:
        m = len(ids)
        if m == 0:
            return
        self._reserve(m)
        a, b = self.n, self.n + m
        self.ids[a:b] = ids
        self.mask[a:b] = kind == SAMPLED
        self.logp[a:b] = 0.0 if logp is None else logp
        self.runs.append((kind, turn, src, a, m))
        self.n = b

    def truncate(self, n: int) -> None:
        self.mask[n : self.n] = False
        self.logp[n : self.n] = 0.0
        self.filled[n : self.n] = False
        while self.runs and self.runs[-1][3] >= n:
            self.runs.pop()
        if self.runs:
            kind, turn, src, dst, m = self.runs[-1]
            self.runs[-1] = (kind, turn, src, dst, min(m, n - dst))
        self.n = n

    def fill(self, dst: int, src: int, length: int, rows: np.ndarray | None, start: int) -> None:
        """Copy capture rows for X[src:src+length] (capture starts at `start`) to dst.., if unset."""
        if rows is None or self.routing is None:
            return
        lo, hi = max(src, start), min(src + length, start + len(rows))
        if lo >= hi:
            return
        d = slice(dst + lo - src, dst + hi - src)
        new = ~self.filled[d]
        if new.all():  # the usual case: a prefix-cache engine captures only new positions
            self.routing[d] = rows[lo - start : hi - start]
        else:
            self.routing[d][new] = rows[lo - start : hi - start][new]
        self.filled[d] = True

    def inherit(self, other: _Stream, n: int) -> None:
        """Take `other`'s routing rows for positions < n (same ids, same prefix)."""
        if self.routing is None or n <= 0:
            return
        self.routing[:n] = other.routing[:n]
        self.filled[:n] = other.filled[:n]

    def routing_out(self) -> np.ndarray | None:
        """int16 [n, L, k] with -1 at every position no capture mapped onto."""
        if self.routing is None:
            return None
        out = self.routing[: self.n].copy()
        out[~self.filled[: self.n]] = -1
        return out


def _route_shape(turns: Sequence[Turn]) -> tuple[int, int] | None:
    have = [t.routing is not None for t in turns]
    if not any(have):
        return None
    if not all(have):
        i = have.index(False)
        raise TitoError(f"turn {i} has no routing capture while other turns have one")
    shape = tuple(turns[0].routing.shape[1:])
    for i, t in enumerate(turns):
        if tuple(t.routing.shape[1:]) != shape:
            raise TitoError(
                f"turn {i}: routing rows are {tuple(t.routing.shape[1:])}, turn 0's are {shape}"
            )
    return shape


def _special_lookup(tokenizer) -> np.ndarray:
    ids = [i for i in tokenizer.all_special_ids if i is not None]
    ids += [tokenizer.convert_tokens_to_ids(t) for t in tokenizer.get_added_vocab()]
    table = np.zeros(max(len(tokenizer), max(ids) + 1), bool)
    table[ids] = True
    return table


_SPECIAL_CACHE: dict[int, tuple[Any, np.ndarray]] = {}


class _Decoder:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        cached = _SPECIAL_CACHE.get(id(tokenizer))
        if cached is None or cached[0] is not tokenizer:
            cached = _SPECIAL_CACHE[id(tokenizer)] = (tokenizer, _special_lookup(tokenizer))
        self.special = cached[1]

    def __call__(self, ids: np.ndarray) -> str:
        return self.tokenizer.decode(
            ids.tolist(), skip_special_tokens=False, clean_up_tokenization_spaces=False
        )


def assemble(
    turns: Sequence[Turn],
    tokenizer=None,
    back: int = DEFAULT_BACK,
    ahead: int = DEFAULT_AHEAD,
) -> Assembly:
    """Assemble one trajectory's turns (DESIGN §8). Without a tokenizer, retokenized is skipped."""
    for i, t in enumerate(turns):
        try:
            t.check(f"turn {i}")
        except TrajectoryError as e:
            raise TitoError(str(e)) from None
    shape = _route_shape(turns)
    decoder = None
    audit = Audit(trajectories=1, turns=len(turns))
    relations: list[str] = []
    keep = np.zeros(len(turns), np.int64)  # each turn's prompt is copied from P[keep:]
    segments: list[Segment] = []
    split_turns: list[int] = []  # turns whose prompt starts a segment
    cap = max(
        (len(t.prompt_ids) + len(t.sampled_ids) + len(t.appended_ids) for t in turns), default=0
    )
    stream = _Stream(shape, cap + 1024)
    for t, turn in enumerate(turns):
        P, G = turn.prompt_ids, turn.sampled_ids
        S = stream.view()
        rows = turn.routing
        start = turn.routing_start
        rel, c = "strict", len(S)
        if t > 0 and not R.is_strict(S, P):
            c = R.common_prefix(S, P)
            if R.is_normalized(S, stream.mask[: stream.n], P, c, back, ahead):
                rel = "normalized"
            elif (
                tokenizer is not None
                and (
                    cut := R.retokenized_cut(
                        S, P, c, decoder := decoder or _Decoder(tokenizer), decoder.special
                    )
                )
                is not None
            ):
                rel = "retokenized"
            else:
                rel = "split"
        if t > 0:
            relations.append(rel)
            audit.relations[rel] += 1
        L = stream.n
        if rel == "strict":
            keep[t] = L
            stream.append(P[L:], PROMPT, t, L)
        elif rel == "normalized":
            keep[t] = c
            stream.truncate(c)
            stream.append(P[c:], PROMPT, t, c)
        elif rel == "retokenized":
            keep[t], c = cut, min(c, cut)
            stream.append(P[cut:], PROMPT, t, cut)
        else:
            old, stream = stream, _Stream(shape, cap + 1024)
            split_turns.append(t)
            keep[t] = 0
            stream.append(P, PROMPT, t, 0)
            stream.inherit(old, c)  # the common prefix has the same context in both segments
            _close(old, segments, turns, keep, split_turns)
        if rel == "retokenized":  # the stream before G is S + P[cut:], P is P[:cut] + P[cut:]
            audit.context_drift[rel] += len(G)
        stream.append(G, SAMPLED, t, 0, turn.logprobs)
        n_x = len(P) + len(G)
        if rel == "retokenized":
            stream.fill(0, 0, c, rows, start)
            s = R.common_suffix(S[c:L], P[c:cut])
            stream.fill(L - s, cut - s, s, rows, start)
            stream.fill(L, cut, n_x - cut, rows, start)
        else:
            stream.fill(0, 0, n_x, rows, start)
        stream.append(turn.appended_ids, tito_segment.APPENDED, t, 0)
    _close(stream, segments, turns, keep, split_turns)
    audit.segments = len(segments)
    tito_segment.audit_outputs(segments, turns, audit)
    if audit.drift_tokens or audit.placeholder_in_loss:
        raise TitoError(
            f"{audit.drift_tokens} drifted loss tokens, {audit.placeholder_in_loss} loss positions "
            "with placeholders (both must be 0)"
        )
    return Assembly(segments=segments, relations=relations, audit=audit)


def _close(
    stream: _Stream,
    segments: list[Segment],
    turns: Sequence[Turn],
    keep: np.ndarray,
    split_turns: list[int],
) -> None:
    """Trim trailing context, run the hard checks, and emit the segment (if it has a loss)."""
    loss = np.flatnonzero(stream.mask[: stream.n])
    if loss.size == 0:
        return
    stream.truncate(int(loss[-1]) + 1)
    T = stream.n
    ids, mask = stream.ids[:T].copy(), stream.mask[:T].copy()
    _check_provenance(stream, turns, keep, split_turns)
    routing = stream.routing_out()
    if routing is not None:
        filled = stream.filled[:T]
        missing = mask & ~filled
        missing[T - 1] = False
        if missing.any():
            j = int(np.flatnonzero(missing)[0])
            kind, turn, src, dst, _ = next(r for r in stream.runs if r[3] <= j < r[3] + r[4])
            raise TitoError(
                f"turn {turn}: no routing capture for sampled token {src + j - dst} "
                f"(stream position {j}; {int(missing.sum())} loss positions without routing)"
            )
    segments.append(
        Segment(ids=ids, loss_mask=mask, logprobs=stream.logp[:T].copy(), routing=routing)
    )


def _check_provenance(
    stream: _Stream, turns: Sequence[Turn], keep: np.ndarray, split_turns: list[int]
) -> None:
    """Invariants 1, 3, 5 on a finished segment, from its provenance runs alone."""
    ids, mask, T = stream.ids, stream.mask, stream.n
    at = 0
    for kind, turn, src, dst, m in stream.runs:
        if dst != at:
            raise TitoError(f"turn {turn}: provenance runs do not tile the stream at {at}")
        at += m
        source = (turns[turn].prompt_ids, turns[turn].sampled_ids, turns[turn].appended_ids)[kind]
        if src + m > len(source):
            raise TitoError(f"turn {turn}: stream copies ids beyond its source")
        same = ids[dst : dst + m] == source[src : src + m]
        if kind == SAMPLED:
            if not (same.all() and mask[dst : dst + m].all()):
                raise TitoError(
                    f"turn {turn}: sampled ids were changed on their way into the stream"
                )
            continue
        if mask[dst : dst + m].any():
            raise TitoError(f"turn {turn}: a context position is in the loss region")
        if not same.all():
            raise TitoError(f"turn {turn}: stream ids differ from the ids the engine consumed")
        if kind == PROMPT and src < keep[turn]:
            raise TitoError(
                f"turn {turn}: prompt ids {src}..{src + m} entered the stream, but only P[{keep[turn]}:] "
                "may (a retokenized copy must never enter the stream)"
            )
    if at != T:
        raise TitoError(f"provenance runs cover {at} of {T} positions")
    first = stream.runs[0]
    if first[1] in split_turns and (first[0], first[2], first[4]) != (
        PROMPT,
        0,
        len(turns[first[1]].prompt_ids),
    ):
        raise TitoError(
            f"turn {first[1]}: a split segment must start with the whole prompt as context"
        )


def assemble_trajectory(
    traj: Trajectory, tokenizer=None, back: int = DEFAULT_BACK, ahead: int = DEFAULT_AHEAD
) -> Assembly:
    """`assemble` on a Trajectory; errors carry its task id."""
    try:
        return assemble(traj.turns, tokenizer, back, ahead)
    except TitoError as e:
        raise TitoError(f"{traj.task_id}: {e}") from None


def assemble_or_abort(
    traj: Trajectory, tokenizer=None, back: int = DEFAULT_BACK, ahead: int = DEFAULT_AHEAD
) -> Assembly | None:
    """Assemble, or mark `traj` ABORTED with the TITO error as its reason and return None."""
    try:
        return assemble(traj.turns, tokenizer, back, ahead)
    except TitoError as e:
        traj.status, traj.reason, traj.reward = Status.ABORTED, f"tito: {e}", None
        return None

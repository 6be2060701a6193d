"""A training batch: TITO segments collated into right-padded [B, T] tensors.

    from t1.train.batch import Batch, collate
    batch = collate(rows, pad_id=0)        # rows: list of Row (one TITO segment each)
    mb = batch.select([0, 2])              # a minibatch of rows
    for idx in length_groups(batch.lengths.tolist(), overhead=256):
        part = batch.select(idx)           # rows of like length, trimmed to their longest

Layout (every [B, T] tensor is indexed by stream position):
  input_ids     long  [B, T]   the segment's ids, right-padded with pad_id
  loss_mask     bool  [B, T]   True where the sampler emitted the token (the loss region)
  rollout_logp  float [B, T]   the engine's logprob of each sampled token (0 elsewhere)
  routing       int16 [B, T, L, k] | None   expert ids each position was routed to in the
                               rollout, -1 = placeholder (live routing); padding is -1
  reward        float [B]      the trajectory's scalar reward (lands on the last loss token)
  lengths       long  [B]      real tokens per row
  meta          list[dict]     per row: task_id, category, status, resolved, ...

Right padding needs no attention mask: under causal attention no real token attends to a pad.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


@dataclass
class Row:
    """One TITO segment with its trajectory's reward: the unit `collate` consumes."""

    ids: Sequence[int]
    loss_mask: Sequence[bool] | Sequence[int]
    logprobs: Sequence[float] | None = None  # [T], 0 at context positions
    routing: Any = None  # int [T, L, k] (numpy / torch), -1 = placeholder; None = no record
    reward: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Batch:
    input_ids: torch.Tensor
    loss_mask: torch.Tensor
    rollout_logp: torch.Tensor
    routing: torch.Tensor | None
    reward: torch.Tensor
    lengths: torch.Tensor
    meta: list[dict[str, Any]]

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def tokens(self) -> int:
        """Real (non-pad) tokens in the batch."""
        return int(self.lengths.sum())

    @property
    def loss_tokens(self) -> int:
        return int(self.loss_mask.sum())

    def to(self, device: torch.device | str) -> Batch:
        """The same batch with its tensors on `device` (itself when already there)."""
        if self.input_ids.device == torch.device(device):
            return self
        move = lambda x: None if x is None else x.to(device)  # noqa: E731
        return Batch(
            move(self.input_ids), move(self.loss_mask), move(self.rollout_logp),
            move(self.routing), move(self.reward), move(self.lengths), self.meta,
        )  # fmt: skip

    def select(self, rows: Sequence[int] | torch.Tensor) -> Batch:
        """The given rows, trimmed to their longest real length."""
        idx = torch.as_tensor(rows, dtype=torch.long, device=self.input_ids.device)
        t = int(self.lengths[idx].max()) if len(idx) else 0
        return Batch(
            input_ids=self.input_ids[idx, :t],
            loss_mask=self.loss_mask[idx, :t],
            rollout_logp=self.rollout_logp[idx, :t],
            routing=None if self.routing is None else self.routing[idx, :t],
            reward=self.reward[idx],
            lengths=self.lengths[idx],
            meta=[self.meta[i] for i in idx.tolist()],
        )


def length_groups(lengths: Sequence[int], overhead: int, max_rows: int = 0) -> list[list[int]]:
    """Row indices in groups of like length, so that each group runs trimmed to its longest row
    and a short row does not pay for a long one's padding. The rows are sorted by length (ties
    by index) and cut into runs that minimize the padded tokens of all groups plus `overhead`
    tokens per group (what one more forward and backward costs beyond its tokens); `max_rows` >
    0 caps a group's rows. Each group lists its rows in ascending index order; the groups come
    shortest first. Depends on the lengths only, so a resumed run groups as the first did."""
    n = len(lengths)
    if n == 0:
        return []
    order = sorted(range(n), key=lambda i: (int(lengths[i]), i))
    sizes = [int(lengths[i]) for i in order]
    cap = max_rows if max_rows > 0 else n
    best, cut = [0] + [None] * n, [0] * (n + 1)
    for j in range(1, n + 1):  # best[j]: the cheapest split of the j shortest rows
        for i in range(max(0, j - cap), j):
            cost = best[i] + (j - i) * sizes[j - 1] + overhead
            if best[j] is None or cost < best[j]:
                best[j], cut[j] = cost, i
    groups, j = [], n
    while j > 0:
        groups.append(sorted(order[cut[j] : j]))
        j = cut[j]
    return groups[::-1]


def collate(rows: Sequence[Row], pad_id: int = 0) -> Batch:
    """Right-pad rows into a Batch. Routing is kept if any row has a record (rows without one
    get placeholders); every record must be [len(ids), L, k] with the same (L, k)."""
    if not rows:
        raise ValueError("collate: no rows")
    b, t = len(rows), max(len(r.ids) for r in rows)
    ids = torch.full((b, t), pad_id, dtype=torch.long)
    mask = torch.zeros(b, t, dtype=torch.bool)
    logp = torch.zeros(b, t, dtype=torch.float32)
    lengths = torch.tensor([len(r.ids) for r in rows], dtype=torch.long)
    shapes = {tuple(_as_tensor(r.routing).shape[1:]) for r in rows if r.routing is not None}
    if len(shapes) > 1:
        raise ValueError(f"collate: routing records disagree on [layers, k]: {sorted(shapes)}")
    routing = torch.full((b, t, *shapes.pop()), -1, dtype=torch.int16) if shapes else None
    for i, r in enumerate(rows):
        n = len(r.ids)
        if len(r.loss_mask) != n:
            raise ValueError(
                f"collate: row {i}: loss_mask has {len(r.loss_mask)} entries for {n} ids"
            )
        ids[i, :n] = _as_tensor(r.ids).to(torch.long)
        mask[i, :n] = _as_tensor(r.loss_mask).to(torch.bool)
        if r.logprobs is not None:
            if len(r.logprobs) != n:
                raise ValueError(f"collate: row {i}: {len(r.logprobs)} logprobs for {n} ids")
            logp[i, :n] = _as_tensor(r.logprobs).to(torch.float32)
        if r.routing is not None:
            rt = _as_tensor(r.routing)
            if rt.shape[0] != n:
                raise ValueError(
                    f"collate: row {i}: routing has {rt.shape[0]} positions for {n} ids"
                )
            routing[i, :n] = rt.to(torch.int16)
    reward = torch.tensor([float(r.reward) for r in rows], dtype=torch.float32)
    return Batch(ids, mask, logp, routing, reward, lengths, [dict(r.meta) for r in rows])


def _as_tensor(x: Any) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))

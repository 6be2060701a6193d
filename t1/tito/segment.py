"""What an assembly produces: training segments, the boundary relations and the audit counters.

    seg.ids, seg.loss_mask, seg.logprobs, seg.routing   # [T], [T], [T], int16 [T, L, k]
    asm.relations, asm.audit                            # per boundary; counters (Audit)

`Segment` (one training stream), `Assembly` (what `t1.tito.stream.assemble` returns), `Audit`
(counters, summed over trajectories by `t1 tito-audit`), `audit_outputs` (drift and
placeholders counted from finished segments and the turns alone), `TitoError`, and the
position kinds of a stream's provenance (PROMPT, SAMPLED, APPENDED).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from t1.agent.trajectory import Turn

RELATIONS = ("strict", "normalized", "retokenized", "split")
PROMPT, SAMPLED, APPENDED = 0, 1, 2


class TitoError(ValueError):
    """The turns cannot be assembled without dropping or padding; the rollout is ABORTED."""


@dataclass
class Segment:
    """One training stream.

    ids        int32 [T]
    loss_mask  bool [T]          True exactly at ids the sampler emitted
    logprobs   float32 [T]       the sampler's logprob at loss positions, 0 elsewhere
    routing    int16 [T, L, k] | None   expert ids, -1 = placeholder; None = no capture at all
    """

    ids: np.ndarray
    loss_mask: np.ndarray
    logprobs: np.ndarray
    routing: np.ndarray | None

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class Audit:
    """Counters of one or more assemblies (add with `merge`)."""

    trajectories: int = 0
    turns: int = 0
    segments: int = 0
    relations: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RELATIONS, 0))
    context_drift: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RELATIONS, 0))
    positions: int = 0
    loss_tokens: int = 0
    drift_tokens: int = 0
    placeholders: int = 0
    placeholder_in_loss: int = 0  # loss positions with -1, the final one of a segment excepted
    final_placeholders: int = 0  # final positions of segments that hold -1

    def merge(self, other: Audit) -> None:
        for name in ("trajectories", "turns", "segments", "positions", "loss_tokens"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("drift_tokens", "placeholders", "placeholder_in_loss", "final_placeholders"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for r in RELATIONS:
            self.relations[r] += other.relations[r]
            self.context_drift[r] += other.context_drift[r]

    def to_dict(self) -> dict[str, Any]:
        """The `t1 tito-audit --json` keys."""
        return {
            "trajectories": self.trajectories,
            "loss_tokens": self.loss_tokens,
            "drift_tokens": self.drift_tokens,
            "drift_rate": self.drift_tokens / self.loss_tokens if self.loss_tokens else 0.0,
            "placeholder_rate": self.placeholders / self.positions if self.positions else 0.0,
            "placeholder_in_loss": self.placeholder_in_loss,
            "relations": dict(self.relations),
        }


@dataclass
class Assembly:
    segments: list[Segment]
    relations: list[str]  # one per boundary: turns 1..n-1
    audit: Audit


def audit_outputs(segments: Sequence[Segment], turns: Sequence[Turn], audit: Audit) -> None:
    """Count drift and placeholders from the finished segments and the turns alone.

    Each turn's sampled ids land, in order, in exactly one segment's loss region, so the loss
    ids of all segments concatenated must equal the ids the ENGINE returned for all turns
    concatenated (`Turn.engine_ids`, kept apart from `sampled_ids` in the record; turns
    without them fall back to `sampled_ids`, which makes the check weaker: a stream built
    from re-tokenized `sampled_ids` would then agree with itself). The logprobs are compared
    likewise; a mismatch or a length difference counts as drift.
    """
    empty = np.zeros(0, np.int32)
    loss_ids = np.concatenate([s.ids[s.loss_mask] for s in segments] or [empty])
    loss_lp = np.concatenate(
        [s.logprobs[s.loss_mask] for s in segments] or [empty.astype(np.float32)]
    )
    sampled = np.concatenate(
        [t.sampled_ids if t.engine_ids is None else t.engine_ids for t in turns] or [empty]
    )
    logprobs = np.concatenate([t.logprobs for t in turns] or [empty.astype(np.float32)])
    n = min(len(loss_ids), len(sampled))
    audit.drift_tokens += int((loss_ids[:n] != sampled[:n]).sum()) + abs(
        len(loss_ids) - len(sampled)
    )
    audit.loss_tokens += int(len(loss_ids))
    if len(loss_lp) == len(logprobs) and not np.array_equal(loss_lp, logprobs):
        audit.drift_tokens += int((loss_lp != logprobs).sum())
    for s in segments:
        audit.positions += len(s)
        if s.routing is None:
            continue
        hole = s.routing[:, 0, 0] < 0  # rows are written whole: a placeholder is -1 in every slot
        audit.placeholders += int(hole.sum())
        audit.final_placeholders += int(hole[-1])
        audit.placeholder_in_loss += int((hole[:-1] & s.loss_mask[:-1]).sum())

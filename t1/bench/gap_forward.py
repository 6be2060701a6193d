"""The trainer side of `t1 bench gap`: one fp32 full-sequence forward that scores a token stream
(optionally replaying a routing record) and reports the routing it saw, and the
train-inference gap of a stream and its token-weighted pooling over many.

    from t1.bench.gap_forward import forward_logp
    logp, live, used = forward_logp(policy, ids, routing)   # routing None: live routing
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from t1.model import routing as rt
from t1.ppo.metrics import train_inference_gap


def forward_logp(
    policy: torch.nn.Module, ids: Sequence[int], routing: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One full-sequence forward: (logp [T] of each id given the ids before it, 0 at t = 0;
    the gates' live top-k before any replay [T, L, k]; the expert ids the experts modules
    were called with [T, L, k]). `routing` int [T, L, k] (-1 = live) replays."""
    from t1.train.hf import token_logp

    x = torch.tensor([list(ids)], dtype=torch.long)
    with (
        torch.no_grad(),
        rt.RoutingCapture(policy, stage="live") as live,
        rt.RoutingCapture(policy, stage="used") as used,
    ):
        if routing is None:
            logits = policy(input_ids=x, use_cache=False).logits
        else:
            r = torch.as_tensor(np.asarray(routing), dtype=torch.int16)[None]
            with rt.replay(policy, r):
                logits = policy(input_ids=x, use_cache=False).logits
    return token_logp(logits, x)[0].numpy(), live.collect().numpy(), used.collect().numpy()


def _gap(logp_train: np.ndarray, logp_rollout: np.ndarray, mask: np.ndarray) -> tuple[float, int]:
    """(train_inference_gap, loss tokens) of one stream; arrays [T]."""
    n = int(np.asarray(mask, bool).sum())
    if n == 0:
        return math.nan, 0
    g = train_inference_gap(
        torch.as_tensor(logp_train)[None],
        torch.as_tensor(logp_rollout, dtype=torch.float64)[None],
        torch.as_tensor(np.asarray(mask, bool))[None],
    )
    return g, n


class _Pool:
    """Token-weighted pooling of per-stream gaps (= one mask-weighted mean over all streams)."""

    def __init__(self) -> None:
        self.sum, self.n, self.max = 0.0, 0, 0.0

    def add(self, gap: float, n: int, mx: float = 0.0) -> None:
        if n:
            self.sum += gap * n
            self.n += n
            self.max = max(self.max, mx)

    @property
    def mean(self) -> float:
        return self.sum / self.n if self.n else math.nan

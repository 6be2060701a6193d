"""The Engine seam: token ids in, sampled ids + logprobs + routing out (DESIGN §3).

    pytest tests/engine

Two implementations: `LocalEngine` (t1/engine/local.py, a tiny HF MoE in process) and
`SGLangEngine` (t1/engine/sglang.py, an HTTP client of SGLang's native `/generate`, which
`t1 serve` also speaks). Text never round-trips: prompts and outputs are token ids.

Conventions every engine honours
--------------------------------
* `output_ids` include the stop token that ended the turn (e.g. `<|im_end|>`): it was sampled,
  so it belongs to the loss region.
* `output_logprobs[i]` is log p(output_ids[i]) under log-softmax(logits / temperature), the
  distribution the token was drawn from before top-p truncation: SGLang's default
  `output_token_logprobs`. At temperature 0 (greedy) it is the temperature-1 log-softmax.
  (SGLang with `SGLANG_RETURN_ORIGINAL_LOGPROB=1` reports temperature-1 values instead; at
  the recipe's temperature 1 the two agree.)
* `routing` holds one row per position the model processed, from `routing_start` to
  `len(input_ids) + len(output_ids) - 1` exclusive: the prompt and every generated token but
  the last, which is never fed back (SGLang's `seq_len - 1 - routed_experts_start_len`).
  Rows are a compact record `[rows, layers, k]` (t1.model.routing). In a multi-turn session, pass
  `routing_start` = the length of the previous turn's prompt + output - 1 to receive only the
  new rows; `routing_start` must lie in `[0, len(input_ids)]`.
* `finish_reason` is "stop" (a stop id was sampled), "length" (max_new_tokens or the context
  limit) or "abort" (cancelled; outputs so far are returned).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

FINISH_REASONS = ("stop", "length", "abort")


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one request. temperature 0 = greedy; seed None = not reproducible."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")


@dataclass
class GenerateRequest:
    """One turn: the full prompt ids (the whole trajectory so far), not a suffix."""

    input_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    session_id: str | None = None  # turns of one trajectory share it (prefix cache key)
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # for abort()
    routing_start: int = 0  # first position whose routing row is returned
    return_routing: bool = True

    def __post_init__(self) -> None:
        if not self.input_ids:
            raise ValueError("input_ids must not be empty")
        if not 0 <= self.routing_start <= len(self.input_ids):
            raise ValueError(
                f"routing_start {self.routing_start} outside [0, {len(self.input_ids)}] (prompt length)"
            )


@dataclass
class GenerateResult:
    request_id: str
    output_ids: list[int]
    output_logprobs: list[float]
    finish_reason: str  # stop | length | abort
    routing: np.ndarray | None  # compact [len(input)+len(output)-1-routing_start, layers, k]
    routing_start: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt positions served from the prefix cache

    def check(self, layers: int | None = None, k: int | None = None) -> None:
        """Raise ValueError if lengths disagree (a missing capture must never pass silently)."""
        if len(self.output_ids) != len(self.output_logprobs):
            raise ValueError(
                f"request {self.request_id}: {len(self.output_ids)} output ids but "
                f"{len(self.output_logprobs)} logprobs"
            )
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"request {self.request_id}: finish_reason {self.finish_reason!r}")
        if self.routing is None:
            return
        rows = self.prompt_tokens + len(self.output_ids) - 1 - self.routing_start
        if self.routing.ndim != 3 or self.routing.shape[0] != max(rows, 0):
            raise ValueError(
                f"request {self.request_id}: routing has shape {self.routing.shape}, expected "
                f"{rows} rows (prompt {self.prompt_tokens} + output {len(self.output_ids)} - 1 "
                f"- start {self.routing_start})"
            )
        if (layers, k) != (None, None) and self.routing.shape[1:] != (layers, k):
            raise ValueError(
                f"request {self.request_id}: routing rows are {self.routing.shape[1:]}, "
                f"model has (layers, k) = ({layers}, {k})"
            )


@runtime_checkable
class Engine(Protocol):
    """Samples continuations of token-id prompts, with logprobs and routing."""

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        """Sample every request (batched where the backend can); results in request order."""
        ...

    def abort(self, request_id: str) -> None:
        """Cancel a running or upcoming request; its result comes back with finish "abort"."""
        ...

    def close_session(self, session_id: str) -> None:
        """Forget a session's cached prefix (the trajectory ended or was dropped)."""
        ...

    def update_weights(self, path: str) -> None:
        """Load new policy weights from a directory written by `save_policy`; caches flushed."""
        ...

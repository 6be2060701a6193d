"""TITO (token-in, token-out): a trajectory's turns stitched into the streams the sampler produced.

    pytest tests/tito
    t1 tito-audit DIR [--json FILE]

* `t1/tito/relations.py` — the turn-boundary relations (strict, normalized, retokenized, split)
  as pure functions on id arrays (DESIGN §8).
* `t1/tito/stream.py`    — assembly: turns -> segments (ids, loss mask, logprobs, routing rows)
  with the provenance and drift checks; `assemble_or_abort` for the rollout.
* `t1/tito/audit.py`     — `t1 tito-audit`, the CLI that counts relations, drift and placeholders
  over a rollout directory.

The names a caller needs are re-exported here (`from t1.tito import assemble`).
"""

from t1.tito.stream import (
    APPENDED,
    DEFAULT_AHEAD,
    DEFAULT_BACK,
    PROMPT,
    RELATIONS,
    SAMPLED,
    Assembly,
    Audit,
    Segment,
    TitoError,
    assemble,
    assemble_or_abort,
    assemble_text_log,
    assemble_trajectory,
    audit_outputs,
    bench_assembly,
    synthetic_turns,
    turns_from_text_log,
)

__all__ = [
    "APPENDED",
    "DEFAULT_AHEAD",
    "DEFAULT_BACK",
    "PROMPT",
    "RELATIONS",
    "SAMPLED",
    "Assembly",
    "Audit",
    "Segment",
    "TitoError",
    "assemble",
    "assemble_or_abort",
    "assemble_text_log",
    "assemble_trajectory",
    "audit_outputs",
    "bench_assembly",
    "synthetic_turns",
    "turns_from_text_log",
]

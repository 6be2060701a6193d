"""TITO (token-in, token-out): a trajectory's turns stitched into the streams the sampler produced.

    pytest tests/tito
    t1 tito-audit DIR [--json FILE]

* `t1/tito/relations.py` — the turn-boundary relations (strict, normalized, retokenized, split)
  as pure functions on id arrays (DESIGN §8).
* `t1/tito/segment.py`   — the records: Segment, Audit, Assembly, TitoError, the token origins.
* `t1/tito/stream.py`    — assembly: turns -> segments (ids, loss mask, logprobs, routing rows)
  with the provenance and drift checks; `assemble_or_abort` for the rollout.
* `t1/tito/text_log.py`  — assembly of a text-only log (the retokenized baseline).
* `t1/tito/synthetic.py` — synthetic turns for the benches.
* `t1/tito/audit.py`     — `t1 tito-audit`, the CLI that counts relations, drift and placeholders
  over a rollout directory.

The names a caller needs are re-exported here (`from t1.tito import assemble`).

Pipeline stage 9 of 17 (the order: t1/__init__.py). May import: the shared root modules and
store, supervise, sandbox, tasks, verify, model, engine, agent.
"""

from t1.tito.segment import (
    APPENDED,
    PROMPT,
    RELATIONS,
    SAMPLED,
    Assembly,
    Audit,
    Segment,
    TitoError,
    audit_outputs,
)
from t1.tito.stream import (
    DEFAULT_AHEAD,
    DEFAULT_BACK,
    assemble,
    assemble_or_abort,
    assemble_trajectory,
)
from t1.tito.synthetic import bench_assembly, synthetic_turns
from t1.tito.text_log import assemble_text_log, turns_from_text_log

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

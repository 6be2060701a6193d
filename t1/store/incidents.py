"""Incident log: one JSON object per line for everything that went wrong and was handled.

    from t1.store.incidents import IncidentLog
    log = IncidentLog("results/tiny/ppo/incidents.jsonl")
    log.write("child_hung", child="trainer", silent_s=61.2, action="restart")

Checkpoints that are partial or corrupt (t1.store.ckpt), children that hung or died and were
restarted, signals that asked a segment to stop (t1.supervise) all land here. Each line has
`schema_version`, `time` (Unix seconds), `kind`, `attempt` (the campaign invocation that saw
it: $T1_LOG_ATTEMPT, which the workflow sets, as in the `logs/<rule>/attempt-N.log` names; 1
outside it), `status` ("handled" unless given) and the fields given; each is written with one `write()` on an O_APPEND descriptor, so concurrent
writers never interleave inside a line. `read_incidents(path)` skips a torn last line.
`t1 report` lists them.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from t1.records import append_json_line

SCHEMA_VERSION = 1


ATTEMPT_ENV = "T1_LOG_ATTEMPT"


def current_attempt() -> int:
    """This campaign invocation's attempt number ($T1_LOG_ATTEMPT; 1 when unset or bad)."""
    try:
        return max(1, int(os.environ.get(ATTEMPT_ENV, "1")))
    except ValueError:
        return 1


class IncidentLog:
    """Append-only JSON-lines log; `path=None` logs nowhere (callers need no `if`)."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()

    def write(self, kind: str, **fields: Any) -> dict[str, Any]:
        record = {"schema_version": SCHEMA_VERSION, "time": time.time(), "kind": kind}
        record["attempt"] = current_attempt()
        record["status"] = fields.pop("status", "handled")
        record.update(fields)
        if self.path is None:
            return record
        with self._lock:
            append_json_line(self.path, record)
        return record


def read_incidents(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All complete records of an incident log (missing file: none; torn last line skipped)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out

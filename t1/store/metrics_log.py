"""Structured run events: one JSON object per line (and TensorBoard scalars when available).

    from t1.store.metrics_log import MetricsLog
    with MetricsLog("results/tiny/train", tensorboard=True) as log:
        log.write("ppo_step", step=3, gap=0.013, gap_ema=0.015, explained_variance=0.7)

Every line carries `schema_version`, `event`, `step`, `time` (Unix seconds) and the fields
given. Nested dicts (e.g. `resolved_by_category`) stay nested in JSON and become
`name/key` scalars in TensorBoard. nan and inf are written as null (JSON has no nan). Each line
is written with one O_APPEND write (t1.records.append_json_line), so a crash loses at most the line being written; a reader skips
a torn last line (`read_events`). TensorBoard needs the `tensorboard` package; without it
the log says so once and writes JSON only. `t1 report` turns these files into tables/plots.

Exactly once: every line also carries `attempt`, one more than the highest attempt already in
the file (1 for a new file), so a stage resumed after a crash, which redoes the steps since its
last checkpoint, writes them again under a new attempt. Readers keep one record per (event,
step) - the last attempt's - with `last_attempt(events)`; it marks records whose step was
written by more than one attempt with `redone` (the number of earlier writes).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from t1.records import append_json_line

SCHEMA_VERSION = 1
FILENAME = "metrics.jsonl"


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # 0-d tensors / numpy scalars
        return _clean(value.item())
    return value


def _scalars(prefix: str, value: Any) -> list[tuple[str, float]]:
    if isinstance(value, bool):
        return [(prefix, float(value))]
    if isinstance(value, (int, float)):
        return [(prefix, float(value))] if math.isfinite(value) else []
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            out += _scalars(f"{prefix}/{k}", v)
        return out
    return []


class MetricsLog:
    """Append-only JSON-lines event log in `directory/metrics.jsonl` (+ TensorBoard files)."""

    def __init__(self, directory: str | Path, tensorboard: bool = True) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / FILENAME
        raw = self.path.read_bytes() if self.path.exists() else b""
        if raw and not raw.endswith(b"\n"):  # a torn line of a killed attempt: cut it off
            os.truncate(self.path, raw.rfind(b"\n") + 1)
        earlier = read_events(self.path) if raw else []
        self.attempt = 1 + max((int(e.get("attempt", 1)) for e in earlier), default=0)
        self.path.touch()
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(self.dir / "tensorboard"))
            except ImportError as e:
                print(
                    f"t1.store.metrics_log: TensorBoard off ({e}); writing JSON lines only",
                    file=sys.stderr,
                )

    def write(self, event: str, step: int, **fields: Any) -> dict[str, Any]:
        """Append one event; returns the record as written."""
        record = {
            "schema_version": SCHEMA_VERSION,
            "event": event,
            "step": int(step),
            "attempt": self.attempt,
            "time": time.time(),
        }
        record.update(_clean(fields))
        append_json_line(self.path, record, default=None)  # not JSON: a TypeError, as before
        if self._tb is not None:
            for name, value in _scalars(event, fields):
                self._tb.add_scalar(name, value, int(step))
            self._tb.flush()
        return record

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()

    def __enter__(self) -> MetricsLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_events(path: str | Path, event: str | None = None) -> list[dict[str, Any]]:
    """Events of a metrics.jsonl file (or of `path/metrics.jsonl`), optionally of one kind.

    A torn final line (crash mid-write) is skipped; a malformed line elsewhere is an error
    naming the file and the line number."""
    path = Path(path)
    if path.is_dir():
        path = path / FILENAME
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            if i == len(lines):
                break
            raise ValueError(f"{path}:{i}: malformed event line: {e}") from None
        if event is None or rec.get("event") == event:
            out.append(rec)
    return out


def last_attempt(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per (event, step): the last one written (highest attempt, then file order),
    with `redone` = how many earlier writes of that step it replaces (absent when none).
    Order: as the kept records first appeared."""
    kept: dict[tuple[Any, Any], dict[str, Any]] = {}
    writes: dict[tuple[Any, Any], int] = {}
    for ev in events:
        key = (ev.get("event"), ev.get("step"))
        writes[key] = writes.get(key, 0) + 1
        old = kept.get(key)
        if old is None or int(ev.get("attempt", 1)) >= int(old.get("attempt", 1)):
            kept[key] = ev
    out = []
    for key, ev in kept.items():
        out.append(dict(ev, redone=writes[key] - 1) if writes[key] > 1 else ev)
    return out

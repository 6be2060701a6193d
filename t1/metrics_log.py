"""Structured run events: one JSON object per line (and TensorBoard scalars when available).

    from t1.metrics_log import MetricsLog
    with MetricsLog("results/tiny/train", tensorboard=True) as log:
        log.write("ppo_step", step=3, gap=0.013, gap_ema=0.015, explained_variance=0.7)

Every line carries `schema_version`, `event`, `step`, `time` (Unix seconds) and the fields
given. Nested dicts (e.g. `resolved_by_category`) stay nested in JSON and become
`name/key` scalars in TensorBoard. nan and inf are written as null (JSON has no nan). Each line
is flushed as it is written, so a crash loses at most the line being written; a reader skips
a torn last line (`read_events`). TensorBoard needs the `tensorboard` package; without it
the log says so once and writes JSON only. `t1 report` turns these files into tables/plots.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

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
        self._file = self.path.open("a", encoding="utf-8")
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(self.dir / "tensorboard"))
            except ImportError as e:
                print(
                    f"t1.metrics_log: TensorBoard off ({e}); writing JSON lines only",
                    file=sys.stderr,
                )

    def write(self, event: str, step: int, **fields: Any) -> dict[str, Any]:
        """Append one event; returns the record as written."""
        record = {
            "schema_version": SCHEMA_VERSION,
            "event": event,
            "step": int(step),
            "time": time.time(),
        }
        record.update(_clean(fields))
        self._file.write(json.dumps(record, sort_keys=False) + "\n")
        self._file.flush()
        if self._tb is not None:
            for name, value in _scalars(event, fields):
                self._tb.add_scalar(name, value, int(step))
            self._tb.flush()
        return record

    def close(self) -> None:
        self._file.close()
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

"""Reading the files `t1 ablations` measures from: a JSON record that must be there, whole and
complete (AblationError names the file otherwise), its figures, and a run's PPO step events.

    from t1.eval.ablations_inputs import read_json, step_events
    doc = read_json("results/tiny/ablations/gap.json", "t1 bench gap --json")
    for step, events in step_events(Path("results/tiny")): ...
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


class AblationError(Exception):
    """A missing, empty or unreadable input; the message names the file."""


# ------------------------------------------------------------------ reading inputs


def read_json(path: str | Path, what: str) -> dict[str, Any]:
    """A JSON record; AblationError naming the file when missing, empty, not JSON, not an
    object, or a record (t1.records) whose status is not "complete"."""
    path = Path(path)
    if not path.is_file():
        raise AblationError(f"{path}: missing ({what})")
    text = path.read_text()
    if not text.strip():
        raise AblationError(f"{path}: empty ({what})")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise AblationError(f"{path}: not JSON ({what}): {e}") from None
    if not isinstance(doc, dict) or not doc:
        raise AblationError(f"{path}: not a JSON object with figures ({what})")
    if "status" in doc and doc["status"] != "complete":
        raise AblationError(f"{path}: status {doc['status']!r}, not complete ({what})")
    return doc


def _need(doc: dict[str, Any], path: str | Path, *keys: str) -> Any:
    """doc[k1][k2]...; AblationError naming the file and the key when absent."""
    node: Any = doc
    for i, k in enumerate(keys):
        if not isinstance(node, dict) or k not in node:
            raise AblationError(f"{path}: no {'.'.join(keys[: i + 1])}")
        node = node[k]
    return node


def _num(x: Any) -> float | None:
    """A finite number, else None (JSON null, NaN written by json.dumps, a string)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def step_events(run: Path) -> list[tuple[int, list[dict[str, Any]]]]:
    """(step, its ppo_step events, the last attempt's) for every RUN/ppo/steps/step_N; an
    error names the directory with no steps or the step whose metrics.jsonl is missing/empty."""
    from t1.store.metrics_log import last_attempt, read_events

    root = Path(run) / "ppo" / "steps"
    dirs = sorted(root.glob("step_*")) if root.is_dir() else []
    if not dirs:
        raise AblationError(f"{root}: no PPO step directories (step_NNNNNN)")
    out = []
    for d in dirs:
        f = d / "train" / "metrics.jsonl"
        if not f.is_file():
            raise AblationError(f"{f}: missing (the step's ppo_step event)")
        events = last_attempt(read_events(f, "ppo_step"))
        if not events:
            raise AblationError(f"{f}: holds no ppo_step event")
        out.append((int(d.name.split("_")[1]), events))
    return out

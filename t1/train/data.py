"""Trajectory directories -> training rows: TITO assembly, status filter, reward choice.

    from t1.train.data import load_rows
    rows, stats = load_rows(["results/tiny/ppo/steps/step_000003/rollout"], tokenizer)

Every trajectory under the given directories (any depth, t1.agent.trajectory records) is loaded;
COMPLETED and TRUNCATED ones with a reward are trained on (ABORTED and FAILED never are), and
`require_reward=False` (SFT) admits those without one. Each is assembled into TITO segments
(t1.tito; a trajectory whose turns cannot be assembled is skipped and counted, never padded
or dropped silently), one Row per segment, all carrying the trajectory's reward:

  reward="trajectory"  the reward the verifier attached (dense or binary, per the run)
  reward="binary"      the outcome on the run's scale: what the run's reward paid a trajectory
                       whose every assertion passed (metadata "resolved"; 1.0 when it carries
                       no reward), else 0.0 - the critic warm-up's binary-reward pool

Per-trajectory fields (task_id, category, status, resolved, reward, drift_positions) sit on
the first segment's meta only, so rates count trajectories, not segments. `stats` counts
trajectories by status, skipped ones by reason, and the over-sampling numbers of each
directory's rollout.json (launched, admitted, dropped) when present.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from t1.agent.trajectory import Status, TrajectoryError, find_trajectories, load_trajectory
from t1.tito import TitoError, assemble_trajectory
from t1.train.batch import Row

TRAINED = (Status.COMPLETED, Status.TRUNCATED)


class DataError(ValueError):
    """No usable trajectory, or a record that cannot be read (the message names the path)."""


def load_rows(
    dirs: Iterable[str | Path],
    tokenizer: Any = None,
    reward: str = "trajectory",
    require_reward: bool = True,
) -> tuple[list[Row], dict[str, Any]]:
    if reward not in ("trajectory", "binary"):
        raise ValueError(f"reward must be 'trajectory' or 'binary', got {reward!r}")
    rows: list[Row] = []
    by_status: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    oversampling = Counter()
    paths: list[Path] = []
    for d in dirs:
        d = Path(d)
        if not d.is_dir():
            raise DataError(f"{d}: no such trajectory directory")
        paths += find_trajectories(d)
        summary = d / "rollout.json"
        if summary.exists():
            s = json.loads(summary.read_text())
            for key in ("launched", "admitted", "dropped"):
                oversampling[key] += int(s.get(key) or 0)
    for path in paths:
        try:
            traj = load_trajectory(path)
        except TrajectoryError as e:
            raise DataError(str(e)) from None
        by_status[traj.status.value] += 1
        if traj.status not in TRAINED:
            skipped[f"status {traj.status.value}"] += 1
            continue
        if traj.reward is None and require_reward:
            skipped["no reward"] += 1
            continue
        try:
            asm = assemble_trajectory(traj, tokenizer)
        except TitoError as e:
            skipped["tito error"] += 1
            print(f"t1 train: skipping {path}: {e}")
            continue
        resolved = bool(traj.metadata.get("resolved", False))
        if reward == "binary":  # resolved pays what the run's reward pays a resolved trajectory
            r = (1.0 if traj.reward is None else float(traj.reward)) if resolved else 0.0
        else:
            r = float(traj.reward or 0.0)
        head = {
            "task_id": traj.task_id,
            "category": str(traj.metadata.get("category") or "unknown"),
            "status": traj.status.value,
            "resolved": resolved,
            "reward": r,
            "drift_positions": int(asm.audit.drift_tokens),
            "path": str(path),
        }
        for i, seg in enumerate(asm.segments):
            meta = head if i == 0 else {"task_id": traj.task_id, "segment": i}
            rows.append(Row(seg.ids, seg.loss_mask, seg.logprobs, seg.routing, r, dict(meta)))
    stats = {
        "trajectories": sum(by_status.values()),
        "by_status": dict(by_status),
        "skipped": dict(skipped),
        "rows": len(rows),
        **{f"oversampling_{k}": v for k, v in oversampling.items()},
    }
    return rows, stats

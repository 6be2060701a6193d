"""One PPO step on disk and the commands that do it (used by `t1 segment`, the fleet's job
steps in t1/run/segment_fleet.py and the plan of `t1 segment --dry-run`, t1/run/plan.py).

    RUN/ppo/steps/step_NNNNNN/rollout   t1 rollout --config C --policy PREV/actor ... --out ...
    RUN/ppo/steps/step_NNNNNN/train     t1 train --config C --stage ppo --in .../rollout ...

A library module: the `t1 segment` command imports it, never the other way round.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "ppo" / "steps" / f"step_{step:06d}"


def t1_command() -> list[str]:
    """How to run `t1` from here: this interpreter's own `t1` (a venv's bin/ need not be on
    PATH: `.venv/bin/t1 segment ...` works unactivated), else `python -m t1.cli`."""
    sibling = Path(sys.executable).with_name("t1")
    if sibling.is_file() and os.access(sibling, os.X_OK):
        return [str(sibling)]
    return [sys.executable, "-m", "t1.cli"]


def step_commands(
    cfg_path: str,
    prev: Path,
    sdir: Path,
    batch: list[str],
    seed: int,
    tokenizer: str | None,
    critic: str | None,
    run_manifest: Path | None = None,
    push_to: list[str] | None = None,
) -> dict[str, list[str]]:
    """The two commands of one PPO step (the flags the rollout and train owners define)."""
    tok = ["--tokenizer", tokenizer] if tokenizer else []
    rollout = ["t1", "rollout", "--config", cfg_path, "--policy", str(prev / "actor"), *tok]
    rollout += ["--tasks", *batch, "--launch", str(len(batch)), "--seed", str(seed)]
    if run_manifest is not None:
        rollout += ["--run-manifest", str(run_manifest)]
    rollout += ["--out", str(sdir / "rollout")]
    train = ["t1", "train", "--config", cfg_path, "--stage", "ppo", "--in", str(sdir / "rollout")]
    train += ["--from", str(prev), "--out", str(sdir / "train"), *tok]
    if critic:
        train += ["--critic", critic]
    if push_to:  # fleet.weight_update distributed: the trainer pushes the actor (t1/train/push.py)
        train += ["--push-to", ",".join(push_to)]
    return {"rollout": rollout, "train": train}

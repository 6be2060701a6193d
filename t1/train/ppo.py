"""The PPO stage: one critic-first PPO step on one step's admitted rollouts.

    t1 train --config FILE --stage ppo --in ROLLOUT_DIR --from PREV_DIR --out DIR [--critic W]

PREV_DIR is the previous step's DIR (its newest checkpoint under PREV_DIR/ckpt: actor,
critic, both optimizers, RNG, counters, the gap EMA, the step index and the re-calibration
countdown are restored exactly) or, for the first step, an SFT DIR (its actor; fresh
optimizers). On the first step the critic is loaded from W/critic when given and
`critic_warmup.enabled` (then the next `critic_warmup.recalibration_rollouts` steps update
the critic only), else built cold from the actor's backbone with a fresh head. --critic is
ignored when PREV_DIR holds a checkpoint.

Trains on the COMPLETED and TRUNCATED trajectories with a reward (t1.train.data); a step
without any (every rollout failed) carries the state forward unchanged and says so. Writes
DIR/actor (for the next rollout), DIR/critic, DIR/ckpt/step_N, one `ppo_step` event in
DIR/metrics.jsonl (+ TensorBoard), DIR/DONE.json (with the metrics). If DIR/ckpt already
holds the finished step (a crash after it was written), only the weights and DONE.json are
redone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from t1.config import Config
from t1.metrics_log import MetricsLog
from t1.policy import Critic, load_policy, torch_dtype
from t1.supervise.child import EXIT_REQUEUE, heartbeat
from t1.train.batch import collate
from t1.train.critic_warmup import recalibrate
from t1.train.data import DataError, load_rows
from t1.train.state import StageDir, build_trainer, load_tokenizer_for
from t1.train.step import ppo_step


def _fresh(cfg: Config, source: Path, critic_dir: str | None):
    dtype = torch_dtype(cfg.model.train_dtype)
    actor = load_policy(source / "actor", dtype=dtype)
    warm = bool(critic_dir) and cfg.critic_warmup.enabled
    if warm:
        critic = Critic.from_pretrained(Path(critic_dir) / "critic", dtype=dtype)
    else:
        critic = Critic.from_policy(actor, seed=cfg.run.seed + 1).to(dtype)
    trainer = build_trainer(cfg, actor, critic)
    progress = {
        "step": 0,
        "gap_ema": None,
        "recalibration_left": cfg.critic_warmup.recalibration_rollouts if warm else 0,
        "critic_start": "warm" if warm else "cold",
        "done": False,
    }
    return trainer, progress


def _resumed(cfg: Config, source: Path, payload: dict[str, Any]):
    """Models shaped like source/actor, then everything from the saved state."""
    dtype = torch_dtype(cfg.model.train_dtype)
    actor = load_policy(source / "actor", dtype=dtype)
    critic = Critic(actor.config).to(dtype)
    trainer = build_trainer(cfg, actor, critic)
    trainer.load_state_dict(payload["trainer"])
    return trainer, dict(payload["progress"])


def campaign_step(trainer, batch, cfg: Config, progress: dict[str, Any]) -> dict[str, Any]:
    """One step of the campaign on `batch`: a critic-only re-calibration step while
    `progress["recalibration_left"]` lasts (after loading warm-up weights), else a critic-first
    PPO step. Updates `progress` (the countdown, the gap EMA); returns the step's metrics."""
    if progress["recalibration_left"] > 0:
        m = recalibrate(trainer, batch, cfg.ppo, progress["gap_ema"])
        progress["recalibration_left"] -= 1
    else:
        m = ppo_step(trainer, batch, cfg.ppo, gap_ema=progress["gap_ema"])
    progress["gap_ema"] = m["gap_ema"]
    return m


def _stage_of(path: Path) -> str | None:
    """The stage that wrote `path` (its DONE.json), None if it holds no finished stage."""
    done = path / "DONE.json"
    return json.loads(done.read_text()).get("stage") if done.exists() else None


def run(cfg: Config, args: argparse.Namespace, stop=None) -> int:
    out = StageDir(args.out, "ppo")
    if out.done():
        print(f"t1 train ppo: {out.done_file} exists; nothing to do")
        return 0
    source = Path(args.source)
    own = out.load()
    if own is not None and own["progress"].get("done"):
        trainer, progress = _resumed(cfg, source, own)
        trainer.save_weights(out.path)
        out.finish({"step": progress["step"], "resumed": True})
        return 0
    prev = StageDir(source, "ppo").load() if _stage_of(source) == "ppo" else None
    if prev is not None:
        trainer, progress = _resumed(cfg, source, prev)
        progress["done"] = False
    else:
        trainer, progress = _fresh(cfg, source, args.critic)
    try:
        tokenizer = load_tokenizer_for(args.tokenizer, args.inputs)
        rows, stats = load_rows(args.inputs, tokenizer, reward="trajectory")
    except DataError as e:
        print(f"t1 train ppo: {e}")
        return 3
    if stop is not None and stop.requested:
        return EXIT_REQUEUE
    step = progress["step"]
    with MetricsLog(out.path) as log:
        if not rows:
            log.write("ppo_step", step, empty=True, **stats)
            metrics: dict[str, Any] = {"empty": True}
        else:
            batch = collate(rows)
            m = campaign_step(trainer, batch, cfg, progress)
            metrics = {k: v for k, v in m.items() if not k.startswith("_")}
            metrics.update(
                stats,
                critic_start=progress["critic_start"],
                recalibration_left=progress["recalibration_left"],
            )
            log.write("ppo_step", step, **metrics)
        heartbeat()
        progress["step"] = step + 1
        progress["done"] = True
        out.save(trainer, progress)
        trainer.save_weights(out.path)
    out.finish({"step": step, "metrics": metrics})
    return 0

"""The stage runner SFT and critic warm-up share: rows in, epochs of minibatches, weights out.

    from t1.train.stage import run_stage
    return run_stage(cfg, args, stop, stage="sft", data={"require_reward": False},
                     build=lambda: build_trainer(...), update=lambda trainer, mb: ...,
                     epochs=cfg.sft.epochs, batch=cfg.sft.batch, save_every=cfg.sft.save_every,
                     weights={"actor": True, "critic": False})

Called by `t1 train --stage sft|critic_warmup` (t1/train/sft.py, t1/train/critic_warmup.py);
the PPO stage runs its own loop (t1/train/ppo.py). In order: a DIR with DONE.json is left
alone (exit 0); the trajectories under --in are loaded (exit 3 when they are malformed or none
is trainable); the trainer is built, and restored from the newest complete checkpoint under
DIR/ckpt if there is one; `run_epochs` trains, logging one `<stage>_step` event per optimizer
step into DIR/metrics.jsonl and checkpointing every `save_every` steps and on a stop request
(exit 75 = EXIT_REQUEUE, rerun to resume) or at --max-steps (exit 0, not DONE); at the end the
weights are saved, then a complete checkpoint, a `<stage>_done` event and DIR/DONE.json.
Checkpoints kept per stage: `campaign.keep_checkpoints` (the one retention knob).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from t1.config import Config
from t1.progress import Progress
from t1.store.metrics_log import MetricsLog
from t1.supervise.child import EXIT_REQUEUE
from t1.train.data import DataError, load_rows
from t1.train.hf import HFTrainer
from t1.train.state import StageDir, load_tokenizer_for, run_epochs

EXIT_NO_DATA = 3


def run_stage(
    cfg: Config,
    args: argparse.Namespace,
    stop: Any,
    *,
    stage: str,
    data: dict[str, Any],
    build: Callable[[], HFTrainer],
    update: Callable[[HFTrainer, Any], dict[str, float]],
    epochs: int,
    batch: int,
    save_every: int,
    weights: dict[str, bool],
    rows_of: Callable[[Any], tuple[list, dict[str, Any]]] | None = None,
) -> int:
    """Run one resumable stage into `args.out`; returns the process exit code.

    data: keyword arguments of `t1.train.data.load_rows` (reward kind, require_reward).
    build: makes the trainer (loads the starting weights); called only when there is work.
    update: (trainer, minibatch) -> metrics, one optimizer step.
    weights: `HFTrainer.save_weights` flags (which of actor/critic the stage produces).
    rows_of: tokenizer -> (rows, stats) instead of the trajectories under --in (pre-training
    builds its rows from the generated corpus, t1.train.corpus)."""
    out = StageDir(args.out, stage, keep=cfg.campaign.keep_checkpoints)
    if out.done():
        print(f"t1 train {stage}: {out.done_file} exists; nothing to do")
        return 0
    inputs = list(args.inputs or [])
    try:
        tokenizer = load_tokenizer_for(args.tokenizer, inputs)
        rows, stats = rows_of(tokenizer) if rows_of else load_rows(inputs, tokenizer, **data)
    except DataError as e:
        print(f"t1 train {stage}: {e}")
        return EXIT_NO_DATA
    if not rows:
        where = f"trajectory under {', '.join(inputs)}" if inputs else "row from the corpus"
        print(f"t1 train {stage}: no trainable {where} ({stats})")
        return EXIT_NO_DATA
    trainer = build()
    saved = out.load()
    progress: dict[str, Any] = {}
    if saved is not None:
        trainer.load_state_dict(saved["trainer"])
        progress = saved["progress"]
        print(f"t1 train {stage}: at step {progress.get('step')} (epoch {progress.get('epoch')})")
    # t1.progress: optimizer steps with an ETA (a live line, or log lines in a Slurm log)
    total = epochs * -(-len(rows) // max(1, batch))
    bar = Progress(total, f"train {stage}", start=progress.get("step", 0))

    def on_step(step: int, m: dict[str, float]) -> None:
        log.write(f"{stage}_step", step, **m)
        bar.advance(note=f"step {step}")

    try:
        with MetricsLog(out.path) as log:
            status = run_epochs(
                trainer, rows, epochs, batch, lambda mb: update(trainer, mb), progress, out,
                save_every, on_step, stop, args.max_steps,
            )  # fmt: skip
            if status == "stopped":
                return EXIT_REQUEUE
            if status == "max_steps":
                return 0
            trainer.save_weights(out.path, **weights)
            out.save(trainer, progress, complete=True)
            log.write(f"{stage}_done", progress["step"], **stats)
        out.finish({"steps": progress["step"], "data": stats})
    finally:
        bar.close()
        out.close()  # wait for background retention before the process exits
    return 0

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

Either backend (`train.backend`; the trainer comes from `build`, which SFT and critic warm-up
take from t1.train.megatron.plan.build after the memory check). With train.backend megatron
it runs at any world size under torchrun exactly like the PPO stage: every rank loads the same
rows and runs the same loop (the same shuffling generator, so the same minibatches; the trainer
keeps its data-parallel share of each minibatch's rows, MegatronTrainer), checkpoints are per
rank above world size 1 (t1.train.megatron.stage.open_stage_dir: ShardedStageDir), a checkpoint
of another layout is refused (exit 5, LayoutChanged naming it: no resharding), a stop request
holds on every rank at the same step boundary (agreed_stop: the checkpoint is a collective),
every rank takes part in save_weights and the checkpoints, and rank 0 alone writes
metrics.jsonl, the progress lines and DONE.json. World size > 1 with train.backend hf is
refused (exit 2). How `t1 train` gets under torchrun: t1/train/launch.py.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from t1.config import Config
from t1.progress import Progress
from t1.supervise.child import EXIT_REQUEUE
from t1.train.data import DataError, load_rows
from t1.train.megatron.stage import (
    LayoutChanged,
    agreed_stop,
    lead,
    metrics_log,
    open_stage_dir,
    record_load,
    world_size,
)
from t1.train.state import load_tokenizer_for, run_epochs

EXIT_NO_DATA = 3
EXIT_LAYOUT = 5


class _NoBar:
    """The progress bar of a rank that does not write (above world size 1, rank > 0)."""

    def advance(self, note: str = "") -> None:
        return None

    def close(self) -> None:
        return None


def run_stage(
    cfg: Config,
    args: argparse.Namespace,
    stop: Any,
    *,
    stage: str,
    data: dict[str, Any],
    build: Callable[[], Any],
    update: Callable[[Any, Any], dict[str, float]],
    epochs: int,
    batch: int,
    save_every: int,
    weights: dict[str, bool],
    rows_of: Callable[[Any], tuple[list, dict[str, Any]]] | None = None,
) -> int:
    """Run one resumable stage into `args.out`; returns the process exit code.

    data: keyword arguments of `t1.train.data.load_rows` (reward kind, require_reward).
    build: (resume) -> the trainer with the starting weights; resume=True when a checkpoint will
    fill it next (a megatron trainer then reads no starting weights); called only for work.
    update: (trainer, minibatch) -> metrics, one optimizer step.
    weights: `save_weights` flags (which of actor/critic the stage produces).
    rows_of: tokenizer -> (rows, stats) instead of the trajectories under --in (pre-training
    builds its rows from the generated corpus, t1.train.corpus)."""
    out = open_stage_dir(args.out, stage, keep=cfg.campaign.keep_checkpoints)
    if out.done():
        print(f"t1 train {stage}: {out.done_file} exists; nothing to do")
        return 0
    if world_size() > 1 and cfg.train.backend != "megatron":
        print(
            f"t1 train {stage}: world size {world_size()} (torchrun) needs train.backend "
            f"megatron, got {cfg.train.backend!r} (the hf trainer is one process)"
        )
        return 2
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
    progress: dict[str, Any] = {}
    try:
        saved = out.load()  # a world-size-1 checkpoint above it (or back): LayoutChanged
        trainer = build(resume=saved is not None)  # resuming: shapes only, the checkpoint fills
        record_load(out.path, trainer)  # each rank: what it read of the HF weights
        if saved is not None:
            trainer.load_state_dict(saved["trainer"])  # another torchrun layout: LayoutChanged
    except LayoutChanged as e:
        print(f"t1 train {stage}: {e}")
        return EXIT_LAYOUT
    if saved is not None:
        progress = saved["progress"]
        print(f"t1 train {stage}: at step {progress.get('step')} (epoch {progress.get('epoch')})")
    # t1.progress: optimizer steps with an ETA (a live line, or log lines in a Slurm log)
    total = epochs * -(-len(rows) // max(1, batch))
    start = progress.get("step", 0)
    bar = Progress(total, f"train {stage}", start=start) if lead() else _NoBar()

    def on_step(step: int, m: dict[str, float]) -> None:
        log.write(f"{stage}_step", step, **m)
        bar.advance(note=f"step {step}")

    try:
        with metrics_log(out.path) as log:  # rank 0's only above world size 1
            status = run_epochs(
                trainer, rows, epochs, batch, lambda mb: update(trainer, mb), progress, out,
                save_every, on_step, agreed_stop(stop), args.max_steps,
            )  # fmt: skip
            if status == "stopped":
                return EXIT_REQUEUE
            if status == "max_steps":
                return 0
            trainer.save_weights(out.path, **weights)  # a collective above world size 1
            out.save(trainer, progress, complete=True)
            log.write(f"{stage}_done", progress["step"], **stats)
        out.finish({"steps": progress["step"], "data": stats})  # rank 0's (ShardedStageDir)
    finally:
        bar.close()
        out.close()  # wait for background retention before the process exits
    return 0

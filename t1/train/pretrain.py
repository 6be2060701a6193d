"""Pre-training: the initial policy learns solved family tasks from a generated corpus.

    t1 train --config FILE --stage pretrain --from POLICY_DIR --tokenizer TOK --out DIR

The rows are `pretrain.examples` agent transcripts of random instances of the task families
(t1.train.corpus: generated, not executed; no held-out instance of the run among them). The
loss is SFT's (t1.train.sft.nll: token-level NLL over the assistant's tokens), AdamW with
`pretrain.lr` after a linear warm-up of `pretrain.warmup_steps` (then constant, or decayed to
`pretrain.min_lr` at the stage's last step: `pretrain.lr_decay`), `pretrain.epochs` passes of
`pretrain.batch` rows. No --in: the corpus is made
here, from the config's seed, so a rerun makes the same rows. Writes DIR/actor (SFT starts
from it), DIR/ckpt/, DIR/metrics.jsonl (`pretrain_step` events), DIR/DONE.json; resumable.
One process, the hf trainer whatever `train.backend` (its warm-up sets the torch optimizer's
learning rate): under torchrun (WORLD_SIZE > 1) it is refused (exit 2).

With `pretrain.copy_steps` > 0 a copy warm-up runs first, as a stage of its own in
DIR/copy_warmup (t1.train.copy_warmup: `copy_steps` steps of `copy_batch` rows of made-up
names to repeat; same optimizer settings, resumable, skipped once its DONE.json exists), and
the corpus stage starts from DIR/copy_warmup/actor.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from pathlib import Path

from t1.config import Config
from t1.model.policy import load_policy, torch_dtype
from t1.train.copy_warmup import copy_rows
from t1.train.corpus import corpus_rows
from t1.train.megatron.stage import world_size
from t1.train.sft import nll
from t1.train.stage import run_stage
from t1.train.state import build_trainer


def run(cfg: Config, args: argparse.Namespace, stop=None) -> int:
    p = cfg.pretrain
    if world_size() > 1:
        print(f"t1 train pretrain: runs in one process (hf trainer); world size {world_size()}")
        return 2
    if p.examples <= 0:
        print("t1 train pretrain: pretrain.examples is 0; nothing to train")
        return 2
    if args.tokenizer is None:
        print("t1 train pretrain: --tokenizer is required (the corpus is tokenized here)")
        return 2

    steps = {"copy_warmup": p.copy_steps}  # stage -> its optimizer steps (the decay's length)

    def rows_of(tokenizer):
        rows = corpus_rows(cfg, tokenizer)
        tokens = sum(len(r.ids) for r in rows)
        steps["pretrain"] = p.epochs * -(-len(rows) // max(1, p.batch))
        return rows, {"trajectories": len(rows), "rows": len(rows), "tokens": tokens,
                      "source": "t1.train.corpus"}  # fmt: skip

    def builder(source):
        def build(resume: bool = False):  # noqa: ARG001 - hf: the checkpoint overwrites it
            actor = load_policy(source, dtype=torch_dtype(cfg.model.train_dtype))
            no_replay = dataclasses.replace(cfg, ppo=dataclasses.replace(cfg.ppo, replay=False))
            return build_trainer(no_replay, actor, None, actor_lr=p.lr)

        return build

    def updater(stage, decay):
        def update(trainer, mb):
            # keyed on the trainer's own update counter (saved in its checkpoints, so a resumed
            # stage continues the schedule where it stopped)
            k = trainer.counters["actor_updates"]
            lr = learning_rate(p, k, steps[stage], decay)
            for group in trainer.actor_opt.param_groups:
                group["lr"] = lr
            return dict(trainer.actor_update(mb, nll), lr=lr)

        return update

    source = args.source
    if p.copy_steps > 0:
        warm = argparse.Namespace(**{**vars(args), "out": str(Path(args.out) / COPY_DIR)})

        def copy_of(tokenizer):
            rows = copy_rows(cfg, tokenizer)
            return rows, {"rows": len(rows), "tokens": sum(len(r.ids) for r in rows),
                          "source": "t1.train.copy_warmup"}  # fmt: skip

        rc = run_stage(
            cfg, warm, stop, stage="copy_warmup", data={}, build=builder(source),
            update=updater("copy_warmup", "constant"), epochs=1, batch=p.copy_batch, save_every=p.save_every,
            weights={"actor": True, "critic": False}, rows_of=copy_of,
        )  # fmt: skip
        if rc != 0 or not (Path(warm.out) / "DONE.json").exists():
            return rc  # stopped (75) or --max-steps inside the warm-up: rerun to go on
        source = str(Path(warm.out) / "actor")
    return run_stage(
        cfg, args, stop, stage="pretrain", data={}, build=builder(source),
        update=updater("pretrain", p.lr_decay), epochs=p.epochs, batch=p.batch, save_every=p.save_every,
        weights={"actor": True, "critic": False}, rows_of=rows_of,
    )  # fmt: skip


COPY_DIR = "copy_warmup"  # DIR/copy_warmup: the copy warm-up's own stage directory


def learning_rate(p, k: int, total: int, decay: str) -> float:
    """The rate of optimizer update k (0-based) of a stage of `total` updates: a linear warm-up
    to `p.lr` over `p.warmup_steps`, then `p.lr` (constant) or down to `p.min_lr` at the last
    update (cosine | linear, as Megatron's --lr-decay-style)."""
    warm = max(1, p.warmup_steps)
    if k + 1 < warm or decay == "constant":
        return p.lr * min(1.0, (k + 1) / warm)
    ratio = min(1.0, (k + 1 - warm) / max(1, total - warm))
    coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0) if decay == "cosine" else 1.0 - ratio
    return p.min_lr + coeff * (p.lr - p.min_lr)

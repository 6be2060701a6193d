"""SFT warm start: the actor learns the assistant tokens of expert trajectories.

    t1 train --config FILE --stage sft --in EXPERT_DIR --from POLICY_DIR --out DIR [--tokenizer TOK]

The expert trajectories are reference solutions executed as multi-turn tool calls in real
sandboxes (`t1 rollout --expert`: real observations, the reference's commands as the
"sampled" tokens). Each is assembled by TITO; the loss is the token-level mean negative
log-likelihood over the loss region (the assistant tokens), nothing on observations or
template glue. No routing replay (the expert's tokens were not sampled by our model).
AdamW as in PPO with `sft.lr`; `sft.epochs` passes of `sft.batch` rows, shuffled per epoch.
Writes DIR/actor (the supervised checkpoint every campaign starts from), DIR/ckpt/ (t1.store.ckpt),
DIR/metrics.jsonl (`sft_step` events), DIR/DONE.json; resumable (the skeleton: t1/train/stage.py).

Either `train.backend` (the trainer from t1.train.megatron.plan.build, after the memory check:
the actor alone). With megatron and train.gpus > 1 it runs under torchrun like the PPO stage
(per-rank checkpoints, rank 0 writes; t1/train/stage.py); `t1 train` started outside torchrun
launches itself (inside a Slurm allocation: srun + torchrun over the allocation's nodes) or says
how to launch it (t1/train/launch.py).
"""

from __future__ import annotations

import argparse
import dataclasses

from t1.config import Config
from t1.ppo.losses import masked_mean
from t1.train import roles
from t1.train.megatron.plan import build as build_trainer  # train.backend: hf | megatron
from t1.train.stage import run_stage


def nll(logp, batch):
    """Token-level mean NLL over the loss region. logp [B, T] -> 0-d loss and metrics."""
    loss = -masked_mean(logp, batch.loss_mask)
    return loss, {"loss": float(loss.detach())}


def run(cfg: Config, args: argparse.Namespace, stop=None) -> int:
    def build(resume: bool = False):
        # whole on hf; each rank its slices on megatron (none when a checkpoint fills it)
        actor = roles.actor(cfg, args.source, shape_only=resume)
        no_replay = dataclasses.replace(cfg, ppo=dataclasses.replace(cfg.ppo, replay=False))
        return build_trainer(no_replay, actor, None, actor_lr=cfg.sft.lr)

    return run_stage(
        cfg, args, stop, stage="sft", data={"require_reward": False}, build=build,
        update=lambda trainer, mb: trainer.actor_update(mb, nll), epochs=cfg.sft.epochs,
        batch=cfg.sft.batch, save_every=cfg.sft.save_every,
        weights={"actor": True, "critic": False},
    )  # fmt: skip

"""Critic warm-up: value training over a binary-reward pool before any policy step.

    t1 train --config FILE --stage critic_warmup --in POOL_DIR --from SFT_DIR --out DIR

The critic starts from the SFT policy's backbone with a fresh value head and is trained for
`critic_warmup.epochs` (1) over the pool's trajectories (the warm-up rollout: every task of the
train pool once by default, as the paper's one epoch over TMax-15k), rewards binary in the
outcome and on the run's scale (a resolved trajectory's target is what the run's reward paid it,
an unresolved one's 0: the paper's binary 1 and its dense reward agree for a resolved task only
when the task's assertions fill the scale), the policy frozen (not even loaded into the
optimizer). Loss: 0.5 * MSE between the values and the returns (gamma = lambda = 1: each row's
reward) over the loss region, token-level mean. Each step logs the value loss and the explained
variance of the minibatch's values before that step (`critic_warmup_step` events). Writes
DIR/critic (the critic weights only), DIR/ckpt/ (t1.store.ckpt checkpoints), DIR/DONE.json;
resumable (the skeleton: t1/train/stage.py).

Either `train.backend` (the trainer from t1.train.megatron.plan.build, after the memory check:
the critic alone). With megatron and train.gpus > 1 it runs under torchrun like the PPO stage
(per-rank checkpoints, rank 0 writes; t1/train/stage.py); `t1 train` started outside torchrun
launches itself (inside a Slurm allocation: srun + torchrun over the allocation's nodes) or says
how to launch it (t1/train/launch.py).

The dense campaign then loads only these weights (`t1 train --stage ppo --critic DIR`) and
re-calibrates: its first `critic_warmup.recalibration_rollouts` (2) PPO steps update the
critic alone on the dense-reward rollouts (`recalibrate`), then policy steps begin. With
`critic_warmup.enabled: false` the PPO stage starts with a cold critic instead.
"""

from __future__ import annotations

import argparse
import math

import torch

from t1.config import Config, PPOConfig
from t1.ppo.advantages import gae, token_rewards
from t1.ppo.losses import value_loss
from t1.ppo.metrics import explained_variance
from t1.train import roles
from t1.train.batch import Batch
from t1.train.megatron.plan import build as build_trainer  # train.backend: hf | megatron
from t1.train.stage import run_stage
from t1.train.step import ppo_step


def warmup_loss(values: torch.Tensor, batch: Batch):
    """0.5 * MSE to the returns over the loss region; metrics include the pre-step EV."""
    rewards = token_rewards(batch.reward, batch.loss_mask)
    _, returns = gae(rewards, torch.zeros_like(values), batch.loss_mask, 1.0, 1.0)
    loss = value_loss(values, values.detach(), returns, batch.loss_mask, clip_eps=math.inf)
    ev = explained_variance(values, returns, batch.loss_mask)
    return loss, {
        "value_loss": float(loss.detach()),
        "explained_variance": ev,
        "reward_mean": float(batch.reward.mean()),
    }


def recalibrate(trainer, batch: Batch, ppo: PPOConfig, gap_ema: float | None) -> dict:
    """One critic-only PPO step (the re-calibration after loading warmed-up weights)."""
    return ppo_step(trainer, batch, ppo, gap_ema=gap_ema, update_actor=False)


def run(cfg: Config, args: argparse.Namespace, stop=None) -> int:
    def build(resume: bool = False):  # cold: backbone + head (shapes only when resuming)
        critic = roles.critic(cfg, actor_dir=f"{args.source}/actor", shape_only=resume)
        return build_trainer(cfg, None, critic)

    c = cfg.critic_warmup
    return run_stage(
        cfg, args, stop, stage="critic_warmup",
        data={"reward": "binary", "require_reward": False}, build=build,
        update=lambda trainer, mb: trainer.critic_update(mb, warmup_loss), epochs=c.epochs,
        batch=c.batch, save_every=c.save_every, weights={"actor": False, "critic": True},
    )  # fmt: skip

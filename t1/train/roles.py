"""The actor and critic a training stage starts from, as its backend needs them.

    from t1.train import roles
    actor = roles.actor(cfg, "results/R/sft/actor")                 # PPO, SFT
    critic = roles.critic(cfg, warm="results/R/critic_warmup")      # a warmed-up critic
    critic = roles.critic(cfg, actor_dir="results/R/sft/actor")     # cold: backbone + fresh head
    trainer = t1.train.megatron.plan.build(cfg, actor, critic)

* `train.backend: hf` - one process trains whole modules: the whole policy
  (t1.model.policy.load_policy), the whole critic.
* `train.backend: megatron` - a `Source`: an HF module built on the meta device (the trainer's
  export shell: config, names, shapes and dtype, no storage) plus the directory its weights are
  in. MegatronTrainer reads each rank's slices of that directory's safetensors shards
  (t1.train.megatron.hf_load: TP / PP / EP / ETP shares only, never the whole model; the rank's
  bytes read and peak host memory are logged and kept in `trainer.loaded`), so a 122B
  checkpoint costs each of the 8 ranks of a node its share, not ~490 GB.
* `directory=None` (`shape_only=True`): shells only, for a stage about to restore a checkpoint
  (the trainer's weights are then uninitialized until `load_state_dict`).

A cold critic's value head is `fresh_value_head(config, seed)` on both backends (its own
generator, independent of how the backbone was built), so the per-rank path and the whole-model
path start from the same head.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from t1.config import Config
from t1.model.policy import Critic, fresh_value_head, load_policy, torch_dtype


@dataclass
class Source:
    """A role read per rank from `directory` (None: shape only); `shell` is on the meta device."""

    shell: nn.Module
    directory: Path | None = None
    value_head: dict[str, torch.Tensor] | None = None  # a cold critic from an LM directory

    @property
    def config(self):
        return self.shell.config


def per_rank(cfg: Config) -> bool:
    """True when the backend reads weights per rank (megatron), False when it needs modules."""
    return cfg.train.backend == "megatron"


def shell_config(directory: str | Path):
    """The transformers config `load_policy` would give for DIR (its language model's part for a
    multimodal Qwen3.5 release: t1.model.spec.hf_config)."""
    import json

    from transformers import AutoConfig

    d = Path(directory)
    if not (d / "config.json").is_file():
        raise FileNotFoundError(f"{d}: not a policy directory (no config.json)")
    if isinstance(json.loads((d / "config.json").read_text()).get("text_config"), dict):
        from t1.model.spec import hf_config

        return hf_config(d)
    return AutoConfig.from_pretrained(d)


def policy_shell(config, dtype: torch.dtype) -> nn.Module:
    """The causal LM of `config` on the meta device (no storage), in `dtype`."""
    from t1.model.policy import causal_lm_class

    config.dtype = dtype  # what from_pretrained(dtype=...) records, so the export's config agrees
    with torch.device("meta"):
        return causal_lm_class(config)(config).to(dtype).eval()


def critic_shell(config, dtype: torch.dtype) -> nn.Module:
    config.dtype = dtype
    with torch.device("meta"):
        return Critic(config).to(dtype).eval()


def actor(cfg: Config, directory: str | Path, shape_only: bool = False):
    """The actor of DIR (a policy directory or an HF release): a module or a `Source`."""
    dtype = torch_dtype(cfg.model.train_dtype)
    if not per_rank(cfg):
        return load_policy(directory, dtype=dtype)
    shell = policy_shell(shell_config(directory), dtype)
    return Source(shell, None if shape_only else Path(directory))


def critic(
    cfg: Config,
    *,
    warm: str | Path | None = None,
    actor_dir: str | Path | None = None,
    policy: nn.Module | None = None,
    seed: int | None = None,
    shape_only: bool = False,
):
    """A warmed-up critic (`warm`: a stage directory holding critic/) or a cold one (`actor_dir`:
    the policy's backbone, a fresh head from `seed`, default run.seed + 1; hf backend: `policy`,
    the actor already loaded from there, saves reading it twice)."""
    dtype = torch_dtype(cfg.model.train_dtype)
    seed = cfg.run.seed + 1 if seed is None else seed
    if warm is not None:
        d = Path(warm) / "critic"
        if not per_rank(cfg):
            return Critic.from_pretrained(d, dtype=dtype)
        return Source(critic_shell(shell_config(d), dtype), None if shape_only else d)
    if actor_dir is None:
        raise ValueError("roles.critic: give warm= (a critic directory) or actor_dir=")
    if not per_rank(cfg) and shape_only:
        return Critic(shell_config(actor_dir)).to(dtype)
    if not per_rank(cfg):
        policy = policy if policy is not None else load_policy(actor_dir, dtype=dtype)
        return Critic.from_policy(policy, seed=seed).to(dtype)
    config = shell_config(actor_dir)
    shell = critic_shell(config, dtype)
    if shape_only:
        return Source(shell)
    head = {k: v.to(dtype) for k, v in fresh_value_head(config, seed).items()}
    return Source(shell, Path(actor_dir), value_head=head)

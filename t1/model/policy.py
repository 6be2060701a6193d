"""The policy and the critic: a tiny Mixture-of-Experts built from the config's `model:` section.

    t1 init-policy --config workflow/config/tiny.yaml --out results/tiny/policy/init \
        [--tokenizer DIR | --vocab-size N] [--critic]

The policy is HF `Qwen3MoeForCausalLM` (full attention; the default, fast on the CPU) or
`Qwen3_5MoeForCausalLM` (`model.arch: qwen3_5_moe`: linear + full attention and a shared
expert, the real Qwen3.5 family; ~8x slower on the CPU). Router top-k probabilities are
renormalized (`norm_topk_prob`, as Qwen3 MoE checkpoints ship) and the load-balancing
coefficient is 0: it fights routing replay (DESIGN §2, PPO row).

The critic is the same family without the LM head: the decoder backbone plus a scalar value
head `Linear(hidden, 1)` per token. Both save as safetensors in a directory (config.json +
model.safetensors), written to a temporary directory and renamed, and load back bit-exactly.
Initialization is deterministic given the seed (`run.seed` unless `--seed` is given).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from t1.config import Config, ModelConfig, load_config
from t1.records import replace_dir

CRITIC_FILE = "critic.safetensors"
CRITIC_META = "t1_critic.json"
SCHEMA_VERSION = 1

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    """`"bfloat16"` -> `torch.bfloat16`; raises naming the accepted values."""
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r} (known: {', '.join(DTYPES)})") from None


def hf_config(cfg: ModelConfig, vocab_size: int):
    """The transformers config for `cfg.arch` with `vocab_size` tokens."""
    common = dict(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.head_dim,
        moe_intermediate_size=cfg.expert_intermediate,
        num_experts=cfg.experts,
        num_experts_per_tok=cfg.top_k,
        max_position_embeddings=cfg.max_position,
        router_aux_loss_coef=0.0,
        output_router_logits=False,
        tie_word_embeddings=False,
        initializer_range=0.02,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
    )
    if cfg.arch == "qwen3_moe":
        from transformers import Qwen3MoeConfig

        return Qwen3MoeConfig(
            intermediate_size=cfg.intermediate,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            use_sliding_window=False,
            **common,
        )
    if cfg.arch == "qwen3_5_moe":
        try:
            from transformers import Qwen3_5MoeTextConfig
        except ImportError as e:  # older transformers
            raise RuntimeError(
                f"model.arch qwen3_5_moe needs a transformers with Qwen3.5: {e}"
            ) from None

        q = cfg.qwen35()
        return Qwen3_5MoeTextConfig(
            shared_expert_intermediate_size=q["shared_expert_intermediate"],
            linear_num_key_heads=q["linear_key_heads"],
            linear_num_value_heads=q["linear_value_heads"],
            linear_key_head_dim=q["linear_key_dim"],
            linear_value_head_dim=q["linear_value_dim"],
            linear_conv_kernel_dim=q["linear_conv_kernel"],
            full_attention_interval=q["full_attention_interval"],
            **common,
        )
    raise ValueError(f"unknown model.arch {cfg.arch!r} (known: qwen3_moe, qwen3_5_moe)")


def causal_lm_class(config):
    """The transformers causal-LM class of an HF config (Qwen3.5-MoE or Qwen3-MoE)."""
    return _causal_lm_class(_arch_of(config))


def _causal_lm_class(arch: str):
    if arch == "qwen3_moe":
        from transformers import Qwen3MoeForCausalLM

        return Qwen3MoeForCausalLM
    from transformers import Qwen3_5MoeForCausalLM

    return Qwen3_5MoeForCausalLM


def _backbone_class(arch: str):
    if arch == "qwen3_moe":
        from transformers import Qwen3MoeModel

        return Qwen3MoeModel
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeTextModel

    return Qwen3_5MoeTextModel


def build_policy(cfg: ModelConfig, vocab_size: int, seed: int = 0) -> nn.Module:
    """A freshly initialized causal-LM MoE; the same seed gives the same weights."""
    config = hf_config(cfg, vocab_size)
    with _seeded(seed):
        model = _causal_lm_class(cfg.arch)(config)
    return model.eval()


def save_policy(model: nn.Module, out: str | Path) -> Path:
    """Write config.json + model.safetensors to `out` atomically (temp dir, then rename)."""
    with _quiet():
        return _atomic_dir(Path(out), lambda tmp: model.save_pretrained(tmp))


def load_policy(path: str | Path, dtype: torch.dtype = torch.float32) -> nn.Module:
    """Load a policy directory written by `save_policy` (or any HF Qwen3 MoE checkpoint)."""
    from transformers import AutoConfig

    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path}: not a policy directory (no config.json)")
    config = AutoConfig.from_pretrained(path)
    arch = "qwen3_5_moe" if config.model_type.startswith("qwen3_5_moe") else "qwen3_moe"
    with _quiet():
        model = _causal_lm_class(arch).from_pretrained(path, dtype=dtype)
    return model.eval()


class _quiet:
    """No transformers progress bars while saving / loading a tiny model."""

    def __enter__(self) -> None:
        from transformers.utils import logging as hf_logging

        self._was = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()

    def __exit__(self, *exc) -> None:
        from transformers.utils import logging as hf_logging

        if self._was:
            hf_logging.enable_progress_bar()


class Critic(nn.Module):
    """Value network: the MoE decoder backbone plus `Linear(hidden, 1)` per token.

    forward(input_ids [B, T], attention_mask [B, T] | None) -> values [B, T] (float32).
    """

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.backbone = _backbone_class(_arch_of(config))(config)
        self.value_head = nn.Linear(config.hidden_size, 1, bias=True)
        nn.init.normal_(self.value_head.weight, std=config.initializer_range)
        nn.init.zeros_(self.value_head.bias)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.value_head(hidden).squeeze(-1).float()

    def save_pretrained(self, out: str | Path) -> Path:
        """config.json + critic.safetensors + t1_critic.json, atomically."""

        def write(tmp: Path) -> None:
            self.config.save_pretrained(tmp)
            state = {k: v.detach().contiguous() for k, v in self.state_dict().items()}
            save_file(state, str(tmp / CRITIC_FILE))
            (tmp / CRITIC_META).write_text(
                json.dumps(
                    {"schema_version": SCHEMA_VERSION, "status": "complete", "kind": "critic"}
                )
            )

        return _atomic_dir(Path(out), write)

    @classmethod
    def from_pretrained(cls, path: str | Path, dtype: torch.dtype = torch.float32) -> Critic:
        from transformers import AutoConfig

        path = Path(path)
        if not (path / CRITIC_FILE).exists():
            raise FileNotFoundError(f"{path}: not a critic directory (no {CRITIC_FILE})")
        critic = cls(AutoConfig.from_pretrained(path))
        critic.load_state_dict(load_file(str(path / CRITIC_FILE)))
        return critic.to(dtype).eval()

    @classmethod
    def from_policy(cls, policy: nn.Module, seed: int = 0) -> Critic:
        """A critic whose backbone starts from the policy's decoder weights, its head fresh
        (`fresh_value_head(config, seed)`: what a per-rank trainer builds without the policy)."""
        with _seeded(seed):
            critic = cls(policy.config)
        critic.backbone.load_state_dict(policy.model.state_dict())
        with torch.no_grad():
            for k, v in fresh_value_head(policy.config, seed).items():
                getattr(critic.value_head, k).copy_(v)
        return critic.eval()


def fresh_value_head(config, seed: int) -> dict[str, torch.Tensor]:
    """A cold critic's `Linear(hidden, 1)`: weight ~ N(0, initializer_range) from its own
    generator seeded `seed`, bias 0 (float32; {"weight": [1, H], "bias": [1]})."""
    g = torch.Generator().manual_seed(int(seed))
    w = torch.empty(1, config.hidden_size).normal_(0.0, config.initializer_range, generator=g)
    return {"weight": w, "bias": torch.zeros(1)}


def build_critic(cfg: ModelConfig, vocab_size: int, seed: int = 0) -> Critic:
    """A freshly initialized critic; the same seed gives the same weights."""
    config = hf_config(cfg, vocab_size)
    with _seeded(seed):
        critic = Critic(config)
    return critic.eval()


def _arch_of(config) -> str:
    return "qwen3_5_moe" if config.model_type.startswith("qwen3_5_moe") else "qwen3_moe"


class _seeded:
    """Fork the global torch RNG, seed it, and restore it afterwards."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def __enter__(self) -> None:
        self._fork = torch.random.fork_rng(devices=[])
        self._fork.__enter__()
        torch.manual_seed(self.seed)

    def __exit__(self, *exc) -> None:
        self._fork.__exit__(*exc)


def _atomic_dir(out: Path, write) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        write(tmp)
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def vocab_from_tokenizer(path: str | Path) -> int:
    """Number of ids of a saved transformers tokenizer (added specials included)."""
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(str(path)))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="campaign YAML (its `model:` section)")
    parser.add_argument("--out", required=True, help="directory to write (replaced atomically)")
    src = parser.add_mutually_exclusive_group()
    src.add_argument(
        "--tokenizer", help="tokenizer directory: vocab size from it, copied into --out"
    )
    src.add_argument("--vocab-size", type=int, help="vocab size (default: tokenizer.vocab_size)")
    parser.add_argument("--seed", type=int, help="init seed (default: run.seed)")
    parser.add_argument("--critic", action="store_true", help="write a critic instead of a policy")


def main(args: argparse.Namespace) -> int:
    cfg: Config = load_config(args.config)
    torch.set_num_threads(cfg.run.threads)
    seed = cfg.run.seed if args.seed is None else args.seed
    if args.tokenizer:
        vocab = vocab_from_tokenizer(args.tokenizer)
    else:
        vocab = args.vocab_size or cfg.tokenizer.vocab_size
    if args.critic:
        module = build_critic(cfg.model, vocab, seed)
        module.save_pretrained(args.out)
    else:
        module = build_policy(cfg.model, vocab, seed)

        def write(tmp: Path) -> None:
            with _quiet():
                module.save_pretrained(tmp)
            if args.tokenizer:
                from transformers import AutoTokenizer

                AutoTokenizer.from_pretrained(args.tokenizer).save_pretrained(tmp)

        _atomic_dir(Path(args.out), write)
    params = sum(p.numel() for p in module.parameters())
    kind = "critic" if args.critic else "policy"
    print(
        json.dumps(
            {
                "out": str(args.out),
                "kind": kind,
                "arch": cfg.model.arch,
                "vocab": vocab,
                "params": params,
            }
        )
    )
    return 0

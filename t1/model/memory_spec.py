"""The architecture numbers the memory planner needs, and its presets.

    spec = preset("qwen3.5-122b-a10b")       # or preset("tiny", config_path)
    spec.param_counts()                      # parameters by part; `total` = the actor

`ModelSpec` (one MoE block in every layer; full and Gated DeltaNet linear attention layers),
`tiny_spec` (the model any Config describes; framework `hf` unless asked), `QWEN35_122B` (the
122B preset: `tiny_spec` of workflow/config/qwen3.5-122b-a10b.yaml, framework `megatron`, so
the planner sizes exactly what the campaign runs). The planner itself: t1/model/memory.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ModelSpec:
    """Architecture numbers the planner needs (one MoE block in every layer)."""

    name: str
    layers: int
    hidden: int
    vocab: int
    heads: int  # full attention query heads
    kv_heads: int
    head_dim: int
    experts: int
    top_k: int
    expert_ffn: int
    shared_expert_ffn: int = 0  # 0 = no shared expert
    attn_output_gate: bool = False  # Qwen3.5 gated attention (q_proj emits a gate as well)
    full_attention_interval: int = 1  # every n-th layer is full attention, the rest linear
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_dim: int = 0
    linear_value_dim: int = 0
    linear_conv_kernel: int = 4
    framework: str = "megatron"  # megatron | hf
    seq_len: int = 4096
    micro_batch: int = 1  # sequences per micro-batch

    def layer_kinds(self) -> list[str]:
        n = self.full_attention_interval
        return ["full" if (i + 1) % n == 0 else "linear" for i in range(self.layers)]

    # ------------------------------------------------------------ parameter counts

    def full_attention_params(self) -> int:
        h, a, g, d = self.hidden, self.heads, self.kv_heads, self.head_dim
        q = h * a * d * (2 if self.attn_output_gate else 1)
        return q + 2 * h * g * d + a * d * h + 2 * d  # q, k, v, o + q/k norms

    def linear_attention_params(self) -> int:
        h = self.hidden
        kd = self.linear_key_heads * self.linear_key_dim
        vd = self.linear_value_heads * self.linear_value_dim
        hv = self.linear_value_heads
        conv = (2 * kd + vd) * self.linear_conv_kernel
        return (
            h * (2 * kd + vd) + h * vd + 2 * h * hv + conv + 2 * hv + self.linear_value_dim + vd * h
        )

    def shared_expert_params(self) -> int:
        if not self.shared_expert_ffn:
            return 0
        return 3 * self.hidden * self.shared_expert_ffn + self.hidden  # + its sigmoid gate

    def layer_dense_params(self, kind: str) -> int:
        """Non-expert parameters of one layer: attention, 2 norms, router, shared expert."""
        attn = self.full_attention_params() if kind == "full" else self.linear_attention_params()
        return attn + 2 * self.hidden + self.experts * self.hidden + self.shared_expert_params()

    def expert_params_per_layer(self) -> int:
        return self.experts * 3 * self.hidden * self.expert_ffn

    def param_counts(self) -> dict[str, int]:
        """Counts by part; `total` = the actor (untied embeddings; no vision tower, no MTP)."""
        kinds = self.layer_kinds()
        full, linear = kinds.count("full"), kinds.count("linear")
        out = {
            "embedding": self.vocab * self.hidden,
            "lm_head": self.vocab * self.hidden,
            "full_attention": full * self.full_attention_params(),
            "linear_attention": linear * self.linear_attention_params(),
            "norms": self.layers * 2 * self.hidden + self.hidden,
            "router": self.layers * self.experts * self.hidden,
            "shared_expert": self.layers * self.shared_expert_params(),
            "experts": self.layers * self.expert_params_per_layer(),
        }
        out["total"] = sum(out.values())
        out["critic_total"] = out["total"] - out["lm_head"] + self.hidden + 1
        return out


def tiny_spec(cfg: Any = None, name: str = "tiny", framework: str = "hf") -> ModelSpec:
    """The model a Config describes (or the defaults), as the planner sizes it: the `model:`
    section through the same mapping t1.model.policy builds from (ModelConfig.qwen35), the
    tokenizer's vocabulary, agent.context_tokens per sequence and the trainer's micro-batch
    (train.micro_batch, else ppo.minibatch)."""
    from t1.config import Config

    cfg = cfg or Config()
    m = cfg.model
    qwen35 = m.arch == "qwen3_5_moe"
    q = m.qwen35()
    return ModelSpec(
        name=name,
        layers=m.layers,
        hidden=m.hidden,
        vocab=cfg.tokenizer.vocab_size,
        heads=m.heads,
        kv_heads=m.kv_heads,
        head_dim=m.head_dim,
        experts=m.experts,
        top_k=m.top_k,
        expert_ffn=m.expert_intermediate,
        shared_expert_ffn=q["shared_expert_intermediate"] if qwen35 else 0,
        attn_output_gate=qwen35,
        full_attention_interval=q["full_attention_interval"] if qwen35 else 1,
        linear_key_heads=q["linear_key_heads"] if qwen35 else 0,
        linear_value_heads=q["linear_value_heads"] if qwen35 else 0,
        linear_key_dim=q["linear_key_dim"] if qwen35 else 0,
        linear_value_dim=q["linear_value_dim"] if qwen35 else 0,
        linear_conv_kernel=q["linear_conv_kernel"],
        framework=framework,
        seq_len=cfg.agent.context_tokens,
        micro_batch=cfg.train.micro_batch or cfg.ppo.minibatch,
    )


# The 122B preset as the planner sizes it: read from the preset's own config file, the one the
# campaign runs (`t1 plan-memory --preset qwen3.5-122b-a10b` and the segment's plan use it).
PRESET_CONFIG = Path(__file__).resolve().parents[2] / "workflow/config/qwen3.5-122b-a10b.yaml"


def _preset_122b() -> ModelSpec:
    from t1.config import load_config

    return tiny_spec(load_config(PRESET_CONFIG), name="qwen3.5-122b-a10b", framework="megatron")


QWEN35_122B = _preset_122b()


def preset(name: str, config_path: str | None = None) -> ModelSpec:
    if name == QWEN35_122B.name:
        return QWEN35_122B
    if name == "tiny":
        from t1.config import load_config

        return tiny_spec(load_config(config_path) if config_path else None)
    raise ValueError(f"unknown preset {name!r} (known: tiny, {QWEN35_122B.name})")

"""One model spec: with `model.init_from: DIR` the architecture is the checkpoint's.

    from t1.model.spec import read_shape, check, resolve, memory_spec
    shape = read_shape("ckpt/Qwen3.5-122B-A10B")   # DIR/config.json -> ModelShape
    errors = check(cfg)                            # every preset value the checkpoint contradicts
    cfg = resolve(cfg)                             # raises SpecMismatch, else cfg.model = the shape

`read_shape` reads an HF Qwen3.5-MoE (`qwen3_5_moe` with its `text_config`, or
`qwen3_5_moe_text`) or Qwen3-MoE config.json into `ModelShape`: the numbers of the config's
`model:` section (layers, hidden, heads, kv_heads, head_dim, experts, top_k, expert FFN,
max_position, rope_theta) plus what the tiny mapping of t1.model.policy derives and a real
checkpoint sets on its own (vocabulary, shared expert FFN, the per-layer `layer_types`, the
Gated DeltaNet head counts and sizes, partial RoPE).

`check(cfg)` compares each key the config FILE sets in `model:` (t1.config.given_keys; every
comparable key when the section was not read from a file) and `tokenizer.vocab_size` with the
checkpoint, and returns one error per disagreement naming the file, the key, the preset value,
DIR/config.json, the checkpoint's key and its value. Keys without a counterpart in the
checkpoint are not errors: `train_dtype` (the training precision) and, for qwen3_5_moe, the
dense `intermediate` (Qwen3.5-MoE has no dense MLP; its config.json has no intermediate_size).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from t1.config import Config, ModelConfig, given_keys


class SpecMismatch(ValueError):
    """The config's `model:` section contradicts its `model.init_from` checkpoint."""


@dataclass(frozen=True)
class ModelShape:
    """The architecture of an HF MoE checkpoint (from its config.json)."""

    arch: str  # qwen3_moe | qwen3_5_moe
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    expert_intermediate: int
    experts: int
    top_k: int
    vocab: int
    max_position: int
    rope_theta: float
    intermediate: int | None = None  # dense MLP (qwen3_moe); None when the config has none
    shared_expert_intermediate: int = 0
    layer_types: tuple[str, ...] = ()  # qwen3_5_moe: linear_attention | full_attention per layer
    partial_rotary_factor: float = 1.0
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_dim: int = 0
    linear_value_dim: int = 0
    linear_conv_kernel: int = 4
    tie_word_embeddings: bool = False
    dtype: str = ""  # as config.json says ("bfloat16"), "" when absent

    def full_attention_interval(self) -> int:
        """n when every n-th layer (and only those) is full attention; 1 for qwen3_moe."""
        if not self.layer_types:
            return 1
        full = [i for i, t in enumerate(self.layer_types) if t == "full_attention"]
        n = full[0] + 1 if full else len(self.layer_types) + 1
        want = [
            "full_attention" if (i + 1) % n == 0 else "linear_attention" for i in range(self.layers)
        ]
        if list(self.layer_types) != want:
            raise ValueError(f"layer_types is not periodic: {list(self.layer_types)}")
        return n


# config key -> (ModelShape field, the checkpoint's config.json key)
COMPARED = {
    "arch": ("arch", "model_type"),
    "layers": ("layers", "num_hidden_layers"),
    "hidden": ("hidden", "hidden_size"),
    "heads": ("heads", "num_attention_heads"),
    "kv_heads": ("kv_heads", "num_key_value_heads"),
    "head_dim": ("head_dim", "head_dim"),
    "intermediate": ("intermediate", "intermediate_size"),
    "expert_intermediate": ("expert_intermediate", "moe_intermediate_size"),
    "experts": ("experts", "num_experts"),
    "top_k": ("top_k", "num_experts_per_tok"),
    "max_position": ("max_position", "max_position_embeddings"),
    "rope_theta": ("rope_theta", "rope_parameters.rope_theta"),
    # qwen3_5_moe (ModelConfig.qwen35 resolves their 0 defaults the same way the builder does)
    "full_attention_interval": ("full_attention_interval", "layer_types"),
    "linear_key_heads": ("linear_key_heads", "linear_num_key_heads"),
    "linear_value_heads": ("linear_value_heads", "linear_num_value_heads"),
    "linear_key_dim": ("linear_key_dim", "linear_key_head_dim"),
    "linear_value_dim": ("linear_value_dim", "linear_value_head_dim"),
    "linear_conv_kernel": ("linear_conv_kernel", "linear_conv_kernel_dim"),
    "shared_expert_intermediate": ("shared_expert_intermediate", "shared_expert_intermediate_size"),
}
QWEN35_ONLY = {k for k in COMPARED if k in ModelConfig().qwen35()}


def shape_value(shape: ModelShape, key: str):
    """The checkpoint's value of config key `key` (None where the checkpoint has none)."""
    if key in QWEN35_ONLY and shape.arch != "qwen3_5_moe":
        return None
    v = getattr(shape, COMPARED[key][0])
    return v() if callable(v) else v


NOT_ARCHITECTURE = ("train_dtype", "init_from")


def text_config(directory: str | Path) -> dict[str, Any]:
    """DIR/config.json's language-model part as a dict: the `text_config` of a multimodal
    Qwen3.5 (model_type qwen3_5_moe) with its top-level `tie_word_embeddings`, else the file."""
    path = Path(directory) / "config.json"
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"model.init_from: {path} does not exist") from None
    if isinstance(raw.get("text_config"), dict):
        text = dict(raw["text_config"])
        text.setdefault("model_type", f"{raw.get('model_type', 'qwen3_5_moe')}_text")
        if "tie_word_embeddings" in raw:
            text.setdefault("tie_word_embeddings", raw["tie_word_embeddings"])
        return text
    return raw


def _arch(model_type: str, where: Path) -> str:
    if model_type.startswith("qwen3_5_moe"):
        return "qwen3_5_moe"
    if model_type == "qwen3_moe":
        return "qwen3_moe"
    raise ValueError(
        f"model.init_from: {where}/config.json has model_type {model_type!r}; "
        "known: qwen3_5_moe (qwen3_5_moe_text), qwen3_moe"
    )


def shape_of(c: dict[str, Any], where: Path | str = "config.json") -> ModelShape:
    """ModelShape of a (text) config dict; raises naming a missing key."""
    where = Path(where)

    def need(key: str) -> Any:
        if key not in c:
            raise ValueError(f"model.init_from: {where}/config.json has no {key!r}")
        return c[key]

    rp = c.get("rope_parameters") or {}
    arch = _arch(str(need("model_type")), where)
    heads, hidden = int(need("num_attention_heads")), int(need("hidden_size"))
    q35 = arch == "qwen3_5_moe"
    return ModelShape(
        arch=arch,
        layers=int(need("num_hidden_layers")),
        hidden=hidden,
        heads=heads,
        kv_heads=int(need("num_key_value_heads")),
        head_dim=int(c.get("head_dim") or hidden // heads),
        expert_intermediate=int(need("moe_intermediate_size")),
        experts=int(need("num_experts")),
        top_k=int(need("num_experts_per_tok")),
        vocab=int(need("vocab_size")),
        max_position=int(need("max_position_embeddings")),
        rope_theta=float(rp.get("rope_theta", c.get("rope_theta", 10000.0))),
        intermediate=int(c["intermediate_size"]) if c.get("intermediate_size") else None,
        shared_expert_intermediate=int(c.get("shared_expert_intermediate_size") or 0),
        layer_types=tuple(need("layer_types")) if q35 else (),
        partial_rotary_factor=float(
            rp.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0))
        ),
        linear_key_heads=int(c.get("linear_num_key_heads", 0)) if q35 else 0,
        linear_value_heads=int(c.get("linear_num_value_heads", 0)) if q35 else 0,
        linear_key_dim=int(c.get("linear_key_head_dim", 0)) if q35 else 0,
        linear_value_dim=int(c.get("linear_value_head_dim", 0)) if q35 else 0,
        linear_conv_kernel=int(c.get("linear_conv_kernel_dim", 4)),
        tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
        dtype=str(c.get("dtype") or c.get("torch_dtype") or ""),
    )


def read_shape(directory: str | Path) -> ModelShape:
    """ModelShape of an HF checkpoint directory (its config.json)."""
    return shape_of(text_config(directory), directory)


def hf_config(directory: str | Path):
    """The transformers config object of DIR's language model (Qwen3_5MoeTextConfig or
    Qwen3MoeConfig): what t1.train.megatron.model / convert take as `hf_config`."""
    c = dict(text_config(directory))
    arch = _arch(str(c.get("model_type", "")), Path(directory))
    if arch == "qwen3_5_moe":
        from transformers import Qwen3_5MoeTextConfig as Cls
    else:
        from transformers import Qwen3MoeConfig as Cls
    c.pop("model_type", None)
    c.pop("architectures", None)
    return Cls(**c)


def _given(cfg: Config) -> tuple[str, set[str]]:
    given = given_keys(cfg.model)
    if given is None:  # built in code: compare every key
        return "<config>", {f.name for f in dataclasses.fields(ModelConfig)}
    return given[0], set(given[1])


def check(cfg: Config, shape: ModelShape | None = None) -> list[str]:
    """Every value of cfg's `model:` section (and tokenizer.vocab_size) that disagrees with
    cfg.model.init_from's config.json, one error each naming both; [] without init_from."""
    directory = cfg.model.init_from
    if not directory:
        return []
    shape = shape or read_shape(directory)
    source, keys = _given(cfg)
    ckpt = Path(directory) / "config.json"
    errors = []
    for key in sorted(keys):
        if key in NOT_ARCHITECTURE or key not in COMPARED:
            continue
        ckpt_key = COMPARED[key][1]
        have, want = getattr(cfg.model, key), shape_value(shape, key)
        if want is None:  # e.g. no dense intermediate_size in a Qwen3.5-MoE config
            continue
        if (float(have) != float(want)) if isinstance(want, float) else have != want:
            errors.append(
                f"{source}: model.{key} = {have!r} but {ckpt}: {ckpt_key} = {want!r} "
                "(model.init_from sets the architecture: drop the key or give the checkpoint's value)"
            )
    tok = given_keys(cfg.tokenizer)
    tok_source, tok_keys = (tok[0], tok[1]) if tok else (source, {"vocab_size"})
    if "vocab_size" in tok_keys and cfg.tokenizer.vocab_size != shape.vocab:
        errors.append(
            f"{tok_source}: tokenizer.vocab_size = {cfg.tokenizer.vocab_size!r} but {ckpt}: "
            f"vocab_size = {shape.vocab!r}"
        )
    return errors


def model_config(shape: ModelShape, base: ModelConfig) -> ModelConfig:
    """`base` with every architecture key replaced by the checkpoint's (train_dtype and
    init_from kept; `intermediate` kept where the checkpoint has none)."""
    upd = {k: shape_value(shape, k) for k in COMPARED if shape_value(shape, k) is not None}
    return dataclasses.replace(base, **upd)


def resolve(cfg: Config) -> Config:
    """cfg itself without init_from; else raises SpecMismatch listing every disagreement, or
    returns cfg whose `model:` (and tokenizer.vocab_size) are the checkpoint's."""
    if not cfg.model.init_from:
        return cfg
    shape = read_shape(cfg.model.init_from)
    errors = check(cfg, shape)
    if errors:
        raise SpecMismatch(
            f"model.init_from {cfg.model.init_from}: {len(errors)} value(s) disagree with the "
            "checkpoint:\n  " + "\n  ".join(errors)
        )
    return dataclasses.replace(
        cfg,
        model=model_config(shape, cfg.model),
        tokenizer=dataclasses.replace(cfg.tokenizer, vocab_size=shape.vocab),
    )


def memory_spec(cfg: Config):
    """The memory planner's ModelSpec (t1.model.memory_spec) of cfg: the checkpoint's
    architecture when model.init_from is set (framework hf; plan.py switches it), else
    memory_spec.tiny_spec(cfg)."""
    from t1.model import memory_spec as MS

    base = MS.tiny_spec(cfg)
    if not cfg.model.init_from:
        return base
    s = read_shape(cfg.model.init_from)
    q35 = s.arch == "qwen3_5_moe"
    return dataclasses.replace(
        base,
        name=Path(cfg.model.init_from).name or "init_from",
        layers=s.layers,
        hidden=s.hidden,
        vocab=s.vocab,
        heads=s.heads,
        kv_heads=s.kv_heads,
        head_dim=s.head_dim,
        experts=s.experts,
        top_k=s.top_k,
        expert_ffn=s.expert_intermediate,
        shared_expert_ffn=s.shared_expert_intermediate,
        attn_output_gate=q35,
        full_attention_interval=s.full_attention_interval(),
        linear_key_heads=s.linear_key_heads,
        linear_value_heads=s.linear_value_heads,
        linear_key_dim=s.linear_key_dim,
        linear_value_dim=s.linear_value_dim,
        linear_conv_kernel=s.linear_conv_kernel,
    )

"""One model spec: the 122B preset's `model:` section is what the planner sizes, what
`t1 init-policy` builds, and what a checkpoint's config.json is checked against.

    .venv/bin/pytest tests/test_model_spec.py -q
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from t1.config import load_config
from t1.model import memory_spec, spec
from t1.model.policy import _causal_lm_class, hf_config

PRESET = "workflow/config/qwen3.5-122b-a10b.yaml"


def _config_json(tmp_path, cfg):
    """The config.json `t1 init-policy` would write for cfg's `model:` section."""
    d = tmp_path / "ckpt"
    d.mkdir()
    c = hf_config(cfg.model, cfg.tokenizer.vocab_size).to_dict()
    (d / "config.json").write_text(json.dumps(c))
    return d


def test_the_planner_sizes_the_model_init_policy_builds():
    """Parameters of the HF model built from the preset (meta device: no memory) equal the
    planner's count of QWEN35_122B, which is read from the same file."""
    cfg = load_config(PRESET)
    assert memory_spec.QWEN35_122B == memory_spec.tiny_spec(
        cfg, name="qwen3.5-122b-a10b", framework="megatron"
    )
    with torch.device("meta"):
        model = _causal_lm_class(cfg.model.arch)(hf_config(cfg.model, cfg.tokenizer.vocab_size))
    built = sum(p.numel() for p in model.parameters())
    planned = memory_spec.QWEN35_122B.param_counts()["total"]
    assert built == pytest.approx(planned, rel=1e-3), (built, planned)
    assert 121e9 < built < 123e9  # Qwen3.5-122B-A10B
    # the negative control: the tiny defaults of the linear-attention heads are another model
    tiny_heads = dataclasses.replace(cfg.model, linear_key_heads=0, linear_value_heads=0)
    with torch.device("meta"):
        other = _causal_lm_class(cfg.model.arch)(hf_config(tiny_heads, cfg.tokenizer.vocab_size))
    assert sum(p.numel() for p in other.parameters()) != built


def test_a_checkpoint_of_the_preset_agrees_and_a_changed_key_is_named(tmp_path):
    cfg = load_config(PRESET)
    d = _config_json(tmp_path, cfg)
    shape = spec.read_shape(d)
    with_ckpt = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, init_from=str(d)))
    assert spec.check(with_ckpt, shape) == []
    assert spec.memory_spec(with_ckpt).param_counts() == memory_spec.QWEN35_122B.param_counts()
    raw = json.loads((d / "config.json").read_text())
    raw["linear_num_value_heads"] = 32
    (d / "config.json").write_text(json.dumps(raw))
    errors = spec.check(with_ckpt)
    assert len(errors) == 1 and "model.linear_value_heads = 64" in errors[0]
    assert "linear_num_value_heads = 32" in errors[0]

"""t1/model/checkpoint_names.py: every tensor save_pretrained writes maps to the slice of the
in-memory model it came from (checked against transformers' own conversion, both families)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from safetensors.torch import load_file

from t1.config import load_config
from t1.model.checkpoint_names import checkpoint_tensors, slot
from t1.model.policy import build_policy, save_policy


@pytest.mark.parametrize("arch", ["qwen3_moe", "qwen3_5_moe"])
def test_every_saved_tensor_is_the_slice_it_names(tmp_path, arch):
    cfg = load_config("workflow/config/tiny.yaml")
    model = build_policy(dataclasses.replace(cfg.model, arch=arch), 300, 0)
    save_policy(model, tmp_path / "a")
    saved: dict[str, torch.Tensor] = {}
    for f in sorted((tmp_path / "a").glob("*.safetensors")):
        saved.update(load_file(str(f)))
    params = model.state_dict()
    per_expert = [n for n in saved if ".mlp.experts." in n and n not in params]
    assert per_expert, "the checkpoint stores experts one by one"
    for name, t in saved.items():
        view = slot(params, name)
        assert view is not None, name
        assert torch.equal(view, t), name
    # every element of the model is named exactly once
    covered = sum(t.numel() for t in saved.values())
    assert covered == sum(p.numel() for p in params.values())
    # the inverse: the in-memory model spelled in checkpoint names is the saved checkpoint
    back = dict(checkpoint_tensors(params))
    assert sorted(back) == sorted(saved)
    assert all(torch.equal(back[n], saved[n]) for n in saved)
    assert slot(params, "model.layers.0.mlp.experts.99.gate_proj.weight") is None
    assert slot(params, "model.layers.0.nothing.weight") is None

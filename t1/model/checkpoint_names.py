"""Checkpoint tensor names -> the slice of a loaded HF model's parameter they fill.

    from t1.model.checkpoint_names import slot
    view = slot(model.state_dict(), "model.layers.0.mlp.experts.3.gate_proj.weight")
    view.copy_(tensor)          # writes rows [0, F) of expert 3 of mlp.experts.gate_up_proj

HF MoE checkpoints (what save_pretrained writes, what SGLang loads and what a distributed weight
update sends: t1.train.megatron.export) store one tensor per expert
(`mlp.experts.E.{gate,up,down}_proj.weight`), while transformers 5 keeps the experts of a layer
fused in memory: `mlp.experts.gate_up_proj` [E, 2F, H] (expert E's gate rows, then its up rows)
and `mlp.experts.down_proj` [E, H, F]. `slot` maps either spelling to a view of the in-memory
parameter (a name the model holds as it is maps to itself), or None when it names nothing here.
"""

from __future__ import annotations

import re

import torch

_EXPERT = re.compile(
    r"^(?P<head>.*\.mlp\.experts)\.(?P<e>\d+)\.(?P<proj>gate|up|down)_proj\.weight$"
)


def slot(params: dict[str, torch.Tensor], name: str) -> torch.Tensor | None:
    """The view of `params` (a state dict) that checkpoint tensor `name` fills, or None."""
    if name in params:
        return params[name]
    m = _EXPERT.match(name)
    if m is None:
        return None
    head, e, proj = m["head"], int(m["e"]), m["proj"]
    if proj == "down":
        fused = params.get(f"{head}.down_proj")
        return None if fused is None or e >= fused.shape[0] else fused[e]
    fused = params.get(f"{head}.gate_up_proj")
    if fused is None or e >= fused.shape[0] or fused.shape[1] % 2:
        return None
    half = fused.shape[1] // 2
    return fused[e, :half] if proj == "gate" else fused[e, half:]


def checkpoint_tensors(params: dict[str, torch.Tensor]):
    """(name, tensor) in checkpoint names: each fused expert parameter of `params` split into
    its per-expert tensors (views), everything else as it is; the inverse of `slot`."""
    for name, t in params.items():
        head, _, leaf = name.rpartition(".")
        if head.endswith(".mlp.experts") and leaf == "gate_up_proj" and t.dim() == 3:
            half = t.shape[1] // 2
            for e in range(t.shape[0]):
                yield f"{head}.{e}.gate_proj.weight", t[e, :half]
                yield f"{head}.{e}.up_proj.weight", t[e, half:]
        elif head.endswith(".mlp.experts") and leaf == "down_proj" and t.dim() == 3:
            for e in range(t.shape[0]):
                yield f"{head}.{e}.down_proj.weight", t[e]
        else:
            yield name, t

"""The core attention the trainer's full-attention layers run: `train.attention`.

    from t1.train.megatron.attention import resolve, core_attention
    kind = resolve(cfg.train.attention)          # "te" on a GPU node with Transformer Engine
    spec.submodules.self_attention.submodules.core_attention = core_attention(kind)

* `local`: megatron-core's `DotProductAttention` (the local spec's): it materializes the
  [b, heads, s, s] score matrix and keeps it (and the softmax) for backward. At the 122B
  preset's 65,536-token rows that is hundreds of GiB per GPU (`t1 plan-memory --measure
  --attention local`): the CPU's only choice, and exact against HF on the tiny models.
* `te`: Transformer Engine's `TEDotProductAttention` (flash / cuDNN fused attention: the score
  matrix is never stored; the backward recomputes it). Only the core attention changes: the
  QKV and output projections stay the local spec's column / row parallel linears, so the
  weight names, the HF conversion and the sharding rules are unchanged (convert.py).
* `auto`: `te` where Transformer Engine imports and CUDA is present, else `local`.

The memory measure (measure.py) sizes `te` with its flash stand-in (the score matrix not saved),
since Transformer Engine does not import on the CPU where the measure runs.
"""

from __future__ import annotations

import importlib.util

CHOICES = ("auto", "local", "te")


def te_available() -> bool:
    """Transformer Engine imports and there is a CUDA device (what TEDotProductAttention needs)."""
    import torch

    return importlib.util.find_spec("transformer_engine") is not None and torch.cuda.is_available()


def resolve(choice: str, *, on_gpu: bool | None = None) -> str:
    """`train.attention` -> "local" | "te" on this machine (`on_gpu=True`: on the cluster's GPU
    nodes, where the image ships Transformer Engine: what the memory plan sizes)."""
    if choice not in CHOICES:
        raise ValueError(f"train.attention {choice!r}: expected one of {', '.join(CHOICES)}")
    if choice != "auto":
        return choice
    if on_gpu is None:
        on_gpu = te_available()
    return "te" if on_gpu else "local"


def core_attention(kind: str):
    """The module class of the layer spec's `core_attention` for a resolved choice."""
    if kind == "local":
        from megatron.core.transformer.dot_product_attention import DotProductAttention

        return DotProductAttention
    if kind == "te":
        if importlib.util.find_spec("transformer_engine") is None:
            raise RuntimeError(
                "train.attention te: Transformer Engine does not import here (it needs a GPU "
                "node with the training image); use auto or local"
            )
        from megatron.core.extensions.transformer_engine import TEDotProductAttention

        return TEDotProductAttention
    raise ValueError(f"core attention {kind!r}: expected local or te (resolve() it first)")

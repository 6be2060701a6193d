"""KV caches of the local engine: prefix matching, batching and un-batching.

    n = common_prefix(session.tokens, prompt)       # positions a session's cache can serve
    cache, pads = stack_caches(caches)              # batch-1 caches -> one left-padded batch
    row = row_cache(cache, i, pads[i])              # and back, for the row that finished

Only plain KV layers (transformers' `DynamicLayer`) can be cropped or batched; Qwen3.5's
linear attention states cannot (`croppable`, `batchable`). Used by t1/engine/local.py.
"""

from __future__ import annotations

import torch

from t1.engine.base import GenerateRequest


def first_of_session(requests: list[GenerateRequest]):
    """Yield (is first request of its session in this batch, request)."""
    seen: set[str] = set()
    for r in requests:
        first = r.session_id is None or r.session_id not in seen
        if r.session_id is not None:
            seen.add(r.session_id)
        yield first, r


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    ta, tb = torch.tensor(a[:n]), torch.tensor(b[:n])
    return int((ta != tb).nonzero()[0, 0])


def _is_kv_layer(layer) -> bool:
    from transformers.cache_utils import DynamicLayer

    return type(layer) is DynamicLayer


def batchable(cache) -> bool:
    if not hasattr(cache, "layers"):  # the lean path's RowCache (t1/engine/lean.py)
        return False
    return all(_is_kv_layer(layer) for layer in cache.layers)


def croppable(cache) -> bool:
    return not hasattr(cache, "layers") or batchable(cache)


def stack_caches(caches: list) -> tuple[object, list[int]]:
    """Batch-1 KV caches of different lengths -> one left-padded cache + pad per row."""
    from transformers.cache_utils import DynamicCache

    if len(caches) == 1:
        return caches[0], [0]
    lengths = [c.get_seq_length() for c in caches]
    width = max(lengths)
    pads = [width - n for n in lengths]
    data = []
    for layer in range(len(caches[0].layers)):
        keys, values = [], []
        for c, pad in zip(caches, pads, strict=True):
            k, v = c.layers[layer].keys, c.layers[layer].values
            keys.append(torch.nn.functional.pad(k, (0, 0, pad, 0)))
            values.append(torch.nn.functional.pad(v, (0, 0, pad, 0)))
        data.append((torch.cat(keys), torch.cat(values)))
    return DynamicCache(ddp_cache_data=data), pads


def row_cache(cache, index: int, pad: int):
    """Row `index` of a batched cache, left padding removed, as a batch-1 cache."""
    from transformers.cache_utils import DynamicCache

    data = [
        (
            layer.keys[index : index + 1, :, pad:].clone(),
            layer.values[index : index + 1, :, pad:].clone(),
        )
        for layer in cache.layers
    ]
    return DynamicCache(ddp_cache_data=data)

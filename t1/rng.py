"""Every random generator a run draws from, captured and restored together.

    state = capture_rng()      # python, numpy, torch CPU, torch CUDA (when present)
    restore_rng(state)         # the next draws equal those after the capture

The captured value holds only tensors, ints, floats, strings, lists and tuples, so a
`t1.store.ckpt` part of it loads with `weights_only=True`. The trainer (t1/train/hf.py) adds its own
`torch.Generator` (data shuffles) beside it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any


def capture_rng() -> dict[str, Any]:
    """Python, NumPy (if installed) and torch CPU/CUDA generator states, `torch`-format safe."""
    import torch

    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np

        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype("int64")),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        }
    except ImportError:
        pass
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: Mapping[str, Any]) -> None:
    """Inverse of `capture_rng`."""
    import torch

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        s = state["numpy"]
        keys = s["keys"].numpy().astype("uint32")
        np.random.set_state((s["kind"], keys, s["pos"], s["has_gauss"], s["cached"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])

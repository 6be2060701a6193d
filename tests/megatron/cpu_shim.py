"""The CPU shims the megatron tests need: `torch.cuda.current_device()` -> "cpu", and (for
activation recompute) megatron-core's CUDA RNG save/restore as no-ops.

    from tests.megatron.cpu_shim import install; install()

megatron-core 0.16.1 moves the rotary frequencies and the router weights to
`torch.cuda.current_device()` on their first forward; on a machine without CUDA that call
raises. Pointing it at the CPU is all the forward/backward of these tests need (the RNG tracker
and the missing Transformer Engine symbol are handled by t1.train.megatron.runtime). Activation
recompute (`tensor_parallel.checkpoint`) saves and restores the CUDA RNG state around each
recomputed layer (`random._get_cuda_rng_state` / `_set_cuda_rng_state`, which need CUDA); the
CPU state is restored by megatron-core itself and the models have no dropout, so on the CPU
those two become no-ops. Tests only.
"""

from __future__ import annotations

import torch


def install(recompute: bool = True) -> None:
    """recompute=False: only the device shim (no megatron-core import: a launch that refuses
    before building a model stays fast); enough without activation recompute."""
    if torch.cuda.is_available() or getattr(torch.cuda.current_device, "t1_cpu_shim", False):
        return

    def current_device() -> str:
        return "cpu"

    current_device.t1_cpu_shim = True
    torch.cuda.current_device = current_device
    if not recompute:
        return
    from megatron.core.tensor_parallel import random as mrandom

    mrandom._get_cuda_rng_state = lambda *a, **k: torch.empty(0, dtype=torch.uint8)
    mrandom._set_cuda_rng_state = lambda *a, **k: None

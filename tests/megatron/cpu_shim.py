"""The one CPU shim the megatron tests need: `torch.cuda.current_device()` -> "cpu".

    from tests.megatron.cpu_shim import install; install()

megatron-core 0.16.1 moves the rotary frequencies and the router weights to
`torch.cuda.current_device()` on their first forward; on a machine without CUDA that call
raises. Pointing it at the CPU is all the CPU runs of these tests need (the RNG tracker and
the missing Transformer Engine symbol are handled by t1.train.megatron.runtime). Tests only.
"""

from __future__ import annotations

import torch


def install() -> None:
    if torch.cuda.is_available() or getattr(torch.cuda.current_device, "t1_cpu_shim", False):
        return

    def current_device() -> str:
        return "cpu"

    current_device.t1_cpu_shim = True
    torch.cuda.current_device = current_device

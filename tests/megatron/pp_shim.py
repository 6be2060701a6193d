"""The CPU shim of megatron-core 0.16.1's pipeline schedules (tests only).

    import pp_shim; pp_shim.install()   # after cpu_shim.install(); before a PP > 1 schedule runs

What it replaces, and nothing else:

* `megatron/core/pipeline_parallel/schedules.py` allocates the token counter of every schedule
  with `torch.zeros([], dtype=torch.int, device="cuda")` (forward_backward_no_pipelining,
  the interleaved and the non-interleaved 1F1B schedules), which raises "Torch not compiled
  with CUDA enabled" on this machine. The module's `torch` becomes a proxy whose tensor
  factories (`zeros`, `ones`, `empty`, `full`, `tensor`) read device "cuda" as the CPU; every
  other attribute is torch's.
* `megatron/core/pipeline_parallel/p2p_communication.py` calls `torch.cuda.synchronize()`
  after a batched send/recv (`batch_p2p_sync`, on by default) and when it exchanges shapes;
  the module's `torch` becomes a proxy whose `torch.cuda.synchronize` is a no-op (gloo's
  requests were already waited on; there is no device stream to synchronize). Its receive
  buffers use `torch.cuda.current_device()`, which cpu_shim.py already points at the CPU.

The schedules themselves (1F1B order, p2p send/recv of activations and gradients over the
pipeline group with gloo, backward_step) are megatron-core's code as installed.
"""

from __future__ import annotations

import functools

import torch


def _cpu(device):
    if device is None:
        return None
    return "cpu" if str(device).startswith("cuda") else device


class _TorchOnCPU:
    """`torch`, with device='cuda' in the tensor factories read as the CPU."""

    def __getattr__(self, name):
        return getattr(torch, name)


def _factory(fn):
    @functools.wraps(fn)
    def call(*a, device=None, **k):
        return fn(*a, device=_cpu(device), **k)

    return staticmethod(call)


for _name in ("tensor", "zeros", "ones", "empty", "full"):
    setattr(_TorchOnCPU, _name, _factory(getattr(torch, _name)))


class _CudaNoSync:
    """`torch.cuda` with `synchronize` a no-op."""

    def __getattr__(self, name):
        return getattr(torch.cuda, name)

    @staticmethod
    def synchronize(*a, **k) -> None:  # noqa: ARG004
        return None


class _TorchNoSync:
    cuda = _CudaNoSync()

    def __getattr__(self, name):
        return getattr(torch, name)


def install() -> None:
    if torch.cuda.is_available():
        return
    from megatron.core.pipeline_parallel import p2p_communication, schedules

    if getattr(schedules, "t1_pp_shim", False):
        return
    schedules.torch = _TorchOnCPU()
    p2p_communication.torch = _TorchNoSync()
    schedules.t1_pp_shim = True

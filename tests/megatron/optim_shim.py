"""The CPU shim of megatron-core's mixed-precision optimizer path (tests only).

    import optim_shim; optim_shim.install()   # after cpu_shim.install()

megatron-core 0.16.1's `MixedPrecisionOptimizer` / `DistributedOptimizer` (and its grad
clipping, grad scaler, param/grad buffers) allocate small bookkeeping tensors on
`device='cuda'` literally (e.g. optimizer.py `self._scale_one = torch.tensor([1.0], ...,
device='cuda')`, clip_grads.py `total_norm_cuda`), and classify parameters by their CUDA type
string (`param.type() in ['torch.cuda.HalfTensor', 'torch.cuda.BFloat16Tensor']`,
distrib_optimizer.py), so on a machine without CUDA the bf16 optimizer cannot even be built.
This shim points those modules' `torch` at a proxy whose tensor factories map device 'cuda'
to the CPU, and answers `Tensor.type()` (no arguments, CPU tensor) with the CUDA spelling
while megatron-core's optimizer code that checks it runs (DistributedOptimizer construction,
gradient clipping). Nothing of the
arithmetic changes: the fp32 main weights, the Adam state and the step are megatron-core's.
"""

from __future__ import annotations

import contextlib
import functools

import torch

_MODULES = (
    "megatron.core.optimizer.optimizer",
    "megatron.core.optimizer.distrib_optimizer",
    "megatron.core.optimizer.clip_grads",
    "megatron.core.optimizer.grad_scaler",
    "megatron.core.utils",  # local_multi_tensor_l2_norm: device="cuda"
)


def _cpu(device):
    if device is None:
        return None
    return "cpu" if str(device).startswith("cuda") else device


class _TorchOnCPU:
    """`torch`, with device='cuda' in the tensor factories read as the CPU."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def _factory(fn):
        @functools.wraps(fn)
        def call(*a, device=None, **k):
            return fn(*a, device=_cpu(device), **k)

        return call


for _name in ("tensor", "zeros", "ones", "empty", "full", "zeros_like", "empty_like"):
    setattr(_TorchOnCPU, _name, staticmethod(_TorchOnCPU._factory(getattr(torch, _name))))


@contextlib.contextmanager
def cuda_type_names():
    """`Tensor.type()` of a CPU tensor spelled as its CUDA twin ('torch.cuda.BFloat16Tensor')."""
    orig = torch.Tensor.type

    def typ(self, *a, **k):
        got = orig(self, *a, **k)
        if (
            not a
            and not k
            and isinstance(got, str)
            and got.startswith("torch.")
            and (not got.startswith("torch.cuda."))
        ):
            return "torch.cuda." + got[len("torch.") :]
        return got

    torch.Tensor.type = typ
    try:
        yield
    finally:
        torch.Tensor.type = orig


def install() -> None:
    if torch.cuda.is_available():
        return
    import importlib

    from megatron.core.optimizer import distrib_optimizer

    if getattr(distrib_optimizer, "t1_optim_shim", False):
        return
    proxy = _TorchOnCPU()
    for name in _MODULES:
        importlib.import_module(name).torch = proxy
    init = distrib_optimizer.DistributedOptimizer.__init__

    @functools.wraps(init)
    def shimmed_init(self, *a, **k):
        with cuda_type_names():
            init(self, *a, **k)

    distrib_optimizer.DistributedOptimizer.__init__ = shimmed_init
    from megatron.core.optimizer import clip_grads, optimizer

    clip = clip_grads.clip_grad_by_total_norm_fp32  # asserts grad.type() == 'torch.cuda.Float..'

    @functools.wraps(clip)
    def shimmed_clip(*a, **k):
        with cuda_type_names():
            return clip(*a, **k)

    clip_grads.clip_grad_by_total_norm_fp32 = shimmed_clip
    optimizer.clip_grad_by_total_norm_fp32 = shimmed_clip
    distrib_optimizer.t1_optim_shim = True

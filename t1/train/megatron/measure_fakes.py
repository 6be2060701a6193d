"""What the memory measure (t1/train/megatron/measure.py) runs in place of what cannot run on
fake tensors, and how it counts: a dispatch-mode tracker of live tensor storage (`LiveBytes`),
stand-ins for fla's Gated DeltaNet kernels and flash attention, a balanced token dispatcher
(routing counts are data-dependent), the CUDA calls megatron-core makes while building, and
the list of stand-ins the result reports (`STAND_INS`).
"""

from __future__ import annotations

import contextlib
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

GIB = 1024**3
RUNTIME_RESERVE = 4.0 * GIB  # t1.model.memory_breakdown's runtime item


# ---------------------------------------------------------------- live-storage tracker


class LiveBytes(TorchDispatchMode):
    """Bytes of tensor storages created by ops while active and still alive; `peak` the max.
    Storages in `ignore` (the parameters) are never counted."""

    def __init__(self, ignore=()) -> None:
        super().__init__()
        self.ignore = {id(s) for s in ignore}
        self.keep = list(ignore)
        self.refs: dict[int, weakref.ref] = {}
        self.live = self.peak = 0

    def _freed(self, key: int, nbytes: int, _ref) -> None:
        self.refs.pop(key, None)
        self.live -= nbytes

    def _track(self, t: torch.Tensor) -> None:
        st = t.untyped_storage()
        key = id(st)
        if key in self.ignore or key in self.refs:
            return
        n = st.nbytes()
        self.refs[key] = weakref.ref(st, lambda r, k=key, n=n: self._freed(k, n, r))
        self.live += n
        self.peak = max(self.peak, self.live)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out


# ---------------------------------------------------------------- stand-ins


class _GDNRecurrence(torch.autograd.Function):
    """Stand-in for fla's chunk_gated_delta_rule: output [B, T, Hv, Dv] like v; saves q, k, v,
    g, beta for backward (what the chunked kernel keeps)."""

    @staticmethod
    def forward(ctx, q, k, v, g, beta):
        ctx.save_for_backward(q, k, v, g, beta)
        return torch.empty_like(v)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, g, beta = ctx.saved_tensors
        return (
            torch.empty_like(q),
            torch.empty_like(k),
            torch.empty_like(v),
            torch.empty_like(g),
            torch.empty_like(beta),
        )


class _FlashAttention(torch.autograd.Function):
    """Stand-in for a flash-attention kernel (TE / flash-attn): output [sq, b, np * hn]; saves
    q, k, v, the output and the fp32 log-sum-exp [b, np, sq], no [sq, sk] matrix."""

    @staticmethod
    def forward(ctx, q, k, v):
        sq, b, heads, d = q.shape
        out = q.new_empty(sq, b, heads * d)
        lse = q.new_empty(b, heads, sq, dtype=torch.float32)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):  # noqa: ARG004
        q, k, v, _, _ = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _flash_forward(self, query, key, value, *args, **kwargs):  # noqa: ARG001
    return _FlashAttention.apply(query, key, value)


def _gdn_rule(q, k, v, g=None, beta=None, **_):
    return _GDNRecurrence.apply(q, k, v, g, beta), None


def _l2norm(x, eps: float = 1e-6):
    y = x.float()
    return (y * torch.rsqrt((y * y).sum(-1, keepdim=True) + eps)).to(x.dtype)


class BalancedDispatcher:
    """megatron-core's alltoall token dispatcher's tensors under balanced routing (each rank
    sends and receives N*k token copies; ETP ranks all-gather them)."""

    def __init__(self, cfg, num_local_experts: int) -> None:
        from megatron.core import parallel_state as ps

        self.k, self.local = cfg.moe_router_topk, num_local_experts
        self.ep = ps.get_expert_model_parallel_group()
        self.etp = ps.get_expert_tensor_parallel_group()
        self.ep_size = ps.get_expert_model_parallel_world_size()
        self.etp_size = ps.get_expert_tensor_parallel_world_size()

    def dispatch_preprocess(self, hidden, routing_map, probs):  # noqa: ARG002
        self.shape = hidden.shape
        x = hidden.reshape(-1, hidden.shape[-1])
        n = x.shape[0]
        self.idx = torch.arange(n * self.k, device=x.device) % n
        self.probs = probs.reshape(-1)[: n * self.k].contiguous()
        return x.index_select(0, self.idx), self.probs

    def token_dispatch(self, x, probs):
        from megatron.core.tensor_parallel import mappings

        if self.ep_size > 1:
            x = mappings.all_to_all(self.ep, x)
        if self.etp_size > 1:
            x = mappings.gather_from_sequence_parallel_region(x, group=self.etp)
            probs = mappings.gather_from_sequence_parallel_region(probs, group=self.etp)
        return x, probs

    def dispatch_postprocess(self, x, probs):
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        rows, per = x.shape[0], x.shape[0] // self.local
        with unset_fake_temporarily():
            counts = torch.full((self.local,), per, dtype=torch.long)
            counts[0] += rows - per * self.local
        return x.index_select(0, torch.arange(rows, device=x.device)), counts, probs

    def combine_preprocess(self, out):
        return out.index_select(0, torch.arange(out.shape[0], device=out.device))

    def token_combine(self, out):
        from megatron.core.tensor_parallel import mappings

        if self.etp_size > 1:
            out = mappings.reduce_scatter_to_sequence_parallel_region(out, group=self.etp)
        if self.ep_size > 1:
            out = mappings.all_to_all(self.ep, out)
        return out

    def combine_postprocess(self, out):
        w = out * self.probs.unsqueeze(-1).to(out.dtype)
        n = self.shape.numel() // self.shape[-1]
        y = torch.zeros(n, out.shape[-1], dtype=out.dtype, device=out.device)
        y = y.index_add(0, self.idx, w)
        return y.view(self.shape)


@contextlib.contextmanager
def _patched(items):
    """Set (object, attribute, value) triples; restore them on exit."""
    old = [(o, a, getattr(o, a, None)) for o, a, _ in items]
    try:
        for o, a, v in items:
            setattr(o, a, v)
        yield
    finally:
        for o, a, v in reversed(old):
            setattr(o, a, v)


def _cuda_shims():
    """megatron-core asks torch.cuda.current_device() for the device of GDN buffers, rotary
    frequencies and router weights: the CPU (fake tensors on the CPU) while measuring; recompute's
    CUDA RNG save / restore become no-ops (no dropout)."""
    from megatron.core.ssm import gated_delta_net as gdn
    from megatron.core.tensor_parallel import random as mrandom
    from megatron.core.transformer.moe import moe_utils

    return [
        (mrandom, "_get_cuda_rng_state", lambda *a, **k: torch.empty(0, dtype=torch.uint8)),
        (mrandom, "_set_cuda_rng_state", lambda *a, **k: None),
        (torch.cuda, "current_device", lambda: "cpu"),
        (gdn, "HAVE_FLA", True),
        (gdn, "l2norm", _l2norm),
        (gdn, "chunk_gated_delta_rule", _gdn_rule),
        (moe_utils, "te_general_gemm", getattr(moe_utils, "te_general_gemm", None)),
        (torch._dynamo.config, "disable", True),
    ]


STAND_INS = {
    "gated_delta_rule": "fla chunk_gated_delta_rule (Triton, not importable on this machine): "
    "stand-in returns the output shape and saves q, k, v, g, beta for backward (the chunked "
    "kernel's saved inputs); the kernel's own transient workspace is not measured",
    "l2norm": "fla l2norm (Triton) -> its torch formula",
    "token_dispatcher": "routing counts are data-dependent (.tolist() cannot run fake): "
    "balanced stand-in of megatron-core's alltoall dispatcher; router, shared expert and "
    "SequentialMLP experts are megatron-core's code",
    "runtime": "CUDA context / NCCL / allocator slack cannot be measured: the planner's fixed "
    "4 GiB reserve is added",
    "pipeline": "one micro-batch measured; 1F1B stage i adds (pp - i - 1) x its saved activations",
}

"""What megatron-core's GatedDeltaNet needs from flash-linear-attention (`fla`) on a CPU, for tests.

    from tests.megatron.fla_shim import install; install()   # before building a Qwen3.5 GPTModel

`megatron/core/ssm/gated_delta_net.py` (megatron-core 0.16.1) does, at import,
`from fla.modules.l2norm import l2norm` and `from fla.ops.gated_delta_rule import
chunk_gated_delta_rule`, setting `HAVE_FLA`; `GatedDeltaNet.__init__` raises ImportError when
it is False. fla does not work on this CPU box, measured (pip, flash-linear-attention 0.6.0 +
fla-core 0.6.0): without triton `import fla.modules` fails (`ModuleNotFoundError: No module
named 'triton'`); with triton 3.9.0 it imports, but calling `l2norm` on a CPU tensor raises
`RuntimeError: 0 active drivers ([]). There should only be one.` (Triton kernels need a GPU),
and the installed fla also makes transformers route HF Qwen3.5's gated delta rule to fla's
kernel, so the HF model stops running on the CPU. Hence a shim, which patches the three
module-level names of `megatron.core.ssm.gated_delta_net` and nothing else:

* `HAVE_FLA = True`, so `GatedDeltaNet.__init__` builds the layer;
* `l2norm` (fla's Triton L2 norm, called by `GatedDeltaNet.forward` on q and k whenever
  `use_qk_l2norm`) -> `torch_l2norm`: fla's formula in torch, x * rsqrt(sum(x^2) + eps),
  eps = 1e-6, in fp32, cast back to x's dtype (= HF's `l2norm` in the Qwen3.5 model);
* `chunk_gated_delta_rule` (fla's Triton recurrence) -> `refuse`, which raises: the models of
  these tests are built with `deterministic_mode`, under which `GatedDeltaNet.forward` runs
  megatron-core's own `torch_chunk_gated_delta_rule`, so the fla kernel is never called.

Everything else in the layer (in_proj, the causal depthwise conv1d in torch, since the
`causal_conv1d` package is absent, decay g and beta, megatron-core's torch chunked gated delta
rule, the gated RMSNorm, out_proj) is megatron-core's code as installed. Where `fla` really
imports and CUDA is present, `install` does nothing. Tests only.
"""

from __future__ import annotations

import torch


def torch_l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """fla.modules.l2norm.l2norm's computation: x / sqrt(sum over the last dim of x^2 + eps)."""
    y = x.float()
    return (y * torch.rsqrt((y * y).sum(-1, keepdim=True) + eps)).to(x.dtype)


def refuse(*args, **kwargs):  # noqa: ARG001 - fla's signature
    raise RuntimeError(
        "tests/megatron/fla_shim.py: fla's chunk_gated_delta_rule (a Triton kernel) is not "
        "available on the CPU; build the model with deterministic_mode=True so GatedDeltaNet "
        "uses megatron-core's torch_chunk_gated_delta_rule"
    )


def install() -> None:
    from megatron.core.ssm import gated_delta_net as gdn

    if gdn.HAVE_FLA and torch.cuda.is_available():
        return  # the real fla on a GPU
    gdn.HAVE_FLA = True
    gdn.l2norm = torch_l2norm
    gdn.chunk_gated_delta_rule = refuse
    gdn.t1_fla_shim = True

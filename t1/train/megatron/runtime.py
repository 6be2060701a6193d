"""megatron-core's process state: importability, torch.distributed + model-parallel groups.

    from t1.train.megatron.runtime import setup, Parallel
    par = setup(Parallel(tp=1, ep=1))        # once per process (gloo on CPU, nccl on GPU)

megatron-core 0.16.1 has three places that matter here:
* `moe_utils.RouterGatingLinearFunction` reads the name `te_general_gemm`, which is only
  defined when Transformer Engine imports: without TE every MoE forward raises NameError. The
  intended fallback is `te_general_gemm = None` (plain torch.mm); `setup` sets it when absent.
* the CUDA RNG tracker: every attention forward forks it. We train without dropout (RL), so
  the tracker megatron-core itself offers for that case (`inference_rng_tracker=True`, whose
  fork is a no-op) is installed; weights come from HF checkpoints, never from its init.
* `torch.cuda.current_device()` is called by the rotary embedding and the router on their
  first forward: megatron-core does not run on a machine without CUDA. The CPU equivalence
  tests install a shim for it (tests/megatron/cpu_shim.py); `setup` refuses a CPU-only
  machine without it, naming the reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch


class MegatronUnavailable(RuntimeError):
    """megatron-core cannot run here (not installed, or no CUDA and no CPU shim)."""


def available() -> tuple[bool, str]:
    """(True, version) when megatron-core imports, else (False, the reason)."""
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import megatron.core as mc
    except Exception as e:  # noqa: BLE001 - report whatever the import raised
        return False, f"megatron-core does not import: {type(e).__name__}: {e}"
    return True, str(getattr(mc, "__version__", "?"))


def cpu_shimmed() -> bool:
    return bool(getattr(torch.cuda.current_device, "t1_cpu_shim", False))


@dataclass(frozen=True)
class Parallel:
    """Model-parallel sizes; DP = world / (tp * pp)."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    etp: int = 1


def setup(par: Parallel | None = None) -> Parallel:
    """Initialize torch.distributed (env:// from torchrun, else a one-process group) and
    megatron-core's groups for `par`; idempotent for the same sizes."""
    par = par or Parallel()
    ok, why = available()
    if not ok:
        raise MegatronUnavailable(f"train.backend megatron: {why} (pip install -e '.[megatron]')")
    if not torch.cuda.is_available() and not cpu_shimmed():
        raise MegatronUnavailable(
            "train.backend megatron: megatron-core 0.16.1 needs CUDA (its rotary embedding and "
            "router call torch.cuda.current_device()); on a CPU-only machine use train.backend hf "
            "(the CPU equivalence tests run it through tests/megatron/cpu_shim.py)"
        )
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None  # megatron-core 0.16.1 without TE: see the docstring
    if not dist.is_initialized():
        if "RANK" not in os.environ:
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(_free_port()))
            os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend)
    if ps.model_parallel_is_initialized():
        have = Parallel(
            ps.get_tensor_model_parallel_world_size(),
            ps.get_pipeline_model_parallel_world_size(),
            ps.get_expert_model_parallel_world_size(),
            ps.get_expert_tensor_parallel_world_size(),
        )
        if have == par:
            return par
        ps.destroy_model_parallel()
    ps.initialize_model_parallel(
        tensor_model_parallel_size=par.tp,
        pipeline_model_parallel_size=par.pp,
        expert_model_parallel_size=par.ep,
        expert_tensor_parallel_size=par.etp,
    )
    tensor_parallel.random.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
    return par


def ranks() -> dict[str, int]:
    """This process's rank in each model-parallel group."""
    from megatron.core import parallel_state as ps

    return {
        "tp": ps.get_tensor_model_parallel_rank(),
        "pp": ps.get_pipeline_model_parallel_rank(),
        "ep": ps.get_expert_model_parallel_rank(),
        "etp": ps.get_expert_tensor_parallel_rank(),
    }


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

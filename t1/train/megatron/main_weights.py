"""bf16 training with fp32 main weights: megatron-core's own mixed-precision optimizer.

    from t1.train.megatron.main_weights import MainWeightsAdam, ddp_config
    ddp = DistributedDataParallel(config=model.config, ddp_config=ddp_config(True), module=model)
    opt = MainWeightsAdam(ddp, lr=1e-6, betas=(0.9, 0.98), weight_decay=0.1, max_grad_norm=1.0)
    loss.backward(); finalize_model_grads([ddp]); norm = opt.step()

When the model's parameters are bf16, an Adam update at lr 1e-6 is far below bf16's spacing
(2^-8 relative: a weight of 0.02 moves only by >= 6e-5), so updating the bf16 parameters in
place rounds almost every step away. megatron-core's answer is its mixed-precision optimizer:
`get_megatron_optimizer(OptimizerConfig(optimizer="adam", bf16=True,
use_distributed_optimizer=True, ...))` builds a `DistributedOptimizer` (one per parameter kind:
dense and expert, chained) that keeps an fp32 copy ("main params") of this rank's shard of
every bf16 weight, moves the fp32 gradients of megatron-core's DDP buffers (`main_grad`,
`grad_reduce_in_fp32`) onto them, clips by the global norm (dense + expert, TP duplicates
counted once), runs Adam on fp32 and copies the result back into the bf16 weights. Adam
settings are the hf backend's (t1.train.hf.adamw): betas, eps 1e-8, decoupled weight decay on
matrices only (megatron-core's default rule: no decay on 1-D tensors and biases), clipping at
`max_grad_norm` with the same coefficient max / (norm + 1e-6) (0 = off), constant lr.

State (`state_dict` / `load_state_dict`, what t1.train.megatron.checkpoint writes per rank):
the fp32 main shards and the inner torch optimizer's Adam moments (megatron-core's own
`DistributedOptimizer.state_dict()` holds only the param groups: its per-parameter state goes
through `sharded_state_dict` / dist_checkpointing, which does not run on the CPU).

Offload (`move`): the bf16 weights live in the DDP's contiguous parameter buffers and are moved
with megatron-core's own `offload_to_cpu` / `reload_from_cpu` (storage resized in place, so the
parameter views stay valid); the fp32 main shards and Adam moments move like
`MegatronOptimizer.offload_to_cpu` does (`p.data`, state tensors), to any device. The DDP
gradient buffers are released while the role waits (megatron-core frees their storage and
re-allocates it zeroed: every update zeroes the gradients before its backward anyway).

Host-resident optimizer state (`host_state`, train.optimizer_offload): between steps this
role's fp32 main shards and Adam moments live on the host; `step()` brings them to the
compute device, steps there (megatron-core's step unchanged: the same arithmetic) and sends
them back. The forward/backward peak then holds no optimizer state, and the step's own peak
(weights + gradients + optimizer, no activations) is the other candidate; `measure.py` sizes
both. The cost is two host<->device copies of 12 bytes per parameter shard per step. The
idle-role offload above composes with it: `move` leaves the state on the host.

On a machine without CUDA megatron-core's optimizer allocates on device 'cuda' and checks CUDA
type names; the CPU tests patch that (tests/megatron/optim_shim.py, tests only).
"""

from __future__ import annotations

from typing import Any

import torch


def ddp_config(distributed_optimizer: bool):
    """megatron-core's DDP config of this backend: fp32 gradient buffers, no overlap; with the
    distributed optimizer (bf16 training) the buffers also hold the parameters."""
    from megatron.core.distributed import DistributedDataParallelConfig

    return DistributedDataParallelConfig(
        grad_reduce_in_fp32=True,
        overlap_grad_reduce=False,
        use_distributed_optimizer=distributed_optimizer,
    )


def optimizer_config(
    lr: float, betas: tuple[float, float], weight_decay: float, max_grad_norm: float
):
    """The OptimizerConfig equal to t1.train.hf.adamw + the trainer's clipping, in bf16."""
    from megatron.core.optimizer import OptimizerConfig

    return OptimizerConfig(
        optimizer="adam",
        lr=lr,
        min_lr=lr,
        weight_decay=weight_decay,
        adam_beta1=float(betas[0]),
        adam_beta2=float(betas[1]),
        adam_eps=1e-8,
        clip_grad=max(0.0, float(max_grad_norm)),
        bf16=True,
        params_dtype=torch.bfloat16,
        use_distributed_optimizer=True,
    )


class MainWeightsAdam:
    """megatron-core's chained DistributedOptimizer over one DDP-wrapped model (see the module
    docstring); `step()` -> the global gradient norm before clipping."""

    def __init__(
        self,
        ddp,
        *,
        lr: float,
        betas: tuple[float, float],
        weight_decay: float,
        max_grad_norm: float,
        host_state: bool = False,
    ) -> None:
        from megatron.core.optimizer import get_megatron_optimizer

        self.ddp = ddp
        self.host_state = host_state
        self.config = optimizer_config(lr, betas, weight_decay, max_grad_norm)
        self.opt = get_megatron_optimizer(self.config, [ddp])
        self.parts = list(getattr(self.opt, "chained_optimizers", [self.opt]))
        if host_state:
            self._move_state(torch.device("cpu"))

    def compute_device(self) -> torch.device:
        """Where the DDP's parameter buffers (the bf16 weights) live now."""
        for buf in self.ddp.buffers + self.ddp.expert_parallel_buffers:
            if buf.param_data is not None:
                return buf.param_data.device
        return torch.device("cpu")

    # ------------------------------------------------------------------ step

    def zero_grad(self) -> None:
        self.opt.zero_grad()

    def step(self) -> float:
        if self.host_state:
            self._move_state(self.compute_device())
        try:
            ok, norm, _ = self.opt.step()
        finally:
            if self.host_state:
                self._move_state(torch.device("cpu"))
        if not ok:  # bf16 has no loss scaler: only a non-finite gradient gets here
            raise FloatingPointError("bf16 optimizer step skipped: non-finite gradient norm")
        return float(norm)

    # ------------------------------------------------------------------ fp32 main weights

    def main_params(self) -> list[torch.Tensor]:
        """This rank's fp32 main shards of its bf16 weights (flat 1-D [n_i] each), in a fixed
        order: the copies Adam updates and the bf16 weights are rounded from."""
        return [p for o in self.parts for g in o.shard_fp32_from_float16_groups for p in g]

    def params(self) -> list[torch.Tensor]:
        """Everything the inner torch optimizer steps (the main shards above, and views into
        the weights that are fp32 already, e.g. megatron-core's torch norms), fixed order."""
        return [p for o in self.parts for g in o.optimizer.param_groups for p in g["params"]]

    def _views(self) -> set[int]:
        """ids of the fp32 weights' shards: views into the DDP parameter buffers."""
        return {id(p) for o in self.parts for g in o.shard_fp32_groups for p in g}

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": "megatron_main_weights",
            "inner": [o.optimizer.state_dict() for o in self.parts],
            "main": [p.detach().clone() for p in self.params()],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "megatron_main_weights" or len(state["inner"]) != len(self.parts):
            raise ValueError(
                "optimizer state: not a bf16 (fp32 main weights) megatron optimizer state of "
                "this layout (a float32 run's AdamW state cannot resume a bfloat16 run)"
            )
        for o, inner in zip(self.parts, state["inner"], strict=True):
            o.optimizer.load_state_dict(inner)
        mine = self.params()
        if [p.shape for p in mine] != [p.shape for p in state["main"]]:
            raise ValueError("optimizer state: fp32 main shards differ in shape from this model")
        with torch.no_grad():
            for dst, src in zip(mine, state["main"], strict=True):
                dst.copy_(src)

    # ------------------------------------------------------------------ offload

    def move(self, target: torch.device) -> None:
        """bf16 weights (DDP parameter buffers), fp32 main shards and Adam moments to `target`
        (the compute device or the CPU), in place."""
        for buf in self.ddp.buffers + self.ddp.expert_parallel_buffers:
            if buf.param_data is None or buf.param_data.device.type == "cpu":
                continue  # nothing to move (the compute device is the CPU)
            # gradients are released, not copied: every update zeroes them before backward
            if target.type == "cpu":
                buf.offload_to_cpu(move_params=True, move_grads=True)
            else:
                buf.reload_from_cpu(move_params=True, move_grads=True)
        if not self.host_state:  # host-resident state stays where it is
            self._move_state(target)

    def _move_state(self, target: torch.device) -> None:
        """The fp32 main shards (those not viewing the DDP buffers) and the Adam moments to
        `target`, in place (`p.data`, as MegatronOptimizer.offload_to_cpu does)."""
        views = self._views()  # these move with the DDP buffers
        with torch.no_grad():
            for o in self.parts:
                for group in o.optimizer.param_groups:
                    for p in group["params"]:
                        if id(p) not in views:
                            p.data = p.data.to(target)
                for st in o.optimizer.state.values():
                    for k, v in st.items():
                        if isinstance(v, torch.Tensor) and k != "step":
                            st[k] = v.to(target)

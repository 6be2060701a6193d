"""Actor and critic on the same devices: with `offload` the role not in use waits on the CPU.

    from t1.train.megatron.residency import Residency
    residency = Residency(device, offload=True)
    residency.use("actor", {"actor": (actor, actor_opt), "critic": (critic, critic_opt)})

`Residency.use(role, ...)` puts `role` (weights, gradients, Adam state) on the compute device
and, when offloading, every other role on the CPU; without offload every role stays on the
device. `move_role` moves one role in place (the optimizer keeps the same Parameter objects);
a bf16 role's optimizer (main_weights.MainWeightsAdam) moves its own buffers and releases its
DDP gradient buffers; an fp32 role's DDP gradient buffers (`main_grad`) stay on the device.
"""

from __future__ import annotations

import torch


def move_role(
    model: torch.nn.Module, opt: torch.optim.Optimizer | None, target: torch.device
) -> None:
    """Weights, grads and Adam moments of one role to `target`, in place (the optimizer keeps
    the same Parameter objects). A bf16 role's optimizer (main_weights.MainWeightsAdam) moves
    its own: the bf16 weights in the DDP buffers, the fp32 main weights and Adam moments."""
    if hasattr(opt, "move"):
        opt.move(target)
        return
    with torch.no_grad():
        for prm in model.parameters():
            prm.data = prm.data.to(target)
            if prm.grad is not None:
                prm.grad = prm.grad.to(target)
    if opt is not None:
        for st in opt.state.values():
            for k, v in st.items():
                if isinstance(v, torch.Tensor) and k != "step":
                    st[k] = v.to(target)


class Residency:
    """Keeps one role on the compute device at a time when offloading (weights + Adam state)."""

    def __init__(self, device: torch.device, offload: bool, move=move_role) -> None:
        self.device, self.offload, self.move = device, offload, move
        self.where: dict[str, str] = {}
        self.moves: list[tuple[str, str]] = []  # (role, device) in order (tests read it)

    def use(
        self, role: str, models: dict[str, tuple[torch.nn.Module, torch.optim.Optimizer]]
    ) -> None:
        for name, (model, opt) in models.items():
            if model is None:
                continue
            target = self.device if (name == role or not self.offload) else torch.device("cpu")
            if self.where.get(name) == str(target):
                continue
            self.move(model, opt, target)
            self.where[name] = str(target)
            self.moves.append((name, str(target)))

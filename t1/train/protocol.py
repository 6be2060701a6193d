"""The Trainer protocol: what the PPO step, SFT and critic warm-up need from a backend.

    from t1.train.protocol import Trainer
    out = trainer.actor_forward(batch)              # no grad: logp, entropy  [B, T]
    v = trainer.critic_values(batch)                # no grad: values         [B, T]
    ref = trainer.reference_logp(batch)             # no grad: ppo.kl_coef's reference (hf)
    trainer.critic_update(batch, loss_fn)           # one optimizer step of the critic
    trainer.actor_update(batch, loss_fn)            # one optimizer step of the actor

Backends: `hf` (t1/train/hf.py: torch + transformers, CPU or one GPU) and `megatron`
(its own issue: megatron-core with TP/EP/PP and built-in router replay). Both take the same
`Batch` (t1/train/batch.py) and the same loss functions, so t1/train/step.py is shared.

Alignment: position t of every [B, T] output refers to token t of the stream. logp[b, t] is
log pi(token t | tokens < t); values[b, t] estimates the return from just before token t; both
are 0 at t = 0 (never a loss position: a segment opens with context).

Replay: when `batch.routing` is set and replay is on, every forward (no-grad and training)
routes each position to its recorded experts; -1 placeholders use live routing. The router's
weights are softmax(live logits) at the replayed ids, so the router keeps its gradient.

A loss function receives (output [B, T] with grad, the minibatch) and returns (scalar loss,
dict of float metrics); the backend does backward, gradient clipping and the optimizer step,
and returns the loss function's metrics plus `grad_norm`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from t1.train.batch import Batch

LossFn = Callable[[torch.Tensor, Batch], tuple[torch.Tensor, dict[str, float]]]


@dataclass
class ActorOutput:
    logp: torch.Tensor  # [B, T] log-probability of each token given its prefix (0 at t = 0)
    entropy: torch.Tensor | None  # [B, T] entropy of the distribution that sampled token t


class Trainer(Protocol):
    counters: dict[str, int]

    def actor_forward(self, batch: Batch, entropy: bool = False) -> ActorOutput: ...

    def critic_values(self, batch: Batch) -> torch.Tensor: ...

    def actor_update(self, batch: Batch, loss_fn: LossFn) -> dict[str, float]: ...

    def critic_update(self, batch: Batch, loss_fn: LossFn) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def save_weights(self, out_dir: str, actor: bool = True, critic: bool = True) -> None: ...

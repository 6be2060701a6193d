"""The `hf` training backend: a transformers MoE actor and a value-head critic, trained with
torch AdamW on the CPU (or one GPU), with R³ routing replay from `t1.model.routing`.

    from t1.train.hf import HFTrainer
    trainer = HFTrainer(actor, critic, actor_lr=1e-4, critic_lr=1.5e-3)
    out = trainer.actor_forward(batch, entropy=True)
    trainer.critic_update(batch, loss_fn)

Optimizer: AdamW, betas (0.9, 0.98), weight decay 0.1 on matrices and expert tensors (not on
norm weights and biases, as Megatron does), constant learning rate, gradient clipping at
`max_grad_norm` (0 = off). The load-balancing loss is off: the models are built with
`router_aux_loss_coef = 0` and no router logits are requested.

Replay applies to the actor only: the routing records are the actor's (the engine's) expert
choices. The critic has its own router and routes live.

Length groups: every update and no-grad forward runs its rows in groups of like length, each
trimmed to its longest row (`t1.train.batch.length_groups`; no-grad groups of at most
`forward_rows`), and one backward runs through all of an update's groups, so the loss and the
step are the whole batch's. A pre-training batch of copy exercises was 40 % padding; on the tiny
MoE on 2 CPU cores a copy step took 0.190 s against 0.218 s whole, a corpus step 0.469 against
0.530, three PPO steps 7.0 s against 9.4-10.1 (LOG.md, 2026-12-07).

Routing check (every `actor_forward` of a batch with routing records, replay on or off):
`routing_check` holds `positions` (non-placeholder positions compared), `live_mismatch` (of
them, where the actor's own live top-k, taken before replay, differs from the engine's
capture: the mismatch R³ removes) and `replay_mismatch` (where the experts the MoE layers were
actually called with differ from the capture: 0 while replay works; with replay off it equals
`live_mismatch`). t1.train.step logs them as routing_* metrics.

`state_dict()` holds everything needed to continue bit for bit: both models, both optimizers,
the torch / numpy / python RNG states, the trainer's shuffling generator and its counters.
Models live on `device` (default CPU; one GPU works the same way): each forward moves its
minibatch there, no-grad outputs come back to the CPU, loss functions get device tensors.
Call `calls = []` on the trainer to record the order of its public calls (tests use it).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from t1.model.routing import RoutingCapture, mismatch
from t1.model.routing import replay as routing_replay
from t1.rng import capture_rng, restore_rng
from t1.train.batch import Batch, length_groups
from t1.train.protocol import ActorOutput, LossFn

SCHEMA_VERSION = 2  # 2: rng from t1.rng (CUDA generators included)
GROUP_OVERHEAD = 256  # tokens: HFTrainer.group_overhead on the CPU


def token_logp(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """logits [B, T, V] (position t predicts token t+1), ids [B, T] -> logp [B, T] aligned to
    the token: out[:, t] = log softmax(logits[:, t-1])[ids[:, t]], out[:, 0] = 0."""
    lg = logits[:, :-1].float()
    picked = lg.gather(-1, ids[:, 1:, None]).squeeze(-1)
    return F.pad(picked - torch.logsumexp(lg, dim=-1), (1, 0))


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """logits [B, T, V] -> entropy [B, T] of the distribution that sampled token t (0 at t=0)."""
    lp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return F.pad(-(lp.exp() * lp).sum(-1), (1, 0))


def loss_region_logp(model: nn.Module, ids: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """token_logp of a transformers causal LM at the loss positions only: the backbone runs on
    every position, the output layer and its log-softmax on the positions that predict a loss
    token (position t-1 for a loss token t), and the result is scattered into zeros [B, T].

    The same numbers as `token_logp(model(ids).logits, ids)` where loss_mask is set (fp32
    rounding of a matmul over fewer rows), 0 elsewhere. An agent's loss region is its sampled
    tokens, a third of a pre-training row and less of a PPO row, and the output layer over a
    4096-token vocabulary is about half of the tiny MoE's matmul work: a training step skips the
    rest (`t1 bench train`'s loss_region). Models without a `.model` backbone and an `.lm_head`
    take the full logits."""
    backbone, head = getattr(model, "model", None), getattr(model, "lm_head", None)
    if backbone is None or head is None:
        return token_logp(model(input_ids=ids, use_cache=False).logits, ids)
    hidden = backbone(input_ids=ids, use_cache=False).last_hidden_state
    predicts = loss_mask[:, 1:].to(torch.bool)  # [B, T-1]: position t-1 predicts token t
    rows, cols = predicts.nonzero(as_tuple=True)
    logits = head(hidden[rows, cols]).float()  # [N, V]
    out = torch.zeros(ids.shape[0], ids.shape[1] - 1, dtype=torch.float32, device=ids.device)
    out = out.index_put((rows, cols), picked_logp(logits, ids[rows, cols + 1]))
    return F.pad(out, (1, 0))


class _PickedLogp(torch.autograd.Function):
    """log softmax(logits)[target] over rows [N, V] -> [N]. The backward reuses the logits'
    own memory, (-g) * exp(logits - lse) then g added at the target, as Megatron's fused
    cross-entropy does with its logits: no [N, V] is allocated or zero-filled. Autograd's
    backward of `gather - logsumexp` makes the same numbers to the bit (the same products, the
    same two addends at the target) in four passes and three new [N, V] tensors; on the tiny
    MoE that was a fifth of a pre-training step."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        lse = torch.logsumexp(logits, dim=-1)
        ctx.save_for_backward(logits, lse, target)
        ctx.spent = False
        return logits.gather(-1, target[:, None]).squeeze(-1) - lse

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        if ctx.spent:
            raise RuntimeError("picked_logp: its backward overwrites the logits; run it once")
        ctx.spent = True
        logits, lse, target = ctx.saved_tensors
        grad = logits.sub_(lse[:, None]).exp_().mul_(-g[:, None])
        return grad.scatter_add_(-1, target[:, None], g[:, None]), None


def autograd_picked_logp(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """picked_logp through autograd's own `gather - logsumexp` (the reference of the test and
    of `t1 bench train`'s picked_logp section); leaves the logits as they are."""
    return logits.gather(-1, target[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def picked_logp(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """logits [N, V] (float), target [N] -> log softmax(logits)[n, target[n]], [N]. The logits
    are consumed: the backward overwrites them with their gradient, so pass a tensor nothing
    reads after it (the output layer's fresh result, as loss_region_logp does)."""
    return _PickedLogp.apply(logits, target)


def shift_values(v: torch.Tensor) -> torch.Tensor:
    """Value head output [B, T] at the last context position -> aligned to the next token."""
    return F.pad(v[:, :-1], (1, 0))


def adamw(
    model: nn.Module, lr: float, betas: tuple[float, float], weight_decay: float
) -> torch.optim.AdamW:
    """AdamW with decay on parameters of rank >= 2 only."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    rest = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": rest, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=1e-8)


class HFTrainer:
    """Actor and/or critic with their optimizers. Either model may be None (SFT trains the
    actor alone; critic warm-up the critic alone, with the policy frozen)."""

    def __init__(
        self,
        actor: nn.Module | None,
        critic: nn.Module | None,
        *,
        actor_lr: float = 1e-4,
        critic_lr: float = 1.5e-3,
        betas: tuple[float, float] = (0.9, 0.98),
        weight_decay: float = 0.1,
        max_grad_norm: float = 1.0,
        replay: bool = True,
        seed: int = 0,
        forward_rows: int = 4,
        device: str | torch.device = "cpu",
    ) -> None:
        self.device = torch.device(device)
        actor = actor.to(self.device) if actor is not None else None
        critic = critic.to(self.device) if critic is not None else None
        self.actor, self.critic = actor, critic
        self.forward_rows = max(1, forward_rows)  # rows per no-grad forward (bounds memory)
        self.replay = replay
        self.max_grad_norm = max_grad_norm
        betas = (float(betas[0]), float(betas[1]))
        self.actor_opt = adamw(actor, actor_lr, betas, weight_decay) if actor is not None else None
        self.critic_opt = (
            adamw(critic, critic_lr, betas, weight_decay) if critic is not None else None
        )
        self.generator = torch.Generator().manual_seed(seed)
        self.counters: dict[str, int] = {"actor_updates": 0, "critic_updates": 0}
        self.calls: list[str] | None = None
        self.routing_check: dict[str, int] | None = None  # of the last actor_forward
        # actor_update's output layer on the loss positions only (loss_region_logp); False:
        # the full logits, as `t1 bench train`'s loss_region compares
        self.loss_region = True
        # tokens one more forward and backward costs beyond its own (`length_groups`): each update
        # and no-grad forward runs its rows in groups of like length, so short rows skip a long
        # row's padding. Measured on the tiny MoE on 2 CPU cores (LOG.md); on a GPU, where a
        # launch costs more tokens than padding does, the batch runs whole as before
        self.group_overhead = GROUP_OVERHEAD if self.device.type == "cpu" else 1 << 30
        # ppo.kl_coef > 0: the frozen policy PPO started from (t1.train.ppo attaches it);
        # never trained, never in state_dict (it is the run's SFT actor, reloaded from disk)
        self.reference: nn.Module | None = None

    # ------------------------------------------------------------------ forwards

    def _note(self, name: str) -> None:
        if self.calls is not None:
            self.calls.append(name)

    def _replay(self, batch: Batch):
        if self.replay and batch.routing is not None:
            return routing_replay(self.actor, batch.routing)
        return contextlib.nullcontext()

    def _actor_logits(self, batch: Batch) -> torch.Tensor:
        with self._replay(batch):
            return self.actor(input_ids=batch.input_ids, use_cache=False).logits

    def _actor_loss_logp(self, batch: Batch) -> torch.Tensor:
        """The actor's logp [B, T] with grad, computed at the loss positions only (0 elsewhere:
        every loss masks with `loss_mask`). See loss_region_logp."""

        def logp(part: Batch) -> torch.Tensor:
            if not self.loss_region:
                return token_logp(self._actor_logits(part), part.input_ids)
            with self._replay(part):
                return loss_region_logp(self.actor, part.input_ids, part.loss_mask)

        return self._grouped(batch, logp)

    def _grouped(self, batch: Batch, fn) -> torch.Tensor:
        """fn(rows) -> [b, t] with grad, run over the batch's length groups (`length_groups`,
        each group trimmed to its longest row) and put back in row order as [B, T], 0 past a
        group's length. One backward then runs through every group: the loss is the batch's,
        whatever the loss function; the groups hold no more activations than the whole batch did."""
        groups = length_groups(batch.lengths.tolist(), self.group_overhead)
        if len(groups) == 1:
            return fn(batch)
        t = batch.input_ids.shape[1]
        parts = [fn(batch.select(idx)) for idx in groups]
        parts = [F.pad(x, (0, t - x.shape[1])) for x in parts]
        order = torch.tensor([i for idx in groups for i in idx], device=parts[0].device)
        return torch.cat(parts).index_select(0, torch.argsort(order))

    def _chunks(self, batch: Batch):
        """Row groups of like length for the no-grad forwards, at most `forward_rows` each
        (`length_groups`); each is run trimmed to its longest row."""
        return length_groups(batch.lengths.tolist(), self.group_overhead, self.forward_rows)

    def _stitch(self, parts: list[tuple[list[int], torch.Tensor]], batch: Batch) -> torch.Tensor:
        out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
        for idx, x in parts:
            out[idx, : x.shape[1]] = x.float().cpu()
        real = torch.arange(out.shape[1])[None, :] < batch.lengths.cpu()[:, None]
        return out * real  # 0 at padding, however the rows were chunked

    def actor_forward(self, batch: Batch, entropy: bool = False) -> ActorOutput:
        """No-grad forward of the actor: logp [B, T] (and entropy [B, T] if asked)."""
        self._note("actor.forward")
        self.actor.eval()
        logps, ents = [], []
        check = self.routing_check = (
            None
            if batch.routing is None
            else {"positions": 0, "live_mismatch": 0, "replay_mismatch": 0}
        )
        with torch.no_grad():
            for idx in self._chunks(batch):
                mb = batch.select(idx).to(self.device)
                if check is None:
                    logits = self._actor_logits(mb)
                else:
                    logits = self._checked_logits(mb, check)
                logps.append((idx, token_logp(logits, mb.input_ids)))
                if entropy:
                    ents.append((idx, token_entropy(logits)))
        return ActorOutput(
            self._stitch(logps, batch), self._stitch(ents, batch) if entropy else None
        )

    def reference_logp(self, batch: Batch) -> torch.Tensor:
        """No-grad logp [B, T] of the reference policy at the loss positions (0 elsewhere),
        replaying the batch's routing as the actor's forwards do, so that a KL term compares
        the two policies on the experts the engine used."""
        self._note("reference.forward")
        if self.reference is None:
            raise RuntimeError("reference_logp: no reference policy attached (ppo.kl_coef > 0)")
        ref = self.reference.to(self.device).eval()
        parts = []
        with torch.no_grad():
            for idx in self._chunks(batch):
                mb = batch.select(idx).to(self.device)
                replay = (
                    routing_replay(ref, mb.routing)
                    if self.replay and mb.routing is not None
                    else contextlib.nullcontext()
                )
                with replay:
                    parts.append((idx, loss_region_logp(ref, mb.input_ids, mb.loss_mask)))
        return self._stitch(parts, batch)

    def _checked_logits(self, mb: Batch, check: dict[str, int]) -> torch.Tensor:
        """The actor's logits, counting the routing check's mismatches on the way."""
        with (
            RoutingCapture(self.actor, stage="live") as live,
            RoutingCapture(self.actor, stage="used") as used,
        ):
            logits = self._actor_logits(mb)
        record = mb.routing.reshape(-1, *mb.routing.shape[2:]).cpu().numpy()
        n_live, n = mismatch(live.collect().cpu().numpy(), record)
        n_used, _ = mismatch(used.collect().cpu().numpy(), record)
        check["positions"] += n
        check["live_mismatch"] += n_live
        check["replay_mismatch"] += n_used
        return logits

    def critic_values(self, batch: Batch) -> torch.Tensor:
        """No-grad values [B, T] of the critic (aligned to tokens)."""
        self._note("critic.values")
        self.critic.eval()
        with torch.no_grad():
            parts = [
                (idx, shift_values(self.critic(batch.select(idx).to(self.device).input_ids)))
                for idx in self._chunks(batch)
            ]
        return self._stitch(parts, batch)

    # ------------------------------------------------------------------ updates

    def _step(self, model: nn.Module, opt: torch.optim.Optimizer, loss: torch.Tensor) -> float:
        opt.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for p in model.parameters() if p.grad is not None]
        if self.max_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
        else:
            norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params]))
        opt.step()
        return float(norm)

    def actor_update(self, batch: Batch, loss_fn: LossFn) -> dict[str, float]:
        """One optimizer step of the actor on `loss_fn(logp [B, T] with grad, batch)`."""
        self._note("actor.update")
        self.actor.train()
        batch = batch.to(self.device)
        logp = self._actor_loss_logp(batch)
        loss, metrics = loss_fn(logp, batch)
        metrics = dict(metrics, grad_norm=self._step(self.actor, self.actor_opt, loss))
        self.counters["actor_updates"] += 1
        return metrics

    def critic_update(self, batch: Batch, loss_fn: LossFn) -> dict[str, float]:
        """One optimizer step of the critic on `loss_fn(values [B, T] with grad, batch)`."""
        self._note("critic.update")
        self.critic.train()
        batch = batch.to(self.device)
        values = self._grouped(batch, lambda part: shift_values(self.critic(part.input_ids)))
        loss, metrics = loss_fn(values, batch)
        metrics = dict(metrics, grad_norm=self._step(self.critic, self.critic_opt, loss))
        self.counters["critic_updates"] += 1
        return metrics

    def permutation(self, n: int) -> list[int]:
        """A shuffle of range(n) from the trainer's own generator (part of its state)."""
        return torch.randperm(n, generator=self.generator).tolist()

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        def sd(x):
            return None if x is None else x.state_dict()

        return {
            "schema_version": SCHEMA_VERSION,
            "actor": sd(self.actor),
            "critic": sd(self.critic),
            "actor_optim": sd(self.actor_opt),
            "critic_optim": sd(self.critic_opt),
            "rng": {**capture_rng(), "generator": self.generator.get_state()},
            "counters": dict(self.counters),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(
                f"trainer state schema_version {state.get('schema_version')}, expected {SCHEMA_VERSION}"
            )
        for name in ("actor", "critic", "actor_opt", "critic_opt"):
            key = {"actor_opt": "actor_optim", "critic_opt": "critic_optim"}.get(name, name)
            target, saved = getattr(self, name), state[key]
            if (target is None) != (saved is None):
                raise ValueError(
                    f"trainer state: {key} is {'absent' if saved is None else 'present'} in the state but not here"
                )
            if target is not None:
                target.load_state_dict(saved)
        restore_rng(state["rng"])
        self.generator.set_state(state["rng"]["generator"])
        self.counters = dict(state["counters"])

    def save_weights(self, out_dir: str | Path, actor: bool = True, critic: bool = True) -> None:
        """DIR/actor (policy directory) and/or DIR/critic (critic directory), each atomic."""
        from t1.model.policy import save_policy

        out_dir = Path(out_dir)
        if actor and self.actor is not None:
            save_policy(self.actor, out_dir / "actor")
        if critic and self.critic is not None:
            self.critic.save_pretrained(out_dir / "critic")

"""`MegatronTrainer`: the `t1.train.protocol.Trainer` of the megatron backend.

    from t1.train.megatron.trainer import MegatronTrainer
    trainer = MegatronTrainer(hf_actor, hf_critic, actor_lr=1e-4, critic_lr=1.5e-3)
    metrics = t1.train.step.ppo_step(trainer, batch, cfg.ppo)   # the same PPO step as hf

It takes the HF actor and critic (t1.policy), converts their weights into megatron-core
GPTModels (convert.py) and keeps the HF modules as export shells: `save_weights` converts back
and writes the same policy / critic directories as the hf backend (what the engine, SGLang
included, loads after each step). The math is the hf backend's: the same token alignment
(t1.train.hf.token_logp / token_entropy / shift_values), the same loss functions from
t1.train.step, AdamW with the same groups, betas, decay and clipping, so one PPO step's loss and
gradients agree with hf to fp32 rounding (tests/megatron/test_megatron_trainer.py).

State (`state_dict`): actor and critic in HF names (so a checkpoint is readable by either
backend), both optimizers, RNG, the shuffling generator, counters; the conversion is exact, so
resume is bit-identical in deterministic mode. World size 1 only for training and checkpoints:
data parallelism (and with it EP > 1, whose ranks are data-parallel for the dense weights) is
not wired into the update; world size 2 is covered for the forward and for weight sharding.

Co-residence: actor and critic live on the same devices; with `offload=True` the role not in
use is moved (weights and optimizer state) to the CPU between calls (`Residency`), so each role
alone must fit the budget `t1 plan-memory` computed (plan.py checks before launch).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch

from t1.rng import capture_rng, restore_rng
from t1.train.batch import Batch
from t1.train.hf import adamw, shift_values, token_entropy, token_logp
from t1.train.megatron import convert as C
from t1.train.megatron import model as M
from t1.train.megatron import replay as R
from t1.train.megatron.runtime import Parallel, ranks, setup
from t1.train.protocol import ActorOutput, LossFn

SCHEMA_VERSION = 1


def move_role(
    model: torch.nn.Module, opt: torch.optim.Optimizer | None, target: torch.device
) -> None:
    """Weights, grads and Adam moments of one role to `target`, in place (the optimizer keeps
    the same Parameter objects)."""
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


class MegatronTrainer:
    """Actor and critic as megatron-core GPTModels (either may be None)."""

    def __init__(
        self,
        actor: torch.nn.Module | None,
        critic: torch.nn.Module | None,
        *,
        actor_lr: float = 1e-4,
        critic_lr: float = 1.5e-3,
        betas: tuple[float, float] = (0.9, 0.98),
        weight_decay: float = 0.1,
        max_grad_norm: float = 1.0,
        replay: bool = True,
        seed: int = 0,
        forward_rows: int = 4,
        parallel: Parallel | None = None,
        router_fusion: bool = False,
        offload: bool = False,
        device: str | torch.device | None = None,
    ) -> None:
        self.par = setup(parallel or Parallel())
        import torch.distributed as dist

        if dist.get_world_size() != 1:
            raise NotImplementedError(
                f"MegatronTrainer trains at world size 1 only (got {dist.get_world_size()}): data "
                "parallelism is not wired into the update yet"
            )
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.hf_actor, self.hf_critic = actor, critic
        ref = actor if actor is not None else critic
        self.hf_config = ref.config
        dtype = next(ref.parameters()).dtype
        tc = M.transformer_config(
            self.hf_config, replay=replay, dtype=dtype, router_fusion=router_fusion
        )
        self.replay = replay
        self.actor = self._build("actor", tc, actor) if actor is not None else None
        self.critic = self._build("critic", tc, critic) if critic is not None else None
        if self.actor is not None and replay:
            R.install(self.actor)
        self.max_grad_norm = max_grad_norm
        self.forward_rows = max(1, forward_rows)
        b = (float(betas[0]), float(betas[1]))
        self.actor_opt = (
            adamw(self.actor, actor_lr, b, weight_decay) if self.actor is not None else None
        )
        self.critic_opt = (
            adamw(self.critic, critic_lr, b, weight_decay) if self.critic is not None else None
        )
        self.generator = torch.Generator().manual_seed(seed)
        self.counters: dict[str, int] = {"actor_updates": 0, "critic_updates": 0}
        self.calls: list[str] | None = None
        self.routing_check: dict[str, int] | None = None  # of the last actor_forward
        self.residency = Residency(self.device, offload)

    # ------------------------------------------------------------------ weights

    def _build(self, kind: str, tc, hf: torch.nn.Module) -> torch.nn.Module:
        model = (M.build_actor if kind == "actor" else M.build_critic)(tc, self.hf_config)
        self._load(kind, model, hf.state_dict())
        return model.to(self.device)

    def _load(self, kind: str, model: torch.nn.Module, hf_state: dict[str, torch.Tensor]) -> None:
        c = self.hf_config
        full = C.hf_to_mcore(hf_state, c, kind, tp=self.par.tp)
        r = ranks()
        local = C.shard(
            full,
            C.Sizes(self.par.tp, self.par.pp, self.par.ep, self.par.etp),
            C.Ranks(r["tp"], r["pp"], r["ep"], r["etp"]),
            c.num_hidden_layers,
            c.num_experts,
            kind,
        )
        C.load_local(model, local)

    def hf_state(self, kind: str) -> dict[str, torch.Tensor]:
        """The role's weights in HF names (world size 1: the local state is the whole model)."""
        model = self.actor if kind == "actor" else self.critic
        return {
            k: v.clone()
            for k, v in C.mcore_to_hf(C.local_state(model), self.hf_config, kind).items()
        }

    # ------------------------------------------------------------------ forwards

    def _note(self, name: str) -> None:
        if self.calls is not None:
            self.calls.append(name)

    def _use(self, role: str) -> None:
        self.residency.use(
            role, {"actor": (self.actor, self.actor_opt), "critic": (self.critic, self.critic_opt)}
        )

    def _replay(self, batch: Batch):
        if self.replay and batch.routing is not None:
            return R.replaying(self.actor, batch.routing)
        return contextlib.nullcontext()

    def _chunks(self, batch: Batch):
        for i in range(0, batch.size, self.forward_rows):
            yield list(range(i, min(i + self.forward_rows, batch.size)))

    def _stitch(self, parts, batch: Batch) -> torch.Tensor:
        out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
        for idx, x in parts:
            out[idx[0] : idx[-1] + 1, : x.shape[1]] = x.float().cpu()
        real = torch.arange(out.shape[1])[None, :] < batch.lengths.cpu()[:, None]
        return out * real

    def _actor_logits(self, batch: Batch) -> torch.Tensor:
        with self._replay(batch):
            return M.forward(self.actor, batch.input_ids)

    def actor_forward(self, batch: Batch, entropy: bool = False) -> ActorOutput:
        self._note("actor.forward")
        self._use("actor")
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

    def _checked_logits(self, mb: Batch, check: dict[str, int]) -> torch.Tensor:
        """The actor's logits, counting the routing check (t1.train.hf) on the way: the
        routers' own top-k and the experts actually dispatched to, against the record."""
        from t1.routing import mismatch

        b, k = mb.input_ids.shape[0], self.hf_config.num_experts_per_tok
        replaying = self.replay and mb.routing is not None
        R.keep_live(self.actor, replaying)
        try:
            with R.RoutingObserver(self.actor) as seen:
                logits = self._actor_logits(mb)
            used = seen.routing(b, k)
            live = R.live_routing(self.actor, b) if replaying else used
        finally:
            R.keep_live(self.actor, False)
        record = mb.routing.reshape(-1, *mb.routing.shape[2:]).cpu().numpy()
        n_live, n = mismatch(live.reshape(-1, *live.shape[2:]).numpy(), record)
        n_used, _ = mismatch(used.reshape(-1, *used.shape[2:]).numpy(), record)
        check["positions"] += n
        check["live_mismatch"] += n_live
        check["replay_mismatch"] += n_used
        return logits

    def critic_values(self, batch: Batch) -> torch.Tensor:
        self._note("critic.values")
        self._use("critic")
        self.critic.eval()
        with torch.no_grad():
            parts = [
                (
                    idx,
                    shift_values(
                        M.forward(self.critic, batch.select(idx).to(self.device).input_ids)[
                            ..., 0
                        ].float()
                    ),
                )
                for idx in self._chunks(batch)
            ]
        return self._stitch(parts, batch)

    # ------------------------------------------------------------------ updates

    def _step(self, model, opt, loss) -> float:
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
        self._note("actor.update")
        self._use("actor")
        self.actor.train()
        batch = batch.to(self.device)
        with self._replay(batch):  # targets live through backward, cleared right after
            logp = token_logp(M.forward(self.actor, batch.input_ids), batch.input_ids)
            loss, metrics = loss_fn(logp, batch)
            metrics = dict(metrics, grad_norm=self._step(self.actor, self.actor_opt, loss))
        self.counters["actor_updates"] += 1
        return metrics

    def critic_update(self, batch: Batch, loss_fn: LossFn) -> dict[str, float]:
        self._note("critic.update")
        self._use("critic")
        self.critic.train()
        batch = batch.to(self.device)
        values = shift_values(M.forward(self.critic, batch.input_ids)[..., 0].float())
        loss, metrics = loss_fn(values, batch)
        metrics = dict(metrics, grad_norm=self._step(self.critic, self.critic_opt, loss))
        self.counters["critic_updates"] += 1
        return metrics

    def permutation(self, n: int) -> list[int]:
        return torch.randperm(n, generator=self.generator).tolist()

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        def sd(x):
            return None if x is None else x.state_dict()

        return {
            "schema_version": SCHEMA_VERSION,
            "backend": "megatron",
            "actor": None if self.actor is None else self.hf_state("actor"),
            "critic": None if self.critic is None else self.hf_state("critic"),
            "actor_optim": sd(self.actor_opt),
            "critic_optim": sd(self.critic_opt),
            "rng": {**capture_rng(), "generator": self.generator.get_state()},
            "counters": dict(self.counters),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("schema_version") != SCHEMA_VERSION or state.get("backend") != "megatron":
            raise ValueError(
                f"trainer state: backend {state.get('backend', 'hf')!r} schema "
                f"{state.get('schema_version')}, expected megatron schema {SCHEMA_VERSION} "
                "(a checkpoint of another train.backend cannot resume here)"
            )
        for kind in ("actor", "critic"):
            model, opt = getattr(self, kind), getattr(self, f"{kind}_opt")
            if (model is None) != (state[kind] is None):
                raise ValueError(f"trainer state: {kind} presence differs from this trainer")
            if model is not None:
                self._load(kind, model, state[kind])
                opt.load_state_dict(state[f"{kind}_optim"])
        restore_rng(state["rng"])
        self.generator.set_state(state["rng"]["generator"])
        self.counters = dict(state["counters"])

    def save_weights(self, out_dir: str | Path, actor: bool = True, critic: bool = True) -> None:
        """DIR/actor and DIR/critic in HF format (the hf backend's directories), each atomic."""
        from t1.policy import save_policy

        out_dir = Path(out_dir)
        if actor and self.actor is not None:
            self.hf_actor.load_state_dict(self.hf_state("actor"))
            save_policy(self.hf_actor, out_dir / "actor")
        if critic and self.critic is not None:
            self.hf_critic.load_state_dict(self.hf_state("critic"))
            self.hf_critic.save_pretrained(out_dir / "critic")

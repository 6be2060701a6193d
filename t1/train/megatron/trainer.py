"""`MegatronTrainer`: the `t1.train.protocol.Trainer` of the megatron backend.

    from t1.train.megatron.trainer import MegatronTrainer
    trainer = MegatronTrainer(actor, critic, actor_lr=1e-4, critic_lr=1.5e-3)
    metrics = t1.train.step.ppo_step(trainer, batch, cfg.ppo)   # the same PPO step as hf

A role (actor, critic) is either an HF module (t1.model.policy; its weights converted here,
convert.py) or a `t1.train.roles.Source`: an HF shell on the meta device plus the directory
each rank reads only its own slices from (hf_load.py; stats in `trainer.loaded`), which is how
`t1 train` starts every megatron stage. The HF modules stay as export shells (config, names,
shapes): `save_weights` writes the hf backend's policy / critic directories (what the engine,
SGLang included, loads), each pipeline stage's leader its own tensors, no gather (export.py).
The math is the hf backend's (t1.train.hf's token alignment, t1.train.step's losses, AdamW's
groups, betas, decay, clipping): one step agrees with hf to fp32 rounding
(tests/megatron/test_megatron_trainer.py).

Precision: float32 models train with torch AdamW on the parameters (exact vs hf); bfloat16 with
megatron-core's DistributedOptimizer (`get_megatron_optimizer`: fp32 main weights and gradient
buffers, the same Adam settings; main_weights.py), so small updates are not rounded away.

Log-probs: the last hidden states go through the output layer `logp_chunk` tokens at a time
(default 4096, what t1/model/memory.py plans for), vocab-parallel over TP and checkpointed per
chunk, so full-vocabulary logits never exist (vocab_logp.py).

Parallelism: TP / EP / ETP from `parallel` (runtime.setup), DP = the rest of the world; each
model in megatron-core's DistributedDataParallel, every update ending in `finalize_model_grads`
with the per-token loss normalization, each rank on its share of the rows (dataparallel.py).
PP > 1 runs every forward and update through megatron-core's own schedule
(`get_forward_backward_func`, 1F1B) in micro-batches of `forward_rows` rows, R3 replay set per
micro-batch on every stage, log-probs and values on the last stage and broadcast over the
pipeline group (pipeline.py). EP 2 / DP 2, PP 2, TP 2 + SP and TP 2 x PP 2 x EP 2 (Qwen3.5,
world size 8) equal world size 1 on the CPU (tests/megatron/test_megatron_parallel.py,
test_megatron_pipeline.py).

State: at world size 1 `state_dict` holds both roles in HF names (readable by either backend),
both optimizers, RNG, the shuffling generator, counters; at any world size `checkpoint.py`
writes one file per rank inside t1.store.ckpt's atomic protocol, which `load_state_dict` takes
above world size 1 ({"checkpoint": t1.store.ckpt.Checkpoint}). Resume is bit-identical in
deterministic mode.

Co-residence: actor and critic live on the same devices; with `offload=True` the role not in
use waits on the CPU (weights and optimizer state; residency.py), so each role alone must fit
the budget (plan.py checks before launch). A bf16 role also releases its DDP gradient buffers
while it waits; an fp32 role's (`main_grad`) stay.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch

from t1.rng import capture_rng, restore_rng
from t1.train.batch import Batch
from t1.train.hf import adamw, shift_values
from t1.train.megatron import convert as C
from t1.train.megatron import dataparallel as DP
from t1.train.megatron import model as M
from t1.train.megatron import pipeline as PL
from t1.train.megatron import replay as R
from t1.train.megatron import vocab_logp as VL
from t1.train.megatron.residency import Residency, move_role  # noqa: F401 - re-exported
from t1.train.megatron.runtime import Parallel, ranks, setup
from t1.train.protocol import ActorOutput, LossFn

SCHEMA_VERSION = 1


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
        recompute: bool = False,
        logp_chunk: int = VL.DEFAULT_CHUNK,
        optimizer_offload: bool = False,
        attention: str = "local",
    ) -> None:
        self.par = setup(parallel or Parallel())
        self.max_grad_norm = max_grad_norm
        import torch.distributed as dist

        self.world = dist.get_world_size()
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        # a role is an HF module (its weights converted here) or a roles.Source (an HF shell on
        # the meta device + the directory this rank reads its slices from: hf_load)
        self.hf_actor, self.hf_critic = _shell(actor), _shell(critic)  # export shells
        self.loaded: dict[str, dict[str, Any]] = {}  # per role: hf_load.LoadStats of this rank
        ref = self.hf_actor if actor is not None else self.hf_critic
        self.hf_config = ref.config
        dtype = next(ref.parameters()).dtype
        if dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"train.backend megatron trains float32 or bfloat16, got {dtype}")
        self.mixed = dtype == torch.bfloat16  # fp32 main weights in megatron-core's optimizer
        if optimizer_offload and not self.mixed:
            raise ValueError("train.optimizer_offload needs bfloat16 (megatron-core's optimizer)")
        self.host_state, self.attention = optimizer_offload, attention  # main_weights, attention
        tc = M.transformer_config(
            self.hf_config,
            replay=replay,
            dtype=dtype,
            router_fusion=router_fusion,
            recompute=recompute,
        )
        self.replay, self.recompute = replay, recompute
        self.logp_chunk = max(1, int(logp_chunk))  # tokens per output-layer chunk (vocab_logp)
        self.actor = self._build("actor", tc, actor) if actor is not None else None
        self.critic = self._build("critic", tc, critic) if critic is not None else None
        self.ddp = {
            kind: _ddp(getattr(self, kind), self.mixed)
            for kind in ("actor", "critic")
            if getattr(self, kind) is not None
        }
        if self.actor is not None and replay:
            R.install(self.actor)
        self.forward_rows = max(1, forward_rows)
        b = (float(betas[0]), float(betas[1]))
        self.actor_opt = self._optimizer("actor", actor_lr, b, weight_decay)
        self.critic_opt = self._optimizer("critic", critic_lr, b, weight_decay)
        self.generator = torch.Generator().manual_seed(seed)
        self.counters: dict[str, int] = {"actor_updates": 0, "critic_updates": 0}
        self.calls: list[str] | None = None
        self.routing_check: dict[str, int] | None = None  # of the last actor_forward
        self.residency = Residency(self.device, offload)
        self.last_export = None  # export.ExportStats of the last role save_weights wrote

    # ------------------------------------------------------------------ weights

    def _optimizer(self, kind: str, lr: float, betas, weight_decay: float):
        """fp32: torch AdamW on the parameters (the hf backend's, exact); bf16: megatron-core's
        DistributedOptimizer with fp32 main weights (main_weights.py), same Adam settings."""
        model = getattr(self, kind)
        if model is None:
            return None
        if not self.mixed:
            return adamw(model, lr, betas, weight_decay)
        from t1.train.megatron.main_weights import MainWeightsAdam

        return MainWeightsAdam(
            self.ddp[kind],
            lr=lr,
            betas=betas,
            weight_decay=weight_decay,
            max_grad_norm=self.max_grad_norm,
            host_state=self.host_state,
        )

    def _build(self, kind: str, tc, role) -> torch.nn.Module:
        from t1.train.roles import Source

        build = M.build_actor if kind == "actor" else M.build_critic
        model = build(tc, self.hf_config, self.attention)
        if not isinstance(role, Source):
            self._load(kind, model, role.state_dict())
        elif role.directory is not None:  # this rank's slices only, straight from the shards
            from dataclasses import asdict

            from t1.train.megatron import hf_load

            stats = hf_load.load_into(
                model, role.directory, self.hf_config, kind, *hf_load.this_rank(self.par),
                value_head=role.value_head,
            )  # fmt: skip
            self.loaded[kind] = {"directory": str(role.directory), **asdict(stats)}
        # else: shape only, the caller restores a checkpoint next (load_state_dict)
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
        """The role's weights in HF names. Above world size 1 a collective (every rank calls
        it): the stage leaders stream it to rank 0 one tensor at a time (collect.py);
        rank 0 gets the whole role, every other rank {}."""
        model = self.actor if kind == "actor" else self.critic
        if self.world > 1:
            from t1.train.megatron.collect import collect_hf

            return collect_hf(self, kind)
        local = C.local_state(model)
        return {k: v.clone() for k, v in C.mcore_to_hf(local, self.hf_config, kind).items()}

    def sizes(self) -> C.Sizes:
        return C.Sizes(self.par.tp, self.par.pp, self.par.ep, self.par.etp)

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

    def _rowwise(self, batch: Batch, fn, k: int = 1) -> list[torch.Tensor]:
        """fn(minibatch) -> k [b, t] tensors, run over this DP rank's rows in chunks of
        `forward_rows`; returns the whole batch's k [B, T] tensors (zero past each row's end)
        on every rank."""
        local = DP.local_rows(batch)
        outs = [torch.zeros(local.input_ids.shape, dtype=torch.float32) for _ in range(k)]
        for i in range(0, local.size, self.forward_rows):
            idx = list(range(i, min(i + self.forward_rows, local.size)))
            mb = DP.take(local, idx, trim=self.world == 1).to(self.device)
            for out, x in zip(outs, fn(mb), strict=True):
                out[idx[0] : idx[-1] + 1, : x.shape[1]] = x.float().cpu()
        real = torch.arange(batch.input_ids.shape[1])[None, :] < batch.lengths.cpu()[:, None]
        return [DP.gather_rows(out, batch.size) * real for out in outs]

    def _actor_hidden(self, batch: Batch) -> torch.Tensor:
        """The actor's last hidden states [b, t, H] (before the output layer)."""
        with self._replay(batch):
            return VL.hidden_states(self.actor, batch.input_ids)

    def _logp(self, hidden: torch.Tensor, ids: torch.Tensor, entropy: bool = False):
        """hidden [b, t, H] -> logp [b, t] (and entropy [b, t]): vocab-parallel over TP and
        `logp_chunk` tokens at a time through the output layer (vocab_logp.py)."""
        from megatron.core import parallel_state as ps

        w, start, real = VL.output_shard(self.actor)
        return VL.aligned_logp_entropy(
            hidden,
            w,
            ids,
            start,
            real,
            chunk=self.logp_chunk,
            group=ps.get_tensor_model_parallel_group(),
            entropy=entropy,
        )

    def actor_forward(self, batch: Batch, entropy: bool = False) -> ActorOutput:
        self._note("actor.forward")
        self._use("actor")
        self.actor.eval()
        if self.par.pp > 1:  # megatron-core's pipeline schedule (pipeline.py)
            logp, ent, self.routing_check = PL.actor_forward(self, batch, entropy)
            return ActorOutput(logp, ent)
        check = (
            None
            if batch.routing is None
            else {"positions": 0, "live_mismatch": 0, "replay_mismatch": 0}
        )

        def fn(mb):
            hidden = self._actor_hidden(mb) if check is None else self._checked_hidden(mb, check)
            logp, ent = self._logp(hidden, mb.input_ids, entropy)
            return [logp, ent if entropy else torch.zeros_like(logp)]

        with torch.no_grad():
            logp, ent = self._rowwise(batch, fn, 2)
        if check is not None and self.world > 1:  # every DP rank's rows
            keys = sorted(check)
            tot = DP.all_sum(torch.tensor([check[k] for k in keys], dtype=torch.long))
            check = {k: int(v) for k, v in zip(keys, tot, strict=True)}
        self.routing_check = check
        return ActorOutput(logp, ent if entropy else None)

    def _checked_hidden(self, mb: Batch, check: dict[str, int]) -> torch.Tensor:
        """The actor's last hidden states, counting the routing check (t1.train.hf) on the way: the
        routers' own top-k and the experts actually dispatched to, against the record."""
        from t1.model.routing import mismatch

        b, k = mb.input_ids.shape[0], self.hf_config.num_experts_per_tok
        replaying = self.replay and mb.routing is not None
        R.keep_live(self.actor, replaying)
        try:
            with R.RoutingObserver(self.actor) as seen:
                hidden = self._actor_hidden(mb)
            used = seen.routing(b, k)
            live = R.live_routing(self.actor, b) if replaying else used
        finally:
            R.keep_live(self.actor, False)
        t = mb.input_ids.shape[1]
        used, live = _whole_sequence(used, self.actor, t), _whole_sequence(live, self.actor, t)
        record = mb.routing.reshape(-1, *mb.routing.shape[2:]).cpu().numpy()
        n_live, n = mismatch(live.reshape(-1, *live.shape[2:]).numpy(), record)
        n_used, _ = mismatch(used.reshape(-1, *used.shape[2:]).numpy(), record)
        check["positions"] += n
        check["live_mismatch"] += n_live
        check["replay_mismatch"] += n_used
        return hidden

    def critic_values(self, batch: Batch) -> torch.Tensor:
        self._note("critic.values")
        self._use("critic")
        self.critic.eval()
        if self.par.pp > 1:
            return PL.critic_values(self, batch)
        with torch.no_grad():
            (values,) = self._rowwise(
                batch,
                lambda mb: [shift_values(M.forward(self.critic, mb.input_ids)[..., 0].float())],
            )
        return values

    # ------------------------------------------------------------------ updates

    def _step(self, kind: str, loss, metrics) -> dict[str, float]:
        """Backward of the minibatch loss (None: the pipeline schedule did it), megatron-core's
        gradient reduction (summed over DP: each rank back-propagated its own rows,
        dataparallel.py), global-norm clipping, AdamW."""
        from megatron.core.distributed import finalize_model_grads

        model, opt, ddp = getattr(self, kind), getattr(self, f"{kind}_opt"), self.ddp[kind]
        if loss is not None:
            loss.backward()
        finalize_model_grads([ddp])
        if self.mixed:  # clipping and the fp32 Adam step inside megatron-core's optimizer
            return dict(metrics, grad_norm=opt.step())
        params = [p for p in model.parameters() if p.requires_grad]
        for p in params:
            p.grad = p.main_grad
        norm = DP.clip_grads(params, self.max_grad_norm)
        opt.step()
        return dict(metrics, grad_norm=norm)

    def _zero(self, kind: str) -> None:
        self.ddp[kind].zero_grad_buffer()
        if self.mixed:
            getattr(self, f"{kind}_opt").zero_grad()
        for p in getattr(self, kind).parameters():
            p.grad = None

    def actor_update(self, batch: Batch, loss_fn: LossFn) -> dict[str, float]:
        self._note("actor.update")
        self._use("actor")
        self.actor.train()
        self._zero("actor")
        if self.par.pp > 1:
            return self._pipelined("actor", batch, loss_fn)
        batch = batch.to(self.device)
        mb = DP.local_rows(batch)
        with self._replay(mb):  # targets live through backward, cleared right after
            hidden = R.to_backward(self.actor, VL.hidden_states(self.actor, mb.input_ids))
            logp, _ = self._logp(hidden, mb.input_ids)
            logp = DP.with_peers(logp, batch.size)
            loss, metrics = loss_fn(logp, batch)
            metrics = self._step("actor", loss, metrics)
        self.counters["actor_updates"] += 1
        return metrics

    def critic_update(self, batch: Batch, loss_fn: LossFn) -> dict[str, float]:
        self._note("critic.update")
        self._use("critic")
        self.critic.train()
        self._zero("critic")
        if self.par.pp > 1:
            return self._pipelined("critic", batch, loss_fn)
        batch = batch.to(self.device)
        mb = DP.local_rows(batch)
        values = shift_values(M.forward(self.critic, mb.input_ids)[..., 0].float())
        loss, metrics = loss_fn(DP.with_peers(values, batch.size), batch)
        metrics = self._step("critic", loss, metrics)
        self.counters["critic_updates"] += 1
        return metrics

    def _pipelined(self, kind: str, batch: Batch, loss_fn: LossFn) -> dict[str, float]:
        """One update at PP > 1: loss and gradients through megatron-core's schedule."""
        _, metrics = PL.update(self, kind, batch, loss_fn)
        metrics = self._step(kind, None, metrics)
        self.counters[f"{kind}_updates"] += 1
        return metrics

    def permutation(self, n: int) -> list[int]:
        return torch.randperm(n, generator=self.generator).tolist()

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """The whole trainer state (world size 1; above it use checkpoint.save)."""
        if self.world > 1:
            raise NotImplementedError(
                f"MegatronTrainer.state_dict at world size {self.world}: each rank holds a "
                "shard; use t1.train.megatron.checkpoint.save/load (one file per rank)"
            )

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
        if self.world > 1:
            if "checkpoint" not in state:
                raise NotImplementedError(
                    "MegatronTrainer.load_state_dict above world size 1 takes a per-rank "
                    "checkpoint (t1.train.megatron.stage.ShardedStageDir.load; checkpoint.load)"
                )
            from t1.train.megatron import checkpoint as MC

            MC.restore(self, state["checkpoint"])
            return
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
        """DIR/actor and DIR/critic as the hf backend writes them, each atomic; a collective:
        each pipeline stage's leader writes its own tensors, nothing is gathered (export.py;
        the critic, which the engine never serves, in Critic's one-file format)."""
        from t1.train.megatron.export import export_hf

        out_dir = Path(out_dir)
        for kind, wanted in (("actor", actor), ("critic", critic)):
            if wanted and getattr(self, kind) is not None:
                self.last_export = export_hf(self, kind, out_dir / kind)


def _shell(role) -> torch.nn.Module | None:
    """The HF module of a role (a module, or a roles.Source's meta shell)."""
    return getattr(role, "shell", role)


def _ddp(model: torch.nn.Module, distributed_optimizer: bool = False):
    """megatron-core's DistributedDataParallel around `model` (fp32 grad buffers, no overlap;
    the distributed optimizer's parameter buffers for bf16): the gradient reduction of this
    backend at every world size."""
    from megatron.core.distributed import DistributedDataParallel

    from t1.train.megatron.main_weights import ddp_config

    cfg = ddp_config(distributed_optimizer)
    return DistributedDataParallel(config=model.config, ddp_config=cfg, module=model)


_whole_sequence = R.whole_sequence  # the routing check's TP gather (replay.py)

"""A stage's directory on disk, trainer construction, and the resumable epoch loop.

    from t1.train.state import StageDir, build_trainer, run_epochs

StageDir(out): the resumable state goes through t1.store.ckpt as atomic checkpoints
`OUT/ckpt/step_{N:08d}` (N = optimizer steps taken; parts `actor` and `critic` as
safetensors, `trainer` = the rest of the trainer's state_dict (optimizers, RNG states,
counters) as torch.save bytes, `progress` = stage counters, epoch permutation and cursor as
JSON; meta {"schema_version", "stage", "status": "partial" | "complete"}). The newest `keep`
(`campaign.keep_checkpoints`, the one retention knob) complete ones are kept; on load the
newest complete, verified one wins and a partial or corrupt newer one is reported
(OUT/incidents.jsonl, logger "t1.store.ckpt") and skipped, so a kill -9 anywhere, mid-write
included, costs at most the steps since the previous checkpoint.
A legacy OUT/trainer.pt (older runs) is still read when OUT/ckpt holds nothing usable. A per-rank
checkpoint (train.backend megatron above world size 1, t1/train/megatron/stage.py) is refused
at world size 1 with `LayoutChanged` naming it: there is no resharding.
`DONE.json` ({"schema_version", "status": "complete", "stage", ...}) is written last, after
the weights.

run_epochs: shuffled minibatches of rows over `epochs`, the permutation drawn from the
trainer's own generator at each epoch start and kept in the progress record, so a run stopped
anywhere (SIGUSR2/SIGTERM, --max-steps, a crash after a save) resumes on the same minibatch
sequence. It saves every `save_every` optimizer steps and when asked to stop.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from t1.config import Config
from t1.records import write_json_atomic
from t1.store.ckpt import Checkpoint, latest_complete
from t1.store.ckpt_retention import CheckpointManager
from t1.supervise.child import heartbeat
from t1.train.batch import Row, collate
from t1.train.hf import HFTrainer

SCHEMA_VERSION = 1


class StageDir:
    def __init__(self, out: str | Path, stage: str, keep: int | None = None) -> None:
        """keep: complete checkpoints kept (`campaign.keep_checkpoints`, >= 2: the newest may
        prove corrupt); needed only to save, a StageDir opened to read has none."""
        if keep is not None and keep < 2:
            raise ValueError(
                f"{out}: keep={keep} checkpoints; must be >= 2 (campaign.keep_checkpoints)"
            )
        self.path = Path(out)
        self.stage = stage
        self.keep = keep
        self.ckpt_root = self.path / "ckpt"
        self.legacy_state_file = self.path / "trainer.pt"
        self.done_file = self.path / "DONE.json"
        self.incidents = self.path / "incidents.jsonl"  # outside ckpt/: survives its pruning
        self._manager: CheckpointManager | None = None

    def done(self) -> bool:
        return self.done_file.exists()

    def load(self) -> dict[str, Any] | None:
        """The newest complete checkpoint's payload, or None. Corrupt and partial newer ones
        are reported (OUT/incidents.jsonl) and skipped; a payload of another stage is an
        error. A legacy OUT/trainer.pt is read when OUT/ckpt holds nothing usable."""
        ckpt = latest_complete(self.ckpt_root, incidents=self.incidents)
        if ckpt is not None:
            where = ckpt.path
            if "trainer" not in ckpt.parts and "layout" in ckpt.meta:
                from t1.train.megatron.checkpoint import LayoutChanged

                raise LayoutChanged(
                    f"{where}: a per-rank checkpoint of layout {ckpt.meta['layout']} (train.backend "
                    "megatron under torchrun); this run has world size 1 and there is no "
                    "resharding: resume with the same torchrun layout, or start a new stage from "
                    f"the HF weights ({self.path}/actor, critic)"
                )
            try:
                payload = _payload_of(ckpt)
            except Exception as e:  # noqa: BLE001 - name the checkpoint whatever went wrong
                raise RuntimeError(
                    f"{where}: unreadable trainer state ({e}); remove it to fall back"
                ) from None
            print(f"t1 train {self.stage}: resuming from {where}", flush=True)
        elif self.legacy_state_file.exists():
            where = self.legacy_state_file
            try:
                payload = torch.load(where, weights_only=False)
            except Exception as e:  # noqa: BLE001 - name the file whatever torch raised
                raise RuntimeError(
                    f"{where}: unreadable trainer state ({e}); remove it to restart the stage"
                ) from None
        else:
            return None
        if payload.get("schema_version") != SCHEMA_VERSION or payload.get("stage") != self.stage:
            raise RuntimeError(
                f"{where}: stage {payload.get('stage')!r} schema {payload.get('schema_version')}, "
                f"expected stage {self.stage!r} schema {SCHEMA_VERSION}"
            )
        return payload

    def save(self, trainer: HFTrainer, progress: dict[str, Any], complete: bool = False) -> None:
        """One atomic checkpoint OUT/ckpt/step_N (N = progress["step"]); keeps the newest K."""
        if self.keep is None:
            raise ValueError(
                f"{self.path}: StageDir(..., keep=cfg.campaign.keep_checkpoints) to save"
            )
        if self._manager is None:
            self._manager = CheckpointManager(
                self.ckpt_root, keep=self.keep, incidents=self.incidents
            )
        state = trainer.state_dict()
        parts: dict[str, Any] = {}
        for name in ("actor", "critic"):
            if state[name] is not None:
                parts[name] = state[name]
        rest = {k: v for k, v in state.items() if k not in parts}
        buf = io.BytesIO()
        torch.save(rest, buf)
        parts["trainer"] = buf.getvalue()
        parts["progress"] = progress
        meta = {
            "schema_version": SCHEMA_VERSION,
            "stage": self.stage,
            "status": "complete" if complete else "partial",
        }
        self._manager.save(int(progress.get("step", 0)), parts, meta=meta)

    def close(self) -> None:
        """Wait for background retention (call before the process exits normally)."""
        if self._manager is not None:
            self._manager.close()
            self._manager = None

    def finish(self, info: dict[str, Any]) -> None:
        record = {
            "schema_version": SCHEMA_VERSION,
            "status": "complete",
            "stage": self.stage,
            "time": time.time(),
            **info,
        }
        write_json_atomic(self.done_file, record, default=str)


class UnusableCheckpoints(RuntimeError):
    """A stage would start fresh over checkpoints of its own; the message names them."""


def check_fresh_start(out: str | Path, stage: str, restart: bool = False) -> None:
    """Refuse to start `stage` fresh in OUT while OUT/ckpt holds checkpoints none of which is
    usable (`restart`: move them to OUT/ckpt.discarded-TIME, record an incident, go on)."""
    from t1.store.ckpt import list_step_dirs
    from t1.store.incidents import IncidentLog

    sd = StageDir(out, stage)
    dirs = [p for _, p in list_step_dirs(sd.ckpt_root)]
    if sd.done() or not dirs or latest_complete(sd.ckpt_root, incidents=sd.incidents):
        return
    names = ", ".join(str(p) for p in dirs)
    if not restart:
        raise UnusableCheckpoints(
            f"{sd.ckpt_root}: no usable checkpoint among {names} (see {sd.incidents}); "
            "refusing to start the stage fresh over them; rerun with --restart-stage to "
            "discard them and start over"
        )
    aside = sd.path / f"ckpt.discarded-{int(time.time())}"
    sd.ckpt_root.rename(aside)
    IncidentLog(sd.incidents).write(
        "stage_restarted", stage=stage, checkpoints=names, moved_to=str(aside),
        action="started fresh (--restart-stage)",
    )  # fmt: skip


def _payload_of(ckpt: Checkpoint) -> dict[str, Any]:
    """The payload `StageDir.save` split into parts, put back together."""
    rest = torch.load(io.BytesIO(ckpt.load("trainer")), weights_only=False)
    state = dict(rest)
    for name in ("actor", "critic"):
        state[name] = ckpt.load(name) if name in ckpt.parts else None
    return {**ckpt.meta, "trainer": state, "progress": ckpt.load("progress")}


def trainer_options(cfg: Config, actor_lr: float | None = None) -> dict:
    """The keyword arguments every trainer backend takes from `cfg.ppo` (t1/train/protocol.py)."""
    p = cfg.ppo
    if p.load_balancing_coef != 0.0:
        raise ValueError(
            "ppo.load_balancing_coef must be 0: the load-balancing loss fights routing replay"
        )
    return dict(
        actor_lr=p.actor_lr if actor_lr is None else actor_lr,
        critic_lr=p.critic_lr,
        betas=(p.betas[0], p.betas[1]),
        weight_decay=p.weight_decay,
        max_grad_norm=p.max_grad_norm,
        replay=p.replay,
        seed=cfg.run.seed,
        forward_rows=cfg.train.micro_batch or p.minibatch,
        device=device_of(p.device),
    )


def build_trainer(cfg: Config, actor, critic, actor_lr: float | None = None) -> HFTrainer:
    return HFTrainer(actor, critic, **trainer_options(cfg, actor_lr))


def device_of(name: str) -> str:
    """ "auto" -> "cuda" when a GPU is visible, else "cpu"; other names pass through."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def load_tokenizer_for(args_tokenizer: str | None, rows_meta_dirs: list[str]) -> Any:
    """--tokenizer if given, else the one a trajectory recorded in its metadata, else None
    (TITO then skips the retokenized relation; our own loop never needs it)."""
    from t1.agent.tokenizer import load_tokenizer

    if args_tokenizer:
        return load_tokenizer(args_tokenizer)
    from t1.agent.trajectory import find_trajectories, read_header

    for d in rows_meta_dirs:
        for path in find_trajectories(d)[:1]:
            tok = read_header(path).get("metadata", {}).get("tokenizer")
            if tok and Path(tok).exists():
                return load_tokenizer(tok)
    return None


def run_epochs(
    trainer: HFTrainer,
    rows: list[Row],
    epochs: int,
    batch_rows: int,
    update: Callable[[Any], dict[str, float]],
    progress: dict[str, Any],
    stage_dir: StageDir,
    save_every: int,
    on_step: Callable[[int, dict[str, float]], None],
    stop: Any = None,
    max_steps: int | None = None,
) -> str:
    """Train over `rows`; returns "done", "stopped" (signal) or "max_steps". `progress` holds
    epoch, pos, perm, step and is updated in place (and saved)."""
    progress.setdefault("epoch", 0)
    progress.setdefault("pos", 0)
    progress.setdefault("perm", None)
    progress.setdefault("step", 0)
    taken = 0
    while progress["epoch"] < epochs:
        if progress["perm"] is None:
            progress["perm"] = trainer.permutation(len(rows))
            progress["pos"] = 0
        perm = progress["perm"]
        while progress["pos"] < len(perm):
            if stop is not None and stop.requested:
                stage_dir.save(trainer, progress)
                return "stopped"
            if max_steps is not None and taken >= max_steps:
                stage_dir.save(trainer, progress)
                return "max_steps"
            idx = perm[progress["pos"] : progress["pos"] + batch_rows]
            t0 = time.perf_counter()
            mb = collate([rows[i] for i in idx])
            metrics = update(mb)
            dt = time.perf_counter() - t0
            metrics.update(
                rows=mb.size, tokens=mb.tokens, loss_tokens=mb.loss_tokens, epoch=progress["epoch"]
            )
            metrics.update(step_time_s=dt, tokens_per_s=mb.tokens / dt if dt > 0 else float("nan"))
            progress["pos"] += len(idx)
            progress["step"] += 1
            taken += 1
            on_step(progress["step"], metrics)
            heartbeat()
            if save_every > 0 and progress["step"] % save_every == 0:
                stage_dir.save(trainer, progress)
        progress["epoch"] += 1
        progress["perm"] = None
    return "done"

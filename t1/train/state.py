"""A stage's directory on disk, trainer construction, and the resumable epoch loop.

    from t1.train.state import StageDir, build_trainer, run_epochs

StageDir(out): `trainer.pt` (torch.save to a temp file, fsync, rename: never half-written)
holds {"schema_version", "stage", "status": "partial" | "complete", "trainer": the trainer's
state_dict, "progress": stage counters}; `DONE.json` ({"schema_version", "status":
"complete", "stage", ...}) is written last, after the weights. t1/ckpt.py (atomic manifests)
will take over the writing; the layout stays.

run_epochs: shuffled minibatches of rows over `epochs`, the permutation drawn from the
trainer's own generator at each epoch start and kept in the progress record, so a run stopped
anywhere (SIGUSR2/SIGTERM, --max-steps, a crash after a save) resumes on the same minibatch
sequence. It saves every `save_every` optimizer steps and when asked to stop.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from t1.config import Config
from t1.supervise import heartbeat
from t1.train.batch import Row, collate
from t1.train.hf import HFTrainer

SCHEMA_VERSION = 1
EXIT_REQUEUE = 75


class StageDir:
    def __init__(self, out: str | Path, stage: str) -> None:
        self.path = Path(out)
        self.stage = stage
        self.state_file = self.path / "trainer.pt"
        self.done_file = self.path / "DONE.json"

    def done(self) -> bool:
        return self.done_file.exists()

    def load(self) -> dict[str, Any] | None:
        """The saved payload, or None. A payload of another stage is an error."""
        if not self.state_file.exists():
            return None
        try:
            payload = torch.load(self.state_file, weights_only=False)
        except Exception as e:  # noqa: BLE001 - name the file whatever torch raised
            raise RuntimeError(
                f"{self.state_file}: unreadable trainer state ({e}); remove it to restart the stage"
            ) from None
        if payload.get("schema_version") != SCHEMA_VERSION or payload.get("stage") != self.stage:
            raise RuntimeError(
                f"{self.state_file}: stage {payload.get('stage')!r} schema {payload.get('schema_version')}, "
                f"expected stage {self.stage!r} schema {SCHEMA_VERSION}"
            )
        return payload

    def save(self, trainer: HFTrainer, progress: dict[str, Any], complete: bool = False) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        payload = {
            "schema_version": SCHEMA_VERSION,
            "stage": self.stage,
            "status": "complete" if complete else "partial",
            "trainer": trainer.state_dict(),
            "progress": progress,
        }
        tmp = self.state_file.with_name(f".{self.state_file.name}.tmp")
        with open(tmp, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_file)

    def finish(self, info: dict[str, Any]) -> None:
        record = {
            "schema_version": SCHEMA_VERSION,
            "status": "complete",
            "stage": self.stage,
            "time": time.time(),
            **info,
        }
        tmp = self.done_file.with_name(f".{self.done_file.name}.tmp")
        tmp.write_text(json.dumps(record, indent=1, default=str) + "\n")
        os.replace(tmp, self.done_file)


def build_trainer(cfg: Config, actor, critic, actor_lr: float | None = None) -> HFTrainer:
    p = cfg.ppo
    if p.load_balancing_coef != 0.0:
        raise ValueError(
            "ppo.load_balancing_coef must be 0: the load-balancing loss fights routing replay"
        )
    return HFTrainer(
        actor,
        critic,
        actor_lr=p.actor_lr if actor_lr is None else actor_lr,
        critic_lr=p.critic_lr,
        betas=(p.betas[0], p.betas[1]),
        weight_decay=p.weight_decay,
        max_grad_norm=p.max_grad_norm,
        replay=p.replay,
        seed=cfg.run.seed,
        forward_rows=p.minibatch,
        device=device_of(p.device),
    )


def device_of(name: str) -> str:
    """ "auto" -> "cuda" when a GPU is visible, else "cpu"; other names pass through."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def load_tokenizer_for(args_tokenizer: str | None, rows_meta_dirs: list[str]) -> Any:
    """--tokenizer if given, else the one a trajectory recorded in its metadata, else None
    (TITO then skips the retokenized relation; our own loop never needs it)."""
    from t1.tokenizer import load_tokenizer

    if args_tokenizer:
        return load_tokenizer(args_tokenizer)
    from t1.trajectory import find_trajectories, read_header

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

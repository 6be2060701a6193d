"""A training stage's directory above world size 1 (torchrun): per-rank checkpoints, rank 0 writes.

    torchrun --nproc-per-node 2 -m t1.cli train --config F --stage ppo|sft|critic_warmup ...
    from t1.train.megatron.stage import open_stage_dir, lead, metrics_log, agreed_stop

`open_stage_dir` gives t1.train.state.StageDir at world size 1 (unchanged) and
`ShardedStageDir` when torchrun's WORLD_SIZE > 1 (train.backend megatron only). ShardedStageDir
keeps StageDir's interface for the PPO stage (t1/train/ppo.py) and the SFT / critic warm-up runner
(t1/train/stage.py): `save` writes DIR/ckpt/step_N in
checkpoint.py's per-rank format inside t1.store.ckpt's atomic protocol (every rank writes its file, rank
0 seals; the stage meta and the progress record are in the manifest's meta), then rank 0 prunes
to the newest `keep`; `load` returns a payload whose "trainer" is the checkpoint itself
(MegatronTrainer.load_state_dict restores this rank's file from it); `finish` (DONE.json) is rank
0's. A checkpoint of another layout (a world-size-1 one, or other world / TP / PP / EP / ETP
sizes) is refused with `LayoutChanged` naming the checkpoint and both layouts: there is no
resharding (checkpoint.py); start from the HF weights (DIR/actor, DIR/critic) instead.

`agreed_stop(stop)`: a stop request (SIGUSR2 / SIGTERM, t1.supervise.child.StopRequest) that
every rank reads at the same step boundary and that holds on all of them when it holds on any
(one all-reduce MAX of a flag over the world): the checkpoint it triggers is a collective, so
one rank stopping alone would hang the others. At world size 1 it is the request itself.

Every rank picks the newest complete checkpoint on its own (before the process group exists);
they agree because they read the same shared directory and nothing writes it meanwhile (one
writer per DIR: rank 0 holds DIR/.t1-writer.lock).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from t1.store.ckpt import latest_complete
from t1.store.ckpt_retention import prune
from t1.store.incidents import IncidentLog
from t1.train.megatron.checkpoint import LayoutChanged
from t1.train.state import SCHEMA_VERSION, StageDir

__all__ = [
    "LayoutChanged",
    "ShardedStageDir",
    "agreed_stop",
    "lead",
    "metrics_log",
    "open_stage_dir",
    "record_load",
]


def world_size() -> int:
    """torchrun's WORLD_SIZE (1 when not launched by torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def lead() -> bool:
    """True on the rank that writes the stage's files (rank 0, or no torchrun)."""
    return int(os.environ.get("RANK", "0")) == 0


def open_stage_dir(out: str | Path, stage: str, keep: int | None = None) -> StageDir:
    if world_size() == 1:
        return StageDir(out, stage, keep=keep)
    return ShardedStageDir(out, stage, keep=keep)


LOAD_RECORDS = "weights_load"  # DIR/weights_load/rank_R.json


def record_load(out: str | Path, trainer: Any) -> None:
    """DIR/weights_load/rank_R.json: what this rank read of the HF weights it started from
    (MegatronTrainer.loaded: per role the directory, bytes read of the checkpoint's bytes, files
    opened, peak host memory of the load); nothing for a trainer that loaded none (hf, resume)."""
    loaded = getattr(trainer, "loaded", None)
    if not loaded:
        return
    from t1.records import write_json_atomic

    rank = int(os.environ.get("RANK", "0"))
    doc = {"rank": rank, "world_size": world_size(), "roles": loaded}
    write_json_atomic(Path(out) / LOAD_RECORDS / f"rank_{rank}.json", doc)


class _NoLog:
    def write(self, *a: Any, **k: Any) -> None:
        return None


def metrics_log(directory: str | Path):
    """DIR/metrics.jsonl's writer on the lead rank; a log that writes nothing on the others."""
    from t1.store.metrics_log import MetricsLog

    return MetricsLog(directory) if lead() else contextlib.nullcontext(_NoLog())


class AgreedStop:
    """`stop.requested` agreed over the world (see the module docstring); read it at the same
    points on every rank (it is a collective above world size 1)."""

    def __init__(self, stop: Any) -> None:
        self.stop = stop

    @property
    def requested(self) -> bool:
        mine = bool(self.stop is not None and self.stop.requested)
        if world_size() == 1:
            return mine
        import torch
        import torch.distributed as dist

        dev = (
            torch.device("cuda", torch.cuda.current_device())
            if dist.get_backend() == "nccl"
            else None
        )
        flag = torch.tensor([int(mine)], dtype=torch.int64, device=dev)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


def agreed_stop(stop: Any) -> AgreedStop:
    return AgreedStop(stop)


class ShardedStageDir(StageDir):
    """StageDir of a world-size > 1 megatron run (see the module docstring)."""

    def load(self) -> dict[str, Any] | None:
        if self.legacy_state_file.exists():
            raise LayoutChanged(
                f"{self.legacy_state_file}: a world-size-1 trainer state; this run has world "
                f"size {world_size()}: resume at world size 1 or start from the HF weights"
            )
        ilog = IncidentLog(self.incidents if lead() else None)
        ckpt = latest_complete(self.ckpt_root, verify="size", incidents=ilog)
        if ckpt is None:
            return None
        meta = ckpt.meta
        if meta.get("backend") != "megatron" or "layout" not in meta:
            raise LayoutChanged(
                f"{ckpt.path}: a world-size-1 checkpoint (parts {', '.join(ckpt.parts)}); this "
                f"run has world size {world_size()} and there is no resharding: resume at world "
                f"size 1, or start a new stage from the HF weights ({self.path}/actor, critic)"
            )
        if meta.get("schema_version") != SCHEMA_VERSION or meta.get("stage") != self.stage:
            raise RuntimeError(
                f"{ckpt.path}: stage {meta.get('stage')!r} schema {meta.get('schema_version')}, "
                f"expected stage {self.stage!r} schema {SCHEMA_VERSION}"
            )
        print(f"t1 train {self.stage}: resuming from {ckpt.path} (per-rank)", flush=True)
        trainer = {"schema_version": 1, "backend": "megatron", "checkpoint": ckpt}
        return {**meta, "trainer": trainer, "progress": dict(meta["progress"])}

    def save(self, trainer, progress: dict[str, Any], complete: bool = False) -> None:
        from t1.train.megatron import checkpoint as MC

        if self.keep is None:
            raise ValueError(
                f"{self.path}: StageDir(..., keep=cfg.campaign.keep_checkpoints) to save"
            )
        meta = {
            "schema_version": SCHEMA_VERSION,
            "stage": self.stage,
            "status": "complete" if complete else "partial",
        }
        MC.save(trainer, self.ckpt_root, int(progress.get("step", 0)), progress, meta=meta)
        if lead():
            prune(self.ckpt_root, self.keep)

    def finish(self, info: dict[str, Any]) -> None:
        if lead():
            super().finish({**info, "world_size": world_size()})

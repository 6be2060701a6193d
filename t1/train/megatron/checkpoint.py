"""Checkpoints of the megatron backend at any world size: one file per rank, inside t1.store.ckpt's
atomic protocol (a checkpoint counts only when its completion marker exists).

    from t1.train.megatron import checkpoint as MC
    MC.save(trainer, "OUT/ckpt", step, progress={"step": step})   # every rank calls it
    got = MC.load(trainer, "OUT/ckpt")                             # every rank; None if none
    MC.restore(trainer, checkpoint)            # every rank, from one t1.store.ckpt.Checkpoint

Format: ROOT/step_N/rank_RRRRR.bin (a torch file: this rank's actor and critic shards in
megatron names (convert.local_state), both optimizers' state, its RNG states, the shuffling
generator, counters, and the layout) + manifest.json (sha256 of every rank's file, the layout,
`progress`) + COMPLETE. Rank 0 makes the temporary directory, every rank writes and fsyncs its
file, a barrier, then rank 0 seals it (t1.store.ckpt_write.seal_checkpoint: manifest, rename, marker) and a
barrier again: a crash anywhere before the marker leaves nothing that counts. Resuming needs
the same layout (world, TP, PP, EP, ETP) and refuses another one naming the checkpoint; the
state is restored exactly, so a resumed run repeats the uninterrupted one bit for bit in
deterministic mode (tests/megatron/test_megatron_parallel.py, world size 2, EP 2).

Why not megatron.core.dist_checkpointing: measured, its `torch_dist` save does not run on the
CPU (megatron-core 0.16.1, `dist_checkpointing.save(actor.sharded_state_dict(), dir)` at world
size 1: `strategies/filesystem_async.py` `preload_tensors` calls `torch.cuda.synchronize()` ->
"Torch not compiled with CUDA enabled"), so it could not be proven here; and it saves optimizer
state only through megatron's own optimizers (`sharded_state_dict` of DistributedOptimizer /
ChainedOptimizer), while this backend keeps torch AdamW (the hf backend's, for exact equality).
The per-rank format therefore has no resharding: a layout change needs the HF weights
(save_weights) and a fresh optimizer.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from t1.rng import capture_rng, restore_rng
from t1.store.ckpt import Checkpoint, latest_complete
from t1.store.ckpt_write import begin_checkpoint, seal_checkpoint

SCHEMA_VERSION = 1


class LayoutChanged(ValueError):
    """A checkpoint saved under another parallel layout; the message names both."""


def layout(trainer) -> dict[str, int]:
    p = trainer.par
    return {"world": dist.get_world_size(), "tp": p.tp, "pp": p.pp, "ep": p.ep, "etp": p.etp}


def rank_file(rank: int) -> str:
    return f"rank_{rank:05d}.bin"


def local_state(trainer) -> dict[str, Any]:
    """This rank's part of the trainer state."""
    from t1.train.megatron import convert as C

    def sd(x):
        return None if x is None else x.state_dict()

    return {
        "schema_version": SCHEMA_VERSION,
        "backend": "megatron",
        "layout": layout(trainer),
        "rank": dist.get_rank(),
        "actor": None if trainer.actor is None else C.local_state(trainer.actor),
        "critic": None if trainer.critic is None else C.local_state(trainer.critic),
        "actor_optim": sd(trainer.actor_opt),
        "critic_optim": sd(trainer.critic_opt),
        "rng": {**capture_rng(), "generator": trainer.generator.get_state()},
        "counters": dict(trainer.counters),
    }


def load_local_state(trainer, state: dict[str, Any], where: str) -> None:
    from t1.train.megatron import convert as C

    if state.get("schema_version") != SCHEMA_VERSION or state.get("backend") != "megatron":
        raise ValueError(f"{where}: not a megatron rank checkpoint of schema {SCHEMA_VERSION}")
    if state["layout"] != layout(trainer):
        raise LayoutChanged(
            f"{where}: saved with layout {state['layout']}, this run is {layout(trainer)}; "
            "resume with the same world size and parallel sizes (or start from the HF weights)"
        )
    for kind in ("actor", "critic"):
        model, opt = getattr(trainer, kind), getattr(trainer, f"{kind}_opt")
        if (model is None) != (state[kind] is None):
            raise ValueError(f"{where}: {kind} presence differs from this trainer")
        if model is not None:
            C.load_local(model, state[kind])
            opt.load_state_dict(state[f"{kind}_optim"])
    restore_rng(state["rng"])
    trainer.generator.set_state(state["rng"]["generator"])
    trainer.counters = dict(state["counters"])


def save(
    trainer,
    root: str | os.PathLike[str],
    step: int,
    progress: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
) -> Path:
    """Write ROOT/step_N collectively (every rank calls it); returns the directory. `meta`:
    more keys for the manifest's meta (the stage's, t1.train.megatron.stage)."""
    rank = dist.get_rank()
    box = [str(begin_checkpoint(root, step)) if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    tmp = Path(box[0])
    buf = io.BytesIO()
    torch.save(local_state(trainer), buf)
    with open(tmp / rank_file(rank), "wb") as f:
        f.write(buf.getvalue())
        f.flush()
        os.fsync(f.fileno())
    dist.barrier()
    out = [None]
    if rank == 0:
        got = seal_checkpoint(
            root,
            step,
            tmp,
            meta={
                **(meta or {}),
                "backend": "megatron",
                "layout": layout(trainer),
                "progress": progress or {},
            },
        )
        out = [str(got.path)]
    dist.broadcast_object_list(out, src=0)  # no rank returns before the marker exists
    return Path(out[0])


def load(trainer, root: str | os.PathLike[str]) -> Checkpoint | None:
    """Restore this rank's state from the newest complete checkpoint under ROOT (every rank
    calls it); None when there is none."""
    ckpt = latest_complete(root, verify="size")
    if ckpt is None:
        return None
    restore(trainer, ckpt)
    return ckpt


def restore(trainer, ckpt: Checkpoint) -> None:
    """Restore this rank's state from the complete checkpoint `ckpt` (every rank calls it)."""
    if ckpt.meta.get("layout") != layout(trainer):
        raise LayoutChanged(
            f"{ckpt.path}: saved with layout {ckpt.meta.get('layout')}, this run is "
            f"{layout(trainer)}; resume with the same world size and parallel sizes (or start "
            "from the HF weights)"
        )
    name = rank_file(dist.get_rank())[: -len(".bin")]
    if name not in ckpt.parts:
        raise ValueError(
            f"{ckpt.path}: no {name}.bin (saved by {ckpt.meta.get('layout')}, this run is "
            f"{layout(trainer)})"
        )
    raw = ckpt.load(name)
    if hashlib.sha256(raw).hexdigest() != ckpt.manifest["parts"][name]["sha256"]:
        raise ValueError(f"{ckpt.path / (name + '.bin')}: sha256 differs from the manifest")
    state = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=False)
    load_local_state(trainer, state, str(ckpt.path / f"{name}.bin"))

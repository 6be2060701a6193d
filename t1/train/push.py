"""The trainer's distributed weight update (`fleet.weight_update: distributed`): after a PPO step
the actor goes straight to every rollout replica, SGLang's way.

    t1 train --stage ppo ... --push-to http://n4:30000,http://n5:30000
    from t1.train.push import push_actor
    rec = push_actor(trainer, urls, version_of(OUT / "actor"), bucket_bytes=1 << 30)  # every rank

megatron backend, as slime does it (one weight-update group per pipeline stage, the stage's
source as group rank 0): every trainer rank iterates `export.stage_tensors(trainer, "actor")`
(collective: the TP / EP / ETP pieces of each tensor meet on the stage's leader, one tensor at
a time, in the checkpoint's names); each leader opens its own group with every replica
(t1.engine.weight_update.WeightUpdateGroup, `t1-pp<stage>`, /init_weights_update_group) and
sends its stage's tensors in buckets without committing. Then every rank agrees (an all_reduce
over the trainer's ranks) whether all stages got through, and only then rank 0 commits the
version: each replica loads every stage's tensors at once and stamps `weight_version`.
hf backend (one process): the HF actor's parameters in checkpoint names
(t1.model.checkpoint_names.checkpoint_tensors), one group, committed with the last bucket.

If any part fails nobody commits: each replica keeps its old weights and version, and the
fleet's check before the next rollout (t1.engine.fleet, `distributed`) finds the version differs
and loads the step's export from disk instead (written just before: the recovery path). So a
push never fails the training step: the result says what happened (`ok`, `error`, the leaders'
SendRecords); rank 0 keeps it in the step's directory (`weight_push.json`, by t1.train.ppo).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from t1.engine.weight_update import WeightSyncError, WeightUpdateGroup

FAILURES = (WeightSyncError, OSError, RuntimeError, ValueError)


def push_actor(
    trainer,
    urls: list[str],
    version: str,
    *,
    bucket_bytes: int,
    backend: str | None = None,
    ranks_per_replica: int = 1,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Push the actor to `urls` under `version` (every trainer rank calls it). `backend`: the
    group's (default: nccl with CUDA, else gloo)."""
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    group_of = lambda stage: WeightUpdateGroup(  # noqa: E731 - one line per caller below
        urls,
        group_name=f"t1-pp{stage}",
        backend=backend,
        ranks_per_replica=ranks_per_replica,
        timeout_s=timeout_s,
    )
    if not hasattr(trainer, "par"):  # the hf backend: one process holds the whole actor
        return _push_hf(trainer, group_of(0), urls, version, bucket_bytes)
    return _push_megatron(trainer, group_of, urls, version, bucket_bytes)


def _result(urls, version, stage, leader, committed, record, error) -> dict[str, Any]:
    return {
        "ok": committed and error is None,
        "version": version,
        "stage": stage,
        "leader": leader,
        "committed": committed,
        "replicas": list(urls),
        "record": None if record is None else record.to_json(),
        "error": error,
    }


def _push_hf(trainer, group, urls, version, bucket_bytes) -> dict[str, Any]:
    from t1.model.checkpoint_names import checkpoint_tensors

    record, error = None, None
    try:
        group.open()
        try:
            named = checkpoint_tensors(trainer.actor.state_dict())
            record = group.send(named, version, bucket_bytes, commit=True)
        finally:
            group.close()
    except FAILURES as e:
        error = str(e)
    return _result(urls, version, 0, True, error is None, record, error)


def _push_megatron(trainer, group_of, urls, version, bucket_bytes) -> dict[str, Any]:
    from t1.train.megatron.export import comm_device, coordinates, stage_tensors

    coords = coordinates()
    rank = dist.get_rank()
    stage = coords[rank][1]
    leader = min(r for r, c in enumerate(coords) if c[1] == stage)
    group, record, error, committed = None, None, None, False
    if rank == leader:
        group = group_of(stage)
        try:
            group.open()
        except FAILURES as e:
            error, group = f"stage {stage}: open: {e}", None
    stream = stage_tensors(trainer, "actor")
    try:
        if group is not None:
            mine = ((n, t) for n, t in stream if t is not None)
            try:
                record = group.send(mine, version, bucket_bytes, commit=False)
            except FAILURES as e:
                error = f"stage {stage}: send: {e}"
        elif rank == leader and error is None:
            error = f"stage {stage}: no group"
        for _ in stream:  # the rest of the collective (all of it off the leaders)
            pass
        ok = torch.tensor([0 if error else 1], dtype=torch.int32, device=comm_device())
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        if int(ok.item()) == 1 and rank == 0:
            try:
                group.commit(version)
                committed = True
            except FAILURES as e:
                error = f"commit: {e}"
        elif int(ok.item()) == 0 and error is None:
            error = "another pipeline stage failed: nothing committed"
        done = torch.tensor([int(committed)], dtype=torch.int32, device=comm_device())
        dist.broadcast(done, src=0)  # every rank reports whether the replicas took it
        committed = bool(done.item())
    finally:
        if group is not None:  # after the commit: a replica drops what its groups staged
            group.close()
    return _result(urls, version, stage, rank == leader, committed, record, error)

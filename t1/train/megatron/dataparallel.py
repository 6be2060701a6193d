"""Data parallelism of the megatron backend: which rows a rank works on, how the forwards come
back together, and how one update's loss, gradients and norm are reduced across ranks.

    from t1.train.megatron import dataparallel as DP
    local = DP.local_rows(batch)                 # this DP rank's rows (padded to equal count)
    full = DP.gather_rows(local_out, batch.size) # [B, T] on every rank, in the batch's row order
    logp = DP.with_peers(local_logp, batch.size) # live own rows among the peers' (detached)
    norm = DP.clip_grads(params, max_norm)       # global L2 norm over dense + expert shards

Every rank runs the same `t1.train.step.ppo_step` on the same batch (same shuffling generator);
inside each actor/critic call the trainer keeps only its data-parallel share of the rows:
rank d of D takes the contiguous rows [d P, (d + 1) P), P = ceil(B / D), padded with empty rows
(no loss tokens, no routing record, pad ids) so all ranks' tensors have the same shape (the
`allgather` MoE dispatcher and pipeline p2p need equal shapes across ranks). Rows keep the
batch's length T at world size > 1 (no per-chunk trimming) for the same reason.

The update: each rank's forward gives its rows with grad; `with_peers` puts them among the
other ranks' rows (gathered, detached), so loss_fn sees the whole minibatch exactly as at world
size 1 (its loss and metrics are the world-size-1 ones on every rank) and each rank's backward
covers its own rows. megatron-core's per-token loss mode (`calculate_per_token_loss`: DDP sums
instead of averaging) then makes `finalize_model_grads`' all-reduce (dense gradients over the
data-parallel group, expert gradients over the expert-data-parallel group, by megatron-core's
DistributedDataParallel buffers) the gradient of the minibatch loss, what world size 1
computes; weights after a step agree with world size 1 to fp32 rounding (tests/megatron).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from t1.train.batch import Batch


def dp_group():
    from megatron.core import parallel_state as ps

    return ps.get_data_parallel_group()


def dp_rank_size() -> tuple[int, int]:
    from megatron.core import parallel_state as ps

    return ps.get_data_parallel_rank(), ps.get_data_parallel_world_size()


def share(n: int, rank: int, size: int) -> tuple[list[int], int]:
    """Rows of DP rank `rank` out of `n` (contiguous), and the per-rank row count P."""
    per = -(-n // size)
    return list(range(min(rank * per, n), min((rank + 1) * per, n))), per


def take(batch: Batch, rows: list[int], pad_to: int | None = None, trim: bool = True) -> Batch:
    """Rows `rows` of `batch`, then empty rows up to `pad_to`; trimmed to the longest real row
    only when `trim` (world size 1)."""
    if trim and pad_to is None:
        return batch.select(rows)
    idx = torch.as_tensor(rows, dtype=torch.long, device=batch.input_ids.device)
    extra = (pad_to or len(rows)) - len(rows)

    def rows_of(x, fill):
        if x is None:
            return None
        got = x[idx]
        if extra:
            got = torch.cat(
                [got, torch.full((extra, *x.shape[1:]), fill, dtype=x.dtype, device=x.device)]
            )
        return got

    return Batch(
        input_ids=rows_of(batch.input_ids, 0),
        loss_mask=rows_of(batch.loss_mask, False),
        rollout_logp=rows_of(batch.rollout_logp, 0.0),
        routing=rows_of(batch.routing, -1),
        reward=rows_of(batch.reward, 0.0),
        lengths=rows_of(batch.lengths, 0),
        meta=[batch.meta[i] for i in rows] + [{} for _ in range(extra)],
    )


def local_rows(batch: Batch) -> Batch:
    """This DP rank's share of `batch` (the batch itself at DP 1), padded to the common count."""
    rank, size = dp_rank_size()
    if size == 1:
        return batch
    rows, per = share(batch.size, rank, size)
    return take(batch, rows, pad_to=per, trim=False)


def gather_rows(local: torch.Tensor, n: int) -> torch.Tensor:
    """Every DP rank's [P, ...] -> the batch's [n, ...] (rank order = row order)."""
    _, size = dp_rank_size()
    if size == 1:
        return local
    parts = [torch.empty_like(local) for _ in range(size)]
    dist.all_gather(parts, local.contiguous(), group=dp_group())
    return torch.cat(parts)[:n]


def all_sum(x: torch.Tensor, group=None) -> torch.Tensor:
    x = x.clone()
    dist.all_reduce(x, group=group if group is not None else dp_group())
    return x


def with_peers(local: torch.Tensor, n: int) -> torch.Tensor:
    """This rank's live [P, ...] (with grad) among every DP rank's detached rows: the whole
    minibatch's [n, ...]. A loss over it is the world-size-1 loss on every rank, and each rank's
    backward runs through its own rows only (its padding included, with zero gradient, so the
    MoE dispatcher's backward collectives run on every rank)."""
    rank, size = dp_rank_size()
    if size == 1:
        return local[:n]
    parts = [torch.empty_like(local) for _ in range(size)]
    dist.all_gather(parts, local.detach().contiguous(), group=dp_group())
    parts[rank] = local
    return torch.cat(parts)[:n]


def is_expert_shard(p: torch.nn.Parameter) -> bool:
    """megatron-core marks expert weights sharded over EP with `allreduce = False`."""
    return not getattr(p, "allreduce", True)


def grad_norm(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """Global L2 norm of the gradients: dense weights counted once per model-parallel group
    (TP duplicates skipped), expert shards summed over the expert-parallel group."""
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate

    dense = torch.zeros((), dtype=torch.float64)
    expert = torch.zeros((), dtype=torch.float64)
    for p in params:
        if p.grad is None:
            continue
        sq = p.grad.detach().double().pow(2).sum().cpu()
        if is_expert_shard(p):
            expert += sq
        elif param_is_not_tensor_parallel_duplicate(p):
            dense += sq
    if dist.get_world_size() > 1:
        dense = all_sum(dense, ps.get_model_parallel_group())
        expert = all_sum(expert, ps.get_expert_tensor_model_pipeline_parallel_group())
    return (dense + expert).sqrt()


def clip_grads(params: list[torch.nn.Parameter], max_norm: float) -> float:
    """torch.nn.utils.clip_grad_norm_'s rule (coef = max / (norm + 1e-6), at most 1) on the
    global norm; returns the norm before clipping. max_norm <= 0: no clipping."""
    norm = grad_norm(params)
    if max_norm > 0:
        coef = float(max_norm / (norm + 1e-6))
        if coef < 1.0:
            for p in params:
                if p.grad is not None:
                    p.grad.mul_(coef)
    return float(norm)

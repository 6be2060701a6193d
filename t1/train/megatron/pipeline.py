"""Pipeline parallelism of the megatron backend: megatron-core's own schedules drive a PP > 1
trainer's forwards and updates.

    from t1.train.megatron import pipeline as PL
    logp, ent, check = PL.actor_forward(trainer, batch, entropy=True)   # no grad, every rank
    values = PL.critic_values(trainer, batch)
    loss, metrics = PL.update(trainer, "actor", batch, loss_fn)         # gradients in main_grad

Each call cuts this DP rank's rows (dataparallel.local_rows) into micro-batches of
`forward_rows` rows (the last one padded with empty rows: megatron-core's p2p buffers are
[S(/TP), micro-batch, H] for every micro-batch) and runs them through
`megatron.core.pipeline_parallel.get_forward_backward_func()` (the non-interleaved 1F1B
schedule at PP > 1), whose `forward_step_func` is this module's stage function:

* R3 replay per micro-batch: right before a micro-batch's forward on a stage, every router of
  that stage gets the micro-batch's record of ITS global layer (replay.set_targets: the stage's
  layers, this TP rank's slice of the sequence); the target is also queued for the recompute of
  activation checkpointing, which 1F1B runs first in first out (replay.py).
* Every stage runs its layers (VL.stage_output); a stage before the last returns its hidden
  states, which the schedule sends on. The last stage holds the heads: the actor's log-probs
  (and entropies) through the chunked vocab-parallel output layer (vocab_logp.py), the
  critic's values through its value head; with gradients it returns the micro-batch's loss.
* The results are broadcast from the last stage over the pipeline group, then gathered over
  DP, so every rank returns the whole batch's [B, T] (as at PP 1).
* The routing check (trainer.routing_check) per stage: each stage compares its own layers'
  routes (gathered over TP) with the record's layers of that stage, per position; the
  per-position mismatch flags are combined over the pipeline group (max), so a position
  counts once however many stages it mismatched on, the same counts as at PP 1.

Updates. The PPO loss functions (t1.train.step) take the whole minibatch's [B, T] output and
are not sums over micro-batches, but 1F1B runs each micro-batch's backward before the later
micro-batches' forwards reach the last stage. So an update is two schedules: a forward-only
one gives the minibatch's output y (broadcast from the last stage, gathered over DP), every
rank evaluates `loss_fn(y, batch)` (loss and metrics identical on every rank, as at PP 1) and
its gradient G = dloss/dy; then the training schedule back-propagates, per micro-batch, the
surrogate sum(y_mb * G_mb), whose parameter gradient is the loss's exactly (chain rule; y is
recomputed from the same weights and routes). The cost is one extra no-grad pipeline forward
per update. Gradients then go through the trainer's finalize_model_grads / clipping / step,
unchanged (the global norm already sums over the pipeline group: dataparallel.grad_norm).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from t1.train.batch import Batch
from t1.train.hf import shift_values
from t1.train.megatron import dataparallel as DP
from t1.train.megatron import replay as R
from t1.train.megatron import vocab_logp as VL


def last_stage() -> bool:
    from megatron.core import parallel_state as ps

    return ps.is_pipeline_last_stage()


def from_last_stage(x: torch.Tensor) -> torch.Tensor:
    """`x` of the last pipeline stage on every stage (broadcast over the pipeline group)."""
    from megatron.core import parallel_state as ps

    x = x.contiguous()
    dist.broadcast(
        x,
        src=ps.get_pipeline_model_parallel_last_rank(),
        group=ps.get_pipeline_model_parallel_group(),
    )
    return x


def microbatches(local: Batch, rows: int) -> list[Batch]:
    """`local` in micro-batches of `rows` rows (the last padded with empty rows), full length."""
    rows = max(1, min(rows, local.size))
    out = []
    for i in range(0, local.size, rows):
        idx = list(range(i, min(i + rows, local.size)))
        out.append(DP.take(local, idx, pad_to=rows, trim=False))
    return out


def _loss_of(out: torch.Tensor):
    """The last stage's loss function for megatron-core: the stage function already returned
    the micro-batch's scalar (summed loss: `calculate_per_token_loss`, no rescaling)."""
    return out, torch.zeros((), dtype=torch.int, device=out.device), {}


def schedule(model, mbs: list[Batch], stage_fn, *, forward_only: bool) -> None:
    """Run `stage_fn(j, micro-batch) -> this stage's output` over `mbs` with megatron-core's
    pipeline schedule (on the last stage the output is the micro-batch's scalar)."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    from t1.train.megatron import model as M

    b, t = mbs[0].input_ids.shape
    data = iter(enumerate(mbs))

    def step(it, _model):
        j, mb = next(it)
        return stage_fn(j, mb), _loss_of

    get_forward_backward_func()(
        forward_step_func=step,
        data_iterator=data,
        model=[model],
        num_microbatches=len(mbs),
        seq_length=t + (-t % M.seq_multiple(model)),
        micro_batch_size=b,
        forward_only=forward_only,
    )


class _Nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc) -> None:
        return None


def _flags(chosen: torch.Tensor, record: torch.Tensor, ids: list[int]) -> torch.Tensor:
    """[b, t] True where this stage's layers `ids` chose other experts than the record (sets)."""
    a = chosen.long().sort(-1).values
    r = record[:, :, ids].long().sort(-1).values
    return (a != r).flatten(2).any(-1)


def _outputs(tr, kind: str, local: Batch, entropy: bool = False, check: dict | None = None):
    """No-grad pipeline forward of this DP rank's rows: actor [logp, entropy] or critic
    [values], each [P, T] on every stage; `check` (actor) gets the routing check's counts."""
    model = tr.actor if kind == "actor" else tr.critic
    mbs = [mb.to(tr.device) for mb in microbatches(local, tr.forward_rows)]
    rows, t = mbs[0].input_ids.shape
    k = 2 if kind == "actor" else 1
    outs = [torch.zeros(len(mbs) * rows, t) for _ in range(k)]
    flags: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    topk = tr.hf_config.num_experts_per_tok

    def stage_fn(j, mb):
        ids = mb.input_ids
        if kind == "critic":
            out = VL.stage_output(model, ids, head=True)
        else:
            replaying = tr.replay and mb.routing is not None
            if replaying:
                R.set_targets(model, mb.routing)
            R.keep_live(model, replaying and check is not None)
            try:
                with R.RoutingObserver(model) if check is not None else _Nothing() as seen:
                    out = VL.stage_output(model, ids, head=False)
                if check is not None:
                    used = R.whole_sequence(seen.routing(rows, topk), model, t)
                    live = R.live_routing(model, rows) if replaying else None
                    live = used if live is None else R.whole_sequence(live, model, t)
                    rec = mb.routing.cpu()
                    # the global layers, from megatron-core directly (not R.layer_ids, which
                    # chose the targets): a stage replaying other layers' records shows here
                    lids = [layer.layer_number - 1 for layer in model.decoder.layers]
                    valid = (rec >= 0).flatten(2).all(-1)
                    flags.append((valid, _flags(live, rec, lids), _flags(used, rec, lids)))
            finally:
                R.keep_live(model, False)
                R.clear(model)
        if not last_stage():
            return out
        sl = slice(j * rows, (j + 1) * rows)
        if kind == "critic":
            outs[0][sl] = shift_values(out[:, :t, 0].float()).cpu()
        else:
            lp, ent = tr._logp(VL.gather_hidden(out, model, t), ids, entropy)
            outs[0][sl] = lp.float().cpu()
            if entropy:
                outs[1][sl] = ent.float().cpu()
        return out.new_zeros(())

    with torch.no_grad():
        schedule(model, mbs, stage_fn, forward_only=True)
    if check is not None and flags:
        from megatron.core import parallel_state as ps

        valid, live, used = (torch.cat(x) for x in zip(*flags, strict=True))
        both = torch.stack([live, used]).to(torch.int32)
        dist.all_reduce(both, op=dist.ReduceOp.MAX, group=ps.get_pipeline_model_parallel_group())
        check["positions"] += int(valid.sum())
        check["live_mismatch"] += int((both[0].bool() & valid).sum())
        check["replay_mismatch"] += int((both[1].bool() & valid).sum())
    return [from_last_stage(o)[: local.size] for o in outs]


def _whole(batch: Batch, local_outs: list[torch.Tensor]) -> list[torch.Tensor]:
    real = torch.arange(batch.input_ids.shape[1])[None, :] < batch.lengths.cpu()[:, None]
    return [DP.gather_rows(o, batch.size) * real for o in local_outs]


def actor_forward(tr, batch: Batch, entropy: bool = False):
    """(logp [B, T], entropy [B, T] or None, routing check or None) on every rank."""
    check = (
        None
        if batch.routing is None
        else {"positions": 0, "live_mismatch": 0, "replay_mismatch": 0}
    )
    logp, ent = _whole(batch, _outputs(tr, "actor", DP.local_rows(batch), entropy, check))
    if check is not None and tr.world > 1:  # every DP rank's rows
        keys = sorted(check)
        tot = DP.all_sum(torch.tensor([check[k] for k in keys], dtype=torch.long))
        check = {k: int(v) for k, v in zip(keys, tot, strict=True)}
    return logp, (ent if entropy else None), check


def critic_values(tr, batch: Batch) -> torch.Tensor:
    (values,) = _whole(batch, _outputs(tr, "critic", DP.local_rows(batch)))
    return values


def update(tr, kind: str, batch: Batch, loss_fn):
    """The minibatch loss and metrics (every rank), its gradient accumulated into the model's
    DDP buffers through the training schedule (see the module docstring); the caller
    finalizes, clips and steps."""
    model = tr.actor if kind == "actor" else tr.critic
    batch = batch.to(tr.device)
    local = DP.local_rows(batch)
    (y_local,) = _outputs(tr, kind, local)[:1]
    y = DP.gather_rows(y_local, batch.size)[: batch.size, : batch.input_ids.shape[1]]
    y = y.to(tr.device).detach().requires_grad_(True)
    loss, metrics = loss_fn(y, batch)
    (g,) = torch.autograd.grad(loss, y)
    rank, size = DP.dp_rank_size()
    rows, per = DP.share(batch.size, rank, size)
    g_local = g.new_zeros(per, g.shape[1])  # this DP rank's rows of G (its padding: 0)
    g_local[: len(rows)] = g[rows]
    mbs = [mb.to(tr.device) for mb in microbatches(local, tr.forward_rows)]
    n, t = mbs[0].input_ids.shape
    g_local = torch.cat([g_local, g_local.new_zeros(len(mbs) * n - g_local.shape[0], t)])
    replaying = kind == "actor" and tr.replay and batch.routing is not None

    def stage_fn(j, mb):
        ids = mb.input_ids
        if replaying:
            R.set_targets(model, mb.routing)
        out = VL.stage_output(model, ids, head=kind == "critic")
        if replaying:  # the recompute (activation checkpointing) pops the queued record
            out = R.to_backward(model, out)
        if not last_stage():
            return out
        if kind == "actor":
            yj, _ = tr._logp(VL.gather_hidden(out, model, t), ids)
        else:
            yj = shift_values(out[:, :t, 0].float())
        return (yj * g_local[j * n : (j + 1) * n]).sum()

    try:
        schedule(model, mbs, stage_fn, forward_only=False)
    finally:
        if replaying:
            R.clear(model)
    return loss.detach(), metrics

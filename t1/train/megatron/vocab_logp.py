"""Token log-probabilities and entropies without full-vocabulary logits.

    from t1.train.megatron import vocab_logp as VL
    logp, ent = VL.token_logp_entropy(actor, input_ids, chunk=4096, entropy=True)   # [B, T] x2

The same numbers as t1.train.hf.token_logp / token_entropy on the full logits (fp32 rounding),
computed the way megatron-core's `vocab_parallel_cross_entropy` does, and a chunk at a time:

* vocab-parallel: each tensor-parallel rank holds V/TP rows of the output layer, so its logits
  are [N, V/TP]. The max over the vocabulary, the sum of exp, the target's logit and (entropy)
  the sum of p * logit are reduced over the tensor-parallel group (`reduce_sum`: all-reduce
  forward, identity backward, as megatron's `reduce_from_tensor_model_parallel_region`; the
  max is a constant shift, detached). Padded vocabulary rows (model.padded_vocab) are dropped.
* chunked over the sequence: `chunk` tokens at a time go through the output layer, each chunk
  under activation checkpointing (torch.utils.checkpoint, non-reentrant), so backward keeps one
  chunk's [chunk, V/TP] logits alive, never [B * T, V]. t1/model/memory.py plans with
  4,096-token chunks (the trainer's default).

Shapes: B rows, T positions, H hidden, V vocabulary (unpadded), Vp = padded, TP ranks.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

DEFAULT_CHUNK = 4096


class _ReduceSum(torch.autograd.Function):
    """all-reduce SUM over `group` forward, identity backward (every rank then computes the same
    loss from the reduced value; megatron's `_ReduceFromModelParallelRegion`)."""

    @staticmethod
    def forward(ctx, x, group):  # noqa: ARG004 - autograd signature
        x = x.clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):  # noqa: ARG004
        return grad, None


def reduce_sum(x: torch.Tensor, group) -> torch.Tensor:
    if group is None or dist.get_world_size(group) == 1:
        return x
    return _ReduceSum.apply(x, group)


def shard_logp_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    vocab_start: int,
    group=None,
    entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logits [N, Vr] (this rank's vocabulary columns [vocab_start, vocab_start + Vr), real
    entries only), target [N] global token ids -> (log p(target) [N], entropy [N] or None) of
    the softmax over the whole vocabulary (all ranks of `group` together), in fp32."""
    lg = logits.float()
    n = lg.shape[0]
    if lg.shape[-1]:
        m = lg.detach().amax(-1)
    else:  # a rank whose shard is all padding
        m = torch.full((n,), float("-inf"), device=lg.device)
    if group is not None and dist.get_world_size(group) > 1:
        dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
    z = lg - m[:, None]  # <= 0, max 0 on the rank that holds it
    ez = z.exp()
    se = reduce_sum(ez.sum(-1), group)  # [N] sum_v exp(z_v) over the whole vocabulary
    local = target - vocab_start
    mine = (local >= 0) & (local < lg.shape[-1])
    picked = z.gather(-1, local.clamp(0, max(lg.shape[-1] - 1, 0))[:, None]).squeeze(-1)
    picked = reduce_sum(torch.where(mine, picked, torch.zeros_like(picked)), group)
    log_se = se.log()
    logp = picked - log_se
    if not entropy:
        return logp, None
    # H = log se - sum_v p_v z_v, with p_v = exp(z_v) / se
    pz = reduce_sum((ez * z).sum(-1), group)
    return logp, log_se - pz / se


def output_shard(model) -> tuple[torch.Tensor, int, int]:
    """The actor's output layer on this TP rank: (weight [Vp/TP, H], vocab_start, real columns
    of this shard: the vocabulary padding dropped)."""
    from megatron.core import parallel_state as ps

    w = model.output_layer.weight
    per = w.shape[0]
    start = ps.get_tensor_model_parallel_rank() * per
    vocab = getattr(model, "t1_vocab", per * ps.get_tensor_model_parallel_world_size())
    return w, start, max(0, min(per, vocab - start))


def hidden_states(model, input_ids: torch.Tensor) -> torch.Tensor:
    """input_ids [B, T] -> the decoder's output (final norm applied) [B, T, H] on every TP rank,
    before the output layer: the GPTModel runs with `post_process` off for this call
    (`stage_output(..., head=False)`), then `gather_hidden`."""
    return gather_hidden(stage_output(model, input_ids, head=False), model, input_ids.shape[1])


def stage_output(model, input_ids: torch.Tensor, head: bool = True) -> torch.Tensor:
    """This pipeline stage's output for input_ids [B, T] (right-padded to a multiple of TP
    under sequence parallelism): the hidden states [S(/TP), B, H] on a stage before the last
    (a later stage takes them through `set_input_tensor`); on the last stage the model's head
    ([B, S, V] / [B, S, 1]) or, with `head=False`, the decoder's output [S(/TP), B, H] (final
    norm applied) before the output layer."""
    from t1.train.megatron import model as M

    b, t = input_ids.shape
    ids = F.pad(input_ids, (0, -t % M.seq_multiple(model)))
    pos = torch.arange(ids.shape[1], device=ids.device)[None].expand(b, -1)
    keep = model.post_process
    model.post_process = keep and head
    try:
        return model(ids, pos, M.causal_mask(ids.shape[1], ids.device))
    finally:
        model.post_process = keep


def gather_hidden(h: torch.Tensor, model, t: int) -> torch.Tensor:
    """The decoder's output [S(/TP), B, H] -> [B, t, H] on every TP rank. Under sequence
    parallelism the sequence is all-gathered (reduce-scatter in backward), as the output
    layer's own input would be; without it, the input's gradient is all-reduced over TP in
    backward (megatron's `copy_to_tensor_model_parallel_region`)."""
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import mappings

    if ps.get_tensor_model_parallel_world_size() > 1:
        if model.config.sequence_parallel:
            h = mappings.gather_from_sequence_parallel_region(h, tensor_parallel_output_grad=True)
        else:
            h = mappings.copy_to_tensor_model_parallel_region(h)
    return h.transpose(0, 1)[:, :t]


def chunked_logp_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    vocab_start: int,
    vocab_real: int,
    *,
    chunk: int = DEFAULT_CHUNK,
    group=None,
    entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """hidden [N, H], weight [Vp/TP, H] (this rank's rows), target [N] -> (logp [N], entropy [N]
    or None), `chunk` rows of hidden at a time through the output layer; each chunk is
    checkpointed when gradients are on, so only one chunk's [chunk, V/TP] logits exist in
    backward."""

    def one(h, tgt):
        lg = (h @ weight[:vocab_real].t()).float()  # [c, V/TP]: the layer's dtype, then fp32
        lp, ent = shard_logp_entropy(lg, tgt, vocab_start, group, entropy)
        return (lp, ent) if entropy else (lp,)

    grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    lps, ents = [], []
    for i in range(0, hidden.shape[0], max(1, chunk)):
        h, tgt = hidden[i : i + chunk], target[i : i + chunk]
        if grad:
            from torch.utils.checkpoint import checkpoint

            out = checkpoint(one, h, tgt, use_reentrant=False)
        else:
            out = one(h, tgt)
        lps.append(out[0])
        if entropy:
            ents.append(out[1])
    if not lps:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, (empty if entropy else None)
    return torch.cat(lps), (torch.cat(ents) if entropy else None)


def aligned_logp_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    ids: torch.Tensor,
    vocab_start: int,
    vocab_real: int,
    *,
    chunk: int = DEFAULT_CHUNK,
    group=None,
    entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """hidden [B, T, H], ids [B, T] -> logp [B, T], entropy [B, T] or None, aligned to the token
    like t1.train.hf.token_logp / token_entropy: position t-1 predicts token t, column 0 is 0."""
    b, t, hdim = hidden.shape
    h = hidden[:, :-1].reshape(-1, hdim)
    tgt = ids[:, 1:].reshape(-1)
    lp, ent = chunked_logp_entropy(
        h, weight, tgt, vocab_start, vocab_real, chunk=chunk, group=group, entropy=entropy
    )

    def shape(x):
        return F.pad(x.reshape(b, t - 1), (1, 0))

    return shape(lp), (shape(ent) if entropy else None)


def token_logp_entropy(
    model, input_ids: torch.Tensor, *, chunk: int = DEFAULT_CHUNK, entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The actor GPTModel's logp [B, T] (and entropy [B, T]) of input_ids [B, T], aligned like
    t1.train.hf.token_logp: vocab-parallel over the TP group and chunked over the sequence."""
    from megatron.core import parallel_state as ps

    h = hidden_states(model, input_ids)
    w, start, real = output_shard(model)
    group = ps.get_tensor_model_parallel_group()
    return aligned_logp_entropy(
        h, w, input_ids, start, real, chunk=chunk, group=group, entropy=entropy
    )

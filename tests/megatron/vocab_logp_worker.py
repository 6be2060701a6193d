"""One rank of the TP 2 vocab-parallel log-prob check (test_vocab_logp.py spawns two, gloo).

Every rank draws the same hidden states, output weight and targets, keeps its half of the
vocabulary rows (the last rank's half padded with zero rows, as model.padded_vocab pads), and
computes vocab_logp's chunked log-prob / entropy and their gradients; `reduce=False` is the
negative control (no reduction over the group: each rank's softmax over its own half).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

N, H, V, CHUNK = 23, 8, 13, 5  # V odd: the second shard carries one padding row


def data():
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(N, H, generator=g)
    weight = torch.randn(V, H, generator=g)
    target = torch.randint(0, V, (N,), generator=g)
    return hidden, weight, target


def run(rank: int, world: int, port: int, out: str) -> None:
    """OUT_True.pt (with the reduction) and OUT_False.pt (without: the negative control)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    for reduce in (True, False):
        one(rank, world, f"{out}_{reduce}.pt", reduce)
    dist.barrier()
    dist.destroy_process_group()


def one(rank: int, world: int, out: str, reduce: bool) -> None:
    from t1.train.megatron.vocab_logp import chunked_logp_entropy

    hidden, weight, target = data()
    per = -(-V // world)
    padded = torch.cat([weight, torch.zeros(per * world - V, H)])
    start = rank * per
    real = max(0, min(per, V - start))
    w = padded[start : start + per].clone().requires_grad_(True)
    h = hidden.clone().requires_grad_(True)
    group = dist.group.WORLD if reduce else None
    lp, ent = chunked_logp_entropy(
        h, w, target, start, real, chunk=CHUNK, group=group, entropy=True
    )
    (lp.sum() + 0.5 * ent.sum()).backward()
    gh = h.grad.clone()
    dist.all_reduce(gh)  # the output layer's input gradient is summed over TP
    parts = [torch.empty_like(w.grad) for _ in range(world)]
    dist.all_gather(parts, w.grad.contiguous())
    if rank == 0:
        torch.save(
            {
                "logp": lp.detach(),
                "entropy": ent.detach(),
                "grad_hidden": gh,
                "grad_weight": torch.cat(parts)[:V],
            },
            out,
        )

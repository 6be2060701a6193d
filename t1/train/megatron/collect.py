"""A role's whole HF state dict on rank 0, streamed from the pipeline stages' leaders one tensor
at a time (`MegatronTrainer.hf_state` above world size 1: the tests' comparisons against world
size 1; the campaign's weights go out through export.py, never through this).

    state = collect_hf(trainer, "actor")    # every rank calls it; rank 0 gets it, others {}
"""

from __future__ import annotations

import torch

from t1.train.megatron import convert as C


def collect_hf(trainer, kind: str) -> dict[str, torch.Tensor]:
    """The role's HF state dict on rank 0, {} elsewhere (every rank calls it): the stage
    leaders stream export.stage_tensors to rank 0 one tensor at a time; no other rank holds
    more than its shard and one tensor."""
    import torch.distributed as dist

    from t1.train.megatron.export import comm_device, coordinates, stage_tensors

    rank, coords = dist.get_rank(), coordinates()  # before any send: rank 0 waits in none
    leaders = sorted({min(r for r, c in enumerate(coords) if c[1] == s) for _, s, _, _ in coords})
    got: dict[str, torch.Tensor] = {}
    for name, t in stage_tensors(trainer, kind):
        if t is not None and rank == 0:
            got[name] = t.detach().cpu().clone()
        elif t is not None:
            dist.send_object_list([(name, tuple(t.shape), t.dtype)], dst=0)
            dist.send(t.contiguous(), dst=0)
    if rank in leaders[1:]:
        dist.send_object_list([None], dst=0)
    for src in leaders[1:] if rank == 0 else []:
        while True:
            box = [None]
            dist.recv_object_list(box, src=src)
            if box[0] is None:
                break
            buf = torch.empty(box[0][1], dtype=box[0][2], device=comm_device())
            dist.recv(buf, src=src)
            got[box[0][0]] = buf.cpu()
    dist.barrier()
    return C.stack_experts(got, trainer.hf_config.num_experts) if rank == 0 else {}

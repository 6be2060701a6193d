"""One rank of the Qwen3.5 TP 2 + sequence-parallel check (test_qwen35_tp_sp.py runs it, gloo):

    torchrun --nproc-per-node 2 tests/megatron/qwen35_tp_worker.py --out DIR

`measure` drives megatron-core GPTModels directly (no trainer): the tiny Qwen3.5 of
test_qwen35.py (3 Gated DeltaNet + 1 gated attention layer, shared expert, partial RoPE, every
weight perturbed) converted and sharded for this process's layout, actor and critic each
wrapped in megatron-core's DistributedDataParallel, on rows whose routing another model
recorded (R3 replay on), cut to an odd length (69 > the GDN chunk of 64) so the sequence is
padded to a multiple of TP under sequence parallelism. It returns, on every rank, for the
whole sequence (gathered over TP):

* `logits` (model.forward, full vocabulary) and `values` (critic) under replay;
* `logp`, the vocab-parallel log-probs (vocab_logp.token_logp_entropy, the trainer's path);
* `routes`: the experts every router dispatched to in the replayed forward [B, T, L, k];
* `actor_loss` / `actor_grads`: a policy-gradient-like loss on the vocab-parallel log-probs,
  backward, `finalize_model_grads` (which sums the `sequence_parallel` weights' gradients over
  TP), the gradients unsharded to full megatron names; `critic_loss` / `critic_grads` alike;
* `replicated_spread`: the max difference between TP ranks of the gradient of any weight that
  is replicated over TP (they must agree, else the replicas drift apart).

The world-size-1 run is `measure()` in the test's process. The worker also writes the negative
control: the actor backward again with the GDN output norms' weights NOT marked
`sequence_parallel`, so megatron-core does not reduce their gradients over TP (`broken`).
"""

from __future__ import annotations

import argparse
import functools
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
warnings.filterwarnings("ignore")

# (file name, layout, with the negative control): TP 2 with the experts replicated over TP
# (ETP 1, this project's default), sharded over TP (ETP 2, megatron-core's default), and
# spread over the TP ranks (EP 2); sequence parallel in all three.
LAYOUTS = (
    ("tp2", dict(tp=2), True),
    ("tp2_etp2", dict(tp=2, etp=2), False),
    ("tp2_ep2", dict(tp=2, ep=2), False),
)
T = 69  # odd: padded to a multiple of TP under sequence parallelism; > one GDN chunk (64)


def shims() -> None:
    import cpu_shim
    import fla_shim

    cpu_shim.install()
    fla_shim.install()
    torch._dynamo.config.disable = True  # megatron-core's torch.compile of the gated norm


@functools.cache
def inputs():
    """(hf actor, hf critic, ids [B, T], record [B, T, L, k], loss mask [B, T], advantages)."""
    from test_qwen35 import make_models, make_rows

    from t1.train.batch import collate

    actor, critic = make_models()
    batch = collate(make_rows(actor, n=3))
    ids, rec = batch.input_ids[:, :T], batch.routing[:, :T]
    mask = batch.loss_mask[:, :T].float()
    adv = torch.randn(ids.shape, generator=torch.Generator().manual_seed(3))
    return actor, critic, ids, rec, mask, adv


def _build(kind: str, hf, tc, par):
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

    from t1.train.megatron import convert as C
    from t1.train.megatron import model as M
    from t1.train.megatron.runtime import ranks

    c = hf.config
    m = (M.build_actor if kind == "actor" else M.build_critic)(tc, c)
    r = ranks()
    full = C.hf_to_mcore(hf.state_dict(), c, kind, tp=par.tp)
    sizes = C.Sizes(par.tp, par.pp, par.ep, par.etp)
    C.load_local(
        m,
        C.shard(
            full,
            sizes,
            C.Ranks(r["tp"], r["pp"], r["ep"], r["etp"]),
            c.num_hidden_layers,
            c.num_experts,
            kind,
        ),
    )
    cfg = DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=False)
    return m, DistributedDataParallel(config=m.config, ddp_config=cfg, module=m)


def _gather_grads(m, kind: str, par) -> tuple[dict[str, torch.Tensor], float]:
    """The model's reduced gradients (main_grad) unsharded to full megatron names, and the max
    spread over TP ranks of the replicated weights' gradients."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from t1.train.megatron import convert as C
    from t1.train.megatron.runtime import ranks

    c = m.config
    local = {k: p.main_grad.detach().clone() for k, p in m.named_parameters()}
    if par.tp == 1:
        return local, 0.0
    r = ranks()
    me = C.Ranks(r["tp"], r["pp"], r["ep"], r["etp"])
    parts = [None] * dist.get_world_size()
    dist.all_gather_object(parts, (me, local))
    full = C.unshard(
        dict(parts), C.Sizes(par.tp, par.pp, par.ep, par.etp), c.num_layers, c.num_moe_experts, kind
    )
    assert ps.get_tensor_model_parallel_world_size() == dist.get_world_size()  # one TP group
    spread = 0.0
    for k, p in m.named_parameters():
        if getattr(p, "tensor_model_parallel", False):
            continue  # sharded over TP
        for _, sd in parts:
            spread = max(spread, (sd[k] - local[k]).abs().max().item())
    return full, spread


def _grad_norm(m) -> float:
    """dataparallel.grad_norm (the trainer's clipping norm) of the reduced gradients."""
    from t1.train.megatron import dataparallel as DP

    params = [p for p in m.parameters() if p.requires_grad]
    for p in params:
        p.grad = p.main_grad
    norm = float(DP.grad_norm(params))
    for p in params:  # else the next backward accumulates into the aliased buffer twice
        p.grad = None
    return norm


def _gather_seq(x: torch.Tensor, par, dim: int = 1) -> torch.Tensor:
    """Each TP rank's slice of the (padded) sequence -> the whole sequence, trimmed to T."""
    import torch.distributed as dist

    if par.tp == 1:
        return x
    parts = [None] * dist.get_world_size()
    dist.all_gather_object(parts, x)
    return torch.cat(parts, dim).narrow(dim, 0, T)


def _actor_step(m, ddp, ids, rec, mask, adv):
    from megatron.core.distributed import finalize_model_grads

    from t1.train.megatron import replay as R
    from t1.train.megatron import vocab_logp as VL

    ddp.zero_grad_buffer()
    m.train()
    with R.replaying(m, rec):
        logp, _ = VL.token_logp_entropy(m, ids)
        loss = -(logp * adv * mask).sum() / mask.sum()
        loss.backward()
    finalize_model_grads([ddp])
    return loss.detach(), logp.detach()


def measure(par=None, broken: bool = True) -> dict:
    """The figures above at layout `par` (every rank calls it; the same dict on every rank)."""
    from megatron.core.distributed import finalize_model_grads

    from t1.train.megatron import model as M
    from t1.train.megatron import replay as R
    from t1.train.megatron.runtime import Parallel, setup

    par = setup(par or Parallel())
    hf_actor, hf_critic, ids, rec, mask, adv = inputs()
    tc = M.transformer_config(hf_actor.config, replay=True)
    assert tc.sequence_parallel == (par.tp > 1), tc.sequence_parallel
    actor, actor_ddp = _build("actor", hf_actor, tc, par)
    R.install(actor)
    critic, critic_ddp = _build("critic", hf_critic, tc, par)
    k = hf_actor.config.num_experts_per_tok
    out: dict = {"tp": par.tp, "sequence_parallel": tc.sequence_parallel}
    out["gdn_out_norm"] = type(actor.decoder.layers[0].self_attention.out_norm).__name__

    actor.eval()
    with torch.no_grad(), R.RoutingObserver(actor) as seen, R.replaying(actor, rec):
        out["logits"] = M.forward(actor, ids)
    local_routes = seen.routing(ids.shape[0], k)  # this TP rank's slice of the padded sequence
    out["routes"] = _gather_seq(local_routes, par)

    loss, logp = _actor_step(actor, actor_ddp, ids, rec, mask, adv)
    out["actor_loss"], out["logp"] = float(loss), logp
    out["actor_grads"], out["actor_replicated_spread"] = _gather_grads(actor, "actor", par)
    out["actor_grad_norm"] = _grad_norm(actor)

    critic_ddp.zero_grad_buffer()
    critic.train()
    values = M.forward(critic, ids)[..., 0]
    w = torch.linspace(-1, 1, values.numel()).reshape(values.shape)
    loss = (values.float() * w * mask).sum() / mask.sum()
    loss.backward()
    finalize_model_grads([critic_ddp])
    out["values"], out["critic_loss"] = values.detach(), float(loss.detach())
    out["critic_grads"], out["critic_replicated_spread"] = _gather_grads(critic, "critic", par)
    out["critic_grad_norm"] = _grad_norm(critic)

    if broken and par.tp > 1:  # the guard broken: GDN out_norm gradients not reduced over TP
        for layer in actor.decoder.layers:
            norm = getattr(layer.self_attention, "out_norm", None)
            if norm is not None:
                norm.weight.sequence_parallel = False
        _actor_step(actor, actor_ddp, ids, rec, mask, adv)
        out["broken_actor_grads"], out["broken_replicated_spread"] = _gather_grads(
            actor, "actor", par
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    shims()
    torch.set_num_threads(1)
    import torch.distributed as dist

    from t1.train.megatron.runtime import Parallel

    for name, par, broken in LAYOUTS:
        res = measure(Parallel(**par), broken=broken)
        if dist.get_rank() == 0:
            torch.save(res, Path(a.out) / f"{name}.pt")
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

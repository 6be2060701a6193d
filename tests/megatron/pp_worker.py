"""One rank of the trainer-level layout checks (test_megatron_pipeline.py runs it, gloo):

    torchrun --nproc-per-node 2 tests/megatron/pp_worker.py --out DIR --family qwen3 \\
        --layouts pp2 tp2 pp2_local_layers
    torchrun --nproc-per-node 8 tests/megatron/pp_worker.py --out DIR --family qwen35 \\
        --layouts tp2_pp2_ep2

`measure(par)` builds a MegatronTrainer (actor with R3 replay + critic) at layout `par` and
returns, on every rank, the same figures at any layout (the test runs it at world size 1 in
its own process and compares):

* `logp`, `entropy` (actor_forward, replayed), `check` (the routing check), `values`
  (critic_values): [B, T] each, the whole batch;
  The routing check is computed from the experts each router actually dispatched to (its
  routing map) against the record, per stage, gathered over TP: `replay_mismatch` 0 means
  every recorded position went to its recorded experts in every layer on every stage;
* one actor update and one critic update with fixed loss functions: `actor_loss`,
  `critic_loss`, `actor_grad_norm`, `critic_grad_norm` and `actor_grads` / `critic_grads`
  (the reduced gradients, clipped as the trainer clips, unsharded to HF names);
* `ppo`: a whole t1.train.step.ppo_step afterwards (its metrics) and `weights` (HF names);
* `resume`: a checkpoint (checkpoint.py, one file per rank) after that step, a second step,
  then a fresh trainer (other weights) restored from the checkpoint repeats the second step:
  `weights_equal` / `metrics_equal` bit for bit, and the checkpoint's files.

`pp2_recompute`: PP 2 with activation recompute: each micro-batch's record is queued for
its recompute, which 1F1B runs after later micro-batches' forwards (replay.set_targets).

Negative control (`pp2_local_layers`): PP 2 with replay.layer_ids answering the stage's LOCAL
layer indices (the bug a pipeline stage would have if it replayed the record's first layers):
the second stage replays the wrong layers' record.
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

LR = dict(actor_lr=1e-3, critic_lr=1e-3, seed=0)
LAYOUTS = {
    "pp2": dict(pp=2),
    "pp2_local_layers": dict(pp=2),
    "pp2_recompute": dict(pp=2),  # + activation recompute (the replay queue across 1F1B)
    "tp2": dict(tp=2),
    "tp2_pp2_ep2": dict(tp=2, pp=2, ep=2),
}


def shims(family: str) -> None:
    import cpu_shim
    import pp_shim

    cpu_shim.install()
    pp_shim.install()
    if family == "qwen35":
        import fla_shim

        fla_shim.install()
        torch._dynamo.config.disable = True  # eager, as test_qwen35.py


@functools.cache
def inputs(family: str):
    """(make_models, batch): the family's tiny models and rows another model routed."""
    from t1.train.batch import collate

    if family == "qwen35":
        import test_qwen35 as Q

        batch = collate(Q.make_rows(Q.make_models(0)[0], n=3))
        return Q.make_models, batch.select([0, 1, 2])
    from megatron_helpers import make_models, make_rows

    return make_models, collate(make_rows(make_models(0)[0]))


def _gather_grads(tr, kind: str) -> dict[str, torch.Tensor]:
    import torch.distributed as dist

    from t1.train.megatron import convert as C
    from t1.train.megatron.runtime import ranks

    model = getattr(tr, kind)
    local = {k: p.main_grad.detach().clone() for k, p in model.named_parameters()}
    if tr.world > 1:
        r = ranks()
        parts = [None] * dist.get_world_size()
        dist.all_gather_object(parts, (C.Ranks(r["tp"], r["pp"], r["ep"], r["etp"]), local))
        c = tr.hf_config
        local = C.unshard(dict(parts), tr.sizes(), c.num_hidden_layers, c.num_experts, kind)
    return C.mcore_to_hf(local, tr.hf_config, kind)


def measure(par=None, family: str = "qwen3", **kw) -> dict:
    """The figures of the module docstring at layout `par` (every rank calls it)."""
    import torch.distributed as dist

    from t1.config import PPOConfig
    from t1.ppo.losses import policy_loss
    from t1.train.megatron import checkpoint as MC
    from t1.train.megatron.runtime import Parallel
    from t1.train.megatron.trainer import MegatronTrainer
    from t1.train.step import ppo_step

    par = par or Parallel()
    make_models, batch = inputs(family)
    rows = 1 if family == "qwen35" else 2  # >= 2 micro-batches per DP rank at every layout
    tr = MegatronTrainer(*make_models(0), parallel=par, forward_rows=rows, **kw, **LR)
    out: dict = {"layout": tr.par, "world": tr.world}
    fwd = tr.actor_forward(batch, entropy=True)
    out["logp"], out["entropy"], out["check"] = fwd.logp, fwd.entropy, tr.routing_check
    out["values"] = tr.critic_values(batch)
    adv = torch.linspace(-1, 1, batch.input_ids.numel()).reshape(batch.input_ids.shape)
    w = torch.linspace(-1, 1, batch.input_ids.numel()).reshape(batch.input_ids.shape)

    def ploss(logp, b):
        loss = policy_loss(logp, torch.zeros_like(logp), adv[:, : logp.shape[1]], b.loss_mask)
        return loss, {"loss": float(loss.detach())}

    def vloss(values, b):
        m = b.loss_mask.float()
        loss = (values * w[:, : values.shape[1]] * m).sum() / m.sum()
        return loss, {"loss": float(loss.detach())}

    for kind, fn in (("actor", ploss), ("critic", vloss)):
        m = getattr(tr, f"{kind}_update")(batch, fn)
        out[f"{kind}_loss"], out[f"{kind}_grad_norm"] = m["loss"], m["grad_norm"]
        out[f"{kind}_grads"] = _gather_grads(tr, kind)
    m = ppo_step(tr, batch, PPOConfig(minibatch=2, epochs=1))
    out["ppo"] = {k: v for k, v in m.items() if not k.startswith("_")}
    out["weights"] = {kind: tr.hf_state(kind) for kind in ("actor", "critic")}
    if tr.world > 1:
        import tempfile

        box = [tempfile.mkdtemp() if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(box, src=0)
        root = Path(box[0]) / "ckpt"
        MC.save(tr, root, 1, progress={"step": 1})
        m2 = ppo_step(tr, batch, PPOConfig(minibatch=2, epochs=1))
        w2 = {kind: tr.hf_state(kind) for kind in ("actor", "critic")}
        fresh = MegatronTrainer(*make_models(7), parallel=par, forward_rows=rows, **kw, **LR)
        got = MC.load(fresh, root)
        m3 = ppo_step(fresh, batch, PPOConfig(minibatch=2, epochs=1))
        w3 = {kind: fresh.hf_state(kind) for kind in ("actor", "critic")}
        skip = ("step_time_s", "tokens_per_s")
        out["resume"] = {
            "weights_equal": all(torch.equal(w2[k][n], w3[k][n]) for k in w2 for n in w2[k]),
            "metrics_equal": all(
                m2[k] == m3[k] for k in m2 if k not in skip and not k.startswith("_")
            ),
            "files": sorted(p.name for p in got.path.iterdir()),
            "policy_loss": [m2["policy_loss"], m3["policy_loss"]],
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--family", default="qwen3")
    ap.add_argument("--layouts", nargs="+", required=True)
    a = ap.parse_args()
    shims(a.family)
    torch.set_num_threads(1)
    import torch.distributed as dist

    from t1.train.megatron import replay as R
    from t1.train.megatron.runtime import Parallel

    for name in a.layouts:
        orig = R.layer_ids
        if name == "pp2_local_layers":  # the negative control: local layer indices
            R.layer_ids = lambda model: list(range(len(model.decoder.layers)))
        try:
            kw = {"recompute": True} if name.endswith("_recompute") else {}
            res = measure(Parallel(**LAYOUTS[name]), a.family, **kw)
        finally:
            R.layer_ids = orig
        if dist.get_rank() == 0:
            torch.save(res, Path(a.out) / f"{name}.pt")
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

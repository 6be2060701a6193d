"""The equivalence figures for LOG.md, on the tests' tiny model, printed as one JSON object:

    .venv/bin/python tests/megatron/measure.py

conversion round-trip max error (actor, critic), HF vs Megatron max |logits| / |values| error,
routing agreement with the record (replay on / off), one actor update's loss and gradient error.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
warnings.filterwarnings("ignore")


def main() -> None:
    import cpu_shim

    cpu_shim.install()
    from megatron_helpers import MODEL, VOCAB, make_models, make_rows

    from t1.ppo.losses import policy_loss
    from t1.train.batch import collate
    from t1.train.hf import HFTrainer
    from t1.train.megatron import convert as C
    from t1.train.megatron import replay as R
    from t1.train.megatron.model import forward
    from t1.train.megatron.trainer import MegatronTrainer

    out = {}
    actor, critic = make_models()
    for kind, m in (("actor", actor), ("critic", critic)):
        hf = m.state_dict()
        back = C.mcore_to_hf(C.hf_to_mcore(hf, m.config, kind, tp=4), m.config, kind)
        out[f"roundtrip_max_err_{kind}"] = max(
            (back[k] - v).abs().max().item() for k, v in hf.items()
        )
    a2, c2 = make_models()
    hf_tr = HFTrainer(actor, critic, actor_lr=1e-3, critic_lr=1e-3)
    mg = MegatronTrainer(a2, c2, actor_lr=1e-3, critic_lr=1e-3)
    ids = torch.randint(0, VOCAB, (4, 64), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        lg = actor(input_ids=ids, use_cache=False).logits
        out["logits_max_abs_err"] = (lg - forward(mg.actor, ids)).abs().max().item()
        out["logits_max_abs"] = lg.abs().max().item()
        out["values_max_abs_err"] = (
            (critic(ids) - forward(mg.critic, ids)[..., 0]).abs().max().item()
        )
    batch = collate(make_rows(actor))
    rec, real = batch.routing.long(), (batch.routing >= 0).all(-1)
    for name, ctx in (("on", True), ("off", False)):
        with R.RoutingObserver(mg.actor) as seen, torch.no_grad():
            with R.replaying(mg.actor, rec if ctx else None):
                forward(mg.actor, batch.input_ids)
        used = seen.routing(batch.size, MODEL.top_k)
        out[f"routed_to_record_replay_{name}"] = (
            (used == rec.sort(-1).values).all(-1)[real].float().mean().item()
        )
    out["token_layer_pairs"] = int(real.sum())
    old = hf_tr.actor_forward(batch).logp
    adv = torch.randn(batch.input_ids.shape, generator=torch.Generator().manual_seed(3))

    def loss_fn(logp, b):
        loss = policy_loss(logp, old[:, : logp.shape[1]], adv[:, : logp.shape[1]], b.loss_mask, 0.2)
        return loss, {"policy_loss": float(loss.detach())}

    m1, m2 = hf_tr.actor_update(batch, loss_fn), mg.actor_update(batch, loss_fn)
    out["policy_loss_hf"], out["policy_loss_megatron"] = m1["policy_loss"], m2["policy_loss"]
    out["grad_norm_hf"], out["grad_norm_megatron"] = m1["grad_norm"], m2["grad_norm"]
    g1 = {k: p.grad for k, p in actor.named_parameters() if p.grad is not None}
    g2 = C.mcore_to_hf(
        {k: p.grad for k, p in mg.actor.named_parameters() if p.grad is not None},
        mg.hf_config,
        "actor",
    )
    out["grad_max_abs_err"] = max((g1[k] - g2[k]).abs().max().item() for k in g1)
    out["grad_max_abs"] = max(g.abs().max().item() for g in g1.values())
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

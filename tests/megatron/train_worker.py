"""One rank of the world-size-2 training checks (test_megatron_parallel.py runs it, gloo):

    torchrun --nproc-per-node 2 tests/megatron/train_worker.py --out DIR

0. The forward checks of dist_worker.py at EP 2 and at TP 2 (DIR/forward_ep2.json,
   DIR/forward_tp2.json; TP 2 records megatron-core's refusal on the CPU).
1. EP 2 (DP 2 for the dense weights, expert-DP 1): one PPO step (t1.train.step.ppo_step) of
   MegatronTrainer on the tests' batch; rank 0 saves the metrics and the HF weights gathered
   from both ranks (DIR/ep2.pt), which the test compares with a world-size-1 run.
2. The per-rank checkpoint (t1.train.megatron.checkpoint) after that step, a second step, then
   a fresh trainer (other initial weights) resumed from the checkpoint repeats the second step:
   weights and metrics must be bit-identical (DIR/resume.json).
3. EP 1, DP 2 (experts replicated, reduced over the data-parallel group): one PPO step
   (DIR/dp2.pt).
4. The guard broken: EP 2 with megatron-core's gradient reduction (finalize_model_grads)
   turned into a no-op, so each rank steps on its own rows' gradients (DIR/no_reduce.pt).
5. PP 2 through megatron-core's schedule (`get_forward_backward_func`, 1F1B, gloo p2p): two
   microbatches, loss = -sum of token logprobs; DIR/pp2.json says whether it ran and, if so,
   the max error of the stage gradients (unsharded to HF names) against HF autograd, else the
   error megatron-core raised.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
warnings.filterwarnings("ignore")

PPO = dict(minibatch=2, epochs=1)
LR = dict(actor_lr=1e-3, critic_lr=1e-3, seed=0)


def step_and_weights(tr, batch):
    from t1.config import PPOConfig
    from t1.train.step import ppo_step

    m = ppo_step(tr, batch, PPOConfig(**PPO))
    m = {k: v for k, v in m.items() if not k.startswith("_")}
    return m, {kind: tr.hf_state(kind) for kind in ("actor", "critic")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = Path(a.out)
    import cpu_shim

    cpu_shim.install()
    torch.set_num_threads(1)
    import torch.distributed as dist
    from megatron_helpers import make_models, make_rows

    from t1.train.batch import collate
    from t1.train.megatron import checkpoint as MC
    from t1.train.megatron.runtime import Parallel
    from t1.train.megatron.trainer import MegatronTrainer

    rank0 = lambda: dist.get_rank() == 0  # noqa: E731
    from dist_worker import guarded_forward_check

    for tp, ep in ((1, 2), (2, 1)):
        res = guarded_forward_check(tp, ep)
        if rank0():
            (out / f"forward_{'tp2' if tp == 2 else 'ep2'}.json").write_text(json.dumps(res))
        dist.barrier()
    batch = collate(make_rows(make_models(0)[0]))

    # 1. EP 2, one step
    tr = MegatronTrainer(*make_models(0), parallel=Parallel(ep=2), **LR)
    m1, w1 = step_and_weights(tr, batch)
    if rank0():
        torch.save({"metrics": m1, "weights": w1, "dp": 2, "ep": 2}, out / "ep2.pt")

    # 2. checkpoint, step 2; resume a fresh trainer and repeat step 2
    MC.save(tr, out / "ckpt", 1, progress={"step": 1})
    m2, w2 = step_and_weights(tr, batch)
    fresh = MegatronTrainer(*make_models(7), parallel=Parallel(ep=2), **LR)
    got = MC.load(fresh, out / "ckpt")
    m3, w3 = step_and_weights(fresh, batch)
    same_w = all(torch.equal(w2[k][n], w3[k][n]) for k in w2 for n in w2[k])
    same_m = all(m2[k] == m3[k] for k in m2 if k not in ("step_time_s", "tokens_per_s"))
    files = sorted(p.name for p in got.path.iterdir())
    if rank0():
        (out / "resume.json").write_text(
            json.dumps(
                {
                    "weights_equal": same_w,
                    "metrics_equal": same_m,
                    "files": files,
                    "policy_loss": [m2["policy_loss"], m3["policy_loss"]],
                }
            )
        )

    # 3. DP 2 with replicated experts
    tr = MegatronTrainer(*make_models(0), parallel=Parallel(ep=1), **LR)
    m4, w4 = step_and_weights(tr, batch)
    if rank0():
        torch.save({"metrics": m4, "weights": w4, "dp": 2, "ep": 1}, out / "dp2.pt")

    # 4. no gradient reduction: the weights must part from world size 1
    import megatron.core.distributed as mcd

    mcd.finalize_model_grads = lambda *a, **k: None
    tr = MegatronTrainer(*make_models(0), parallel=Parallel(ep=2), **LR)
    m5, w5 = step_and_weights(tr, batch)
    if rank0():
        torch.save({"metrics": m5, "weights": w5, "dp": 2, "ep": 2}, out / "no_reduce.pt")
    dist.barrier()

    # 5. pipeline parallel 2
    res = pipeline_probe(batch)
    if rank0():
        (out / "pp2.json").write_text(json.dumps(res))
    dist.barrier()
    dist.destroy_process_group()


def pipeline_probe(batch) -> dict:
    import traceback

    import torch.distributed as dist
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron_helpers import MODEL, VOCAB, make_models

    from t1.train.hf import token_logp
    from t1.train.megatron import convert as C
    from t1.train.megatron import model as M
    from t1.train.megatron.runtime import Parallel, ranks, setup

    setup(Parallel(pp=2))
    actor, _ = make_models(0)
    mc = M.build_actor(M.transformer_config(actor.config, replay=False), actor.config)
    r = ranks()
    me = C.Ranks(pp=r["pp"])
    full = C.hf_to_mcore(actor.state_dict(), actor.config, "actor")
    C.load_local(mc, C.shard(full, C.Sizes(pp=2), me, MODEL.layers, MODEL.experts))
    ids = batch.input_ids[:2]
    t = ids.shape[1]

    def step(it, model):
        x = next(it)
        out = model(x, torch.arange(t)[None].expand(x.shape[0], -1), M.causal_mask(t))

        def loss(o):
            lp = token_logp(o[..., :VOCAB], x)
            return -lp.sum(), torch.tensor(lp.numel()), {"loss": -lp.sum().detach()}

        return out, loss

    try:
        get_forward_backward_func()(
            forward_step_func=step,
            data_iterator=iter([ids[:1], ids[1:]]),
            model=[mc],
            num_microbatches=2,
            seq_length=t,
            micro_batch_size=1,
            forward_only=False,
        )
    except Exception as e:  # noqa: BLE001 - the measured reason is the result
        return {
            "ran": False,
            "error": f"{type(e).__name__}: {e}",
            "where": traceback.format_exc()[-1500:],
        }
    grads = {k: p.grad for k, p in mc.named_parameters() if p.grad is not None}
    parts = [None] * dist.get_world_size()
    dist.all_gather_object(parts, (me, grads))
    got = C.mcore_to_hf(
        C.unshard(dict(parts), C.Sizes(pp=2), MODEL.layers, MODEL.experts), actor.config, "actor"
    )
    (-token_logp(actor(input_ids=ids, use_cache=False).logits, ids).sum()).backward()
    want = {k: p.grad for k, p in actor.named_parameters()}
    err = max((got[k] - want[k]).abs().max().item() for k in want)
    return {
        "ran": True,
        "grad_max_err": err,
        "grad_max": max(g.abs().max().item() for g in want.values()),
    }


if __name__ == "__main__":
    main()

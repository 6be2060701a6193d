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
PP 2 runs through the trainer in pp_worker.py (test_megatron_pipeline.py).
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
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""One rank of the trainer's distributed weight update (test_weight_push.py, under torchrun, gloo):

    torchrun --nproc-per-node 2 tests/megatron/push_worker.py --out DIR --urls URL,URL \
        --dead URL

A MegatronTrainer of megatron_helpers' tiny actor + critic at EP 2 does one PPO step, exports
(save_weights: DIR/step/actor, the recovery path) and pushes the actor to --urls with
t1.train.push.push_actor under version_of(DIR/step/actor), in buckets of 16 KiB (several per
stage). Then a second push to --urls plus --dead (a URL nobody answers): it must fail and commit
nothing. Per rank DIR/rank_R.json: both push results.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
warnings.filterwarnings("ignore")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--urls", required=True)
    p.add_argument("--dead", required=True)
    args = p.parse_args()
    import cpu_shim
    import torch
    import torch.distributed as dist

    cpu_shim.install()
    torch.set_num_threads(1)
    from megatron_helpers import make_models, make_rows

    from t1.config import PPOConfig
    from t1.engine.weight_update import version_of
    from t1.train.batch import collate
    from t1.train.megatron.runtime import Parallel
    from t1.train.megatron.trainer import MegatronTrainer
    from t1.train.push import push_actor
    from t1.train.step import ppo_step

    actor, critic = make_models(0)
    tr = MegatronTrainer(
        actor, critic, actor_lr=1e-2, critic_lr=1e-2, seed=0, parallel=Parallel(1, 1, 2, 1)
    )
    batch = collate(make_rows(make_models(0)[0]))
    ppo_step(tr, batch, PPOConfig())
    out = Path(args.out)
    tr.save_weights(out / "step", actor=True, critic=False)
    urls = args.urls.split(",")
    version = version_of(out / "step" / "actor")
    good = push_actor(tr, urls, version, bucket_bytes=16 * 1024)
    bad = push_actor(tr, [*urls, args.dead], "never", bucket_bytes=16 * 1024, timeout_s=5.0)
    rank = dist.get_rank()
    (out / f"rank_{rank}.json").write_text(json.dumps({"good": good, "bad": bad}))
    dist.barrier()


if __name__ == "__main__":
    main()

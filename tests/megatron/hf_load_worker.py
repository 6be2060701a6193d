"""One rank of the per-rank HF loading check under torchrun (gloo, CPU), for test_hf_load.py:

    torchrun --nproc-per-node 2 tests/megatron/hf_load_worker.py --ckpt DIR --ep 2 --out R.json

Every rank builds megatron-core's Qwen3.5 actor GPTModel for the layout, resets its peak host
memory (VmHWM), loads ITS weights with t1.train.megatron.hf_load.load_into (only its slices of
the shards; convert.load_local checks every name and shape against the real model), records the
peak, then compares the loaded model's state with whole-model loading + conversion + shard, and
writes its result to R.json.rank<N>.
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--ep", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import cpu_shim
    import fla_shim

    cpu_shim.install()
    fla_shim.install()
    torch.set_num_threads(1)
    torch._dynamo.config.disable = True
    import torch.distributed as dist

    from t1.model.spec import hf_config
    from t1.train.megatron import convert as C
    from t1.train.megatron import hf_load as H
    from t1.train.megatron import model as M
    from t1.train.megatron.runtime import Parallel, setup

    par = setup(Parallel(tp=a.tp, ep=a.ep))
    config = hf_config(a.ckpt)
    tc = M.transformer_config(config, replay=False)
    model = M.build_actor(tc, config)
    sizes, me = H.this_rank(par)
    lines: list[str] = []
    stats = H.load_into(model, a.ckpt, config, "actor", sizes, me, log=lines.append)
    got = C.local_state(model)
    from t1.model.policy import load_policy

    whole = load_policy(a.ckpt)
    full = C.hf_to_mcore(whole.state_dict(), whole.config, "actor", tp=sizes.tp)
    want = C.shard(full, sizes, me, config.num_hidden_layers, config.num_experts)
    equal = set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
    res = {
        "rank": dist.get_rank(),
        "ranks": [me.tp, me.pp, me.ep, me.etp],
        "equal": equal,
        "tensors": len(got),
        "peak_rss_delta": stats.peak_rss_delta,
        "bytes_read": stats.bytes_read,
        "bytes_out": stats.bytes_out,
        "checkpoint_bytes": stats.checkpoint_bytes,
        "log": lines,
    }
    Path(f"{a.out}.rank{dist.get_rank()}").write_text(json.dumps(res))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""One rank of the world-size-2 forward checks (train_worker.py calls `guarded_forward_check`
for EP 2 and TP 2 in its torchrun run; standalone, gloo):

    torchrun --nproc-per-node 2 tests/megatron/dist_worker.py --tp 2 --ep 1 --out R.json

Every rank builds the same HF actor (same seed), loads ITS shard (convert.shard) into a
megatron-core GPTModel built for the layout, runs one forward (live, then with a replayed
record) and rank 0 writes: max |logits - HF logits|, the replayed routing agreement, and
whether the shards gathered from the live models unshard to the HF weights exactly.
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


def forward_check(tp: int, ep: int) -> dict:
    """The checks above for one layout (every rank calls it); the result dict on every rank."""
    import torch.distributed as dist
    from megatron_helpers import MODEL, VOCAB, make_models, make_rows

    from t1.model.routing import replay as hf_replay
    from t1.train.batch import collate
    from t1.train.megatron import convert as C
    from t1.train.megatron import model as M
    from t1.train.megatron import replay as R
    from t1.train.megatron.runtime import Parallel, ranks, setup

    par = setup(Parallel(tp=tp, ep=ep))
    actor, _ = make_models()
    tc = M.transformer_config(actor.config, replay=True)
    mc = M.build_actor(tc, actor.config)
    sizes = C.Sizes(tp=par.tp, ep=par.ep)
    r = ranks()
    me = C.Ranks(tp=r["tp"], ep=r["ep"], etp=r["etp"])
    full = C.hf_to_mcore(actor.state_dict(), actor.config, "actor", tp=par.tp)
    C.load_local(mc, C.shard(full, sizes, me, MODEL.layers, MODEL.experts))
    R.install(mc)
    batch = collate(make_rows(actor, n=2))
    ids, rec = batch.input_ids, batch.routing
    with torch.no_grad():
        live_err = (actor(input_ids=ids, use_cache=False).logits - M.forward(mc, ids)).abs().max()
        with hf_replay(actor, rec):
            want = actor(input_ids=ids, use_cache=False).logits
        with R.RoutingObserver(mc) as seen, R.replaying(mc, rec):
            got = M.forward(mc, ids)
    used = seen.routing(ids.shape[0], MODEL.top_k)  # this rank's slice under SP
    mine = rec.long()
    if tc.sequence_parallel:  # the record as this TP rank's routers see it: its sequence slice
        mine = torch.nn.functional.pad(mine, (0, 0, 0, 0, 0, -mine.shape[1] % par.tp), value=-1)
        mine = mine.chunk(par.tp, 1)[r["tp"]]
    real = (mine >= 0).all(-1)
    agree = (used == mine.sort(-1).values).all(-1)[real].float().mean()
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (me, C.local_state(mc)))
    back = C.unshard(dict(gathered), sizes, MODEL.layers, MODEL.experts)
    exact = set(back) == set(full) and all(torch.equal(back[k], full[k]) for k in full)
    return {
        "ran": True,
        "tp": par.tp,
        "ep": par.ep,
        "logits_max_err": float(live_err),
        "replayed_logits_max_err": float((want - got).abs().max()),
        "replay_agreement": float(agree),
        "unshard_exact": bool(exact),
        "vocab": VOCAB,
    }


def guarded_forward_check(tp: int, ep: int) -> dict:
    """`forward_check`, or {"ran": False, "error": ...} when megatron-core refuses the layout
    (the error is raised the same way on every rank, before any collective)."""
    try:
        return forward_check(tp, ep)
    except Exception as e:  # noqa: BLE001 - the measured reason is the result
        return {"ran": False, "tp": tp, "ep": ep, "error": f"{type(e).__name__}: {e}"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--ep", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import cpu_shim

    cpu_shim.install()
    torch.set_num_threads(1)
    import torch.distributed as dist

    res = guarded_forward_check(a.tp, a.ep)
    if dist.get_rank() == 0:
        Path(a.out).write_text(json.dumps(res))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

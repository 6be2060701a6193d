"""One rank of the sharded-export checks (test_export.py runs it under torchrun, gloo):

    torchrun --nproc-per-node 2 tests/megatron/export_worker.py --out DIR \\
        --layouts qwen3:tp2 qwen3:ep2 qwen3:pp2 qwen35:tp2 --controls
    torchrun --nproc-per-node 4 tests/megatron/export_worker.py --out DIR \\
        --layouts qwen3:tp2_ep2_etp2 qwen3:tp2_pp2 qwen35:pp2_ep2

Per FAMILY:LAYOUT: a MegatronTrainer of the family's tiny actor + critic (seed 0, untrained:
the HF weights the test's own process exports with save_policy / Critic.save_pretrained) at
that layout, then `export_hf` of both roles into DIR/NAME/actor and DIR/NAME/critic with
small buckets (BUCKET bytes, so each leader writes several files), and per rank
DIR/NAME/rank_R.json: the exporter's peak extra bytes, this rank's shard bytes of each role
(its parameters), whether it leads its stage, its files, tensors and bytes. Rank 0 also saves
`trainer.hf_state` of both roles (collect.collect_hf: leaders stream to rank 0) in
DIR/NAME/hf_state.pt.

--controls (on the first layout's trainer), the negative controls:
* `skip_bucket`: the last stage leader's second `save_file` writes an empty file (a writer that
  loses a bucket): export_hf must raise ExportError on every rank (DIR/skip_bucket_rank_R.json) and
  leave no actor directory;
* `corrupt_piece`: the last rank sends its first piece + 1 (a corrupted TP / EP piece): the
  export succeeds (DIR/corrupt/actor) and the test's comparison must catch it.
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

BUCKET = 16 * 1024
LAYOUTS = {
    "tp2": dict(tp=2),
    "ep2": dict(ep=2),
    "pp2": dict(pp=2),
    "tp2_ep2_etp2": dict(tp=2, ep=2, etp=2),
    "tp2_pp2": dict(tp=2, pp=2),
    "pp2_ep2": dict(pp=2, ep=2),
}


def make_models(family: str):
    if family == "qwen35":
        import test_qwen35 as Q

        return Q.make_models(0)
    from megatron_helpers import make_models as mk

    return mk(0)


def shims(families: set[str]) -> None:
    import cpu_shim

    cpu_shim.install()
    if "qwen35" in families:
        import fla_shim

        fla_shim.install()
        torch._dynamo.config.disable = True


def trainer(family: str, layout: str):
    from t1.train.megatron.runtime import Parallel
    from t1.train.megatron.trainer import MegatronTrainer

    return MegatronTrainer(*make_models(family), parallel=Parallel(**LAYOUTS[layout]), seed=0)


def run_layout(tr, out: Path) -> None:
    import torch.distributed as dist

    from t1.train.megatron.export import coordinates, export_hf

    rank = dist.get_rank()
    coords = coordinates()
    leader = rank == min(r for r, c in enumerate(coords) if c[1] == coords[rank][1])
    rec = {"rank": rank, "leader": leader, "coords": coords[rank], "bucket": BUCKET}
    for kind in ("actor", "critic"):
        model = getattr(tr, kind)
        rec[f"{kind}_shard_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
        st = export_hf(tr, kind, out / kind, bucket_bytes=BUCKET)
        rec[kind] = {
            "peak": st.peak_bytes,
            "files": st.files,
            "tensors": st.tensors,
            "bytes": st.bytes_written,
            "largest": st.largest_bytes,
        }
    states = {kind: tr.hf_state(kind) for kind in ("actor", "critic")}
    if rank == 0:
        torch.save(states, out / "hf_state.pt")
    (out / f"rank_{rank}.json").write_text(json.dumps(rec))
    dist.barrier()


def controls(tr, out: Path) -> None:
    import safetensors.torch as st
    import torch.distributed as dist

    from t1.train.megatron import export as E

    rank, last = dist.get_rank(), dist.get_world_size() - 1
    coords = E.coordinates()
    writer = max(min(r for r, c in enumerate(coords) if c[1] == s) for _, s, _, _ in coords)
    real_save, calls = st.save_file, []

    def lossy_save(tensors, path, metadata=None):
        calls.append(path)
        if rank == writer and len(calls) == 2:
            tensors = {}  # the bucket's tensors are lost: an empty file in its place
        return real_save(tensors, path, metadata=metadata)

    st.save_file = lossy_save
    try:
        E.export_hf(tr, "actor", out / "skip_bucket" / "actor", bucket_bytes=BUCKET)
        res = {"raised": None}
    except E.ExportError as e:
        res = {"raised": str(e)}
    finally:
        st.save_file = real_save
    res["exists"] = (out / "skip_bucket" / "actor").exists()
    (out / f"skip_bucket_rank_{rank}.json").write_text(json.dumps(res))
    dist.barrier()

    real_send, sent = dist.send, []

    def corrupt_send(tensor, dst, *a, **k):
        sent.append(dst)
        if rank == last and len(sent) == 1:
            tensor = tensor + 1
        return real_send(tensor, dst, *a, **k)

    dist.send = corrupt_send
    try:
        E.export_hf(tr, "actor", out / "corrupt" / "actor", bucket_bytes=BUCKET)
    finally:
        dist.send = real_send
    dist.barrier()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--layouts", nargs="+", required=True)
    ap.add_argument("--controls", action="store_true")
    a = ap.parse_args()
    todo = [x.split(":") for x in a.layouts]
    shims({f for f, _ in todo})
    torch.set_num_threads(1)
    import torch.distributed as dist

    for i, (family, layout) in enumerate(todo):
        tr = trainer(family, layout)
        d = Path(a.out) / f"{family}_{layout}"
        d.mkdir(parents=True, exist_ok=True)
        run_layout(tr, d)
        if a.controls and i == 0:
            controls(tr, Path(a.out))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

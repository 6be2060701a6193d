"""Sharded HF export of the megatron backend (t1/train/megatron/export.py) without a gather.

    pytest tests/megatron/test_export.py -q

export_worker.py runs under `torchrun --nproc-per-node 2` (TP 2, EP 2, PP 2 on the tiny
Qwen3-MoE; TP 2 on the tiny Qwen3.5: GDN sections, gated q, shared expert) and 4 (TP 2 + EP 2
+ ETP 2, PP 2 + EP 2, Qwen3.5 TP 2 + PP 2), gloo on the CPU, small buckets so every leader
writes several files. Each export must equal the single-process one (save_policy /
Critic.save_pretrained of the same HF weights): every tensor of the safetensors files and of
load_policy / Critic.from_pretrained bit for bit, the same names, config.json and
generation_config.json, an index that covers every file and byte; hf_load reads them back into
each rank's shard. At world size 1 (in process) the same, also with meta-device HF shells.
The exporter's own peak memory per rank is below one shard plus one bucket, and at least the
largest tensor a leader had to join from TP parts (so the measure is not zero by
construction). Negative controls: a writer losing a bucket is refused by the index check on
every rank (no directory appears), a corrupted piece from one rank is caught by the
comparison. And no `all_gather_object` is left in t1/train.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent
WS2 = ("qwen3:tp2", "qwen3:ep2", "qwen3:pp2", "qwen35:tp2")
WS4 = ("qwen3:tp2_ep2_etp2", "qwen3:pp2_ep2", "qwen35:tp2_pp2")


def _torchrun(n: int, out: Path, layouts, *extra: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).with_name("torchrun")
    cmd = [str(exe), "--nproc-per-node", str(n), "--master-port", str(port)]
    cmd += [str(HERE / "export_worker.py"), "--out", str(out), "--layouts", *layouts, *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]


@pytest.fixture(scope="module")
def refs(tmp_path_factory):
    """The single-process export of each family's seed-0 actor and critic."""
    import export_worker as W

    from t1.model.policy import save_policy

    root = tmp_path_factory.mktemp("export_ref")
    for family in ("qwen3", "qwen35"):
        actor, critic = W.make_models(family)
        save_policy(actor, root / family / "actor")
        critic.save_pretrained(root / family / "critic")
    return root


@pytest.fixture(scope="module")
def ws2(tmp_path_factory):
    out = tmp_path_factory.mktemp("export_ws2")
    _torchrun(2, out, WS2, "--controls")
    return out


@pytest.fixture(scope="module")
def ws4(tmp_path_factory):
    out = tmp_path_factory.mktemp("export_ws4")
    _torchrun(4, out, WS4)
    return out


def _raw(d: Path) -> dict[str, torch.Tensor]:
    """Every tensor of every safetensors file in `d`."""
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for f in sorted(d.glob("*.safetensors")):
        part = load_file(str(f))
        assert not set(part) & set(out), f"{f}: a tensor in two files"
        out.update(part)
    return out


def _diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    """Names whose tensors differ (dtype, shape or any bit); raises on different name sets."""
    assert set(a) == set(b), (sorted(set(a) - set(b))[:5], sorted(set(b) - set(a))[:5])
    return [k for k in a if a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k])]


def _check_index(d: Path) -> None:
    from t1.train.megatron.export import read_header

    files = sorted(p.name for p in d.glob("*.safetensors"))
    if files == ["model.safetensors"]:
        return
    index = json.loads((d / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == files
    total, n = 0, len(files)
    assert files == [f"model-{k:05d}-of-{n:05d}.safetensors" for k in range(1, n + 1)]
    for f in files:
        head = {k: v for k, v in read_header(d / f).items() if k != "__metadata__"}
        assert all(index["weight_map"][k] == f for k in head)
        total += sum(v["data_offsets"][1] - v["data_offsets"][0] for v in head.values())
    assert index["metadata"]["total_size"] == total


def _check_layout(out: Path, ref: Path, family: str, layout: str) -> dict:
    from t1.model.policy import Critic, load_policy

    d = out / f"{family}_{layout}"
    _check_index(d / "actor")
    assert _diff(_raw(ref / family / "actor"), _raw(d / "actor")) == []
    assert (
        _diff(
            load_policy(ref / family / "actor").state_dict(), load_policy(d / "actor").state_dict()
        )
        == []
    )
    for f in ("config.json", "generation_config.json"):
        assert json.loads((d / "actor" / f).read_text()) == json.loads(
            (ref / family / "actor" / f).read_text()
        ), f
    assert sorted(p.name for p in (d / "critic").iterdir()) == sorted(
        p.name for p in (ref / family / "critic").iterdir()
    )
    assert _diff(_raw(ref / family / "critic"), _raw(d / "critic")) == []
    want = Critic.from_pretrained(ref / family / "critic").state_dict()
    assert _diff(want, Critic.from_pretrained(d / "critic").state_dict()) == []
    # trainer.hf_state above world size 1 (collect.collect_hf): the whole role on rank 0
    states = torch.load(d / "hf_state.pt", weights_only=False)
    assert _diff(load_policy(ref / family / "actor").state_dict(), states["actor"]) == []
    assert _diff(want, states["critic"]) == []
    return _check_memory(d, _raw(ref / family / "actor"), layout)


def _check_memory(d: Path, ref: dict[str, torch.Tensor], layout: str) -> dict:
    """Peak extra bytes per rank <= shard + bucket; >= the largest tensor a leader joined."""
    recs = [json.loads(p.read_text()) for p in sorted(d.glob("rank_*.json"))]
    n = len(recs)
    assert [r["rank"] for r in recs] == list(range(n))
    peaks = {}
    for r in recs:
        for kind in ("actor", "critic"):
            peak = r[kind]["peak"]
            peaks[(r["rank"], kind)] = peak
            assert peak <= r[f"{kind}_shard_bytes"] + r["bucket"], (d, r["rank"], kind, peak)
            if not r["leader"]:
                assert r[kind]["tensors"] == 0 and r[kind]["files"] == []
    leaders = [r for r in recs if r["leader"]]
    assert sum(r["actor"]["tensors"] for r in leaders) == len(ref)
    assert sum(r["actor"]["bytes"] for r in leaders) == sum(t.nbytes for t in ref.values())
    if "tp2" in layout:  # the embedding (stage 0) and lm_head (last stage) are joined from TP
        first, last = leaders[0], leaders[-1]
        assert first["actor"]["peak"] >= ref["model.embed_tokens.weight"].nbytes > 0
        assert last["actor"]["peak"] >= ref["lm_head.weight"].nbytes > 0
    for r in leaders:
        assert r["actor"]["peak"] > 0 and r["critic"]["peak"] > 0, (d, r)
    return peaks


@pytest.mark.parametrize("name", WS2)
def test_world_size_2_export_equals_the_single_process_export(ws2, refs, name):
    peaks = _check_layout(ws2, refs, *name.split(":"))
    print(name, "peak extra bytes per (rank, role):", peaks)


@pytest.mark.slow
@pytest.mark.parametrize("name", WS4)
def test_world_size_4_export_equals_the_single_process_export(ws4, refs, name):
    peaks = _check_layout(ws4, refs, *name.split(":"))
    print(name, "peak extra bytes per (rank, role):", peaks)


def test_the_sharded_loader_reads_every_export_back(ws2):
    """hf_load (what a run at another layout starts from) reads the multi-file exports of the
    actor and the one-file critic: each rank's part equals convert.shard of the HF weights."""
    import export_worker as W

    from t1.train.megatron import convert as C
    from t1.train.megatron.hf_load import load_rank

    actor, critic = W.make_models("qwen3")
    c = actor.config
    for kind, model in (("actor", actor), ("critic", critic)):
        full = C.hf_to_mcore(model.state_dict(), c, kind, tp=2)
        for sizes, ranks in (
            (C.Sizes(tp=2), C.Ranks(tp=1)),
            (C.Sizes(pp=2, ep=2), C.Ranks(pp=1, ep=1)),
        ):
            want = C.shard(full, sizes, ranks, c.num_hidden_layers, c.num_experts, kind)
            for layout in ("tp2", "pp2"):
                got, _ = load_rank(ws2 / f"qwen3_{layout}" / kind, c, kind, sizes, ranks, log=None)
                assert _diff(want, got) == [], (kind, layout, sizes)


def test_a_writer_losing_a_bucket_is_refused_on_every_rank(ws2):
    res = [json.loads((ws2 / f"skip_bucket_rank_{r}.json").read_text()) for r in range(2)]
    for r in res:
        assert r["raised"] is not None and "export incomplete" in r["raised"], r
        assert "1 tensors missing" in r["raised"] and r["exists"] is False
    assert not (ws2 / "skip_bucket" / "actor").exists()
    assert [p.name for p in (ws2 / "skip_bucket").iterdir()] == []  # the temporary dir is gone


def test_a_corrupted_piece_is_caught_by_the_comparison(ws2, refs):
    d = ws2 / "corrupt" / "actor"
    _check_index(d)  # a well-formed export...
    bad = _diff(_raw(refs / "qwen3" / "actor"), _raw(d))
    assert len(bad) >= 1, "the corrupted piece went unnoticed"  # ...with wrong numbers
    print("tensors the corrupted piece changed:", bad)


def test_world_size_1_export_is_the_single_process_export_in_several_files(refs, tmp_path):
    """In-process (world size 1): small buckets give an index and several files; a bucket
    larger than the model gives one model.safetensors, as save_pretrained writes; the same
    with the HF shells on the meta device (no weights held)."""
    import export_worker as W

    from t1.model.policy import Critic, load_policy
    from t1.train.megatron.export import export_hf
    from t1.train.megatron.trainer import MegatronTrainer

    tr = MegatronTrainer(*W.make_models("qwen3"), seed=0)
    small = export_hf(tr, "actor", tmp_path / "small", bucket_bytes=W.BUCKET)
    assert len(small.files) > 3 and (tmp_path / "small" / "model.safetensors.index.json").exists()
    _check_index(tmp_path / "small")
    tr.save_weights(tmp_path / "one")
    assert sorted(p.name for p in (tmp_path / "one" / "actor").iterdir()) == sorted(
        p.name for p in (refs / "qwen3" / "actor").iterdir()
    )
    ref = _raw(refs / "qwen3" / "actor")
    for d in (tmp_path / "small", tmp_path / "one" / "actor"):
        assert _diff(ref, _raw(d)) == []
        assert (
            _diff(load_policy(refs / "qwen3" / "actor").state_dict(), load_policy(d).state_dict())
            == []
        )
    want = Critic.from_pretrained(refs / "qwen3" / "critic").state_dict()
    assert _diff(want, Critic.from_pretrained(tmp_path / "one" / "critic").state_dict()) == []
    # the HF shells give names, shapes, dtypes and configs only: meta tensors do as well
    tr.hf_actor.to("meta"), tr.hf_critic.to("meta")
    tr.save_weights(tmp_path / "meta")
    assert _diff(ref, _raw(tmp_path / "meta" / "actor")) == []
    assert _diff(want, Critic.from_pretrained(tmp_path / "meta" / "critic").state_dict()) == []
    assert tr.last_export.peak_bytes <= sum(p.nbytes for p in tr.critic.parameters()) + (1 << 30)


def test_no_all_gather_object_in_t1_train():
    root = Path(__file__).resolve().parents[2] / "t1" / "train"
    hits = [
        f"{p.relative_to(root)}:{i}"
        for p in root.rglob("*.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if "all_gather_object" in line
    ]
    assert hits == [], hits
    # the negative control of this grep: it finds the gather the tests' own worker keeps
    assert "all_gather_object" in (HERE / "pp_worker.py").read_text()

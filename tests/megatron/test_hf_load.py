"""Per-rank loading from an HF checkpoint (t1.train.megatron.hf_load) and the one model spec of
`model.init_from` (t1.model.spec).

    pytest tests/megatron/test_hf_load.py -q

A tiny Qwen3.5-MoE (transformers' Qwen3_5MoeForCausalLM: Gated DeltaNet + gated attention,
shared expert, every weight perturbed) saved with `save_pretrained(max_shard_size=...)`: many
shards and model.safetensors.index.json, experts per expert as HF ships them. Every rank of
TP / EP / ETP / PP layouts at world size 2 and 4 is computed here in one process and must equal
whole-model loading + convert.hf_to_mcore + convert.shard exactly (names, dtypes, values), for
the actor and the critic; the wrong rank's coordinates give different tensors (the comparison
can fail). One torchrun (2 processes, gloo) loads each rank into megatron-core's real GPTModel
and measures the rank's peak host memory (VmHWM) against the whole checkpoint's size.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import save_file

from t1.config import ModelConfig, load_config
from t1.model.policy import Critic, build_policy, load_policy
from t1.model.spec import SpecMismatch, check, hf_config, memory_spec, read_shape, resolve
from t1.train.megatron import convert as C
from t1.train.megatron.hf_load import Checkpoint, load_rank

VOCAB = 250
MODEL = ModelConfig(
    arch="qwen3_5_moe",
    layers=4,
    hidden=64,
    heads=4,
    kv_heads=2,
    head_dim=16,
    intermediate=128,
    expert_intermediate=32,
    experts=8,
    top_k=2,
)
WS2 = [C.Sizes(tp=2), C.Sizes(ep=2)]
WS4 = [C.Sizes(tp=2, ep=2), C.Sizes(ep=4), C.Sizes(tp=2, ep=2, etp=2), C.Sizes(tp=2, pp=2)]


def _perturbed(cfg: ModelConfig, seed: int = 0):
    actor = build_policy(cfg, VOCAB, seed=seed)
    g = torch.Generator().manual_seed(seed + 5)
    with torch.no_grad():
        for p in actor.parameters():
            p.add_(torch.randn(p.shape, generator=g) * (0.1 if p.dim() == 1 else 0.02))
    return actor


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("q35") / "hf"
    _perturbed(MODEL).save_pretrained(d, max_shard_size="100KB")
    whole = load_policy(d)
    critic = Critic.from_policy(whole, seed=1)
    with torch.no_grad():
        critic.value_head.weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(2))
        critic.value_head.bias.fill_(0.25)
    return d, whole, critic


def _ranks(sizes: C.Sizes):
    for tp, pp, ep, etp in itertools.product(
        range(sizes.tp), range(sizes.pp), range(sizes.ep), range(sizes.etp)
    ):
        yield C.Ranks(tp=tp, pp=pp, ep=ep, etp=etp)


def _equal(a: dict, b: dict) -> bool:
    return set(a) == set(b) and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in a
    )


def test_the_checkpoint_is_sharded_with_an_index_and_experts_per_expert(ckpt):
    d, _, _ = ckpt
    index = json.loads((d / "model.safetensors.index.json").read_text())
    files = set(index["weight_map"].values())
    assert len(files) >= 4 and all((d / f).exists() for f in files)
    assert "model.layers.0.mlp.experts.3.gate_proj.weight" in index["weight_map"]
    assert Checkpoint(d).prefix == "model."


@pytest.mark.parametrize("sizes", WS2 + WS4, ids=str)
def test_every_rank_equals_whole_model_conversion(ckpt, sizes):
    d, whole, critic = ckpt
    c = whole.config
    head = {"weight": critic.value_head.weight.detach(), "bias": critic.value_head.bias.detach()}
    for kind, m in (("actor", whole), ("critic", critic)):
        full = C.hf_to_mcore(m.state_dict(), c, kind, tp=sizes.tp)
        for r in _ranks(sizes):
            want = C.shard(full, sizes, r, MODEL.layers, MODEL.experts, kind)
            got, stats = load_rank(d, c, kind, sizes, r, value_head=head, log=None)
            assert _equal(got, want), (kind, sizes, r)
            assert stats.bytes_out == sum(v.numel() * v.element_size() for v in want.values())
            if sizes.ep > 1 or sizes.pp > 1:  # a rank never reads what is not its own
                assert stats.bytes_read <= stats.bytes_out < stats.checkpoint_bytes  # (+ the head)


def test_the_wrong_rank_coordinates_give_other_tensors(ckpt):
    """The comparison above can fail: rank (tp 1, ep 1)'s load against rank (tp 0, ep 0)'s
    shard differs in values, and a whole-model shard of another layout in names or shapes."""
    d, whole, _ = ckpt
    sizes = C.Sizes(tp=2, ep=2)
    full = C.hf_to_mcore(whole.state_dict(), whole.config, "actor", tp=2)
    want = C.shard(full, sizes, C.Ranks(tp=0, ep=0), MODEL.layers, MODEL.experts)
    for wrong in (C.Ranks(tp=1, ep=0), C.Ranks(tp=0, ep=1), C.Ranks(tp=1, ep=1)):
        got, _ = load_rank(d, whole.config, "actor", sizes, wrong, log=None)
        assert set(got) == set(want)
        differ = [k for k in want if not torch.equal(got[k], want[k])]
        assert differ, wrong
        if wrong.ep != 0:
            assert any("local_experts" in k for k in differ)
        if wrong.tp != 0:
            assert "decoder.layers.0.self_attention.in_proj.weight" in differ
    got, _ = load_rank(d, whole.config, "actor", C.Sizes(ep=4), C.Ranks(), log=None)
    assert not _equal(got, want)


def test_fused_experts_under_the_multimodal_prefix_and_a_t1_critic_directory(ckpt, tmp_path):
    """The released Qwen3.5 names (`model.language_model.`) with experts stored fused, in two
    files + index; and a critic saved by t1 (one critic.safetensors, `backbone.` names)."""
    d, whole, critic = ckpt
    sd = {k.replace("model.", "model.language_model.", 1): v for k, v in whole.state_dict().items()}
    names = sorted(sd)
    half = len(names) // 2
    parts = {"a.safetensors": names[:half], "b.safetensors": names[half:]}
    for f, ns in parts.items():
        save_file({n: sd[n].contiguous() for n in ns}, str(tmp_path / f))
    wm = {n: f for f, ns in parts.items() for n in ns}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    assert "model.language_model.layers.0.mlp.experts.gate_up_proj" in wm
    critic.save_pretrained(tmp_path / "critic")
    for sizes in (C.Sizes(tp=2, ep=2, etp=2), C.Sizes(ep=4)):
        for kind, m, src in (("actor", whole, tmp_path), ("critic", critic, tmp_path / "critic")):
            full = C.hf_to_mcore(m.state_dict(), whole.config, kind, tp=sizes.tp)
            for r in _ranks(sizes):
                want = C.shard(full, sizes, r, MODEL.layers, MODEL.experts, kind)
                got, _ = load_rank(src, whole.config, kind, sizes, r, log=None)
                assert _equal(got, want), (kind, sizes, r)


def test_dtype_cast_and_the_logged_line(ckpt):
    d, whole, _ = ckpt
    lines: list[str] = []
    got, stats = load_rank(
        d,
        whole.config,
        "actor",
        C.Sizes(ep=2),
        C.Ranks(ep=1),
        dtype=torch.bfloat16,
        log=lines.append,
    )
    assert {v.dtype for v in got.values()} == {torch.bfloat16}
    assert len(lines) == 1 and "ep=1/2" in lines[0] and "peak host memory" in lines[0]
    assert stats.files_opened > 1


# ---------------------------------------------------------------- the torchrun check + memory

BIG = ModelConfig(**{**MODEL.__dict__, "hidden": 128, "experts": 32, "expert_intermediate": 256})


@pytest.mark.slow
@pytest.mark.integration
def test_torchrun_ep2_loads_each_rank_into_the_gpt_model_below_the_whole_model(tmp_path):
    """Two processes (gloo): each rank's GPTModel loaded per rank equals whole-model
    conversion, and its peak host memory during the load (VmHWM, reset before it) stays below
    the whole checkpoint (~52 MiB; experts are most of it, each rank reads half of them)."""
    d = tmp_path / "big"
    build_policy(BIG, VOCAB, seed=3).save_pretrained(d, max_shard_size="4MB")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torchrun = Path(sys.executable).with_name("torchrun")
    worker = Path(__file__).parent / "hf_load_worker.py"
    out = tmp_path / "res.json"
    cmd = [str(torchrun), "--nproc-per-node", "2", "--master-port", str(port), str(worker)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    p = subprocess.run(
        [*cmd, "--ckpt", str(d), "--ep", "2", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    res = [json.loads(Path(f"{out}.rank{i}").read_text()) for i in range(2)]
    assert sorted(r["ranks"][2] for r in res) == [0, 1]
    for r in res:
        print(r["log"][0])
        assert r["equal"] is True and r["tensors"] > 0
        whole = r["checkpoint_bytes"]
        assert whole > 40 << 20
        assert r["bytes_read"] < 0.6 * whole
        assert 0 < r["peak_rss_delta"] < whole, r


# ---------------------------------------------------------------- the one model spec


def _config_file(tmp_path, model: dict, tokenizer: dict | None = None) -> Path:
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({"model": model, "tokenizer": tokenizer or {}}))
    return f


def test_read_shape_is_the_checkpoint_architecture(ckpt):
    d, whole, _ = ckpt
    s = read_shape(d)
    assert (s.arch, s.layers, s.hidden, s.heads, s.kv_heads, s.head_dim) == (
        "qwen3_5_moe",
        4,
        64,
        4,
        2,
        16,
    )
    assert (s.experts, s.top_k, s.expert_intermediate, s.vocab) == (8, 2, 32, VOCAB)
    assert s.layer_types == tuple(whole.config.layer_types)
    assert s.shared_expert_intermediate == 32 and s.linear_value_heads == 4
    assert s.full_attention_interval() == 4 and s.intermediate is None
    assert hf_config(d).to_dict()["layer_types"] == whole.config.layer_types


def test_check_names_file_key_and_both_values(ckpt, tmp_path):
    d, _, _ = ckpt
    f = _config_file(
        tmp_path,
        {
            "init_from": str(d),
            "arch": "qwen3_5_moe",
            "layers": 4,
            "hidden": 96,
            "experts": 16,
            "intermediate": 999,
            "train_dtype": "bfloat16",
        },
        {"vocab_size": 300},
    )
    cfg = load_config(f)
    errors = check(cfg)
    assert len(errors) == 3, errors
    hidden = next(e for e in errors if "model.hidden" in e)
    assert str(f) in hidden and "96" in hidden and "hidden_size = 64" in hidden
    assert str(d / "config.json") in hidden
    assert any("model.experts = 16" in e and "num_experts = 8" in e for e in errors)
    assert any("tokenizer.vocab_size = 300" in e and "vocab_size = 250" in e for e in errors)
    with pytest.raises(SpecMismatch, match="3 value"):
        resolve(cfg)
    # keys the file does not set are not compared (the defaults: hidden 128, experts 8 ...)
    ok = load_config(_config_file(tmp_path, {"init_from": str(d), "arch": "qwen3_5_moe"}))
    assert check(ok) == []
    r = resolve(ok)
    assert (r.model.hidden, r.model.layers, r.model.experts, r.tokenizer.vocab_size) == (
        64,
        4,
        8,
        VOCAB,
    )
    spec = memory_spec(ok)
    assert (spec.hidden, spec.vocab, spec.shared_expert_ffn, spec.linear_value_heads) == (
        64,
        VOCAB,
        32,
        4,
    )


def test_the_122b_preset_against_a_checkpoint_config(tmp_path):
    """The preset's model section against a config.json shaped like the released multimodal
    checkpoint (text_config nested) whose numbers are QWEN35_122B's: only the keys whose values
    differ are reported (here two invented disagreements)."""
    from t1.model.memory_spec import QWEN35_122B as Q

    text = {
        "model_type": "qwen3_5_moe_text",
        "num_hidden_layers": Q.layers,
        "hidden_size": Q.hidden,
        "num_attention_heads": Q.heads,
        "num_key_value_heads": Q.kv_heads,
        "head_dim": Q.head_dim,
        "moe_intermediate_size": Q.expert_ffn,
        "shared_expert_intermediate_size": 1024,
        "num_experts": Q.experts,
        "num_experts_per_tok": Q.top_k,
        "vocab_size": Q.vocab,
        "max_position_embeddings": 131072,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000000.0,
            "partial_rotary_factor": 0.25,
        },
        "layer_types": [
            "full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(Q.layers)
        ],
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 64,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
    }
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "config.json").write_text(
        json.dumps(
            {
                "model_type": "qwen3_5_moe",
                "text_config": {**text, "num_experts": 128},
                "tie_word_embeddings": False,
            }
        )
    )
    preset = Path(__file__).resolve().parents[2] / "workflow/config/qwen3.5-122b-a10b.yaml"
    cfg = load_config(preset, overrides={"model.init_from": str(ck)})
    errors = check(cfg)
    assert len(errors) == 2, errors
    assert any("model.experts = 256" in e and "num_experts = 128" in e for e in errors)
    assert any("model.max_position = 262144" in e and "= 131072" in e for e in errors)
    assert all(str(preset) in e for e in errors)
    (ck / "config.json").write_text(json.dumps({"model_type": "qwen3_5_moe", "text_config": text}))
    assert len(check(cfg)) == 1  # max_position only
    spec = memory_spec(
        load_config(preset, overrides={"model.init_from": str(ck), "model.max_position": 131072})
    )
    assert spec.param_counts()["total"] == Q.param_counts()["total"]


def test_check_plan_refuses_a_disagreeing_preset(ckpt, tmp_path):
    from t1.train.megatron.plan import check_plan

    d, _, _ = ckpt
    cfg = load_config(_config_file(tmp_path, {"init_from": str(d), "hidden": 96}))
    with pytest.raises(SpecMismatch, match="model.hidden = 96"):
        check_plan(cfg)

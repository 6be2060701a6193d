"""`t1 train` on train.backend megatron starting from an HF Qwen3.5-MoE release as downloaded.

    pytest tests/megatron/test_train_from_release.py -q

The release is written here with transformers' own classes: a tiny Qwen3.5-MoE (Gated DeltaNet
and gated attention layers, shared expert, partial RoPE) whose weights sit under the released
multimodal names (`model.language_model.`), in several safetensors shards with
`model.safetensors.index.json`, and a config.json whose language model is its `text_config`.
SFT and a cold-critic warm-up run through the real `t1 train` (t1.train.cli.main) from it,
and from the same weights saved as a plain t1 policy directory: the resulting weights are
equal bit for bit, and each stage's `weights_load/rank_0.json` shows the per-rank reader
(t1.train.roles -> hf_load) opened the release's shards, not a whole-model load. The control:
a release whose one expert tensor was changed gives other weights. Shims: cpu_shim, fla_shim.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch
import yaml
from megatron_helpers import VOCAB
from safetensors.torch import save_file
from test_megatron_trainer import _stage_world

from t1.config import ModelConfig
from t1.model.policy import Critic, build_policy, load_policy, save_policy

Q35 = ModelConfig(
    arch="qwen3_5_moe", layers=4, hidden=64, heads=4, kv_heads=2, head_dim=16,
    intermediate=128, expert_intermediate=32, experts=8, top_k=2,
)  # fmt: skip


def _release(policy, out: Path, shards: int = 3, poke: bool = False) -> Path:
    """`policy` as an HF Qwen3.5 release: multimodal names and config, `shards` files + index."""
    sd = {
        k.replace("model.", "model.language_model.", 1): v for k, v in policy.state_dict().items()
    }
    if poke:
        k = next(n for n in sorted(sd) if ".mlp.experts." in n)
        sd[k] = sd[k] + 0.01
    names = sorted(sd)
    out.mkdir(parents=True)
    weight_map = {}
    for i in range(shards):
        part = names[i::shards]
        f = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: sd[n].contiguous() for n in part}, str(out / f))
        weight_map.update(dict.fromkeys(part, f))
    (out / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    text = policy.config.to_dict()
    config = {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "text_config": text,
        "vision_config": {"depth": 1},
    }
    (out / "config.json").write_text(json.dumps(config))
    return out


def _ns(cfg, stage, inputs, source, out):
    return argparse.Namespace(
        config=str(cfg), stage=stage, inputs=[str(inputs)], source=str(source), out=str(out),
        critic=None, tokenizer=None, max_steps=None, restart_stage=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    import cpu_shim
    import fla_shim

    cpu_shim.install()
    fla_shim.install()
    d = tmp_path_factory.mktemp("release")
    paths, _, rollout = _stage_world(d)  # trajectories over ids < VOCAB
    base = yaml.safe_load(Path(paths["megatron"]).read_text())
    base["run"]["threads"] = 1
    base["model"] = {"arch": "qwen3_5_moe"}
    base["sft"] = {"batch": 2, "epochs": 1, "save_every": 0}
    base["critic_warmup"] = {"batch": 2, "epochs": 1, "save_every": 0}
    (d / "cfg.yaml").write_text(yaml.safe_dump(base))
    policy = build_policy(Q35, VOCAB, seed=4)
    save_policy(policy, d / "plain" / "actor")
    _release(policy, d / "release")
    _release(policy, d / "poked", poke=True)
    return d, rollout


def _run(d: Path, rollout: Path, stage: str, source: Path, out: Path) -> None:
    from t1.train import cli

    assert cli.main(_ns(d / "cfg.yaml", stage, rollout, source, out)) == 0


def test_sft_and_critic_warmup_start_from_the_release_per_rank(world, tmp_path):
    d, rollout = world
    outs = {}
    for name, src in (("plain", d / "plain" / "actor"), ("release", d / "release")):
        outs[name, "sft"] = tmp_path / f"{name}_sft"
        _run(d, rollout, "sft", src, outs[name, "sft"])
    # critic warm-up takes a stage directory holding actor/: link the release in as one
    stage_dir = tmp_path / "release_stage"
    stage_dir.mkdir()
    (stage_dir / "actor").symlink_to(d / "release")
    for name, src in (("plain", d / "plain"), ("release", stage_dir)):
        outs[name, "critic"] = tmp_path / f"{name}_critic"
        _run(d, rollout, "critic_warmup", src, outs[name, "critic"])

    a = load_policy(outs["plain", "sft"] / "actor").state_dict()
    b = load_policy(outs["release", "sft"] / "actor").state_dict()
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    start = load_policy(d / "plain" / "actor").state_dict()
    assert any(not torch.equal(a[k], start[k]) for k in a)  # SFT moved the weights
    ca = Critic.from_pretrained(outs["plain", "critic"] / "critic").state_dict()
    cb = Critic.from_pretrained(outs["release", "critic"] / "critic").state_dict()
    assert all(torch.equal(ca[k], cb[k]) for k in ca)

    for stage, role in (("sft", "actor"), ("critic", "critic")):
        rec = json.loads((outs["release", stage] / "weights_load" / "rank_0.json").read_text())
        got = rec["roles"][role]
        assert got["files_opened"] == 3 and got["tensors_read"] > 0, got
        lm_head = VOCAB * Q35.hidden * 4 if role == "critic" else 0  # the critic skips it
        assert got["bytes_read"] == got["checkpoint_bytes"] - lm_head, got  # world size 1: all


def test_a_changed_release_tensor_changes_the_result(world, tmp_path):
    d, rollout = world
    _run(d, rollout, "sft", d / "release", tmp_path / "a")
    _run(d, rollout, "sft", d / "poked", tmp_path / "b")
    a = load_policy(tmp_path / "a" / "actor").state_dict()
    b = load_policy(tmp_path / "b" / "actor").state_dict()
    assert any(not torch.equal(a[k], b[k]) for k in a)

"""The tiny MoE policy and critic (t1/model/policy.py): config, deterministic init, safetensors round trip."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from t1.config import ModelConfig
from t1.model.policy import Critic, build_critic, build_policy, load_policy, save_policy

VOCAB = 512


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_policy_shape_follows_the_config():
    cfg = ModelConfig()
    model = build_policy(cfg, VOCAB, seed=0)
    c = model.config
    assert type(model).__name__ == "Qwen3MoeForCausalLM"
    assert (c.num_hidden_layers, c.hidden_size, c.num_experts, c.num_experts_per_tok) == (
        4,
        128,
        8,
        2,
    )
    assert c.vocab_size == VOCAB and c.norm_topk_prob and c.router_aux_loss_coef == 0.0
    assert c.sliding_window is None
    # ~2.8M parameters at the tiny tokenizer's 4096 ids (DESIGN §4).
    big = build_policy(cfg, 4096, seed=0)
    assert 2.5e6 < sum(p.numel() for p in big.parameters()) < 3.1e6


def test_init_is_deterministic_and_seed_dependent():
    a, b = build_policy(ModelConfig(), VOCAB, seed=3), build_policy(ModelConfig(), VOCAB, seed=3)
    assert _same(a, b)
    assert not _same(a, build_policy(ModelConfig(), VOCAB, seed=4))
    # The global RNG is left as it was.
    torch.manual_seed(0)
    x = torch.rand(1)
    torch.manual_seed(0)
    build_policy(ModelConfig(), VOCAB, seed=9)
    assert torch.equal(torch.rand(1), x)


def test_save_load_round_trip_is_exact(tmp_path):
    model = build_policy(ModelConfig(), VOCAB, seed=1)
    save_policy(model, tmp_path / "p")
    assert (tmp_path / "p" / "model.safetensors").exists()
    back = load_policy(tmp_path / "p")
    assert _same(model, back)
    ids = torch.randint(0, VOCAB, (1, 9))
    with torch.no_grad():
        assert torch.equal(model(ids).logits, back(ids).logits)
    # Saving again replaces the directory atomically; no temporary directories are left.
    save_policy(build_policy(ModelConfig(), VOCAB, seed=2), tmp_path / "p")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_policy(tmp_path / "missing")


def test_critic_values_and_round_trip(tmp_path):
    critic = build_critic(ModelConfig(), VOCAB, seed=0)
    ids = torch.randint(0, VOCAB, (2, 7))
    values = critic(ids)
    assert values.shape == (2, 7) and values.dtype == torch.float32
    critic.save_pretrained(tmp_path / "c")
    back = Critic.from_pretrained(tmp_path / "c")
    assert _same(critic, back)
    with torch.no_grad():
        assert torch.equal(critic(ids), back(ids))
    values.sum().backward()
    assert critic.value_head.weight.grad is not None


def test_critic_from_policy_shares_the_backbone():
    policy = build_policy(ModelConfig(), VOCAB, seed=0)
    critic = Critic.from_policy(policy)
    assert _same(critic.backbone, policy.model)


def test_qwen3_5_moe_option():
    try:
        model = build_policy(ModelConfig(arch="qwen3_5_moe"), VOCAB, seed=0)
    except (ImportError, RuntimeError) as e:
        pytest.skip(f"Qwen3.5 MoE unavailable in this transformers: {e}")
    assert type(model).__name__ == "Qwen3_5MoeForCausalLM"
    assert "linear_attention" in model.config.layer_types
    assert build_critic(ModelConfig(arch="qwen3_5_moe"), VOCAB)(
        torch.tensor([[1, 2, 3]])
    ).shape == (1, 3)


def test_init_policy_command(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run: {seed: 5}\n")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "t1.cli",
            "init-policy",
            "--config",
            str(cfg),
            "--out",
            str(tmp_path / "p"),
            "--vocab-size",
            "300",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert info["vocab"] == 300 and info["kind"] == "policy"
    assert _same(load_policy(tmp_path / "p"), build_policy(ModelConfig(), 300, seed=5))

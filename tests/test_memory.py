"""The memory planner: parameter counts, the 122B layout search, the CLI, and the tiny model's
predicted vs measured peak memory on this CPU."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from t1.config import Config, ModelConfig
from t1.model import memory_breakdown
from t1.model.memory import search
from t1.model.memory_breakdown import Layout, plan
from t1.model.memory_spec import QWEN35_122B, tiny_spec
from t1.train import plan_memory


def test_122b_parameter_count_matches_the_paper():
    p = QWEN35_122B.param_counts()
    assert abs(p["total"] / 121.4e9 - 1) < 0.01, p["total"]
    assert abs(p["experts"] / 116.0e9 - 1) < 0.01, p["experts"]


def test_counts_equal_the_real_models():
    # Qwen3.5 family (linear + gated full attention, shared expert): HF's own module, built on
    # the meta device with 4 of the 48 layers (the per-layer formulas are what is checked).
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    s = dataclasses.replace(QWEN35_122B, layers=4)
    cfg = Qwen3_5MoeTextConfig(
        vocab_size=s.vocab, hidden_size=s.hidden, num_hidden_layers=s.layers, num_attention_heads=s.heads,
        num_key_value_heads=s.kv_heads, head_dim=s.head_dim, num_experts=s.experts, num_experts_per_tok=s.top_k,
        moe_intermediate_size=s.expert_ffn, shared_expert_intermediate_size=s.shared_expert_ffn,
        linear_num_key_heads=s.linear_key_heads, linear_num_value_heads=s.linear_value_heads,
        linear_key_head_dim=s.linear_key_dim, linear_value_head_dim=s.linear_value_dim,
        linear_conv_kernel_dim=s.linear_conv_kernel, full_attention_interval=s.full_attention_interval,
        tie_word_embeddings=False,
    )  # fmt: skip
    with torch.device("meta"):
        model = Qwen3_5MoeForCausalLM(cfg)
    assert sum(p.numel() for p in model.parameters()) == s.param_counts()["total"]
    # The tiny policy and critic as t1.model.policy builds them.
    from t1.model.policy import Critic, build_policy

    c = Config(model=ModelConfig(layers=2))
    spec = tiny_spec(c)
    policy = build_policy(c.model, c.tokenizer.vocab_size)
    assert sum(p.numel() for p in policy.parameters()) == spec.param_counts()["total"]
    critic = Critic.from_policy(policy)
    assert sum(p.numel() for p in critic.parameters()) == spec.param_counts()["critic_total"]


def test_122b_fits_8xh200_nodes_within_95_gib_per_role():
    r = search(QWEN35_122B, gpus_per_node=8, gpu_mem_gib=141, budget_gib=95)
    assert r["fits"]
    assert r["actor_gib"] <= 95 and r["critic_gib"] <= 95
    lay = r["layout"]
    assert lay["world"] % 8 == 0 and lay["tp"] * lay["pp"] * lay["dp"] == lay["world"]
    # The breakdown adds up, and the actor carries the logits the critic does not.
    for role in ("actor", "critic"):
        b = r["breakdown"][role]
        assert b["total"] == pytest.approx(sum(b[k] for k in memory_breakdown.ITEMS), abs=0.01)
    assert r["breakdown"]["critic"]["logits"] == 0 < r["breakdown"]["actor"]["logits"]


def test_more_parallelism_and_recompute_lower_memory():
    base = Layout(nodes=4, gpus_per_node=8, tp=2, pp=2, ep=8, recompute="none")
    a = plan(QWEN35_122B, base)["actor_gib"]
    assert plan(QWEN35_122B, dataclasses.replace(base, ep=16))["actor_gib"] < a
    assert plan(QWEN35_122B, dataclasses.replace(base, recompute="selective"))["actor_gib"] < a
    assert (
        plan(QWEN35_122B, dataclasses.replace(base, recompute="full"))["actor_gib"]
        < plan(QWEN35_122B, dataclasses.replace(base, recompute="selective"))["actor_gib"]
    )
    assert plan(QWEN35_122B, dataclasses.replace(base, dist_opt=False))["actor_gib"] > a
    assert not memory_breakdown.valid(QWEN35_122B, dataclasses.replace(base, tp=4))  # 2 KV heads


def test_cli_json_keys_and_exit_codes(tmp_path, capsys):
    import argparse

    parser = argparse.ArgumentParser()
    plan_memory.add_arguments(parser)
    out = tmp_path / "plan.json"
    args = parser.parse_args(
        [
            "--preset",
            "qwen3.5-122b-a10b",
            "--gpus-per-node",
            "8",
            "--gpu-mem-gib",
            "141",
            "--budget-gib",
            "95",
            "--json",
            str(out),
        ]
    )
    assert plan_memory.main(args) == 0
    data = json.loads(out.read_text())
    assert {"layout", "actor_gib", "critic_gib", "fits"} <= set(data) and data["fits"] is True
    assert "weights" in capsys.readouterr().out
    args = parser.parse_args(
        [
            "--preset",
            "qwen3.5-122b-a10b",
            "--gpus-per-node",
            "8",
            "--gpu-mem-gib",
            "141",
            "--budget-gib",
            "95",
            "--max-nodes",
            "1",
        ]
    )
    assert plan_memory.main(args) == 1  # one node is not enough


@pytest.mark.slow
def test_tiny_prediction_within_20_percent_of_measured_peak():
    from t1.bench.train import bench_memory

    r = bench_memory(None, rows=2, seq=512)
    for role in ("actor", "critic"):
        ratio = r[role]["predicted_over_measured"]
        assert 0.8 <= ratio <= 1.2, (role, r[role])

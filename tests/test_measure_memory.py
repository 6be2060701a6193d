"""`t1 plan-memory --measure`: the trainer's real megatron-core models measured under a fake
process group + FakeTensorMode (t1/train/megatron/measure.py).

    .venv/bin/pytest tests/test_measure_memory.py -q            # fast part
    .venv/bin/pytest tests/test_measure_memory.py -q -m slow    # the 122B preset (~2 min)
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from t1.config import Config, ModelConfig, load_config
from t1.train.megatron.runtime import available

pytestmark = pytest.mark.skipif(not available()[0], reason="megatron-core not importable")
REPO = Path(__file__).resolve().parents[1]
PRESET = REPO / "workflow/config/qwen3.5-122b-a10b.yaml"
TINY = ModelConfig(
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
    train_dtype="bfloat16",
)


def tiny_cfg(gpus: int, tp: int, pp: int, ep: int, etp: int = 1) -> Config:
    c = Config()
    return dataclasses.replace(
        c,
        model=TINY,
        tokenizer=dataclasses.replace(c.tokenizer, vocab_size=250),
        train=dataclasses.replace(
            c.train,
            backend="megatron",
            gpus=gpus,
            tensor_parallel=tp,
            pipeline_parallel=pp,
            expert_parallel=ep,
            expert_tensor_parallel=etp,
        ),
    )


def _real_rank_bytes(cfg: Config, role: str, rank: int) -> tuple[int, list]:
    """The same rank's model built for real (materialized CPU tensors) under the fake PG."""
    from t1.train.megatron import measure as MM
    from t1.train.megatron import model as M

    t = cfg.train
    lay = {
        "tp": t.tensor_parallel,
        "pp": t.pipeline_parallel,
        "ep": t.expert_parallel,
        "etp": t.expert_tensor_parallel,
    }
    with MM._patched(MM._cuda_shims()):
        MM._init(t.gpus, rank, lay)
        try:
            hc = MM.hf_config_of(cfg)
            tc = M.transformer_config(
                hc, dtype=torch.bfloat16, dispatcher="allgather", deterministic=False
            )
            model = (M.build_actor if role == "actor" else M.build_critic)(tc, hc)
            shapes = sorted((n, tuple(p.shape)) for n, p in model.named_parameters())
            assert all(not p.is_meta and type(p.data) is torch.Tensor for p in model.parameters())
            return sum(p.numel() * p.element_size() for p in model.parameters()), shapes
        finally:
            MM._teardown()


@pytest.mark.parametrize("role", ["actor", "critic"])
def test_fake_build_equals_real_model_bytes(role):
    """Measured parameter bytes (fake build) == the real CPU model's, rank by rank, at
    TP 2 / PP 2 / EP 2 on 8 ranks; and the per-rank shard is smaller than the whole."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from t1.train.megatron import measure as MM

    warnings.filterwarnings("ignore")
    cfg = tiny_cfg(8, tp=2, pp=2, ep=2)
    for stage in (0, 1):
        r = MM.measure_rank(cfg, role, stage, tokens=0)
        real, real_shapes = _real_rank_bytes(cfg, role, r["rank"])
        assert r["bytes"]["weights"] == real
        assert r["params"] * 2 == real  # bf16
        with MM._patched(MM._cuda_shims()):
            MM._init(8, r["rank"], {"tp": 2, "pp": 2, "ep": 2, "etp": 1})
            try:
                fake, _ = MM.build_fake(cfg, role, FakeTensorMode(allow_non_fake_inputs=True))
                assert (
                    sorted((n, tuple(p.shape)) for n, p in fake.named_parameters()) == real_shapes
                )
            finally:
                MM._teardown()
    whole = MM.measure_rank(tiny_cfg(1, 1, 1, 1), role, 0, tokens=0)
    assert r["params"] < whole["params"]


@pytest.mark.slow
def test_measure_tiny_whole():
    """The whole measure runs at a small layout (activations measured, both roles and stages,
    co-resident peak, the planner beside it)."""
    from t1.train.megatron.measure import measure

    warnings.filterwarnings("ignore")
    res = measure(tiny_cfg(8, tp=2, pp=2, ep=2), tokens=128)
    for role in ("actor", "critic"):
        b = res["roles"][role]["breakdown_gib"]
        assert b["activations_peak"] > 0 and b["weights"] > 0
        assert res["coresident"]["phase_peak_gib"][role] >= res["roles"][role]["peak_gib"]
    assert res["planned_gib"] is not None


def test_negative_control_tp_halved():
    """Halving TP raises the measured per-rank weights and activations."""
    from t1.train.megatron.measure import measure_rank

    warnings.filterwarnings("ignore")
    tp2 = measure_rank(tiny_cfg(8, tp=2, pp=1, ep=2), "actor", 0, tokens=128)
    tp1 = measure_rank(tiny_cfg(8, tp=1, pp=1, ep=2), "actor", 0, tokens=128)
    assert tp1["bytes"]["weights"] > tp2["bytes"]["weights"]
    assert tp1["bytes"]["activations_peak"] > tp2["bytes"]["activations_peak"]


def test_cli_measure_help_and_planner_still_requires_preset():
    from t1.cli import main

    assert main(["plan-memory", "--gpus-per-node", "8"]) == 2


@pytest.mark.slow
def test_preset_measure(tmp_path):
    """The 122B preset at its own layout (TP 2, PP 2, EP 16, 32 GPUs): params / grads /
    optimizer match the planner's; the verdict is the exit code."""
    import json

    out = tmp_path / "m.json"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "t1.cli",
            "plan-memory",
            "--measure",
            "--config",
            str(PRESET),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    res = json.loads(out.read_text())
    assert p.returncode == (0 if res["fits"] else 1), p.stderr[-2000:]
    cfg = load_config(PRESET)
    plan = res["planned_gib"]["breakdown"]
    for role in ("actor", "critic"):
        stage0 = res["roles"][role]["stages"][0]["bytes"]
        for item in ("weights", "grads"):
            assert stage0[item] == pytest.approx(plan[role][item], rel=0.01)
        # train.optimizer_offload: the state waits on the host; the step (weights, gradients,
        # optimizer state, reserve; no activations) is the planner's figure for the role
        assert cfg.train.optimizer_offload
        step = res["roles"][role]["phases_gib"]["optimizer_step"]
        assert step == pytest.approx(plan[role]["total"], rel=0.01)
        fwd_bwd = res["roles"][role]["phases_gib"]["forward_backward"]
        assert res["roles"][role]["peak_gib"] == pytest.approx(max(step, fwd_bwd), abs=1e-3)
    peak = res["coresident"]["peak_gib"]
    assert res["fits"] == (peak <= cfg.train.gpu_budget_gib)

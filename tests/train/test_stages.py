"""`t1 train` stages end to end on trajectories the local engine really generated."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch
import yaml

from t1.agent.trajectory import Status, Trajectory, Turn, save_trajectory
from t1.config import load_config
from t1.model.policy import Critic, build_policy, load_policy, save_policy
from t1.store.metrics_log import read_events
from t1.train import cli

VOCAB = 256
MODEL = {
    "layers": 2,
    "hidden": 64,
    "heads": 4,
    "kv_heads": 2,
    "head_dim": 16,
    "intermediate": 128,
    "expert_intermediate": 32,
    "experts": 8,
    "top_k": 2,
}


def _config(tmp_path, **over):
    data = {
        "run": {"threads": 2, "seed": 0},
        "tokenizer": {"vocab_size": VOCAB},
        "model": MODEL,
        "engine": {"max_new_tokens": 6},
        "ppo": {"minibatch": 2, "actor_lr": 1e-3, "critic_lr": 1e-3},
        "sft": {"epochs": 2, "batch": 2, "save_every": 1, "lr": 1e-3},
        "critic_warmup": {"batch": 2, "recalibration_rollouts": 1, "save_every": 1},
    }
    for k, v in over.items():
        data[k].update(v)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _rollout(cfg_path, policy_dir, out, n=4, turns=2, seed=0):
    """Multi-turn trajectories from the local engine: real sampled ids, logprobs, routing."""
    from t1.engine.base import GenerateRequest, SamplingParams
    from t1.engine.local import LocalEngine

    cfg = load_config(cfg_path)
    engine = LocalEngine.from_config(cfg, policy_dir)
    rng = np.random.default_rng(seed)
    for i in range(n):
        prompt = rng.integers(10, VOCAB, 12).tolist()
        tt, start = [], 0
        for t in range(turns):
            res = engine.generate(
                [
                    GenerateRequest(
                        prompt,
                        SamplingParams(max_new_tokens=6, seed=seed * 100 + i * 10 + t),
                        session_id=f"s{i}",
                        routing_start=start,
                    )
                ]
            )[0]
            appended = rng.integers(10, VOCAB, 5).tolist() if t < turns - 1 else []
            tt.append(
                Turn(prompt, res.output_ids, res.output_logprobs, res.routing, start, appended)
            )
            start = len(prompt) + len(res.output_ids) - 1
            prompt = prompt + res.output_ids + appended
        resolved = i % 2 == 0
        meta = {
            "category": "files" if i % 2 else "net",
            "resolved": resolved,
            "passed": i,
            "total": 3,
        }
        traj = Trajectory(
            task_id=f"task{i}", status=Status.COMPLETED, turns=tt, reward=i / 3, metadata=meta
        )
        save_trajectory(traj, out / "trajectories" / f"{i:04d}-task{i}")
    failed = Trajectory(task_id="broken", status=Status.FAILED, turns=[], reason="sandbox")
    save_trajectory(failed, out / "trajectories" / "9999-broken")
    (out / "rollout.json").write_text(
        json.dumps({"launched": n + 2, "admitted": n + 1, "dropped": 1})
    )
    return out


def _args(cfg, stage, inputs, source, out, critic=None, max_steps=None):
    return argparse.Namespace(
        config=cfg,
        stage=stage,
        inputs=[str(inputs)],
        source=str(source),
        out=str(out),
        critic=critic,
        tokenizer=None,
        max_steps=max_steps,
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stages")
    cfg = _config(tmp)
    c = load_config(cfg)
    policy_dir = save_policy(build_policy(c.model, VOCAB, seed=0), tmp / "policy")
    rollout = _rollout(cfg, policy_dir, tmp / "rollout")
    return {"tmp": tmp, "cfg": cfg, "policy": policy_dir, "rollout": rollout}


def _weights(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_sft_resumes_bit_exactly_and_marks_done(world):
    tmp, cfg = world["tmp"], world["cfg"]
    full, part = tmp / "sft_full", tmp / "sft_part"
    assert cli.main(_args(cfg, "sft", world["rollout"], world["policy"], full)) == 0
    assert json.loads((full / "DONE.json").read_text())["status"] == "complete"
    # Interrupted after one step, then resumed: the same weights as the uninterrupted run.
    assert cli.main(_args(cfg, "sft", world["rollout"], world["policy"], part, max_steps=1)) == 0
    assert not (part / "DONE.json").exists() and (part / "ckpt" / "step_00000001").is_dir()
    assert cli.main(_args(cfg, "sft", world["rollout"], world["policy"], part)) == 0
    a, b = load_policy(full / "actor").state_dict(), load_policy(part / "actor").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    init = load_policy(world["policy"]).state_dict()
    assert any(not torch.equal(a[k], init[k]) for k in a)
    steps = read_events(full, "sft_step")
    assert (
        len(steps) == 4 and steps[-1]["loss"] < steps[0]["loss"] + 1.0
    )  # 4 rows, batch 2, 2 epochs
    assert cli.main(_args(cfg, "sft", world["rollout"], world["policy"], full)) == 0  # DONE: no-op


def test_the_warm_up_target_is_the_outcome_on_the_runs_reward_scale(world):
    """A resolved trajectory's target is what the run's reward paid it (a resolved family task
    earns 2/3 at the tiny config's scale 3, not 1), an unresolved one's 0: the dense campaign
    then meets a critic on its own scale, where 2 re-calibration steps of 16 trajectories could
    not bring a critic that predicts 1 for every resolved task (LOG.md, 2026-12-06)."""
    from t1.train.data import load_rows

    rows, _ = load_rows([world["rollout"]], None, reward="binary")
    got = {r.meta["task_id"]: r.reward for r in rows if "status" in r.meta}
    # _rollout: task i earned i/3 and is resolved when i is even
    assert got == {"task0": 0.0, "task1": 0.0, "task2": pytest.approx(2 / 3), "task3": 0.0}
    rows, _ = load_rows([world["rollout"]], None, reward="trajectory")
    got = {r.meta["task_id"]: r.reward for r in rows if "status" in r.meta}
    assert got == pytest.approx({f"task{i}": i / 3 for i in range(4)})


def test_warmup_then_recalibration_then_policy_steps(world):
    tmp, cfg = world["tmp"], world["cfg"]
    sft = tmp / "sft_full"
    if not (sft / "DONE.json").exists():
        assert cli.main(_args(cfg, "sft", world["rollout"], world["policy"], sft)) == 0
    warm = tmp / "warm"
    assert cli.main(_args(cfg, "critic_warmup", world["rollout"], sft, warm)) == 0
    assert (warm / "critic").is_dir() and not (warm / "actor").exists()
    ev = read_events(warm, "critic_warmup_step")
    assert ev and all("explained_variance" in e for e in ev)
    # First PPO step: warm critic loaded, re-calibration only (the actor is the SFT actor).
    s1, s2 = tmp / "ppo1", tmp / "ppo2"
    assert cli.main(_args(cfg, "ppo", world["rollout"], sft, s1, critic=str(warm))) == 0
    m1 = read_events(s1, "ppo_step")[0]
    assert m1["actor_updated"] is False and m1["critic_start"] == "warm" and m1["step"] == 0
    assert m1["oversampling_launched"] == 6 and m1["by_status"] == {"COMPLETED": 4, "FAILED": 1}
    a_sft, a1 = load_policy(sft / "actor").state_dict(), load_policy(s1 / "actor").state_dict()
    assert all(torch.equal(a_sft[k], a1[k]) for k in a_sft)
    w = Critic.from_pretrained(warm / "critic").state_dict()
    c1 = Critic.from_pretrained(s1 / "critic").state_dict()
    assert any(not torch.equal(w[k], c1[k]) for k in w)
    # Second step (--critic is ignored now): a policy step.
    assert cli.main(_args(cfg, "ppo", world["rollout"], s1, s2, critic=str(warm))) == 0
    m2 = read_events(s2, "ppo_step")[0]
    assert m2["actor_updated"] is True and m2["step"] == 1
    for k in (
        "gap",
        "gap_ema",
        "explained_variance",
        "value_loss",
        "policy_loss",
        "clip_fraction",
        "entropy",
        "reward_mean",
        "resolved_rate",
        "placeholder_rate",
        "tokens_per_s",
    ):
        assert m2.get(k) is not None, k
    assert m2["resolved_by_category"] == {"files": 0.0, "net": 1.0}
    # TITO invariants seen from the trainer: no drift, no placeholder inside the loss region
    # (the final position of a segment excepted: engines never capture it).
    assert m2["drift_rate"] == 0 and m2["placeholders_in_loss"] == 0 and m2["placeholder_rate"] > 0
    assert m2["gap_ema"] == pytest.approx(0.25 * m2["gap"] + 0.75 * m1["gap_ema"])
    a2 = load_policy(s2 / "actor").state_dict()
    assert any(not torch.equal(a1[k], a2[k]) for k in a1)


def test_ppo_cold_start_and_crash_after_state_write(world):
    tmp, cfg = world["tmp"], world["cfg"]
    sft = tmp / "sft_full"
    if not (sft / "DONE.json").exists():
        assert cli.main(_args(cfg, "sft", world["rollout"], world["policy"], sft)) == 0
    cold = tmp / "cold"
    assert cli.main(_args(cfg, "ppo", world["rollout"], sft, cold)) == 0
    m = read_events(cold, "ppo_step")[0]
    assert m["critic_start"] == "cold" and m["actor_updated"] is True
    # A crash between trainer.pt and DONE.json: the rerun rewrites weights and DONE only.
    (cold / "DONE.json").unlink()
    actor_before = load_policy(cold / "actor").state_dict()
    import shutil

    shutil.rmtree(cold / "actor")
    assert cli.main(_args(cfg, "ppo", world["rollout"], sft, cold)) == 0
    after = load_policy(cold / "actor").state_dict()
    assert all(torch.equal(actor_before[k], after[k]) for k in after)
    assert len(read_events(cold, "ppo_step")) == 1

"""The megatron trainer against the hf trainer: one PPO step's loss and gradients, checkpoint
state, HF export, the plan check, and `t1 train --stage ppo` with train.backend megatron.

    pytest tests/megatron/test_megatron_trainer.py -q
"""

from __future__ import annotations

import argparse
import copy
import json

import numpy as np
import pytest
import torch
import yaml
from megatron_helpers import MODEL, VOCAB, make_models, make_rows

from t1.config import Config, PPOConfig, TrainConfig, load_config
from t1.ppo.losses import policy_loss
from t1.train.batch import collate
from t1.train.hf import HFTrainer
from t1.train.megatron import convert as C
from t1.train.step import ppo_step


def _pair(seed=0, **kw):
    from t1.train.megatron.trainer import MegatronTrainer

    a1, c1 = make_models(seed)
    a2, c2 = make_models(seed)
    args = dict(actor_lr=1e-3, critic_lr=1e-3, seed=seed, **kw)
    return HFTrainer(a1, c1, **args), MegatronTrainer(a2, c2, **args)


def _grads(tr, kind):
    model = getattr(tr, kind)
    g = {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}
    if isinstance(tr, HFTrainer):
        return g
    return C.mcore_to_hf(g, tr.hf_config, kind)


def test_one_actor_update_loss_and_gradients_agree_with_hf():
    hf, mg = _pair()
    batch = collate(make_rows(hf.actor))
    old = hf.actor_forward(batch).logp
    adv = torch.randn(batch.input_ids.shape, generator=torch.Generator().manual_seed(3))

    def loss_fn(logp, b):
        loss = policy_loss(logp, old[:, : logp.shape[1]], adv[:, : logp.shape[1]], b.loss_mask, 0.2)
        return loss, {"policy_loss": float(loss.detach())}

    m1, m2 = hf.actor_update(batch, loss_fn), mg.actor_update(batch, loss_fn)
    assert abs(m1["policy_loss"] - m2["policy_loss"]) < 1e-6
    assert abs(m1["grad_norm"] - m2["grad_norm"]) < 1e-5 * max(1.0, m1["grad_norm"])
    g1, g2 = _grads(hf, "actor"), _grads(mg, "actor")
    assert set(g1) == set(g2)
    err = max((g1[k] - g2[k]).abs().max().item() for k in g1)
    scale = max(g.abs().max().item() for g in g1.values())
    assert err < 1e-4 * scale, (err, scale)
    # the router weights got gradients under replay (the softmax stays live)
    assert g2["model.layers.0.mlp.gate.weight"].abs().sum() > 0


def test_replay_off_changes_the_gradients():
    """The guard above can fail: without replay on the megatron side the losses part ways."""
    hf, mg = _pair(replay=True)
    mg.replay = False
    batch = collate(make_rows(hf.actor))
    a = hf.actor_forward(batch).logp
    b = mg.actor_forward(batch).logp
    assert (a - b).abs().max().item() > 1e-3
    # and the routing check sees it: every compared position not routed as recorded
    assert mg.routing_check["replay_mismatch"] == mg.routing_check["live_mismatch"] > 0


def test_ppo_step_metrics_and_weights_agree_with_hf():
    hf, mg = _pair()
    batch = collate(make_rows(hf.actor))
    cfg = PPOConfig(minibatch=2, epochs=1)
    w0 = {kind: {k: v.clone() for k, v in getattr(hf, kind).state_dict().items()}
          for kind in ("actor", "critic")}  # fmt: skip
    m1, m2 = ppo_step(hf, batch, cfg), ppo_step(mg, batch, cfg)
    assert set(m1) == set(m2)
    for k in ("gap", "explained_variance", "value_loss", "policy_loss", "entropy", "clip_fraction"):
        assert abs(m1[k] - m2[k]) < 1e-4, (k, m1[k], m2[k])
    # the routing check: same positions, same live mismatch, and replay leaves none
    assert m2["routing_positions"] == m1["routing_positions"] > 0
    assert m2["routing_live_mismatch"] == m1["routing_live_mismatch"] > 0
    assert m2["routing_replay_mismatch"] == m1["routing_replay_mismatch"] == 0
    for kind in ("actor", "critic"):
        w1, w2 = getattr(hf, kind).state_dict(), mg.hf_state(kind)
        # each tensor against its own update, as in test_train_stage_ppo_with_the_megatron_backend:
        # Adam's first steps are O(lr) per element whatever the gradient, so an element whose
        # gradient is near eps moves by its fp32 rounding (an absolute 1e-5 held on AVX-512 and
        # measured 1.18e-5 on an AVX2 CPU; the worst ratio there is printed on failure)
        worst = max(
            ((w1[k] - w2[k]).abs().max() / (w1[k] - w0[kind][k]).abs().max().clamp_min(1e-12), k)
            for k in w2
        )
        assert worst[0] < 0.05, (kind, worst)
    assert hf.calls is None and mg.counters == hf.counters


def test_state_round_trip_resumes_bit_identically(tmp_path):
    _, mg = _pair()
    batch = collate(make_rows(mg.hf_actor))
    cfg = PPOConfig(minibatch=2)
    ppo_step(mg, batch, cfg)
    state = copy.deepcopy(mg.state_dict())  # as from disk: no tensor shared with mg
    _, mg2 = _pair(seed=0)
    mg2.load_state_dict(state)
    a, b = ppo_step(mg, batch, cfg), ppo_step(mg2, batch, cfg)
    assert a["policy_loss"] == b["policy_loss"] and a["value_loss"] == b["value_loss"]
    s1, s2 = mg.hf_state("actor"), mg2.hf_state("actor")
    assert all(torch.equal(s1[k], s2[k]) for k in s1)
    with pytest.raises(ValueError, match="another train.backend"):
        mg2.load_state_dict({**state, "backend": "hf"})
    mg.save_weights(tmp_path)
    from t1.model.policy import Critic, load_policy

    exported = load_policy(tmp_path / "actor").state_dict()
    assert all(torch.equal(exported[k], s1[k]) for k in s1)
    critic = Critic.from_pretrained(tmp_path / "critic").state_dict()
    assert all(torch.equal(critic[k], v) for k, v in mg.hf_state("critic").items())


def test_offload_moves_the_idle_role_in_turn():
    """The schedule (the compute device is a label here: this machine has no GPU), then a real
    in-place move that keeps the optimizer's Parameter objects."""
    from t1.train.megatron.trainer import Residency, move_role

    ms = {"actor": (torch.nn.Linear(2, 2), None), "critic": (torch.nn.Linear(2, 1), None)}
    r = Residency(torch.device("cuda"), offload=True, move=lambda *a: None)
    r.use("critic", ms)
    r.use("critic", ms)  # nothing moves twice
    r.use("actor", ms)
    assert r.moves == [("actor", "cpu"), ("critic", "cuda"), ("actor", "cuda"), ("critic", "cpu")]
    keep = Residency(torch.device("cuda"), offload=False, move=lambda *a: None)
    keep.use("critic", ms)
    keep.use("actor", ms)
    assert keep.moves == [("actor", "cuda"), ("critic", "cuda")]
    lin = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(lin.parameters())
    lin(torch.ones(1, 4)).sum().backward()
    opt.step()
    w = lin.weight
    move_role(lin, opt, torch.device("cpu"))
    assert lin.weight is w and "exp_avg" in opt.state[lin.weight]


def test_plan_check_refuses_hf_for_the_122b_preset_and_accepts_tiny():
    from t1.train.megatron.plan import PlanError, check_plan

    big = load_config("workflow/config/qwen3.5-122b-a10b.yaml")
    assert big.train.backend == "megatron"
    hf_big = Config(**{**big.__dict__, "train": TrainConfig(backend="hf")})
    with pytest.raises(PlanError, match="needs train.backend megatron"):
        check_plan(hf_big)
    tiny = load_config("workflow/config/tiny.yaml")
    assert check_plan(tiny)["actor_gib"] < tiny.train.gpu_budget_gib
    tight = Config(
        **{**tiny.__dict__, "train": TrainConfig(backend="megatron", gpu_budget_gib=0.01)}
    )
    with pytest.raises(PlanError, match="the actor needs"):
        check_plan(tight)
    with pytest.raises(ValueError, match="hf or megatron"):
        check_plan(Config(**{**tiny.__dict__, "train": TrainConfig(backend="jax")}))


def test_plan_check_holds_actor_and_critic_co_resident():
    """Both roles on the same GPUs: without offload they must fit the GPU together; with it the
    larger alone (the preset turns it on)."""
    import dataclasses

    from t1.train.megatron.plan import PlanError, check_plan

    assert load_config("workflow/config/qwen3.5-122b-a10b.yaml").train.offload
    tiny = load_config("workflow/config/tiny.yaml")

    def cfg(offload: bool, gpu: float) -> Config:
        train = TrainConfig(backend="megatron", offload=offload)
        return Config(
            **{
                **tiny.__dict__,
                "train": train,
                "campaign": dataclasses.replace(tiny.campaign, gpu_mem_gib=gpu),
            }
        )

    both = check_plan(cfg(False, 0.0))
    assert both["co_resident_gib"] == pytest.approx(both["actor_gib"] + both["critic_gib"])
    one = check_plan(cfg(True, 0.0))
    assert one["co_resident_gib"] == pytest.approx(max(one["actor_gib"], one["critic_gib"]))
    gpu = (both["co_resident_gib"] + one["co_resident_gib"]) / 2  # fits one role, not both
    assert check_plan(cfg(True, gpu))["co_resident_gib"] < gpu
    with pytest.raises(PlanError, match="set train.offload: true"):
        check_plan(cfg(False, gpu))


# ---------------------------------------------------------------- the PPO stage, both backends


def _stage_world(tmp):
    from t1.agent.trajectory import Status, Trajectory, Turn, save_trajectory
    from t1.engine.base import GenerateRequest, SamplingParams
    from t1.engine.local import LocalEngine
    from t1.model.policy import build_policy, save_policy

    data = {
        "run": {"threads": 2, "seed": 0},
        "tokenizer": {"vocab_size": VOCAB},
        "model": {
            k: getattr(MODEL, k)
            for k in (
                "layers",
                "hidden",
                "heads",
                "kv_heads",
                "head_dim",
                "intermediate",
                "expert_intermediate",
                "experts",
                "top_k",
            )
        },
        "engine": {"max_new_tokens": 6},
        "ppo": {"minibatch": 2, "actor_lr": 1e-3, "critic_lr": 1e-3, "device": "cpu"},
    }
    paths = {}
    for backend in ("hf", "megatron"):
        p = tmp / f"{backend}.yaml"
        p.write_text(yaml.safe_dump({**data, "train": {"backend": backend}}))
        paths[backend] = str(p)
    cfg = load_config(paths["hf"])
    sft = tmp / "sft"
    save_policy(build_policy(cfg.model, VOCAB, seed=0), sft / "actor")
    engine = LocalEngine.from_config(cfg, sft / "actor")
    rng = np.random.default_rng(0)
    out = tmp / "rollout"
    for i in range(4):
        prompt = rng.integers(10, VOCAB, 12).tolist()
        res = engine.generate([GenerateRequest(prompt, SamplingParams(max_new_tokens=6, seed=i))])[
            0
        ]
        turn = Turn(prompt, res.output_ids, res.output_logprobs, res.routing, 0, [])
        traj = Trajectory(
            task_id=f"task{i}",
            status=Status.COMPLETED,
            turns=[turn],
            reward=i / 3,
            metadata={"resolved": i % 2 == 0},
        )
        save_trajectory(traj, out / "trajectories" / f"{i:04d}-task{i}")
    (out / "rollout.json").write_text(json.dumps({"launched": 4, "admitted": 4, "dropped": 0}))
    return paths, sft, out


def _args(cfg, inputs, source, out):
    return argparse.Namespace(
        config=cfg,
        stage="ppo",
        inputs=[str(inputs)],
        source=str(source),
        out=str(out),
        critic=None,
        tokenizer=None,
        max_steps=None,
    )


@pytest.mark.slow
def test_train_stage_ppo_with_the_megatron_backend(tmp_path):
    from t1.model.policy import load_policy
    from t1.store.metrics_log import read_events
    from t1.train import cli

    paths, sft, rollout = _stage_world(tmp_path)
    outs = {}
    for backend in ("hf", "megatron"):
        outs[backend] = tmp_path / f"ppo_{backend}"
        assert cli.main(_args(paths[backend], rollout, sft, outs[backend])) == 0
    ev = {b: read_events(o, "ppo_step")[0] for b, o in outs.items()}
    assert set(ev["hf"]) == set(ev["megatron"])
    assert abs(ev["hf"]["policy_loss"] - ev["megatron"]["policy_loss"]) < 1e-4
    a = load_policy(outs["hf"] / "actor").state_dict()
    b = load_policy(outs["megatron"] / "actor").state_dict()
    s = load_policy(sft / "actor").state_dict()
    # Adam divides by sqrt(v) + eps: an element whose gradient is near eps takes an O(lr) step
    # whose size follows its fp32 rounding, so compare each tensor to its own update (measured:
    # worst 1.2 % of the update, an expert down_proj; a wrong weight or head is ~100 %)
    worst = max((a[k] - b[k]).abs().max() / (a[k] - s[k]).abs().max().clamp_min(1e-12) for k in a)
    assert worst < 0.05, worst
    # a second step resumes the megatron checkpoint of the first
    nxt = tmp_path / "ppo_megatron_2"
    assert cli.main(_args(paths["megatron"], rollout, outs["megatron"], nxt)) == 0
    assert read_events(nxt, "ppo_step")[0]["step"] == 1

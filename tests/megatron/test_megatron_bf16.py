"""bf16 training through megatron-core's mixed-precision optimizer (fp32 main weights).

    pytest tests/megatron/test_megatron_bf16.py -q

At lr 1e-6 one Adam step moves each weight by about 1e-6, below the spacing of bf16 around
the weights: megatron-core's DistributedOptimizer keeps fp32 main weights that do move, while
the negative control (torch AdamW directly on the bf16 parameters, same gradients) leaves most
bf16 weights exactly as they were. Runs at world size 1 with the CPU shims (cpu_shim.py,
optim_shim.py).
"""

from __future__ import annotations

import copy

import pytest
import torch
from megatron_helpers import make_models, make_rows

from t1.config import PPOConfig
from t1.ppo.losses import policy_loss
from t1.train.batch import collate
from t1.train.hf import adamw
from t1.train.step import ppo_step

LR = 1e-6


@pytest.fixture(autouse=True)
def _optim_shim():
    import optim_shim

    optim_shim.install()


def _bf16_trainer(seed=0, **kw):
    from t1.train.megatron.trainer import MegatronTrainer

    actor, critic = (m.to(torch.bfloat16) for m in make_models(seed))
    return MegatronTrainer(actor, critic, actor_lr=LR, critic_lr=LR, seed=seed, **kw)


def _loss_fn(batch):
    adv = torch.linspace(-1, 1, batch.input_ids.numel()).reshape(batch.input_ids.shape)

    def loss_fn(logp, b):
        loss = policy_loss(logp, logp.detach(), adv[:, : logp.shape[1]], b.loss_mask, 0.2)
        return loss, {"policy_loss": float(loss.detach())}

    return loss_fn


def test_bf16_step_at_lr_1e6_moves_the_fp32_main_weights_where_bf16_adam_rounds_away():
    from t1.train.megatron.main_weights import MainWeightsAdam

    tr = _bf16_trainer()
    assert tr.mixed and isinstance(tr.actor_opt, MainWeightsAdam)
    # the matrices are bf16 (megatron-core's torch norms keep fp32 weights without TE / Apex)
    assert all(p.dtype == torch.bfloat16 for p in tr.actor.parameters() if p.dim() >= 2)
    main0 = [p.detach().clone() for p in tr.actor_opt.main_params()]
    assert main0 and all(p.dtype == torch.float32 for p in main0)
    bf0 = {k: p.detach().clone() for k, p in tr.actor.named_parameters()}
    batch = collate(make_rows(tr.hf_actor.float(), n=2))
    m = tr.actor_update(batch, _loss_fn(batch))
    assert m["grad_norm"] > 0 and torch.isfinite(torch.tensor(m["grad_norm"]))
    # the fp32 main weights moved, by about lr per element (Adam's first step: |m / sqrt v| = 1)
    main1 = tr.actor_opt.main_params()
    delta = torch.cat([(b - a).flatten() for a, b in zip(main0, main1, strict=True)])
    moved = float((delta != 0).float().mean())
    assert moved > 0.5, moved
    step = delta[delta != 0].abs().median().item()
    assert 0.3 * LR < step < 3 * LR, step
    # the bf16 weights are the main weights rounded: mostly unchanged at this lr
    grads = {k: p.main_grad.detach().clone() for k, p in tr.actor.named_parameters()}
    bf = {k: p for k, p in tr.actor.named_parameters() if p.dtype == torch.bfloat16}
    bf_changed = sum(int((p != bf0[k]).sum()) for k, p in bf.items())
    n = sum(p.numel() for p in bf.values())
    assert n == delta.numel()

    # negative control: a pure-bf16 AdamW update of the same parameters with the same gradients
    ctrl = copy.deepcopy(tr.hf_actor).to(torch.bfloat16)
    names = dict(ctrl.named_parameters())
    from t1.train.megatron import convert as C

    hf_bf = C.mcore_to_hf(bf0, tr.hf_config, "actor")
    hf_grads = C.mcore_to_hf(grads, tr.hf_config, "actor")
    with torch.no_grad():
        for k, p in names.items():
            p.copy_(hf_bf[k])
            p.grad = hf_grads[k].to(torch.bfloat16)
    torch.nn.utils.clip_grad_norm_(ctrl.parameters(), 1.0)
    before = {k: p.detach().clone() for k, p in names.items()}
    adamw(ctrl, LR, (0.9, 0.98), 0.1).step()
    mats = [k for k, p in names.items() if p.dim() >= 2]
    ctrl_changed = sum(int((names[k] != before[k]).sum()) for k in mats)
    with_grad = sum(int((hf_grads[k] != 0).sum()) for k in mats)
    assert ctrl_changed < 0.1 * with_grad, (ctrl_changed, with_grad)  # rounded away
    assert moved * n > 5 * ctrl_changed  # the main weights kept what bf16 lost
    assert bf_changed < 0.1 * n


def test_bf16_ppo_step_trains_both_roles_and_resumes_bit_identically():
    tr = _bf16_trainer()
    batch = collate(make_rows(tr.hf_actor.float(), n=3))
    cfg = PPOConfig(minibatch=2, epochs=1)
    crit0 = [p.clone() for p in tr.critic_opt.main_params()]
    m = ppo_step(tr, batch, cfg)
    assert all(torch.isfinite(torch.tensor(v)) for v in (m["policy_loss"], m["value_loss"]))
    crit1 = tr.critic_opt.main_params()
    assert any(not torch.equal(a, b) for a, b in zip(crit0, crit1, strict=True))
    state = copy.deepcopy(tr.state_dict())
    assert state["actor_optim"]["kind"] == "megatron_main_weights"
    tr2 = _bf16_trainer(seed=0)
    tr2.load_state_dict(state)
    a, b = ppo_step(tr, batch, cfg), ppo_step(tr2, batch, cfg)
    assert a["policy_loss"] == b["policy_loss"] and a["value_loss"] == b["value_loss"]
    for x, y in zip(tr.actor_opt.main_params(), tr2.actor_opt.main_params(), strict=True):
        assert torch.equal(x, y)


def test_bf16_offload_moves_the_main_weights_and_adam_state_in_place():
    """The compute device is the CPU here, so the move is CPU -> CPU: the optimizer keeps its
    tensors (identity), the Adam state comes along, and training continues."""
    from t1.train.megatron.trainer import move_role

    tr = _bf16_trainer(offload=True)
    batch = collate(make_rows(tr.hf_actor.float(), n=2))
    tr.actor_update(batch, _loss_fn(batch))
    mains = tr.actor_opt.main_params()
    move_role(tr.actor, tr.actor_opt, torch.device("cpu"))
    assert all(a is b for a, b in zip(mains, tr.actor_opt.main_params(), strict=True))
    st = tr.actor_opt.parts[0].optimizer.state[mains[0]]
    assert "exp_avg" in st and st["exp_avg"].device.type == "cpu"
    tr.actor_update(batch, _loss_fn(batch))
    assert ("critic", "cpu") in tr.residency.moves


def test_optimizer_offload_keeps_adam_state_on_the_host_between_steps_and_steps_the_same():
    """train.optimizer_offload: the fp32 main shards and Adam moments go to the compute device
    for each step and back to the host after it (spied: the order of the moves), and the
    training is bit-identical to the state staying put. The compute device is the CPU here,
    so the moves cost nothing; the memory they save is measured in tests/test_measure_memory.py."""
    from t1.train.megatron.main_weights import MainWeightsAdam

    plain, host = _bf16_trainer(), _bf16_trainer(optimizer_offload=True)
    assert not plain.actor_opt.host_state and host.actor_opt.host_state
    moves: list[str] = []
    real = MainWeightsAdam._move_state

    def spy(self, target):  # the host_state trainer's actor only (residency moves too)
        if self is host.actor_opt:
            moves.append(f"actor->{target.type}")
        real(self, target)

    MainWeightsAdam._move_state = spy
    try:
        batch = collate(make_rows(plain.hf_actor.float(), n=2))
        for tr in (plain, host):
            for _ in range(2):
                tr.actor_update(batch, _loss_fn(batch))
    finally:
        MainWeightsAdam._move_state = real
    assert moves == ["actor->cpu", "actor->cpu"] * 2  # to the compute device, back to the host
    for x, y in zip(plain.actor_opt.main_params(), host.actor_opt.main_params(), strict=True):
        assert torch.equal(x, y)
    st = host.actor_opt.parts[0].optimizer.state[host.actor_opt.main_params()[0]]
    assert st["exp_avg"].device.type == "cpu" and int(st["step"]) == 2

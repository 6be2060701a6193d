"""A real tiny MoE actor/critic and a synthetic batch with recorded routing."""

from __future__ import annotations

import pytest
import torch

from t1.config import ModelConfig, PPOConfig
from t1.model.policy import Critic, build_policy
from t1.model.routing import RoutingCapture
from t1.train.batch import Row, collate
from t1.train.hf import HFTrainer, token_logp

VOCAB = 256
MODEL = ModelConfig(
    layers=2,
    hidden=64,
    heads=4,
    kv_heads=2,
    head_dim=16,
    intermediate=128,
    expert_intermediate=32,
    experts=8,
    top_k=2,
)


def make_trainer(
    seed: int = 0, replay: bool = True, actor_lr: float = 1e-3, critic_lr: float = 1e-3
) -> HFTrainer:
    torch.set_num_threads(2)
    actor = build_policy(MODEL, VOCAB, seed=seed)
    critic = Critic.from_policy(actor, seed=seed + 1)
    return HFTrainer(
        actor, critic, actor_lr=actor_lr, critic_lr=critic_lr, replay=replay, seed=seed
    )


def make_rows(actor, n: int = 6, seed: int = 0, placeholder_every: int = 5) -> list[Row]:
    """Rows whose rollout logprobs and routing come from `actor` itself (as an engine would
    record them), with context / sampled stretches, a reward per row and placeholders."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        t = 24 + 4 * i
        ids = torch.randint(0, VOCAB, (t,), generator=g)
        mask = torch.zeros(t, dtype=torch.bool)
        mask[6:12] = True
        mask[16:t] = True
        with torch.no_grad(), RoutingCapture(actor) as cap:
            logits = actor(input_ids=ids[None], use_cache=False).logits
        routing = cap.collect().to(torch.int16)  # [t, L, k]
        routing[::placeholder_every] = -1  # some placeholders (context and loss alike here)
        logp = token_logp(logits, ids[None])[0] * mask
        rows.append(
            Row(
                ids=ids.tolist(),
                loss_mask=mask.tolist(),
                logprobs=(logp + 0.01 * mask).tolist(),
                routing=routing,
                reward=float(i % 3) / 2,
                meta={
                    "task_id": f"t{i}",
                    "category": "a" if i % 2 else "b",
                    "resolved": i % 3 == 2,
                    "status": "COMPLETED",
                },
            )
        )
    return rows


@pytest.fixture(name="make_trainer")
def make_trainer_fixture():
    return make_trainer


@pytest.fixture(name="make_rows")
def make_rows_fixture():
    return make_rows


@pytest.fixture
def trainer():
    return make_trainer()


@pytest.fixture
def batch(trainer):
    return collate(make_rows(trainer.actor))


@pytest.fixture
def ppo_cfg():
    return PPOConfig(minibatch=3, epochs=1)

"""Shared pieces of the megatron tests (imported by the tests, dist_worker.py and measure.py):
one tiny Qwen3-MoE actor/critic and rows whose routing another model recorded."""

from __future__ import annotations

import torch

from t1.config import ModelConfig
from t1.model.policy import Critic, build_policy
from t1.train.batch import Row

VOCAB = 250  # not a multiple of 4: the vocab padding is exercised at TP 2 and 4
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


def make_models(seed: int = 0):
    actor = build_policy(MODEL, VOCAB, seed=seed)
    critic = Critic.from_policy(actor, seed=seed + 1)
    with torch.no_grad():  # a non-zero head, so value gradients reach the backbone
        critic.value_head.weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(seed))
    return actor, critic


def make_rows(actor, n: int = 5, seed: int = 0, placeholder_every: int = 7) -> list[Row]:
    """Rows with loss regions, rewards, engine logprobs and routing ROUTED BY A DIFFERENT
    model (seed + 100), so replay moves experts away from the actor's own choice."""
    from t1.model.routing import RoutingCapture
    from t1.train.hf import token_logp

    other = build_policy(MODEL, VOCAB, seed=seed + 100)
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        t = 20 + 3 * i
        ids = torch.randint(0, VOCAB, (t,), generator=g)
        mask = torch.zeros(t, dtype=torch.bool)
        mask[5:t] = True
        with torch.no_grad(), RoutingCapture(other) as cap:
            other(input_ids=ids[None], use_cache=False)
        with torch.no_grad():
            logp = token_logp(actor(input_ids=ids[None], use_cache=False).logits, ids[None])[0]
        routing = cap.collect().to(torch.int16)
        routing[::placeholder_every] = -1
        rows.append(
            Row(
                ids=ids.tolist(),
                loss_mask=mask.tolist(),
                logprobs=(logp * mask).tolist(),
                routing=routing,
                reward=float(i % 3) / 2,
                meta={"task_id": f"t{i}", "resolved": i % 3 == 2, "status": "COMPLETED"},
            )
        )
    return rows

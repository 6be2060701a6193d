"""Collating TITO segments into padded tensors; chunked no-grad forwards agree with one pass."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from t1.train.batch import Row, collate


def test_collate_pads_right_and_select_trims():
    routing = np.zeros((3, 2, 2), dtype=np.int16)
    routing[0] = -1
    rows = [
        Row(
            ids=np.array([5, 6, 7]),
            loss_mask=[0, 1, 1],
            logprobs=[0, -0.5, -0.25],
            routing=routing,
            reward=1.0,
            meta={"a": 1},
        ),
        Row(
            ids=[9, 8, 7, 6, 5], loss_mask=[0, 0, 1, 1, 0], logprobs=None, routing=None, reward=0.0
        ),
    ]
    b = collate(rows, pad_id=0)
    assert b.input_ids.tolist() == [[5, 6, 7, 0, 0], [9, 8, 7, 6, 5]]
    assert b.loss_mask.tolist() == [
        [False, True, True, False, False],
        [False, False, True, True, False],
    ]
    assert b.rollout_logp[0].tolist() == [0.0, -0.5, -0.25, 0.0, 0.0]
    assert b.routing.shape == (2, 5, 2, 2) and b.routing.dtype == torch.int16
    assert (b.routing[0, 0] == -1).all() and (b.routing[0, 1:3] == 0).all()
    assert (b.routing[0, 3:] == -1).all() and (b.routing[1] == -1).all()  # padding / no record
    assert b.tokens == 8 and b.loss_tokens == 4 and b.reward.tolist() == [1.0, 0.0]
    one = b.select([0])
    assert one.input_ids.shape == (1, 3) and one.meta == [{"a": 1}]


def test_collate_refuses_disagreeing_lengths():
    with pytest.raises(ValueError, match="loss_mask"):
        collate([Row(ids=[1, 2], loss_mask=[1])])
    with pytest.raises(ValueError, match="routing"):
        collate([Row(ids=[1, 2], loss_mask=[0, 1], routing=np.zeros((3, 2, 2)))])


def test_chunked_forwards_match_one_pass(trainer, batch):
    trainer.forward_rows = batch.size
    whole = trainer.actor_forward(batch, entropy=True)
    v_whole = trainer.critic_values(batch)
    trainer.forward_rows = 2
    parts = trainer.actor_forward(batch, entropy=True)
    assert torch.allclose(whole.logp, parts.logp, atol=1e-5)
    assert torch.allclose(whole.entropy, parts.entropy, atol=1e-5)
    assert torch.allclose(v_whole, trainer.critic_values(batch), atol=1e-5)

"""Vocab-parallel, sequence-chunked log-probs and entropies (t1/train/megatron/vocab_logp.py)
against the full-logits t1.train.hf.token_logp / token_entropy, forward and gradient.

    pytest tests/megatron/test_vocab_logp.py -q

TP 1: the actor GPTModel (chunks of 7 tokens across rows) and the hf functions on its full
logits. TP 2: two gloo processes (torch.multiprocessing), each holding half of the vocabulary;
the negative control drops the reduction over the group and the result moves.
"""

from __future__ import annotations

import socket

import pytest
import torch
import torch.multiprocessing as mp
import vocab_logp_worker as W
from megatron_helpers import make_models, make_rows

from t1.train.batch import collate
from t1.train.hf import token_entropy, token_logp


def _full(hidden, weight, target):
    """The hf functions on full logits, shaped as one row: position i predicts target i."""
    logits = (hidden @ weight.t())[None]  # [1, N, V]
    ids = torch.cat([torch.zeros(1, dtype=torch.long), target])[None]
    pad = torch.zeros(1, 1, weight.shape[0])
    lg = torch.cat([logits, pad], 1)
    return token_logp(lg, ids)[0, 1:], token_entropy(lg)[0, 1:]


def test_tp1_model_logp_and_entropy_equal_the_full_logits_forward_and_gradient():
    from t1.train.megatron import model as M
    from t1.train.megatron import vocab_logp as VL
    from t1.train.megatron.trainer import MegatronTrainer

    actor, critic = make_models(0)
    tr = MegatronTrainer(actor, critic, replay=False)
    ids = collate(make_rows(actor, n=2)).input_ids
    w = tr.actor.output_layer.weight

    def grads():
        out = {k: p.main_grad.clone() for k, p in tr.actor.named_parameters()}
        tr.ddp["actor"].zero_grad_buffer()
        return out

    logits = M.forward(tr.actor, ids)
    want_lp, want_ent = token_logp(logits, ids), token_entropy(logits)
    (want_lp.sum() + want_ent.sum()).backward()
    g_want = grads()
    saved = []

    def pack(x):
        saved.append(tuple(x.shape))
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        lp, ent = VL.token_logp_entropy(tr.actor, ids, chunk=7, entropy=True)
    assert (lp - want_lp).abs().max() < 1e-5 and (ent - want_ent).abs().max() < 1e-5
    (lp.sum() + ent.sum()).backward()
    g_got = grads()
    err = max((g_got[k] - g_want[k]).abs().max().item() for k in g_want)
    scale = max(g.abs().max().item() for g in g_want.values())
    assert err < 1e-5 * max(1.0, scale), (err, scale)
    assert g_got["output_layer.weight"].abs().sum() > 0
    # checkpointed chunks: no logits tensor (last dim = vocabulary) is kept for backward
    assert not [s for s in saved if s and s[-1] == w.shape[0]], saved


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    """(with the reduction, without it) from one spawn of two gloo ranks."""
    out = tmp_path_factory.mktemp("vocab_tp2") / "tp2"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(W.run, args=(2, port, str(out)), nprocs=2, join=True)
    return torch.load(f"{out}_True.pt"), torch.load(f"{out}_False.pt")


def _want():
    hidden, weight, target = W.data()
    h = hidden.clone().requires_grad_(True)
    w = weight.clone().requires_grad_(True)
    lp, ent = _full(h, w, target)
    (lp.sum() + 0.5 * ent.sum()).backward()
    return lp.detach(), ent.detach(), h.grad, w.grad


def test_tp2_vocab_parallel_equals_the_full_logits_forward_and_gradient(tp2):
    got, _ = tp2
    lp, ent, gh, gw = _want()
    assert (got["logp"] - lp).abs().max() < 1e-5
    assert (got["entropy"] - ent).abs().max() < 1e-5
    assert (got["grad_hidden"] - gh).abs().max() < 1e-5
    assert (got["grad_weight"] - gw).abs().max() < 1e-5


def test_tp2_without_the_group_reduction_parts_from_the_full_logits(tp2):
    """The guard above can fail: each rank's softmax over its own half is another number."""
    _, bad = tp2
    lp, ent, _, _ = _want()
    assert (bad["logp"] - lp).abs().max() > 0.1
    assert (bad["entropy"] - ent).abs().max() > 0.1

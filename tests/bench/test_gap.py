"""Setting (a) of `t1 bench gap`: messages from a trajectory, byte-offset alignment, token drift."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from t1.agent import chat
from t1.agent.tokenizer_train import bpe_tokenizer
from t1.agent.trajectory import Status, Trajectory, Turn
from t1.bench.gap_forward import forward_logp
from t1.bench.gap_text import messages_of, retokenized_gap
from t1.config import ModelConfig
from t1.model.policy import build_policy

SMALL = ModelConfig(
    layers=1,
    hidden=32,
    heads=2,
    kv_heads=1,
    head_dim=16,
    intermediate=32,
    expert_intermediate=16,
    experts=4,
    top_k=2,
)

# Ends with a digit: `]` + "\n" would merge across the glue when the whole text is encoded.
OBS = "a.txt\nexit 0"


@pytest.fixture(scope="module")
def tok():
    return bpe_tokenizer()


def _trajectory(tok, first_sampled: list[int]) -> Trajectory:
    im_end = chat.glue_of(tok).im_end
    p0 = chat.prompt_ids(tok, chat.initial_messages("List the files.", "You are a terminal agent."))
    s0 = first_sampled + [im_end]
    p1, appended = chat.next_prompt(tok, p0, s0, OBS)
    s1 = chat.encode(tok, "Done.") + [im_end]
    turns = [
        Turn(
            p0,
            s0,
            np.full(len(s0), -1.0),
            appended_ids=appended,
            observation=OBS,
        ),
        Turn(p1, s1, np.full(len(s1), -2.0)),
    ]
    return Trajectory(task_id="t", status=Status.COMPLETED, turns=turns)


def test_messages_round_trip_the_first_prompt(tok):
    traj = _trajectory(tok, chat.encode(tok, "ls -la"))
    msgs = messages_of(traj, tok)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "assistant"]
    assert (
        msgs[0]["content"] == "You are a terminal agent."
        and msgs[1]["content"] == "List the files."
    )
    assert msgs[2]["content"] == "ls -la" and msgs[4]["content"] == "Done."


def test_unmerged_pieces_count_as_token_drift_the_rest_aligns(tok):
    ls = chat.encode(tok, "ls")
    assert len(ls) == 1  # precondition: "ls" is one token, so "l" + "s" re-encodes merged
    split = [tok.convert_tokens_to_ids("l"), tok.convert_tokens_to_ids("s")]
    torch.manual_seed(0)
    policy = build_policy(SMALL, len(tok), seed=0)

    clean = retokenized_gap(policy, _trajectory(tok, ls + chat.encode(tok, " -la")), tok)
    n = len(ls) + len(chat.encode(tok, " -la")) + 1 + len(chat.encode(tok, "Done.")) + 1
    assert clean["sampled"] == clean["matched"] == n

    drifted = retokenized_gap(policy, _trajectory(tok, split + chat.encode(tok, " -la")), tok)
    assert drifted["sampled"] == n + 1
    assert drifted["matched"] == n - 1  # "l" and "s" have no partner; " -la" ... still align
    assert math.isfinite(drifted["gap"])


def test_aligned_tokens_compare_the_trainer_logp_at_the_same_token(tok):
    """With rollout logprobs taken from the trainer on the same ids, the gap of (a) is 0."""
    policy = build_policy(SMALL, len(tok), seed=1)
    traj = _trajectory(tok, chat.encode(tok, "ls -la"))
    ids = chat.render_ids(tok, messages_of(traj, tok), add_generation_prompt=False)
    lp, _, _ = forward_logp(policy, ids)
    # The rendered text re-encodes to the stream our loop built (no merges across the glue here).
    stream = np.concatenate([traj.turns[1].prompt_ids, traj.turns[1].sampled_ids])
    assert ids[: len(stream)] == stream.tolist()
    for turn in traj.turns:
        start = len(turn.prompt_ids)
        turn.logprobs = lp[start : start + len(turn.sampled_ids)].astype(np.float32)
    r = retokenized_gap(policy, traj, tok)
    assert r["matched"] == r["sampled"] and r["gap"] < 1e-6

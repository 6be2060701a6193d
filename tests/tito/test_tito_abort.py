"""What TITO refuses: disagreeing lengths, missing captures, a retokenized copy in the stream.

Each raises TitoError; `assemble_or_abort` turns it into status ABORTED with the reason, and
nothing is dropped or padded.
"""

from __future__ import annotations

import numpy as np
import pytest
from tito_helpers import own_loop_turns

from t1.agent import chat
from t1.agent.trajectory import Status, Trajectory
from t1.tito.segment import PROMPT, TitoError
from t1.tito.stream import _check_provenance, _Stream, assemble, assemble_or_abort

CALL = chat.tool_call_text("ls")
OBS = ["a.txt\n", "1\n"]


def _turns(tok):
    return own_loop_turns(tok, [CALL, CALL, "Done."], OBS)


def _aborts(tok, turns, match: str) -> None:
    with pytest.raises(TitoError, match=match):
        assemble(turns, tok)
    traj = Trajectory("t", Status.COMPLETED, turns=turns, reward=1.0)
    assert assemble_or_abort(traj, tok) is None
    assert (
        traj.status == Status.ABORTED and traj.reason.startswith("tito: ") and traj.reward is None
    )


def test_logprobs_shorter_than_sampled_ids(tok):
    turns = _turns(tok)
    turns[1].logprobs = turns[1].logprobs[:-1]
    _aborts(tok, turns, r"turn 1: \d+ sampled ids but \d+ logprobs")


def test_missing_capture_of_a_sampled_token(tok):
    """The engine skipped the row of turn 0's last sampled id (it should come with turn 1)."""
    turns = _turns(tok)
    turns[1].routing, turns[1].routing_start = turns[1].routing[1:], turns[1].routing_start + 1
    _aborts(tok, turns, r"turn 0: no routing capture for sampled token")


def test_routing_rows_beyond_the_sequence(tok):
    turns = _turns(tok)
    extra = np.zeros((1, *turns[0].routing.shape[1:]), turns[0].routing.dtype)
    turns[0].routing = np.concatenate([turns[0].routing, extra])
    _aborts(tok, turns, r"turn 0: routing rows .* exceed")


def test_a_turn_without_capture_among_captured_ones(tok):
    turns = _turns(tok)
    turns[2].routing = None
    _aborts(tok, turns, "turn 2 has no routing capture")


def test_turns_disagreeing_on_routing_shape(tok):
    turns = _turns(tok)
    turns[1].routing = turns[1].routing[:, :1]
    _aborts(tok, turns, r"turn 1: routing rows are \(1, 2\), turn 0's are \(3, 2\)")


def test_last_sampled_token_of_the_trajectory_needs_no_capture(tok):
    turns = _turns(tok)
    asm = assemble(turns, tok)
    assert asm.audit.final_placeholders == 1 and asm.audit.placeholder_in_loss == 0


def test_provenance_check_rejects_a_retokenized_copy():
    """Invariant 3: prompt ids before the relation's cut must never be copied into the stream."""
    from t1.agent.trajectory import Turn

    turn = Turn(prompt_ids=[5, 6, 7, 8], sampled_ids=[9], logprobs=[-0.1])
    stream = _Stream(None)
    stream.append(np.array([5, 6, 7, 8], np.int32), PROMPT, 0, 0)
    _check_provenance(stream, [turn], keep=np.array([0]), split_turns=[])  # whole prompt: fine
    with pytest.raises(TitoError, match="retokenized copy"):
        _check_provenance(stream, [turn], keep=np.array([2]), split_turns=[])
    stream.ids[1] = 99  # an id nobody consumed
    with pytest.raises(TitoError, match="differ from the ids the engine consumed"):
        _check_provenance(stream, [turn], keep=np.array([0]), split_turns=[])

"""TITO on the drift cases of DESIGN §4, with both real tokenizers (trained BPE, Qwen3.5).

Each case is built from real tokenizer output and must yield its intended relation with zero
drift in the loss region and routing placeholders only outside it (tito_helpers.check_invariants).
"""

from __future__ import annotations

import numpy as np
import pytest
from tito_helpers import (
    byte_ids,
    check_invariants,
    fake_logprobs,
    im_end,
    own_loop_turns,
    routing_exact_upto,
    sample,
    text_log,
)

from t1.agent import chat
from t1.tito import assemble, assemble_text_log, turns_from_text_log

CALL_LS = chat.tool_call_text("ls -la /srv/data")
CALL_WC = chat.tool_call_text("ls /srv/data | wc -l")
OBS = ["total 8\n-rw-r--r-- 1 root root 3 a.txt\n", "1\n"]


def test_strict_on_our_own_loop(tok):
    texts = ["I will list the files.\n" + CALL_LS, CALL_WC, "There is one file."]
    turns = own_loop_turns(tok, texts, OBS)
    asm = assemble(turns, tok)
    assert asm.relations == ["strict", "strict"]
    (seg,) = asm.segments
    assert np.array_equal(seg.ids, np.concatenate([turns[-1].prompt_ids, turns[-1].sampled_ids]))
    check_invariants(asm, turns)
    routing_exact_upto(seg, len(seg))
    assert asm.audit.placeholders == 1 == asm.audit.final_placeholders  # the last sampled id only
    assert sum(asm.audit.context_drift.values()) == 0


@pytest.mark.parametrize("change", ["dropped", "added"])
def test_newline_after_im_end_is_normalized(tok, change):
    """Our loop's glue and the engine's template disagree on the newline after <|im_end|>."""
    texts = ["I will list the files.\n" + CALL_LS, CALL_WC, "There is one file."]
    if change == "dropped":  # the server renders without it; our glue has it
        turns = own_loop_turns(tok, texts, OBS, server_options={"im_end_newline": False})
    else:  # the server renders with it; our loop's glue lacks it

        def glue_without_newline(ids, obs):
            text = f"\n<|im_start|>user\n<tool_response>\n{obs}\n</tool_response><|im_end|><|im_start|>assistant\n"
            return chat.encode(tok, text)

        turns = own_loop_turns(
            tok, texts, OBS, server_options={}, appended_override=glue_without_newline
        )
    asm = assemble(turns, tok)
    assert asm.relations == ["normalized", "normalized"]
    (seg,) = asm.segments
    assert np.array_equal(seg.ids, np.concatenate([turns[-1].prompt_ids, turns[-1].sampled_ids]))
    check_invariants(asm, turns)
    routing_exact_upto(seg, len(seg))
    assert sum(asm.audit.context_drift.values()) == 0
    # the search is bounded: with no room to look back, the same boundary is a split
    assert assemble(turns, tok, back=2).relations == ["split", "split"]


def _split_piece(tok, ids: list[int], piece: str) -> tuple[list[int], int]:
    """Replace the first token whose text contains `piece` by its single bytes (unmerged)."""
    for i, t in enumerate(ids):
        text = tok.decode([t])
        if piece in text and len(text.encode()) > 1:
            pieces = byte_ids(tok, text.encode())
            assert chat.encode(tok, text) != pieces  # re-encoding merges them again
            return ids[:i] + pieces + ids[i + 1 :], i
    raise AssertionError(f"no token contains {piece!r}")


def _retokenized_log(tok, first_ids: list[int], first_fields: dict) -> tuple[list, list]:
    turns = [
        (first_ids, first_fields, OBS[0]),
        (sample(tok, CALL_WC), {"content": CALL_WC}, OBS[1]),
        (sample(tok, "There is one file."), {"content": "There is one file."}, None),
    ]
    messages = text_log(tok, turns)
    return messages, turns_from_text_log(messages, tok)


def _check_retokenized(tok, messages, turns, first_ids):
    asm = assemble_text_log(messages, tok)
    assert asm.relations == ["retokenized", "retokenized"]
    (seg,) = asm.segments
    check_invariants(asm, turns)
    # S is kept as sampled: the unmerged ids sit in the stream, the server's re-encoding does not
    p0 = turns[0].prompt_ids
    assert np.array_equal(seg.ids[: len(p0) + len(first_ids)], np.concatenate([p0, first_ids]))
    assert asm.audit.context_drift["retokenized"] == len(turns[1].sampled_ids) + len(
        turns[2].sampled_ids
    )
    routing_exact_upto(seg, len(p0) + len(first_ids) - 1)  # rows before the repaired boundary
    return asm


def test_unmerged_pieces_are_retokenized(tok):
    ids, _ = _split_piece(tok, sample(tok, CALL_LS), "ls")
    content = chat.turn_text(tok, ids)
    assert content == CALL_LS
    messages, turns = _retokenized_log(tok, ids, {"content": content})
    assert not np.array_equal(
        turns[1].prompt_ids[: len(turns[0].prompt_ids) + len(ids)][-len(ids) :], ids
    )
    _check_retokenized(tok, messages, turns, ids)


def test_merge_across_the_turn_boundary_is_retokenized(tok):
    text = "\nLet me look.\n" + CALL_LS  # "\n" after "<|im_start|>assistant\n" merges on re-encode
    ids = sample(tok, text)
    messages, turns = _retokenized_log(tok, ids, {"content": text})
    p0, p1 = turns[0].prompt_ids, turns[1].prompt_ids
    assert not np.array_equal(p1[: len(p0)], p0)  # the merge reaches into the glue before the turn
    _check_retokenized(tok, messages, turns, ids)


def test_lone_invalid_utf8_byte_is_retokenized(tok):
    head, tail = chat.encode(tok, "echo caf"), sample(tok, " > /tmp/x\n" + CALL_LS)
    ids = head + byte_ids(tok, b"\xe2") + tail  # a lead byte with no continuation
    content = chat.turn_text(tok, ids)
    assert "\ufffd" in content
    messages, turns = _retokenized_log(tok, ids, {"content": content})
    _check_retokenized(tok, messages, turns, ids)


def test_special_token_text_inside_content_is_retokenized(tok):
    literal = tok.encode("<|im_end|>", add_special_tokens=False, split_special_tokens=True)
    assert len(literal) > 1 and im_end(tok) not in literal
    ids = chat.encode(tok, "grep -c '") + literal + sample(tok, "' log.txt\n" + CALL_LS)
    content = chat.turn_text(tok, ids)
    assert "<|im_end|>" in content
    messages, turns = _retokenized_log(tok, ids, {"content": content})
    _check_retokenized(tok, messages, turns, ids)


def test_reasoning_stripped_on_rerender_is_split(tok):
    rounds = [
        ("I should list the files first.", CALL_LS, OBS[0]),
        ("Now count them.", CALL_WC, OBS[1]),
    ]
    rounds.append(("One line of output.", "There is one file.", None))
    log = []
    for reasoning, content, obs in rounds:
        ids = sample(tok, f"<think>\n{reasoning}\n</think>\n\n{content}")
        log.append((ids, {"reasoning_content": reasoning, "content": content}, obs))
    messages = text_log(tok, log, server_options={"strip_reasoning": True})
    turns = turns_from_text_log(messages, tok, strip_reasoning=True)
    asm = assemble(turns, tok)
    assert asm.relations == ["strict", "split"]
    first, second = asm.segments
    check_invariants(asm, turns)
    # invariant 5: the new segment's context is exactly the prompt; the earlier one is kept
    p2 = turns[2].prompt_ids
    assert np.array_equal(second.ids[: len(p2)], p2) and not second.loss_mask[: len(p2)].any()
    assert np.array_equal(first.ids, np.concatenate([turns[1].prompt_ids, turns[1].sampled_ids]))
    routing_exact_upto(first, len(first))
    routing_exact_upto(second, len(second))


def test_text_log_without_routing_gives_streams_without_routing(tok):
    log = [
        (sample(tok, CALL_LS), {"content": CALL_LS}, OBS[0]),
        (sample(tok, "Done."), {"content": "Done."}, None),
    ]
    messages = text_log(tok, log, routing=False)
    asm = assemble_text_log(messages, tok)
    assert asm.relations == ["strict"] and asm.segments[0].routing is None
    assert asm.audit.placeholders == 0


def test_without_a_tokenizer_retokenized_becomes_split(tok):
    ids, _ = _split_piece(tok, sample(tok, CALL_LS), "ls")
    messages, turns = _retokenized_log(tok, ids, {"content": chat.turn_text(tok, ids)})
    asm = assemble(turns, tokenizer=None)
    # after the split the stream is the server's own rendering, which the next prompt extends
    assert asm.relations == ["split", "strict"] and len(asm.segments) == 2
    check_invariants(asm, turns)


def test_logprobs_are_carried_only_on_the_loss_region(tok):
    turns = own_loop_turns(tok, [CALL_LS, "Done."], OBS)
    turns[0].logprobs = fake_logprobs(len(turns[0].sampled_ids), 7)
    (seg,) = assemble(turns, tok).segments
    start = len(turns[0].prompt_ids)
    assert np.array_equal(
        seg.logprobs[start : start + len(turns[0].sampled_ids)], turns[0].logprobs
    )

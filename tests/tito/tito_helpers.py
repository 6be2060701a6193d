"""Shared pieces of the TITO tests: a toy engine, log builders, invariant checks.

The toy engine stands in for the model only where the model does not matter: its routing row
for a position is a hash of the ids up to and including it (so a row is "right" exactly when
the stream's prefix is the engine's prefix), and it keeps an id-keyed prefix cache like
SGLang's: each call returns rows from the first position it had not processed before.
"""

from __future__ import annotations

import numpy as np
from transformers.convert_slow_tokenizer import bytes_to_unicode

from t1.agent import chat
from t1.agent import tokenizer as T
from t1.agent.trajectory import Turn
from t1.tito import Assembly
from t1.tito.relations import common_prefix

LAYERS, K, EXPERTS = 3, 2, 16
_MOD = (1 << 61) - 1


def toy_rows(seq, start: int, end: int) -> np.ndarray:
    """uint8 [end - start, LAYERS, K]: row j is a hash of seq[: j + 1]."""
    h, out = 0, []
    for j, x in enumerate(seq[:end]):
        h = (h * 1_000_003 + int(x) + 1) % _MOD
        if j >= start:
            out.append([(h >> (4 * s)) % EXPERTS for s in range(LAYERS * K)])
    return np.asarray(out, np.uint8).reshape(-1, LAYERS, K)


class ToyEngine:
    """Routing capture with an id-keyed prefix cache (the last sampled id is never fed back)."""

    def __init__(self) -> None:
        self.cached = np.zeros(0, np.int32)

    def capture(self, prompt, sampled, skip: int = 0) -> tuple[np.ndarray, int]:
        x = np.concatenate([np.asarray(prompt, np.int32), np.asarray(sampled, np.int32)])
        start = min(common_prefix(self.cached, x), len(prompt)) + skip
        self.cached = x[:-1]
        return toy_rows(x, start, len(x) - 1), start


def im_end(tok) -> int:
    return tok.convert_tokens_to_ids(T.IM_END)


def sample(tok, text: str) -> list[int]:
    """What a model that wrote `text` and stopped would have sampled: encode(text) + <|im_end|>."""
    return chat.encode(tok, text) + [im_end(tok)]


def byte_ids(tok, data: bytes) -> list[int]:
    """One single-byte token per byte (every byte-level vocabulary has all 256)."""
    b2u = bytes_to_unicode()
    ids = [tok.convert_tokens_to_ids(b2u[b]) for b in data]
    assert all(isinstance(i, int) for i in ids)
    return ids


def fake_logprobs(n: int, seed: int = 0) -> np.ndarray:
    return -np.random.default_rng(seed).random(n).astype(np.float32)


def text_log(tok, turns, server_options=None, routing=True) -> list[dict]:
    """An OpenAI-style log: turns = [(sampled ids, assistant message fields, observation | None)].

    Each assistant message's prompt is what the server renders (with `server_options`); the
    toy engine captures routing on that prompt + the sampled ids.
    """
    server_options = server_options or {}
    messages = chat.initial_messages("List the files, then count them.")
    engine = ToyEngine()
    for i, (ids, fields, obs) in enumerate(turns):
        prompt = chat.render_ids(tok, messages, True, **server_options)
        msg = {
            "role": "assistant",
            **fields,
            "token_ids": list(ids),
            "logprobs": fake_logprobs(len(ids), i),
        }
        if routing:
            msg["routing"], msg["routing_start"] = engine.capture(prompt, ids)
        messages.append(msg)
        if obs is not None:
            messages.append({"role": "tool", "content": obs})
    return messages


def own_loop_turns(
    tok, texts, observations, server_options=None, appended_override=None
) -> list[Turn]:
    """Turns of our agent loop (ids appended). With `server_options`, the engine re-renders the
    messages itself (a server with its own template) and consumes that prompt instead."""
    messages = chat.initial_messages("List the files, then count them.")
    prompt = chat.prompt_ids(tok, messages)
    engine = ToyEngine()
    turns = []
    for i, text in enumerate(texts):
        if server_options is not None:
            prompt = chat.render_ids(tok, messages, True, **server_options)
        ids = sample(tok, text)
        routing, start = engine.capture(prompt, ids)
        last = i == len(texts) - 1
        obs = "" if last else observations[i]
        if last:
            appended = []
        elif appended_override is not None:
            appended = appended_override(ids, obs)
        else:
            appended = chat.observation_ids(tok, ids, obs)
        turns.append(
            Turn(prompt, ids, fake_logprobs(len(ids), i), routing, start, appended, observation=obs)
        )
        messages += [{"role": "assistant", "content": text}, {"role": "tool", "content": obs}]
        prompt = list(prompt) + ids + list(appended)
    return turns


def check_invariants(asm: Assembly, turns) -> None:
    """Invariants 1 and 4 from the outputs alone, plus the audit agreeing with them."""
    loss_ids = np.concatenate([s.ids[s.loss_mask] for s in asm.segments])
    assert np.array_equal(loss_ids, np.concatenate([t.sampled_ids for t in turns]))  # drift 0
    loss_lp = np.concatenate([s.logprobs[s.loss_mask] for s in asm.segments])
    assert np.array_equal(loss_lp, np.concatenate([t.logprobs for t in turns]))
    holes = 0
    for s in asm.segments:
        assert not s.logprobs[~s.loss_mask].any()
        assert s.loss_mask[-1]  # a segment ends with a sampled token
        if s.routing is None:
            continue
        assert s.routing.dtype == np.int16 and s.routing.shape == (len(s), LAYERS, K)
        hole = (s.routing < 0).any(axis=(1, 2))
        assert np.array_equal(hole, (s.routing < 0).all(axis=(1, 2)))  # whole rows only
        assert not (hole[:-1] & s.loss_mask[:-1]).any()  # placeholders only at context
        holes += int(hole.sum())
    a = asm.audit
    assert (a.drift_tokens, a.placeholder_in_loss, a.placeholders) == (0, 0, holes)
    assert a.loss_tokens == len(loss_ids)


def routing_exact_upto(seg, end: int) -> None:
    """Every captured row before `end` is the engine's row for the stream's own prefix."""
    want = toy_rows(seg.ids, 0, min(end, len(seg)))
    got = seg.routing[: len(want)]
    ok = got[:, 0, 0] >= 0
    assert np.array_equal(got[ok], want[ok].astype(np.int16))

"""Setting (a) of `t1 bench gap`: the text pipeline without TITO or R3. A trajectory becomes
OpenAI-style messages, is re-rendered with the chat template and re-encoded, and its sampled
tokens are matched to the re-encoded ones by byte offset (the unmatched ones are token drift).

    from t1.bench.gap_text import retokenized_gap
    a = retokenized_gap(policy, traj, tokenizer)   # {"gap", "matched", "sampled", "max", "ids"}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from t1.agent import chat
from t1.agent.trajectory import Trajectory
from t1.bench.gap_forward import _gap, forward_logp


def messages_of(traj: Trajectory, tokenizer) -> list[dict[str, Any]]:
    """The trajectory as an OpenAI-style message list (system, user, assistant, tool, ...).

    System and user contents are read back from the first prompt, which the chat template
    rendered from exactly those two messages; raises ValueError when re-rendering them does
    not give the first prompt's ids back."""
    from t1.agent.tokenizer import IM_END, IM_START

    first = tokenizer.decode(
        traj.turns[0].prompt_ids.tolist(),
        skip_special_tokens=False,
        clean_up_tokenization_spaces=False,
    )
    sys_head, user_head = f"{IM_START}system\n", f"{IM_END}\n{IM_START}user\n"
    tools_at = first.find("\n\n# Tools\n")
    user_at = first.find(user_head)
    if not first.startswith(sys_head) or tools_at < 0 or user_at < 0:
        raise ValueError(f"{traj.task_id}: first prompt is not system + tools + user")
    tail = f"{IM_END}\n{IM_START}assistant\n"
    if not first.endswith(tail):
        raise ValueError(f"{traj.task_id}: first prompt does not end with the generation prompt")
    messages = chat.initial_messages(
        first[user_at + len(user_head) : -len(tail)], first[len(sys_head) : tools_at]
    )
    if chat.render_ids(tokenizer, messages) != traj.turns[0].prompt_ids.tolist():
        raise ValueError(f"{traj.task_id}: re-rendered first prompt differs from its ids")
    for turn in traj.turns:
        messages.append(
            {"role": "assistant", "content": chat.turn_text(tokenizer, turn.sampled_ids)}
        )
        if len(turn.appended_ids):
            messages.append({"role": "tool", "content": turn.observation})
    return messages


class _TokenBytes:
    """Byte string of each token id (byte-level BPE: the token's characters mapped back)."""

    def __init__(self, tokenizer) -> None:
        from transformers.convert_slow_tokenizer import bytes_to_unicode

        self.tokenizer = tokenizer
        self.inv = {c: b for b, c in bytes_to_unicode().items()}
        self.cache: dict[int, int] = {}

    def length(self, token_id: int) -> int:
        n = self.cache.get(token_id)
        if n is None:
            s = self.tokenizer.convert_ids_to_tokens(int(token_id))
            n = self.cache[token_id] = sum(1 if c in self.inv else len(c.encode()) for c in s)
        return n

    def offsets(self, ids: Sequence[int], start: int = 0) -> np.ndarray:
        lens = np.fromiter((self.length(i) for i in ids), np.int64, len(ids))
        return start + np.concatenate([[0], np.cumsum(lens)[:-1]]) if len(ids) else lens


def retokenized_gap(
    policy: torch.nn.Module, traj: Trajectory, tokenizer, nbytes: _TokenBytes | None = None
) -> dict[str, Any]:
    """Setting (a) for one trajectory: sum |delta logp| over matched tokens, matched, sampled."""
    nbytes = nbytes or _TokenBytes(tokenizer)
    messages = messages_of(traj, tokenizer)
    full = chat.render_text(tokenizer, messages, add_generation_prompt=False)
    ids = chat.encode(tokenizer, full)
    r_off = nbytes.offsets(ids)
    at = {int(o): j for j, o in enumerate(r_off)}
    lp_train, _, _ = forward_logp(policy, ids)
    train, rollout = [], []
    sampled = 0
    k = 0
    for m, msg in enumerate(messages):
        if msg["role"] != "assistant":
            continue
        turn = traj.turns[k]
        k += 1
        head = chat.render_text(tokenizer, messages[:m], add_generation_prompt=True)
        if not full.startswith(head):
            raise ValueError(f"{traj.task_id}: the template is not append-only at turn {k - 1}")
        offs = nbytes.offsets(turn.sampled_ids.tolist(), len(head.encode()))
        sampled += len(offs)
        for i, (o, tid) in enumerate(zip(offs.tolist(), turn.sampled_ids.tolist(), strict=True)):
            j = at.get(o)
            if j is not None and j > 0 and ids[j] == tid:
                train.append(lp_train[j])
                rollout.append(turn.logprobs[i])
    train_a, rollout_a = np.asarray(train), np.asarray(rollout, np.float64)
    g, n = _gap(train_a, rollout_a, np.ones(len(train_a), bool))
    mx = float(np.abs(train_a - rollout_a).max()) if n else 0.0
    return {"gap": g, "matched": n, "sampled": sampled, "max": mx, "ids": ids}

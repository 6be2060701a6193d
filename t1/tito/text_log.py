"""TITO on text-level logs: an OpenAI-style message log (a server's) turned into turns.

    asm = assemble_text_log(messages, tokenizer)    # turns_from_text_log, then assemble

Each sampled assistant message carries its `token_ids` and `logprobs` (and optionally
`routing` with `routing_start`); each prompt is the chat template re-rendered over the
messages before it and tokenized.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from t1.agent.trajectory import Turn
from t1.tito.segment import Assembly
from t1.tito.stream import DEFAULT_AHEAD, DEFAULT_BACK, assemble


def turns_from_text_log(
    messages: Sequence[dict[str, Any]], tokenizer, **template_options: Any
) -> list[Turn]:
    """Turns of an OpenAI-style log, each prompt re-rendered as text and tokenized (a server).

    Assistant messages that were sampled carry `token_ids` and `logprobs` (and optionally
    `routing` [rows, layers, k] with `routing_start`); their `content` (and `tool_calls`,
    `reasoning_content`) is what the server stored. The prompt of each is the chat template
    over the messages before it with the generation prompt (`template_options` select the
    server's template variant: t1.agent.chat.render_text).
    """
    from t1.agent.chat import render_ids

    turns = []
    for k, msg in enumerate(messages):
        if msg.get("role") != "assistant" or "token_ids" not in msg:
            continue
        routing = msg.get("routing")
        turns.append(
            Turn(
                prompt_ids=render_ids(tokenizer, messages[:k], True, **template_options),
                sampled_ids=msg["token_ids"],
                engine_ids=msg["token_ids"],  # the server's own ids: the drift reference
                logprobs=msg.get("logprobs", []),
                routing=None if routing is None else np.asarray(routing),
                routing_start=int(msg.get("routing_start", 0)),
            )
        )
    return turns


def assemble_text_log(
    messages: Sequence[dict[str, Any]],
    tokenizer,
    back: int = DEFAULT_BACK,
    ahead: int = DEFAULT_AHEAD,
    **template_options: Any,
) -> Assembly:
    return assemble(
        turns_from_text_log(messages, tokenizer, **template_options), tokenizer, back, ahead
    )

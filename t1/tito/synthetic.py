"""A synthetic long trajectory and the assembly benchmark on it.

    bench_assembly(tokenizer)     # assemble vs one encode of the text: ~33k tokens, 300 turns

`synthetic_turns` builds the turns our own loop would produce (ids appended after each
sampled turn, SGLang-style routing captures).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from t1.agent.trajectory import Turn
from t1.tito.stream import assemble


def synthetic_turns(
    tokenizer, n_turns: int = 300, layers: int = 48, k: int = 8, seed: int = 0
) -> list[Turn]:
    """A long trajectory built by our loop (ids appended), with SGLang-style routing captures."""
    from t1.agent import chat

    rng = np.random.default_rng(seed)
    prompt = chat.prompt_ids(
        tokenizer, chat.initial_messages("Find every TODO in the repo and fix it.")
    )
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    turns, start = [], 0
    for i in range(n_turns):
        text = f"Step {i}: look at the next file.\n" + chat.tool_call_text(
            f"grep -n TODO src/mod_{i}.py | head -20"
        )
        sampled = chat.encode(tokenizer, text) + [im_end]
        obs = "".join(f"src/mod_{i}.py:{j * 7}: # TODO case {j}\n" for j in range(2))
        rows = len(prompt) + len(sampled) - 1 - start
        routing = rng.integers(0, 256, (rows, layers, k), dtype=np.uint8)
        nxt, appended = (
            chat.next_prompt(tokenizer, prompt, sampled, obs) if i < n_turns - 1 else (None, [])
        )
        turns.append(
            Turn(prompt, sampled, rng.normal(-1, 0.5, len(sampled)), routing, start, appended)
        )
        start = len(prompt) + len(sampled) - 1
        prompt = nxt
    return turns


def bench_assembly(tokenizer=None, n_turns: int = 300, repeats: int = 3) -> dict[str, Any]:
    """Time `assemble` on a synthetic ~33k-token, 300-turn trajectory vs one `encode` of its text."""
    if tokenizer is None:
        from t1.agent.tokenizer_train import bpe_tokenizer

        tokenizer = bpe_tokenizer()
    turns = synthetic_turns(tokenizer, n_turns)
    asm_s, enc_s = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        asm = assemble(turns, tokenizer)
        asm_s.append(time.perf_counter() - t0)
    text = tokenizer.decode(asm.segments[0].ids.tolist(), skip_special_tokens=False)
    for _ in range(repeats):
        t0 = time.perf_counter()
        tokenizer.encode(text, add_special_tokens=False)
        enc_s.append(time.perf_counter() - t0)
    return {
        "turns": n_turns,
        "tokens": int(len(asm.segments[0])),
        "loss_tokens": asm.audit.loss_tokens,
        "relations": asm.audit.relations,
        "assemble_s": min(asm_s),
        "encode_s": min(enc_s),
        "ratio": min(asm_s) / min(enc_s),
    }

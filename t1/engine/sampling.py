"""Sampling one token from logits: temperature, top-p, and the logprob the engine reports.

    token, logprob = sample_token(logits, temperature=1.0, top_p=0.95, generator=gen)

The logprob conventions (temperature-scaled, untruncated by top-p): t1/engine/base.py.
"""

from __future__ import annotations

import torch


def sample_token(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> tuple[int, float]:
    """Draw one id from logits [V] (float32). Returns (id, log p(id) under logits / temperature).

    temperature 0 -> argmax with the temperature-1 log-softmax; top_p < 1 samples from the
    smallest set of ids whose probability reaches top_p (the logprob stays the untruncated one).
    """
    if temperature == 0:
        logp = torch.log_softmax(logits, dim=-1)
        token = int(torch.argmax(logits))
        return token, float(logp[token])
    logp = torch.log_softmax(logits / temperature, dim=-1)
    probs = logp.exp()
    if top_p < 1.0:
        sorted_p, order = probs.sort(descending=True)
        cum = sorted_p.cumsum(0)
        keep = cum - sorted_p < top_p  # always keeps the most likely id
        probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
    token = int(torch.multinomial(probs, 1, generator=generator))
    return token, float(logp[token])

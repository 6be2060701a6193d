"""The language-model synthesizer against `t1 serve` with the tiny model (its output is
garbage): every candidate is rejected with a reason, and a synthesis run still completes."""

from __future__ import annotations

import random

import pytest
from shared_fixtures import t1_serve

from t1.synth import draft
from t1.synth.llm import LLMClient, LLMSynthesizer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from t1.agent.tokenizer import train_bpe
    from t1.config import ModelConfig
    from t1.model.policy import build_policy, save_policy

    root = tmp_path_factory.mktemp("llm-serve")
    texts = [open(__file__).read(), open(draft.__file__).read()] * 3
    tok = train_bpe(texts, vocab_size=600)
    tok.save_pretrained(root / "tok")
    save_policy(build_policy(ModelConfig(), len(tok), seed=0), root / "policy")
    with t1_serve(
        root / "policy", "run: {threads: 1}\nengine: {dtype: float32, max_batch: 2}\n", root
    ) as url:
        yield url, root / "tok"


def test_tiny_model_candidates_are_rejected_with_reasons(served):
    url, tok = served
    client = LLMClient(url, api="sglang", tokenizer=tok, max_tokens=48, timeout=120)
    synth = LLMSynthesizer(client)
    parent = draft.seed_draft(random.Random(0), 0)
    for i in range(3):
        step, reasons, raw = synth.propose(parent, random.Random(i))
        assert step is None
        assert reasons and all(isinstance(r, str) and r for r in reasons)
        assert not reasons[0].startswith("endpoint error"), reasons  # the server answered
        assert isinstance(raw, str)

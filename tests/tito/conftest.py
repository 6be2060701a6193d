"""Fixtures of the TITO tests: every drift case runs with both real tokenizers."""

from __future__ import annotations

import pytest

from t1.agent import tokenizer as T
from t1.agent import tokenizer_train as TT


@pytest.fixture(scope="session", params=["bpe", "qwen3.5"])
def tok(request):
    return TT.bpe_tokenizer() if request.param == "bpe" else T.build_qwen35_tokenizer()

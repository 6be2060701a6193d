"""Fixtures of the TITO tests: every drift case runs with both real tokenizers."""

from __future__ import annotations

import pytest

from t1 import tokenizer as T


@pytest.fixture(scope="session", params=["bpe", "qwen3.5"])
def tok(request):
    return T.bpe_tokenizer() if request.param == "bpe" else T.build_qwen35_tokenizer()

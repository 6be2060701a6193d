"""The `heldout_unseen` split of t1 families: names no training stage ever held.

Disjointness is proven by scanning what the stages of the tiny campaign actually produce or
consume, not by trusting the word pools: the tokenizer corpus (`t1 tokenizer train` without
--corpus, workflow/rules/model.smk), the pre-training rows (t1.train.corpus, decoded), the
rendered training instances (the SFT experts and the PPO pool), the seed tasks of the train
pool (tasks.train_dirs) and the sources of t1 synth (its tasks are rendered from their
templates). A real tokenizer trained by t1.agent.tokenizer_train on the tiny corpus splits every
unseen word into 2 or more tokens.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from t1.agent import tokenizer_train as TT
from t1.config import load_config
from t1.tasks.families import (
    FAMILIES,
    UNSEEN_WORDS,
    WORDS,
    make_split,
    word_pool,
    words_of,
    write_split,
)
from t1.tasks.family_corpus import draw_corpus
from t1.tasks.load import load_task

TINY = "workflow/config/tiny.yaml"
UNSEEN = 8  # per family: 64 instances over the 8 families
SYNTHETIC_NAMES = 0.5  # pretrain.synthetic_names as measured in LOG.md


@pytest.fixture(scope="module")
def cfg():
    return load_config(TINY)


@pytest.fixture(scope="module")
def tok(tmp_path_factory, cfg):
    """The campaign's tokenizer, trained here as its rule does (default corpus, tiny vocab)."""
    out = tmp_path_factory.mktemp("tok")
    return TT.train_tokenizer(out, vocab_size=cfg.tokenizer.vocab_size)


def _split(cfg):
    fc = cfg.families
    names = list(fc.names) or None
    return make_split(cfg.run.seed, fc.train, fc.heldout, names, fc.words, UNSEEN, fc.train_made_up)


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def _dir_texts(d: Path) -> list[str]:
    return [p.read_text() for p in sorted(d.rglob("*")) if p.is_file()]


def test_unseen_split_has_64_instances_named_only_from_the_unseen_pool(tmp_path, cfg):
    split = _split(cfg)
    unseen = split["heldout_unseen"]
    assert len(unseen) == UNSEEN * len(FAMILIES) >= 64
    assert {i.family for i in unseen} == set(FAMILIES)
    for inst in unseen:
        assert words_of(inst.params) <= set(UNSEEN_WORDS), inst
    # file contents too (the text families' lines are drawn from the same pool)
    write_split(split, tmp_path, seed=cfg.run.seed)
    files = [d / "environment" / "files" for d in (tmp_path / "heldout_unseen").iterdir()]
    contents = "".join(t for d in files if d.is_dir() for t in _dir_texts(d))
    assert _words(contents) & set(WORDS) == set()
    assert len(_words(contents) & set(UNSEEN_WORDS)) >= 20
    # the unseen draws have their own stream: train and held-out are those of a split without
    fc = cfg.families
    plain = make_split(cfg.run.seed, fc.train, fc.heldout, None, fc.words, 0, fc.train_made_up)
    # (made-up training instances are indexed after the unseen ones: compare what was drawn)
    drawn = lambda part: [(i.family, i.params) for i in part]  # noqa: E731
    assert drawn(plain["train"]) == drawn(split["train"]) and plain["heldout"] == split["heldout"]
    assert plain["heldout_unseen"] == []
    ids = [i.task_id for part in split.values() for i in part]
    assert len(ids) == len(set(ids))
    for d in sorted((tmp_path / "heldout_unseen").iterdir())[:8]:
        assert load_task(d).workdir == "/app"


def test_no_training_stage_holds_an_unseen_word(tmp_path, cfg, tok):
    from t1.train.copy_warmup import copy_rows
    from t1.train.corpus import corpus_rows

    split = _split(cfg)
    write_split(split, tmp_path / "families", seed=cfg.run.seed)
    stages = {
        "tokenizer corpus": TT.default_corpus(),
        "pre-training rows": tok.batch_decode([r.ids for r in corpus_rows(cfg, tok)]),
        "copy warm-up rows": tok.batch_decode([r.ids for r in copy_rows(cfg, tok)]),
        "family train split (SFT experts, PPO pool)": _dir_texts(tmp_path / "families" / "train"),
        "seed tasks of the train pool": [
            t for d in cfg.tasks.train_dirs for t in TT.task_texts([d], cap_bytes=10**9)
        ],
        "t1 synth templates": [p.read_text() for p in sorted(Path("t1/synth").rglob("*.py"))],
    }
    for stage, texts in stages.items():
        blob = "\n".join(texts).lower()
        assert len(blob) > 1000, stage
        leaked = [w for w in UNSEEN_WORDS if w in blob]  # substrings: stricter than words
        assert not leaked, f"{stage} holds unseen words {leaked}"
    # the scan can fail: it finds the training words where they are, and the unseen words in
    # the unseen split's own rendering
    pretrain = "\n".join(stages["pre-training rows"])
    assert set(word_pool(cfg.families.words)) <= _words(pretrain)
    rendered = "\n".join(_dir_texts(tmp_path / "families" / "heldout_unseen")).lower()
    names = set().union(*(words_of(i.params) for i in split["heldout_unseen"]))
    assert names and all(w in rendered for w in names)


def test_the_trained_tokenizer_splits_every_unseen_word(cfg, tok):
    """As the instruction and the command spell them (after a space): 2+ tokens each, while
    the tiny config's training words are mostly one token (the measure can tell them apart)."""
    pieces = {w: tok.tokenize(" " + w) for w in UNSEEN_WORDS}
    single = [w for w, p in pieces.items() if len(p) < 2]
    assert not single, f"one-token unseen words: {single}"
    assert sum(len(p) >= 3 for p in pieces.values()) >= len(UNSEEN_WORDS) // 2
    trained = word_pool(cfg.families.words)
    assert sum(len(tok.tokenize(" " + w)) == 1 for w in trained) >= len(trained) // 2
    # in context: the instruction of an unseen instance holds each name as its 2+ tokens
    inst = next(i for i in _split(cfg)["heldout_unseen"] if i.family == "copy-file")
    ids = tok.encode(inst.instruction())
    for name in (inst.params["src"], inst.params["dst"]):
        sub = tok.encode(" " + name)
        assert any(ids[k : k + len(sub)] == sub for k in range(len(ids))), name


def test_pretraining_names_half_its_transcripts_with_made_up_multi_token_names(cfg, tok):
    """pretrain.synthetic_names (SYNTHETIC_NAMES: the fraction measured in LOG.md): made-up
    names, thousands of them, none recallable from a list, most of them several tokens, none
    holding an unseen word; corpus_rows reads the key (the tiny config: 0.5)."""
    fc, p = cfg.families, cfg.pretrain
    insts = list(draw_corpus(cfg.run.seed, p.examples, set(), fc.words, SYNTHETIC_NAMES))
    pool = set(word_pool(fc.words))
    made_up = [i for i in insts if not words_of(i.params) <= pool]
    assert abs(len(made_up) / len(insts) - SYNTHETIC_NAMES) < 0.05
    names = set().union(*(words_of(i.params) for i in made_up))
    assert len(names) > 5000 and not names & pool and not names & set(UNSEEN_WORDS)
    assert not [n for n in names if any(u in n for u in UNSEEN_WORDS)]
    pieces = [len(tok.tokenize(" " + n)) for n in sorted(names)]
    assert sum(k >= 2 for k in pieces) / len(pieces) > 0.9
    # the draw can fail: with synthetic 0 every name is the pool's
    plain = draw_corpus(cfg.run.seed, 2000, set(), fc.words)
    assert all(words_of(i.params) <= pool for i in plain)


def test_t1_families_writes_the_unseen_split_beside_the_others(tmp_path):
    from t1.cli import main

    out = tmp_path / "families"
    assert main(["families", "--config", TINY, "--out", str(out), "--heldout-unseen", "2"]) == 0
    doc = json.loads((out / "families.json").read_text())
    assert len(doc["heldout_unseen"]) == 2 * len(FAMILIES)
    assert len(doc["heldout"]) == load_config(TINY).families.heldout * len(FAMILIES)
    assert sorted(p.name for p in (out / "heldout_unseen").iterdir()) == sorted(
        doc["heldout_unseen"]
    )
    assert not set(doc["heldout_unseen"]) & set(doc["train"] + doc["heldout"])
    for d in (out / "heldout_unseen").iterdir():
        params = json.loads((d / "family.json").read_text())["params"]
        assert words_of(params) <= set(UNSEEN_WORDS)


def test_the_pretraining_rows_follow_pretrain_synthetic_names(tok):
    """The key does what it says: 0 names every transcript from the pool; 1 names none from
    it (the tiny config: 0.5)."""
    from t1.train.corpus import corpus_rows

    pool = set(word_pool(load_config(TINY).families.words))
    seen = {}
    for frac in (0.0, 1.0):
        c = load_config(TINY, {"pretrain.examples": 60, "pretrain.synthetic_names": frac})
        text = " ".join(tok.decode(r.ids) for r in corpus_rows(c, tok))
        names = set(re.findall(r"([a-z]+)\.(?:txt|log|csv)", text))
        seen[frac] = names
    assert seen[0.0] and seen[0.0] <= pool
    assert seen[1.0] and not seen[1.0] & pool
    with pytest.raises(ValueError, match="synthetic_names"):
        corpus_rows(load_config(TINY, {"pretrain.synthetic_names": 1.5}), tok)

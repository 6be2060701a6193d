"""`t1 train --stage pretrain`: the generated family transcripts, no --in, a warm-up, resumable."""

from __future__ import annotations

import json

import yaml

from t1.agent.tokenizer_train import BPE_CACHE, bpe_tokenizer
from t1.cli import main as t1_main
from t1.store.metrics_log import read_events


def _setup(tmp_path, **pretrain):
    bpe_tokenizer()  # the cached default tokenizer
    cfg = tmp_path / "cfg.yaml"
    body = {
        "run": {"seed": 0, "deterministic": True},
        "families": {"enabled": True, "train": 1, "heldout": 1, "words": 12},
        "pretrain": {"examples": 24, "batch": 4, "pack": 3, "full_fraction": 0.5,
                     "warmup_steps": 3, "lr": 0.002, **pretrain},
    }  # fmt: skip
    cfg.write_text(yaml.safe_dump(body))
    init = tmp_path / "init"
    assert t1_main(["init-policy", "--config", str(cfg), "--tokenizer", str(BPE_CACHE.expanduser()),
                    "--out", str(init)]) == 0  # fmt: skip
    return cfg, init


def test_pretrain_trains_on_the_corpus_with_a_warmup(tmp_path):
    cfg, init = _setup(tmp_path)
    out = tmp_path / "pretrain"
    args = ["train", "--config", str(cfg), "--stage", "pretrain", "--from", str(init),
            "--tokenizer", str(BPE_CACHE.expanduser()), "--out", str(out)]  # fmt: skip
    assert t1_main(args) == 0
    done = json.loads((out / "DONE.json").read_text())
    steps = read_events(out / "metrics.jsonl", "pretrain_step")
    assert done["steps"] == len(steps) > 3 and (out / "actor").is_dir()
    lrs = [e["lr"] for e in steps]
    assert lrs[:3] == [0.002 / 3, 0.002 * 2 / 3, 0.002] and set(lrs[3:]) == {0.002}
    assert steps[-1]["loss"] < steps[0]["loss"]
    assert t1_main(args) == 0  # DONE: nothing to do


def test_pretrain_refuses_without_examples_or_tokenizer(tmp_path, capsys):
    cfg, init = _setup(tmp_path, examples=0)
    base = ["train", "--config", str(cfg), "--stage", "pretrain", "--from", str(init)]
    assert t1_main([*base, "--tokenizer", str(BPE_CACHE.expanduser()),
                    "--out", str(tmp_path / "a")]) == 2  # fmt: skip
    assert "pretrain.examples is 0" in capsys.readouterr().out
    assert t1_main(["train", "--config", str(cfg), "--stage", "sft", "--from", str(init),
                    "--out", str(tmp_path / "b")]) == 2  # fmt: skip
    assert "needs --in" in capsys.readouterr().out


def test_copy_exercises_are_solved_by_copying_and_only_by_it():
    """Each row: made-up names, ` >`, the same names again; the loss covers the repeat alone,
    whose tokens are exactly the first list's (so copying predicts every one of them); no row
    holds a word of the families' lists (WORDS, UNSEEN_WORDS); the seed fixes the rows."""
    from t1.agent.tokenizer import load_tokenizer
    from t1.config import load_config
    from t1.tasks.families import UNSEEN_WORDS, WORDS
    from t1.train.copy_warmup import SEPARATOR, copy_rows

    bpe_tokenizer()
    tok = load_tokenizer(BPE_CACHE.expanduser())
    cfg = load_config("workflow/config/tiny.yaml", {"pretrain.copy_steps": 5})
    rows = copy_rows(cfg, tok)
    assert len(rows) == 5 * cfg.pretrain.copy_batch
    sep = len(tok.encode(SEPARATOR, add_special_tokens=False))
    for r in rows:
        k = r.loss_mask.index(True)
        assert all(r.loss_mask[k:]) and not any(r.loss_mask[:k])
        assert r.ids[k:] == r.ids[: k - sep]  # the repeat is the list, token for token
        names = tok.decode(r.ids[k:]).split()
        assert 3 <= len(names) <= 8
        stems = {n.split(".")[0] for n in names}
        assert not stems & set(WORDS) and not [n for n in stems for u in UNSEEN_WORDS if u in n]
    assert [r.ids for r in rows] == [r.ids for r in copy_rows(cfg, tok)]
    other = load_config("workflow/config/tiny.yaml", {"pretrain.copy_steps": 5, "run.seed": 1})
    assert [r.ids for r in rows] != [r.ids for r in copy_rows(other, tok)]


def test_pretrain_runs_the_copy_warmup_first_and_starts_the_corpus_from_it(tmp_path):
    """pretrain.copy_steps does what it says: DIR/copy_warmup is a stage of its own (its steps,
    its DONE.json, resumable) and the corpus stage starts from its actor; with 0 there is none
    and the weights differ."""
    from t1.model.policy import load_policy

    tok = str(BPE_CACHE.expanduser())
    outs = {}
    for steps in (0, 4):
        (tmp_path / str(steps)).mkdir()
        cfg, init = _setup(tmp_path / str(steps), copy_steps=steps, copy_batch=4)
        outs[steps] = out = tmp_path / str(steps) / "pretrain"
        args = ["train", "--config", str(cfg), "--stage", "pretrain", "--from", str(init),
                "--tokenizer", tok, "--out", str(out)]  # fmt: skip
        assert t1_main(args) == 0
        assert (out / "copy_warmup").exists() == (steps > 0)
        assert t1_main(args) == 0  # DONE: nothing to do
    warm = outs[4] / "copy_warmup"
    ev = read_events(warm / "metrics.jsonl", "copy_warmup_step")
    assert [e["step"] for e in ev] == [1, 2, 3, 4] and all(e["rows"] == 4 for e in ev)
    assert json.loads((warm / "DONE.json").read_text())["stage"] == "copy_warmup"
    assert read_events(outs[4] / "metrics.jsonl", "pretrain_step")  # then the corpus
    a = load_policy(outs[0] / "actor").state_dict()
    b = load_policy(outs[4] / "actor").state_dict()
    assert any(not (a[k] == b[k]).all() for k in a)


def test_pretrain_lr_decay_reaches_min_lr_at_the_last_step_and_resumes_on_schedule(tmp_path):
    """pretrain.lr_decay does what it says: after the warm-up the corpus stage's rate falls
    (cosine) to pretrain.min_lr at its last step, the copy warm-up keeps pretrain.lr, and a
    stage stopped half way (--max-steps) resumes on the same schedule; an unknown decay style
    or a min_lr above lr is refused, naming the key."""
    import pytest

    from t1.config import ConfigError, load_config

    cfg, init = _setup(tmp_path, lr_decay="cosine", min_lr=0.0002, copy_steps=4, copy_batch=4,
                       examples=48)  # fmt: skip
    tok = str(BPE_CACHE.expanduser())
    base = ["train", "--config", str(cfg), "--stage", "pretrain", "--from", str(init),
            "--tokenizer", tok]  # fmt: skip
    whole, halves = tmp_path / "whole", tmp_path / "halves"
    assert t1_main([*base, "--out", str(whole)]) == 0
    lrs = [e["lr"] for e in read_events(whole / "metrics.jsonl", "pretrain_step")]
    assert len(lrs) >= 7  # 48 transcripts, 3 per packed row or 1 per full row, 4 rows a step
    assert lrs[:3] == [0.002 / 3, 0.002 * 2 / 3, 0.002]
    assert all(a > b for a, b in zip(lrs[2:], lrs[3:], strict=False))
    assert lrs[-1] == pytest.approx(0.0002)
    warm = [
        e["lr"] for e in read_events(whole / "copy_warmup" / "metrics.jsonl", "copy_warmup_step")
    ]
    assert warm[2:] == [0.002, 0.002]
    assert t1_main([*base, "--out", str(halves), "--max-steps", "5"]) == 0
    assert len(read_events(halves / "metrics.jsonl", "pretrain_step")) == 5
    assert t1_main([*base, "--out", str(halves)]) == 0
    resumed = read_events(halves / "metrics.jsonl", "pretrain_step")
    assert [e["lr"] for e in resumed] == lrs

    for over, words in (({"pretrain.lr_decay": "exp"}, "lr_decay must be constant | cosine"),
                        ({"pretrain.min_lr": 0.01}, "min_lr must be in [0, lr")):  # fmt: skip
        with pytest.raises(ConfigError, match=r"cfg\.yaml: pretrain: ") as e:
            load_config(cfg, over)
        assert words in str(e.value)

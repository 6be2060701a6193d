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

"""Pinned inputs: the first segment records hashes, a resume with changed inputs is refused."""

from __future__ import annotations

import json

import pytest

from t1.store.pinning import InputsChanged, digest, pin_inputs


def test_first_call_records_later_calls_refuse_what_changed(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("run: {seed: 1}\n")
    tok = tmp_path / "tokenizer"
    tok.mkdir()
    (tok / "tokenizer.json").write_text('{"model": 1}')
    (tok / ".t1-writer.lock").write_text("pid 1")  # dot files (locks) do not count
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"reward": {"kind": "dense", "scale": 10}}))
    pinned = pin_inputs(manifest, {"config": cfg, "tokenizer": tok})
    assert pinned["tokenizer"]["sha256"] == digest(tok)
    assert json.loads(manifest.read_text())["reward"]["kind"] == "dense"  # other sections kept
    (tok / ".t1-writer.lock").write_text("pid 2")
    pin_inputs(manifest, {"config": cfg, "tokenizer": tok})  # unchanged: fine
    (tok / "tokenizer.json").write_text('{"model": 2}')  # e.g. retrained on another host
    with pytest.raises(InputsChanged, match=r"tokenizer \(.*tokenizer\): sha256") as e:
        pin_inputs(manifest, {"config": cfg, "tokenizer": tok})
    assert "config" not in str(e.value).split("changed")[1]
    (tok / "tokenizer.json").write_text('{"model": 1}')
    pin_inputs(manifest, {"config": cfg, "tokenizer": tok})  # restored: fine again
    tok.rename(tmp_path / "gone")
    with pytest.raises(InputsChanged, match="missing: tokenizer"):
        pin_inputs(manifest, {"config": cfg, "tokenizer": tok})

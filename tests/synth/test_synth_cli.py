"""`t1 synth`, `t1 audit`, `t1 pool` argument handling (no sandbox)."""

from __future__ import annotations

import pytest

from t1.cli import main


def test_synth_rejects_bad_arguments(tmp_path, capsys):
    assert main(["synth", "--out", str(tmp_path / "a"), "--steps", "x-y"]) == 2
    assert "MIN-MAX" in capsys.readouterr().err
    assert main(["synth", "--out", str(tmp_path / "a"), "--steps", "3-1"]) == 2
    assert main(["synth", "--out", str(tmp_path / "a"), "--per-round", "0"]) == 2
    (tmp_path / "b" / "some-task").mkdir(parents=True)
    assert main(["synth", "--out", str(tmp_path / "b"), "--rounds", "0", "--per-round", "1"]) == 2
    assert "already holds" in capsys.readouterr().err


def test_synth_reads_its_config_section(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("synth: {steps_min: 2, steps_max: 1}\n")
    assert main(["synth", "--config", str(cfg), "--out", str(tmp_path / "o")]) == 2
    cfg.write_text("synth: {no_such_key: 1}\n")
    from t1.config import ConfigError

    with pytest.raises(ConfigError, match="no_such_key"):
        main(["synth", "--config", str(cfg), "--out", str(tmp_path / "o")])


def test_audit_and_pool_without_tasks(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["audit", str(tmp_path / "nothing-here")]) in (1, 2)
    assert main(["pool", "--in", str(tmp_path / "empty"), "--out", str(tmp_path / "p")]) == 1

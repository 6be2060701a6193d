"""A run's pinned config (t1/run/campaign.py): merging like Snakemake, --set, validation, writing.

.venv/bin/pytest tests/test_campaign.py -q
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from t1.config import ConfigError
from t1.run.campaign import derive_config, merge, parse_sets, write_config


def test_merge_is_recursive_and_later_wins():
    a = {"run": {"name": "tiny", "seed": 0}, "tasks": {"train_dirs": ["x"]}}
    b = {"run": {"name": "big"}, "tasks": {"train_dirs": ["y", "z"]}}
    assert merge(a, b) == {"run": {"name": "big", "seed": 0}, "tasks": {"train_dirs": ["y", "z"]}}
    assert a["run"]["name"] == "tiny"  # inputs untouched


def test_sets_parse_yaml_values():
    assert parse_sets(["reward.kind=binary", "campaign.segments=4", 'run.name="a=b"']) == {
        "reward.kind": "binary",
        "campaign.segments": 4,
        "run.name": "a=b",
    }
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_sets(["novalue"])


def test_derive_spells_out_defaults_and_names_the_source_on_errors():
    cfg = derive_config({"run": {"name": "x"}}, {"reward.kind": "binary"}, "a.yaml")
    assert cfg["reward"]["kind"] == "binary" and cfg["campaign"]["segments"] >= 1
    with pytest.raises(ConfigError, match=r"a\.yaml \+ b\.yaml: unknown key 'campaign.segmentz'"):
        derive_config({"campaign": {"segmentz": 1}}, {}, "a.yaml + b.yaml")


def test_write_is_atomic_and_leaves_an_identical_file_alone(tmp_path):
    path = tmp_path / "run/config.yaml"
    cfg = derive_config({}, {})
    assert write_config(path, cfg) is True
    mtime = path.stat().st_mtime_ns
    assert write_config(path, cfg) is False and path.stat().st_mtime_ns == mtime
    assert yaml.safe_load(path.read_text()) == cfg
    assert not list(tmp_path.glob("run/*.tmp"))


def test_cli_merges_files_in_order(tmp_path):
    (tmp_path / "a.yaml").write_text("run: {name: a, seed: 1}\n")
    (tmp_path / "b.yaml").write_text("run: {name: b}\n")
    out = tmp_path / "pinned.yaml"
    cmd = [
        sys.executable,
        "-m",
        "t1.cli",
        "run-config",
        "--base",
        str(tmp_path / "a.yaml"),
        str(tmp_path / "b.yaml"),
    ]
    r = subprocess.run(
        [*cmd, "--set=reward.kind=binary", "--out", str(out)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    pinned = yaml.safe_load(out.read_text())
    assert (
        pinned["run"]["name"] == "b"
        and pinned["run"]["seed"] == 1
        and pinned["reward"]["kind"] == "binary"
    )
    (tmp_path / "b.yaml").write_text("run: {nmae: b}\n")
    r = subprocess.run([*cmd, "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 2 and "b.yaml" in r.stderr and "run.nmae" in r.stderr

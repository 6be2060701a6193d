"""The workflow's config logic, in Python (t1/run/campaign.py; workflow/rules/common.smk calls it):
defaults, runs, Snakemake's file order, `--config` overrides, the flags of `t1 run-config`,
the warning when a pinned config moved on."""

from __future__ import annotations

import io
import shlex
import subprocess
import sys

import pytest

from t1.config import Config, to_dict
from t1.run import campaign


def test_lookup_falls_back_to_the_dataclass_default():
    cfg = {"run": {"name": "x"}, "campaign": {"segments": 7}}
    assert campaign.lookup(cfg, "run.name") == "x"
    assert campaign.lookup(cfg, "campaign.segments") == 7
    assert campaign.lookup(cfg, "campaign.keep_checkpoints") == Config().campaign.keep_checkpoints
    assert campaign.lookup({}, "sandbox.backend") == to_dict(Config())["sandbox"]["backend"]
    with pytest.raises(KeyError):
        campaign.lookup(cfg, "campaign.nope")


def test_runs_are_the_dense_run_and_its_binary_and_cold_critic_arms():
    assert campaign.runs("tiny") == {
        "tiny": {"run.name": "tiny"},
        "tiny-binary": {"run.name": "tiny-binary", "reward.kind": "binary"},
        "tiny-cold": {"run.name": "tiny-cold", "critic_warmup.enabled": False},
    }


def test_config_files_directive_first_then_configfile_flags():
    assert campaign.config_files(["a.yaml", "b.yaml"], ["b.yaml", "c.yaml"]) == [
        "a.yaml",
        "b.yaml",
        "c.yaml",
    ]
    assert campaign.config_files(["a.yaml"], []) == ["a.yaml"]


def test_cli_sets_are_what_differs_from_the_files(tmp_path):
    (tmp_path / "a.yaml").write_text("run: {name: a, seed: 1}\ntasks: {train_dirs: [x]}\n")
    (tmp_path / "b.yaml").write_text("run: {name: b}\n")
    files = [tmp_path / "a.yaml", tmp_path / "b.yaml"]
    merged = {"run": {"name": "b", "seed": 1}, "tasks": {"train_dirs": ["x"]}}
    assert campaign.cli_sets(merged, files) == {}
    changed = {"run": {"name": "b", "seed": 5}, "tasks": {"train_dirs": ["x"]}, "ppo": {"x": 1}}
    assert campaign.cli_sets(changed, files) == {"run.seed": 5, "ppo.x": 1}
    (tmp_path / "bad.yaml").write_text("run: [\n")
    with pytest.raises(campaign.ConfigError, match="bad.yaml"):
        campaign.cli_sets(merged, [tmp_path / "bad.yaml"])


def test_set_flags_round_trip_through_the_shell_and_parse_sets():
    sets = {"run.name": "a b=c", "reward.scale": 2.5, "tasks.train_dirs": ["x", "y"], "k": None}
    flags = shlex.split(campaign.set_flags(sets))
    assert all(f.startswith("--set=") for f in flags)
    assert campaign.parse_sets([f.removeprefix("--set=") for f in flags]) == sets


def test_warn_if_pinned_differs(tmp_path):
    runs = campaign.runs("r")
    cfg = {"run": {"name": "r", "results_dir": str(tmp_path)}}
    for run, sets in runs.items():
        campaign.write_config(tmp_path / run / "config.yaml", campaign.derive_config(cfg, sets))
    out = io.StringIO()
    assert campaign.warn_if_pinned_differs(str(tmp_path), runs, cfg, out) == []
    assert out.getvalue() == ""
    moved = {**cfg, "campaign": {"segments": 9}}
    assert len(campaign.warn_if_pinned_differs(str(tmp_path), runs, moved, out)) == len(runs)
    assert out.getvalue().count("NOTE: ") == len(runs) and "r-binary/config.yaml" in out.getvalue()


def test_run_config_is_a_listed_t1_subcommand():
    r = subprocess.run(
        [sys.executable, "-m", "t1.cli", "--help"], capture_output=True, text=True, check=True
    )
    assert "run-config" in r.stdout

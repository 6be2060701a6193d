"""The campaign's pinned config: one YAML per run, derived once, read by every rule of the run.

    t1 run-config --base workflow/config/tiny.yaml \\
        --set run.name=tiny-binary --set reward.kind=binary --out results/tiny-binary/config.yaml

The workflow's `run_config` rule runs exactly that: each run's config is derived from the
config files Snakemake was given (merged in order, later keys win, as Snakemake merges them:
`config_files`), what `--config KEY=VALUE` changed on top of them (`cli_sets`) and the run's
own settings (`runs`: `campaign_binary` sets `reward.kind: binary`), validated with
`t1.config.load_config` (unknown keys are errors) and written with every default spelled out
to `results/<run>/config.yaml`. Every rule of the run reads that file, so a multi-day
campaign keeps the config it started with even when the workflow's YAML is edited later; the
workflow warns when the two differ (`warn_if_pinned_differs`, at parse time). To adopt a
change, edit the pinned file, or delete it and rerun (which reruns the whole run).
workflow/rules/common.smk keeps only the Snakemake glue (`conf`, paths, input functions) and
calls these functions; tests/test_campaign.py and tests/test_run_config.py cover them.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

import yaml

from t1.config import Config, ConfigError, load_config, to_dict
from t1.records import write_atomic


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Recursive dict update (a new dict): mappings merge, everything else is replaced."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_sets(sets: list[str]) -> dict[str, Any]:
    """["a.b=1", "c=x"] -> {"a.b": 1, "c": "x"} (values parsed as YAML scalars)."""
    out = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE with a dotted KEY")
        out[key] = yaml.safe_load(value)
    return out


def derive_config(
    data: dict[str, Any], sets: dict[str, Any], source: str = "config"
) -> dict[str, Any]:
    """The full, validated config (every default spelled out) of `data` with `sets` applied;
    errors name `source` (the files `data` came from)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(data, f)
    try:
        return to_dict(load_config(f.name, overrides=sets))
    except ConfigError as e:
        raise ConfigError(str(e).replace(f.name, source)) from None
    finally:
        os.unlink(f.name)


def render(cfg: dict[str, Any]) -> str:
    head = "# Pinned config of this run (t1 run-config); every rule reads it.\n"
    return head + yaml.safe_dump(cfg, sort_keys=False, default_flow_style=False)


def write_config(path: str | os.PathLike[str], cfg: dict[str, Any]) -> bool:
    """Write atomically; returns False (and leaves the file alone) if it already says the same."""
    path = Path(path)
    text = render(cfg)
    if path.exists() and path.read_text() == text:
        return False
    write_atomic(path, text)
    return True


def read_pinned(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    try:
        return yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        return None


def lookup(config: dict[str, Any], dotted: str) -> Any:
    """config["a"]["b"] for "a.b", falling back to t1.config's default (KeyError if no such key)."""
    node, default = config, to_dict(Config())
    for key in dotted.split("."):
        default = default[key]
        node = node.get(key, default) if isinstance(node, dict) else default
    return node


def runs(name: str) -> dict[str, dict[str, Any]]:
    """The runs of a campaign -> their settings on top of the workflow's config: the dense run
    `name`, its binary-reward arm `name-binary` (`campaign_binary`) and its cold-critic arm
    `name-cold` (`campaign_ablations`). The arms change only what the PPO segments do, so they
    share the dense run's tasks, tokenizer, pre-training, SFT and critic warm-up
    (workflow/rules/common.smk `base`)."""
    return {
        name: {"run.name": name},
        f"{name}-binary": {"run.name": f"{name}-binary", "reward.kind": "binary"},
        f"{name}-cold": {"run.name": f"{name}-cold", "critic_warmup.enabled": False},
    }


def config_files(configfiles: Iterable[Any], overwrite: Iterable[Any]) -> list[str]:
    """Config files in Snakemake's precedence: the `configfile:` directive's, then
    `--configfile`'s (Snakemake's `workflow.configfiles`, `workflow.overwrite_configfiles`)."""
    overwrite = [str(f) for f in overwrite]
    return [str(f) for f in configfiles if str(f) not in overwrite] + overwrite


def merge_files(paths: Iterable[str | os.PathLike[str]]) -> dict[str, Any]:
    """The YAML files merged in order (later keys win); errors name the file."""
    data: dict[str, Any] = {}
    for path in paths:
        try:
            data = merge(data, yaml.safe_load(Path(path).read_text()) or {})
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{path}: {e}") from None
    return data


def leaves(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1} (lists and scalars are leaves)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(leaves(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def cli_sets(config: dict[str, Any], files: Iterable[str | os.PathLike[str]]) -> dict[str, Any]:
    """The dotted keys Snakemake's merged `config` holds with another value than the files
    say: what `--config KEY=VALUE` changed on top of them."""
    from_files = leaves(merge_files(files))
    missing = object()
    return {k: v for k, v in leaves(config).items() if from_files.get(k, missing) != v}


def set_flags(sets: dict[str, Any]) -> str:
    """`--set=KEY=VALUE` flags for `t1 run-config`, values as JSON (a YAML subset), quoted."""
    return " ".join(shlex.quote(f"--set={k}={json.dumps(v)}") for k, v in sets.items())


def warn_if_pinned_differs(
    results: str, all_runs: dict[str, dict[str, Any]], config: dict[str, Any],
    stream: IO[str] | None = None,
) -> list[str]:  # fmt: skip
    """A run keeps the config it started with; say so (on `stream`, default stderr) for every
    run whose pinned results/<run>/config.yaml differs from what `config` derives now.
    Returns the paths that differ."""
    differ = []
    for run, sets in all_runs.items():
        path = f"{results}/{run}/config.yaml"
        old = read_pinned(path)
        if old is not None and old != derive_config(dict(config), sets):
            differ.append(path)
            print(
                f"NOTE: {path} (pinned when the run started) differs from the workflow's "
                "config; the run goes on with its pinned file (delete it to start the run over).",
                file=stream or sys.stderr,
            )
    return differ


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base", nargs="+", required=True, help="config YAML files, merged in order"
    )
    parser.add_argument("--set", action="append", default=[], help="dotted KEY=VALUE (repeatable)")
    parser.add_argument(
        "--out", required=True, help="the pinned config (results/<run>/config.yaml)"
    )


def main(args: argparse.Namespace) -> int:
    try:
        cfg = derive_config(merge_files(args.base), parse_sets(args.set), " + ".join(args.base))
    except ConfigError as e:
        print(f"t1 run-config: {e}", file=sys.stderr)
        return 2
    changed = write_config(args.out, cfg)
    print(f"{args.out}: {'written' if changed else 'unchanged'}")
    return 0

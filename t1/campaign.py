"""The campaign's pinned config: one YAML per run, derived once, read by every rule of the run.

    python -m t1.campaign config --base workflow/config/tiny.yaml \\
        --set run.name=tiny-binary --set reward.kind=binary --out results/tiny-binary/config.yaml

The workflow (workflow/rules/common.smk) derives each run's config from the config files
Snakemake was given (merged in order, later keys win, as Snakemake merges them) plus the run's
own settings (`campaign_binary` sets `reward.kind: binary`), validates it with
`t1.config.load_config` (unknown keys are errors) and writes it with every default spelled
out to `results/<run>/config.yaml`. Every rule of the run reads that file, so a multi-day
campaign keeps the config it started with even when the workflow's YAML is edited later; the
workflow warns when the two differ (`derive_config` here, compared at parse time). To adopt a
change, edit the pinned file, or delete it and rerun (which reruns the whole run).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from t1.config import ConfigError, load_config, to_dict


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
    head = "# Pinned config of this run (python -m t1.campaign config); every rule reads it.\n"
    return head + yaml.safe_dump(cfg, sort_keys=False, default_flow_style=False)


def write_config(path: str | os.PathLike[str], cfg: dict[str, Any]) -> bool:
    """Write atomically; returns False (and leaves the file alone) if it already says the same."""
    path = Path(path)
    text = render(cfg)
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return True


def read_pinned(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    try:
        return yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        return None


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m t1.campaign", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("config", help="derive, validate and write a run's pinned config")
    c.add_argument("--base", nargs="+", required=True, help="config YAML files, merged in order")
    c.add_argument("--set", action="append", default=[], help="dotted KEY=VALUE (repeatable)")
    c.add_argument("--out", required=True)
    args = p.parse_args(argv)
    try:
        data: dict[str, Any] = {}
        for base in args.base:
            try:
                data = merge(data, yaml.safe_load(Path(base).read_text()) or {})
            except (OSError, yaml.YAMLError) as e:
                raise ConfigError(f"{base}: {e}") from None
        cfg = derive_config(data, parse_sets(args.set), " + ".join(args.base))
    except ConfigError as e:
        print(f"t1.campaign: {e}", file=sys.stderr)
        return 2
    changed = write_config(args.out, cfg)
    print(f"{args.out}: {'written' if changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(_main())

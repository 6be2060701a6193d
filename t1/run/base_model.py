"""`t1 base-model`: check `model.init_from` against the run's config and link its tokenizer and
weights, in place of `t1 tokenizer` and `t1 init-policy` (workflow/rules/model.smk).

    t1 base-model --config results/R/config.yaml --tokenizer-out results/R/base_model/tokenizer \\
        --out results/R/base_model/policy

The checkpoint directory (an HF Qwen3.5-MoE / Qwen3-MoE release) must hold:
* config.json whose architecture every key of the config's `model:` section (and
  tokenizer.vocab_size) agrees with (t1.model.spec.check; an error per disagreeing key);
* the weights: model.safetensors.index.json and every shard its weight_map names, or one
  model.safetensors;
* the tokenizer: tokenizer.json and tokenizer_config.json, loadable as a t1 tokenizer (the ChatML
  specials and a chat template; t1.agent.tokenizer.load_tokenizer) with no more ids than the
  checkpoint's vocabulary.

Nothing is copied: --tokenizer-out gets symbolic links to the tokenizer files, --out to every
top-level file of the checkpoint (weights included), plus `init_from.json` in each (the absolute
source, the architecture read, the files linked). Both are replaced atomically. Exit 2 naming
every problem when the checkpoint is incomplete or disagrees with the config; nothing is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from t1.records import replace_dir, write_json_atomic

WEIGHTS_INDEX = "model.safetensors.index.json"
# what a tokenizer directory of an HF release holds (those present are linked)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
)
REQUIRED_TOKENIZER = ("tokenizer.json", "tokenizer_config.json")


def missing_files(directory: str | Path) -> list[str]:
    """What the checkpoint directory lacks (config, weights, tokenizer), one line each."""
    d = Path(directory)
    if not d.is_dir():
        return [f"model.init_from: {d} is not a directory"]
    out = []
    if not (d / "config.json").is_file():
        out.append(f"model.init_from: {d}/config.json is missing")
    index = d / WEIGHTS_INDEX
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, AttributeError) as e:
            out.append(f"model.init_from: {index}: no readable weight_map ({e})")
            shards = []
        absent = [s for s in shards if not (d / s).is_file()]
        if absent:
            more = f" (and {len(absent) - 3} more)" if len(absent) > 3 else ""
            out.append(
                f"model.init_from: {index} names {len(absent)} of {len(shards)} shards that are "
                f"missing: {', '.join(absent[:3])}{more}"
            )
        elif not shards:
            out.append(f"model.init_from: {index} names no shards")
    elif not (d / "model.safetensors").is_file():
        out.append(f"model.init_from: {d} has no {WEIGHTS_INDEX} (nor one model.safetensors)")
    for name in REQUIRED_TOKENIZER:
        if not (d / name).is_file():
            out.append(f"model.init_from: {d}/{name} is missing (the checkpoint's tokenizer)")
    return out


def check_checkpoint(cfg, load_tok: bool = True) -> tuple[list[str], dict[str, Any]]:
    """(errors, what was read) for cfg.model.init_from: its files, its architecture against
    cfg (t1.model.spec.check) and, with load_tok, its tokenizer."""
    from t1.model.spec import check, read_shape

    directory = cfg.model.init_from
    if not directory:
        return ["model.init_from is not set"], {}
    errors = missing_files(directory)
    info: dict[str, Any] = {"init_from": str(Path(directory).resolve())}
    if not (Path(directory) / "config.json").is_file():
        return errors, info
    try:
        shape = read_shape(directory)
    except ValueError as e:
        return [*errors, str(e)], info
    info["shape"] = dataclasses.asdict(shape)
    errors += check(cfg, shape)
    if load_tok and not any("tokenizer" in e for e in errors):
        from t1.agent.tokenizer import load_tokenizer

        try:
            tok = load_tokenizer(directory)
        except (OSError, ValueError) as e:
            errors.append(f"model.init_from: tokenizer: {e}")
        else:
            info["tokenizer_ids"] = len(tok)
            if len(tok) > shape.vocab:
                errors.append(
                    f"model.init_from: the tokenizer has {len(tok)} ids, over the checkpoint's "
                    f"vocab_size {shape.vocab}"
                )
    return errors, info


def link_dir(out: str | Path, source: Path, names: list[str], marker: dict[str, Any]) -> Path:
    """`out` (replaced atomically) = symbolic links to source/NAME for each name + init_from.json."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    for name in names:
        os.symlink(source / name, tmp / name)
    write_json_atomic(tmp / "init_from.json", {**marker, "linked": names}, indent=1)
    tmp.chmod(0o755)
    replace_dir(tmp, out)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="the run's config (model.init_from set)")
    parser.add_argument("--tokenizer-out", help="directory of links to the tokenizer files")
    parser.add_argument("--out", help="directory of links to the checkpoint (the initial policy)")
    parser.add_argument("--check-only", action="store_true", help="check and print; link nothing")


def main(args: argparse.Namespace) -> int:
    from t1.config import ConfigError, load_config

    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        print(f"t1 base-model: {e}", file=sys.stderr)
        return 2
    if not args.check_only and not (args.out and args.tokenizer_out):
        print("t1 base-model: --out and --tokenizer-out are required (or --check-only)",
              file=sys.stderr)  # fmt: skip
        return 2
    errors, info = check_checkpoint(cfg)
    if errors:
        print(f"t1 base-model: {args.config}: {len(errors)} problem(s) with model.init_from:",
              file=sys.stderr)  # fmt: skip
        for e in errors:
            print(f"  {e}", file=sys.stderr)
        return 2
    source = Path(info["init_from"])
    print(f"{source}: agrees with {args.config} ({info['shape']['arch']}, "
          f"{info['shape']['layers']} layers, {info['shape']['experts']} experts, "
          f"vocab {info['shape']['vocab']}; tokenizer {info['tokenizer_ids']} ids)")  # fmt: skip
    if args.check_only:
        return 0
    marker = {"init_from": str(source), "config": str(args.config), "shape": info["shape"]}
    tok_names = [n for n in TOKENIZER_FILES if (source / n).is_file()]
    link_dir(args.tokenizer_out, source, tok_names, marker)
    files = sorted(p.name for p in source.iterdir() if p.is_file() and p.name != "init_from.json")
    link_dir(args.out, source, files, marker)
    print(f"{args.tokenizer_out}: {len(tok_names)} tokenizer files linked")
    print(f"{args.out}: {len(files)} checkpoint files linked")
    return 0

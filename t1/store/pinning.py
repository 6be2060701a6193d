"""Pinned inputs: the campaign manifest records the hash of every input at the first segment,
and a resume whose inputs changed is refused with an error naming what changed.

    from t1.store.pinning import pin_inputs, digest
    pin_inputs("results/tiny/manifest.json", {
        "config": "results/tiny/config.yaml", "tokenizer": "results/tiny/tokenizer",
        "sft_actor": "results/tiny/sft/model/actor", "train_pool": "results/tiny/pool/train",
    })
    python -m t1.store.pinning PATH...          # print the digest of files / directories

`digest(path)`: sha256 of a file, or of a directory's regular files (sorted relative paths and
their contents; names starting with "." - locks, temp files - are left out). The manifest's
"inputs" section maps each name to {"path", "sha256"}; other sections (the reward spec) are
kept. The first call records; every later one (each segment, each resume) compares and raises
`InputsChanged` listing every input whose hash differs, with both hashes; an input the first
segment did not record is added. `t1 segment` calls it before its first step.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from t1.records import write_json_atomic

SECTION = "inputs"


class InputsChanged(RuntimeError):
    """An input of the campaign differs from the one its first segment read."""


def digest(path: str | os.PathLike[str]) -> str:
    path = Path(path)
    sha = hashlib.sha256()
    if path.is_file():
        files = [(path.name, path)]
    elif path.is_dir():
        files = sorted(
            (str(p.relative_to(path)), p)
            for p in path.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
    else:
        raise FileNotFoundError(f"{path}: no such input file or directory")
    for rel, p in files:
        sha.update(rel.encode() + b"\0")
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                sha.update(chunk)
        sha.update(b"\0")
    return sha.hexdigest()


def pin_inputs(
    manifest: str | os.PathLike[str], inputs: dict[str, str | os.PathLike[str]]
) -> dict[str, Any]:
    """Record (first call) or check (later calls) the hashes of `inputs` in `manifest`."""
    manifest = Path(manifest)
    data: dict[str, Any] = {}
    if manifest.exists():
        try:
            data = json.loads(manifest.read_text())
        except ValueError as e:
            raise InputsChanged(f"{manifest}: unreadable campaign manifest ({e})") from None
    pinned = dict(data.get(SECTION, {}))
    missing = [f"{name} ({p})" for name, p in inputs.items() if not Path(p).exists()]
    if missing:
        raise InputsChanged(f"{manifest}: inputs missing: {', '.join(missing)}")
    now = {name: {"path": str(p), "sha256": digest(p)} for name, p in inputs.items()}
    changed = [
        f"{name} ({now[name]['path']}): sha256 {pinned[name]['sha256'][:12]} at the first "
        f"segment, {now[name]['sha256'][:12]} now"
        for name in now
        if name in pinned and pinned[name]["sha256"] != now[name]["sha256"]
    ]
    if changed:
        raise InputsChanged(
            f"{manifest}: inputs changed since the campaign's first segment: "
            + "; ".join(changed)
            + ". Restore them, or start a new run (another run.name)"
        )
    added = {k: v for k, v in now.items() if k not in pinned}
    if added:
        data.setdefault("schema_version", 1)
        data.setdefault("status", "running")
        data[SECTION] = {**pinned, **added}
        write_json_atomic(manifest, data, indent=2, sort_keys=True)
    return data.get(SECTION, pinned)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m t1.store.pinning", description="print the digest of files / directories"
    )
    parser.add_argument("paths", nargs="+", metavar="PATH")
    for arg in parser.parse_args(argv).paths:
        print(f"{digest(arg)}  {arg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

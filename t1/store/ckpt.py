"""Atomic checkpoints: a checkpoint either exists whole and verified, or it does not count.

    from t1.store.ckpt import latest_complete
    from t1.store.ckpt_retention import CheckpointManager
    from t1.rng import capture_rng
    mgr = CheckpointManager("results/tiny/ppo/ckpt", keep=3)
    mgr.save(step, {
        "actor": actor.state_dict(), "critic": critic.state_dict(),    # -> safetensors
        "actor_optim": a_opt.state_dict(), "critic_optim": c_opt.state_dict(),  # -> torch
        "rng": capture_rng(),                                           # -> torch
        "data": {"cursor": 17, "epoch": 2, "perm_seed": 1234},          # -> json
        "oversampling": planner.state_dict(), "counters": {...}, "metrics": [...],
    })
    ckpt = latest_complete("results/tiny/ppo/ckpt")    # newest verified one, or None
    actor_state = ckpt.load("actor")

    python -m t1.store.ckpt ROOT [--verify size]             # list checkpoints and their problems

Modules: this one holds the layout (step directories, manifest, marker), verification,
reading and the CLI; writing is t1/store/ckpt_write.py, retention and `CheckpointManager`
t1/store/ckpt_retention.py.

Writing (`CheckpointManager.save`, `ckpt_write.write_checkpoint`): every part goes to a file in a temporary directory
`ROOT/.tmp-step_N-HOST-PID-X`, each file fsynced as written, with its sha256 computed on the
way; `manifest.json` (schema_version, step, parts with file/format/bytes/sha256, meta) is
written and fsynced, then the directory; it is renamed to `ROOT/step_{N:08d}`, the root is
fsynced, and only then the completion marker `COMPLETE` (pinning the manifest's sha256) is
written by temp + rename + fsync. A crash at any point leaves either a `.tmp-*` directory
(ignored, cleaned later) or a step directory without `COMPLETE` (partial: reported, skipped).

Reading (`latest_complete`): step directories newest first; the first with a marker, a
manifest matching it, a known schema version and every part present with the recorded size
and checksum wins. Each one passed over on the way is logged (logger "t1.store.ckpt") and written to
the incident log (`ROOT/incidents.jsonl` unless given) as `checkpoint_partial` or
`checkpoint_corrupt`, naming the file and the problem.

Retention (keep the newest K marked checkpoints; remove older partial ones and stale temp
directories) runs on a background thread after each save; a failure there is logged and
recorded as an incident and never reaches the training loop. Deletion renames to `.trash-*`
first, so a half-deleted directory never looks like a checkpoint.

Part formats, chosen per value (or forced with `formats=`): a mapping of tensors ->
`safetensors`; bytes -> `bytes`; a value that survives a JSON round trip unchanged -> `json`;
anything else (optimizer state, RNG states, tuples, NaN) -> `torch` (loaded with
`weights_only=True`). Loading a part returns what was saved (tensors on the CPU).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from t1.store.incidents import IncidentLog

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
MARKER = "COMPLETE"
INCIDENTS = "incidents.jsonl"
FORMATS = {"safetensors": ".safetensors", "torch": ".pt", "json": ".json", "bytes": ".bin"}
# Conventional part names (not enforced): everything a PPO segment needs to continue bit-for-bit.
PARTS = (
    "actor",
    "critic",
    "actor_optim",
    "critic_optim",
    "rng",
    "data",
    "oversampling",
    "counters",
    "metrics",
)

_STEP_DIR = re.compile(r"^step_(\d+)$")
_CHUNK = 8 << 20
log = logging.getLogger("t1.store.ckpt")


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or read; the message names the path and the problem."""


# ----------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Checkpoint:
    """One complete, verified checkpoint directory."""

    path: Path
    step: int
    manifest: dict[str, Any]

    @property
    def parts(self) -> list[str]:
        return list(self.manifest["parts"])

    @property
    def meta(self) -> dict[str, Any]:
        return self.manifest.get("meta", {})

    def load(self, name: str) -> Any:
        """The value saved as part `name` (tensors on the CPU)."""
        try:
            entry = self.manifest["parts"][name]
        except KeyError:
            raise CheckpointError(
                f"{self.path}: no part {name!r} (has: {', '.join(self.parts)})"
            ) from None
        path = self.path / entry["file"]
        fmt = entry["format"]
        if fmt == "safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        if fmt == "torch":
            import torch

            return torch.load(path, map_location="cpu", weights_only=True)
        if fmt == "json":
            return json.loads(path.read_text())
        if fmt == "bytes":
            return path.read_bytes()
        raise CheckpointError(f"{self.path / MANIFEST}: part {name!r} has unknown format {fmt!r}")

    def load_all(self) -> dict[str, Any]:
        return {name: self.load(name) for name in self.parts}


def step_dir_name(step: int) -> str:
    return f"step_{step:08d}"


def list_step_dirs(root: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """(step, path) of every `step_N` directory under root, newest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    out = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and p.is_dir():
            out.append((int(m.group(1)), p))
    return sorted(out, reverse=True)


# ----------------------------------------------------------------------------- verification


def check(path: str | os.PathLike[str], verify: str = "sha256") -> tuple[str, list[str]]:
    """Status of one checkpoint directory: ("complete" | "partial" | "corrupt", problems).

    verify: "sha256" re-hashes every part (default); "size" checks sizes only (fast, for
    multi-GB checkpoints whose disks are trusted).
    """
    path = Path(path)
    marker = path / MARKER
    if not marker.exists():
        return "partial", [f"{marker}: completion marker missing (write interrupted)"]
    try:
        mark = json.loads(marker.read_text())
        if mark.get("status") != "complete":
            return "corrupt", [f"{marker}: status is {mark.get('status')!r}, not 'complete'"]
    except (OSError, ValueError) as e:
        return "corrupt", [f"{marker}: unreadable ({e})"]
    manifest_path = path / MANIFEST
    try:
        raw = manifest_path.read_bytes()
        manifest = json.loads(raw)
    except FileNotFoundError:
        return "corrupt", [f"{manifest_path}: missing"]
    except (OSError, ValueError) as e:
        return "corrupt", [f"{manifest_path}: unreadable ({e})"]
    if hashlib.sha256(raw).hexdigest() != mark.get("manifest_sha256"):
        return "corrupt", [f"{manifest_path}: sha256 differs from the one in {MARKER}"]
    version = manifest.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        return "corrupt", [
            f"{manifest_path}: schema_version {version!r} (this code reads <= {SCHEMA_VERSION})"
        ]
    problems = []
    for name, entry in manifest.get("parts", {}).items():
        f = path / entry["file"]
        try:
            size = f.stat().st_size
        except FileNotFoundError:
            problems.append(f"{f}: missing (part {name!r})")
            continue
        if size != entry["bytes"]:
            problems.append(f"{f}: {size} bytes, manifest says {entry['bytes']}")
        elif verify == "sha256" and sha256_file(f) != entry["sha256"]:
            problems.append(f"{f}: sha256 mismatch (part {name!r})")
    return ("corrupt", problems) if problems else ("complete", [])


_reported: set[tuple[str, str]] = set()
_reported_lock = threading.Lock()


def latest_complete(
    root: str | os.PathLike[str],
    *,
    verify: str = "sha256",
    incidents: IncidentLog | str | os.PathLike[str] | None = None,
) -> Checkpoint | None:
    """The newest complete, verified checkpoint under root, or None if there is none.

    Partial and corrupt checkpoints newer than it are logged and recorded (once per process
    and problem) in `incidents` (default ROOT/incidents.jsonl), then skipped.
    """
    root = Path(root)
    ilog = (
        incidents
        if isinstance(incidents, IncidentLog)
        else IncidentLog(incidents or root / INCIDENTS)
    )
    for step, path in list_step_dirs(root):
        status, problems = check(path, verify)
        if status == "complete":
            manifest = json.loads((path / MANIFEST).read_text())
            return Checkpoint(path=path, step=step, manifest=manifest)
        for problem in problems:
            key = (str(path), problem)
            with _reported_lock:
                if key in _reported:
                    continue
                _reported.add(key)
            log.warning("checkpoint %s is %s, skipped: %s", path, status, problem)
            ilog.write(
                f"checkpoint_{status}", path=str(path), step=step, problem=problem, action="skipped"
            )
    return None


def sha256_file(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


# ----------------------------------------------------------------------------- CLI


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m t1.store.ckpt", description="list checkpoints under ROOT"
    )
    p.add_argument("root")
    p.add_argument("--verify", choices=("sha256", "size"), default="sha256")
    args = p.parse_args(argv)
    dirs = list_step_dirs(args.root)
    if not dirs:
        print(f"{args.root}: no checkpoints")
        return 1
    for _step, path in dirs:
        status, problems = check(path, args.verify)
        print(f"{path.name}  {status}")
        for problem in problems:
            print(f"    {problem}")
    best = latest_complete(args.root, verify=args.verify, incidents=IncidentLog(None))
    print(f"newest complete: {best.path if best else 'none'}")
    return 0 if best else 1


if __name__ == "__main__":
    sys.exit(_main())

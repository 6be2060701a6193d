"""A built environment layer on disk, as a sandbox reads it at start.

    layer = load_layer(Path("~/.cache/t1/env/<key>").expanduser())   # env, workdir; or an error
    seed_workdir(layer.path, "/app", host_workdir)                    # what the build left in /app

Layout: `<key>/{usr,etc,var,rootfs}/` (the build's overlay upper dirs, stacked as lower layers
by the bwrap sandbox; `rootfs/` holds what it wrote outside /usr, /etc, /var) and
`meta.json` (schema_version 1, status "complete", key, dockerfile, env, workdir, created).
The builder is t1.sandbox.envbuild (it runs the build in a bwrap sandbox); the bwrap backend
reads layers through here, so neither imports the other both ways.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from t1.sandbox.base import SandboxError

__all__ = ["DIRS", "META", "SCHEMA_VERSION", "EnvLayer", "load_layer", "seed_workdir"]

SCHEMA_VERSION = 1
META = "meta.json"
DIRS = ("usr", "etc", "var", "rootfs")


@dataclass
class EnvLayer:
    path: Path
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    cached: bool = False


def load_layer(path: Path) -> EnvLayer:
    """The layer at `path` (its ENV and WORKDIR); a SandboxError naming meta.json otherwise."""
    meta_path = Path(path) / META
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SandboxError(f"{meta_path}: not a built environment layer ({e})") from None
    if meta.get("status") != "complete":
        raise SandboxError(f"{meta_path}: layer status is {meta.get('status')!r}, not 'complete'")
    return EnvLayer(Path(path), dict(meta.get("env", {})), meta.get("workdir"))


def seed_workdir(layer: Path, workdir: str, host_dir: Path) -> None:
    """Copy what the build wrote under `workdir` into the sandbox's (fresh) workdir."""
    src = Path(layer) / "rootfs" / workdir.lstrip("/")
    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, host_dir, symlinks=True, dirs_exist_ok=True)

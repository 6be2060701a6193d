"""Environment build (stub)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class EnvLayer:
    path: Path
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None


def load_layer(path: Path) -> EnvLayer:
    meta = json.loads((path / "meta.json").read_text())
    return EnvLayer(path, meta.get("env", {}), meta.get("workdir"))


def seed_workdir(layer: Path, workdir: str, host_dir: Path) -> None:
    src = layer / "rootfs" / workdir.lstrip("/")
    if src.is_dir():
        shutil.copytree(src, host_dir, symlinks=True, dirs_exist_ok=True)

"""Offline tool cache for sandboxes (stub; filled in below)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

INSIDE = "/opt/t1"


def default_dir() -> Path:
    return Path(
        os.environ.get("T1_PROVISION", Path.home() / ".cache" / "t1" / "provision")
    ).expanduser()


@dataclass
class Provision:
    root: Path

    @property
    def layer(self) -> Path | None:
        p = self.root / "layer"
        return p if p.is_dir() else None

    def env(self, network: bool) -> dict[str, str]:
        return {}


def locate(path: Path | None = None) -> Provision | None:
    root = Path(path) if path is not None else default_dir()
    return Provision(root) if (root / "MANIFEST.json").exists() else None


def missing_note(path: Path | None = None) -> str:
    root = Path(path) if path is not None else default_dir()
    return f"no offline provisioning at {root} (run `t1 provision`): pip/uv/apt need a network"

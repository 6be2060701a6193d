"""Skip conditions and helpers shared by test modules in several folders.

Import from here, not from conftest: tests/tito and tests/train have conftest modules of their
own, so `from conftest import` would depend on the order pytest collects in.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def have_bwrap() -> bool:
    return shutil.which("bwrap") is not None


requires_bwrap = pytest.mark.skipif(not have_bwrap(), reason="bubblewrap (bwrap) is not installed")
requires_root_bwrap = pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/bin/bwrap").exists(),
    reason="needs root and bubblewrap (the copy-on-write root mounts overlays)",
)


def slurm_problem() -> str | None:
    """Why the local Slurm (.ci/slurm/up.sh) cannot run a test, or None when it can."""
    for tool in ("sbatch", "sacct", "scontrol", "sinfo"):
        if shutil.which(tool) is None:
            return f"{tool} not installed"
    try:
        state = subprocess.run(
            ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10
        )
        acct = subprocess.run(
            ["sacct", "-n", "-X", "-S", "now-1minutes"], capture_output=True, text=True, timeout=10
        )
    except subprocess.TimeoutExpired:
        return "Slurm does not answer"
    if state.returncode or not re.search(r"idle|mixed|alloc", state.stdout):
        why = state.stdout.strip() or state.stderr.strip()
        return f"no usable node (sinfo: {why}); run .ci/slurm/up.sh"
    if acct.returncode:
        return f"sacct does not answer ({acct.stderr.strip()}); run .ci/slurm/up.sh"
    return None


@contextlib.contextmanager
def t1_serve(model: Path, config_text: str, workdir: Path) -> Iterator[str]:
    """A real `t1 serve` subprocess on a free localhost port; yields its base URL."""
    cfg = workdir / "serve.yaml"
    cfg.write_text(config_text)
    cmd = [sys.executable, "-m", "t1.cli", "serve", "--config", str(cfg), "--model", str(model)]
    proc = subprocess.Popen(
        [*cmd, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            pytest.fail(f"t1 serve did not start: {proc.stderr.read()[-2000:]}")
        yield json.loads(line)["url"]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def serve_replica(model: Path, cfg: Path, extra_env: dict | None = None):
    """A `t1 serve` replica of `model` on a free port (gloo weight groups, 60 s timeout):
    (process, its URL). Stop it with stop_replica."""
    cmd = [sys.executable, "-m", "t1.cli", "serve", "--config", str(cfg), "--model", str(model)]
    proc = subprocess.Popen(
        [*cmd, "--port", "0", "--group-timeout-s", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(extra_env or {})},
    )
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        pytest.fail("t1 serve did not start")
    return proc, json.loads(line)["url"]


def stop_replica(proc) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def replica_checksums(url: str) -> dict:
    """A t1 serve replica's GET /weights_checksum (weight_version, sha256 per tensor)."""
    import urllib.request

    with urllib.request.urlopen(url + "/weights_checksum", timeout=60) as r:
        return json.loads(r.read())

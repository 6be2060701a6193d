"""Verifier of the attack fixture: two files the agent must make; /app exists even for the no-op."""

import subprocess
from pathlib import Path


def test_app_dir_exists():
    assert Path("/app").is_dir()


def test_greeting():
    assert Path("/app/greeting.txt").read_text() == "hello world\n"


def test_script_prints_ok():
    out = subprocess.run(["bash", "/app/run.sh"], capture_output=True, text=True, timeout=10)
    assert out.stdout.strip() == "ok"

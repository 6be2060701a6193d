"""The tree is formatted and linted as ruff is configured in pyproject.toml (the whole tree:
the package, the tests, the task fixtures).

    .venv/bin/pytest tests/test_style.py -q
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUFF = Path(sys.executable).with_name("ruff")


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(RUFF), *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_ruff_format_is_clean():
    r = _ruff("format", "--check", ".")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]


def test_ruff_check_is_clean():
    r = _ruff("check", ".")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]

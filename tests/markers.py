"""Skip marks shared by test modules (import from here, not from conftest: tests/tito and
tests/train have conftest modules of their own, so `from conftest import` depends on the
order pytest collects in)."""

from __future__ import annotations

import shutil

import pytest


def have_bwrap() -> bool:
    return shutil.which("bwrap") is not None


requires_bwrap = pytest.mark.skipif(not have_bwrap(), reason="bubblewrap (bwrap) is not installed")

"""Test tiers: unit tests run by default; `integration`, `slurm`, `e2e` marks select the rest.

The README's test command runs every tier (CI brings up bubblewrap and the local Slurm);
`pytest -m "not integration and not slurm and not e2e"` is the fast unit tier.
"""

from __future__ import annotations

import pytest

REPO = __import__("pathlib").Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root():
    return REPO

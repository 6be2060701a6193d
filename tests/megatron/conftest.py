"""Fixtures of the megatron-core CPU equivalence tests: skip when megatron-core is absent, and
the CPU shim (cpu_shim.py, tests only). Models and rows: megatron_helpers.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from t1.train.megatron.runtime import available  # noqa: E402

OK, WHY = available()


def pytest_collection_modifyitems(config, items):  # noqa: ARG001
    if OK:
        return
    skip = pytest.mark.skip(reason=f"megatron-core not importable: {WHY}")
    for item in items:
        if "tests/megatron" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _cpu_shim():
    import cpu_shim

    cpu_shim.install()
    torch.set_num_threads(2)

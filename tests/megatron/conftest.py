"""Fixtures of the megatron-core CPU equivalence tests: skip when megatron-core is absent, the
CPU shim (cpu_shim.py, tests only), and `ws2`: the one `torchrun --nproc-per-node 2` run of
train_worker.py (gloo) whose results test_megatron_dist.py and test_megatron_parallel.py read.
Models and rows: megatron_helpers.py."""

from __future__ import annotations

import os
import socket
import subprocess
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


@pytest.fixture(scope="session")
def ws2(tmp_path_factory):
    """DIR of train_worker.py's results (one torchrun for every world-size-2 check)."""
    out = tmp_path_factory.mktemp("ws2")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torchrun = Path(sys.executable).with_name("torchrun")
    worker = Path(__file__).parent / "train_worker.py"
    cmd = [str(torchrun), "--nproc-per-node", "2", "--master-port", str(port), str(worker)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    p = subprocess.run(
        [*cmd, "--out", str(out)], capture_output=True, text=True, timeout=500, env=env
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    return out

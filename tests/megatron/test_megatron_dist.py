"""World size 2 on the CPU (gloo) under torchrun: EP 2 and TP 2 against the HF model.

    pytest tests/megatron/test_megatron_dist.py -q

EP 2 runs: logits and replayed logits equal HF's, the replayed record routes every token, and
the two ranks' shards gathered from the live models unshard to the HF weights exactly.
TP 2 cannot run here, measured: megatron-core 0.16.1 requires sequence parallelism for MoE with
TP > 1, and its sequence parallelism refuses the torch norms (`WrappedTorchNorm`: "sequence
parallel not supported by torch LayerNorm") that are all it has without Transformer Engine or
Apex; the test runs it and skips with that message when it is the failure.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
TP_REASON = "sequence parallel not supported by torch LayerNorm"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(tmp_path, tp: int, ep: int):
    out = tmp_path / f"tp{tp}_ep{ep}.json"
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [
        str(torchrun),
        "--nproc-per-node",
        "2",
        "--master-port",
        str(_port()),
        str(HERE / "dist_worker.py"),
        "--tp",
        str(tp),
        "--ep",
        str(ep),
        "--out",
        str(out),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    return p, (json.loads(out.read_text()) if out.exists() else None)


@pytest.mark.slow
def test_ep2_matches_hf(tmp_path):
    p, res = _run(tmp_path, tp=1, ep=2)
    assert p.returncode == 0, p.stderr[-3000:]
    assert res["logits_max_err"] < 2e-5 and res["replayed_logits_max_err"] < 2e-5
    assert res["replay_agreement"] == 1.0
    assert res["unshard_exact"] is True


@pytest.mark.slow
def test_tp2_matches_hf_or_skips_with_the_measured_reason(tmp_path):
    p, res = _run(tmp_path, tp=2, ep=1)
    if p.returncode != 0 and TP_REASON in p.stderr:
        pytest.skip(
            f"TP 2 on the CPU: megatron-core 0.16.1 says {TP_REASON!r} (MoE + TP needs "
            "sequence parallelism, which needs Transformer Engine or Apex norms)"
        )
    assert p.returncode == 0, p.stderr[-3000:]
    assert res["logits_max_err"] < 2e-5 and res["replay_agreement"] == 1.0
    assert res["unshard_exact"] is True

"""Qwen3.5 at tensor parallel 2 with sequence parallelism equals world size 1 (CPU, gloo).

    pytest tests/megatron/test_qwen35_tp_sp.py -q

One `torchrun --nproc-per-node 2` run of qwen35_tp_worker.py measures the tiny Qwen3.5 of
test_qwen35.py (3 Gated DeltaNet + 1 gated attention layer, shared expert, partial RoPE) at
TP 2 + SP in three expert layouts (ETP 1: experts replicated over TP; ETP 2: sharded over TP;
EP 2: spread over the TP ranks), driving the megatron-core GPTModels directly (actor with R3
replay, critic, megatron-core's DistributedDataParallel + finalize_model_grads); the same
`measure` runs at world size 1 in this process. Compared: full-vocabulary logits, the
vocab-parallel log-probs, values, the experts every router dispatched to (the record replayed),
both losses, every gradient (unsharded to full megatron names), the global gradient norm, and
that replicated weights get the same gradient on both TP ranks. Sequence length 69: padded to
a multiple of TP under SP, and longer than one GDN chunk (64).

Negative control: the same actor step with the GDN output norms' weights not marked
`sequence_parallel`, so finalize_model_grads does not sum their gradients over TP: exactly
those weights move away from world size 1 (and apart between the TP ranks).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent
LAYOUTS = ("tp2", "tp2_etp2", "tp2_ep2")
TOL = 2e-5  # fp32, as test_qwen35.py's logits / values tolerance
GRAD_TOL = 1e-5  # relative to the largest gradient of the model


@pytest.fixture(scope="module", autouse=True)
def _shims():
    import cpu_shim
    import fla_shim

    cpu_shim.install()
    fla_shim.install()
    was = torch._dynamo.config.disable
    torch._dynamo.config.disable = True  # as test_qwen35.py: eager (no CPU compile of the norm)
    yield
    torch._dynamo.config.disable = was


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    """{layout: the worker's results at TP 2 + SP}."""
    out = tmp_path_factory.mktemp("qwen35_tp2")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), "--nproc-per-node", "2", "--master-port", str(port)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    p = subprocess.run(
        [*cmd, str(HERE / "qwen35_tp_worker.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=500,
        env=env,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    return {name: torch.load(out / f"{name}.pt", weights_only=False) for name in LAYOUTS}


@pytest.fixture(scope="module")
def ws1(_shims):
    import qwen35_tp_worker as W

    return W.measure()


def _grad_errors(want: dict, got: dict) -> dict[str, float]:
    assert set(want) == set(got)
    return {k: (want[k] - got[k]).abs().max().item() for k in want}


def _scale(grads: dict) -> float:
    return max(g.abs().max().item() for g in grads.values())


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
def test_tp2_sp_forward_and_replayed_routes_equal_world_size_1(tp2, ws1, layout):
    import qwen35_tp_worker as W

    got = tp2[layout]
    assert got["tp"] == 2 and got["sequence_parallel"] is True
    assert ws1["sequence_parallel"] is False
    assert got["gdn_out_norm"] == "RMSNorm"  # model.RMSNorm, not megatron-core's torch norm
    for k in ("logits", "logp", "values"):
        assert got[k].shape == ws1[k].shape, k
        assert (got[k] - ws1[k]).abs().max().item() < TOL * max(1.0, ws1[k].abs().max()), k
    assert torch.equal(got["routes"], ws1["routes"])
    rec = W.inputs()[3].long()
    real = (rec >= 0).all(-1)
    assert real.any() and (~real).any()  # recorded positions and placeholders
    agree = (got["routes"] == rec.sort(-1).values).all(-1)[real]
    assert agree.all()  # every recorded token went to the recorded experts on both TP ranks


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
def test_tp2_sp_losses_gradients_and_norm_equal_world_size_1(tp2, ws1, layout):
    got = tp2[layout]
    for kind in ("actor", "critic"):
        assert abs(got[f"{kind}_loss"] - ws1[f"{kind}_loss"]) < 1e-6 * max(
            1.0, abs(ws1[f"{kind}_loss"])
        )
        errs = _grad_errors(ws1[f"{kind}_grads"], got[f"{kind}_grads"])
        scale = _scale(ws1[f"{kind}_grads"])
        worst = max(errs, key=errs.get)
        assert errs[worst] < GRAD_TOL * scale, (kind, worst, errs[worst], scale)
        assert got[f"{kind}_replicated_spread"] == 0.0, kind  # TP replicas stay identical
        norm, want = got[f"{kind}_grad_norm"], ws1[f"{kind}_grad_norm"]
        assert abs(norm - want) < 1e-6 * want, (kind, norm, want)
    out_norms = [k for k in got["actor_grads"] if k.endswith("self_attention.out_norm.weight")]
    assert len(out_norms) == 3  # the three GDN layers' output norms got (reduced) gradients
    assert all(got["actor_grads"][k].abs().sum() > 0 for k in out_norms)


@pytest.mark.slow
def test_gdn_out_norm_gradient_not_reduced_over_tp_moves_exactly_those_weights(tp2, ws1):
    """The guard above can fail: without the `sequence_parallel` mark, finalize_model_grads
    leaves each TP rank with its own heads' part of the GDN output norm's gradient."""
    got = tp2["tp2"]
    errs = _grad_errors(ws1["actor_grads"], got["broken_actor_grads"])
    scale = _scale(ws1["actor_grads"])
    moved = {k for k, e in errs.items() if e >= GRAD_TOL * scale}
    assert moved == {f"decoder.layers.{i}.self_attention.out_norm.weight" for i in range(3)}
    assert min(errs[k] for k in moved) > 100 * GRAD_TOL * scale, errs
    assert got["broken_replicated_spread"] > 100 * GRAD_TOL * scale  # the replicas part

"""The trainer's distributed weight update through the real code path (issue 25): a megatron
trainer at world size 2 (EP 2, gloo) after a PPO step pushes its actor to two `t1 serve`
replicas (t1/train/push.py -> t1/engine/weight_update.py -> serve's /init_weights_update_group,
/update_weights_from_distributed in checkpoint names); every replica then holds exactly the
step's sharded export (hash per tensor), reports its version, and samples (greedy ids,
logprobs, routes) as a replica that loaded the export from disk. A push that cannot reach one
replica commits nothing anywhere.

    pytest tests/megatron/test_weight_push.py -q
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from megatron_helpers import VOCAB, make_models
from shared_fixtures import replica_checksums, serve_replica, stop_replica

from t1.engine.base import GenerateRequest, SamplingParams
from t1.engine.sglang import SGLangEngine
from t1.engine.weight_update import tensor_checksum, version_of
from t1.model.policy import load_policy, save_policy

CONFIG = "run: {threads: 1}\nengine: {dtype: float32, max_batch: 4}\n"
GREEDY = SamplingParams(temperature=0, max_new_tokens=8)


def _samples(url: str) -> list[tuple]:
    client = SGLangEngine(url, layers=2, k=2, num_experts=8, timeout_s=120)
    out = []
    for seed in (0, 1):
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, VOCAB, (6 + seed,), generator=g).tolist()
        (res,) = client.generate([GenerateRequest(ids, GREEDY)])
        out.append((res.output_ids, res.output_logprobs, res.routing))
    client.close()
    return out


def _free_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed: nobody answers


@pytest.mark.slow
def test_a_trainer_push_equals_the_export_on_every_replica(tmp_path):
    start = tmp_path / "start"
    save_policy(make_models(0)[0], start)
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(CONFIG)
    procs = [serve_replica(start, cfg), serve_replica(start, cfg)]
    urls = [u for _, u in procs]
    before = replica_checksums(urls[0])["tensors"]
    try:
        torchrun = Path(sys.executable).with_name("torchrun")
        worker = Path(__file__).parent / "push_worker.py"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [str(torchrun), "--nproc-per-node", "2", "--master-port", str(port), str(worker)]
        cmd += ["--out", str(tmp_path), "--urls", ",".join(urls), "--dead", _free_url()]
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
        ranks = [json.loads((tmp_path / f"rank_{r}.json").read_text()) for r in (0, 1)]
        export = tmp_path / "step" / "actor"
        version = version_of(export)
        for r in ranks:
            assert r["good"]["ok"] and r["good"]["committed"], r["good"]
            assert not r["bad"]["ok"] and not r["bad"]["committed"], r["bad"]
        lead = ranks[0]["good"]
        assert lead["leader"] and lead["record"]["buckets"] > 1  # EP 2: one stage, rank 0 leads
        assert not ranks[1]["good"]["leader"]
        want = {n: tensor_checksum(t) for n, t in load_policy(export).state_dict().items()}
        assert want != before  # the PPO step moved the weights: the comparison can fail
        for url in urls:
            got = replica_checksums(url)
            assert got["weight_version"] == version  # the failed push committed nothing
            assert got["tensors"] == want
        # sampling equals a replica that loaded the export from disk
        disk, disk_url = serve_replica(export, cfg)
        procs.append((disk, disk_url))
        ref = _samples(disk_url)
        for url in urls:
            for a, b in zip(_samples(url), ref, strict=True):
                assert a[0] == b[0] and np.allclose(a[1], b[1], atol=1e-6)
                assert np.array_equal(a[2], b[2])
    finally:
        for proc, _ in procs:
            stop_replica(proc)

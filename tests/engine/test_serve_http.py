"""`t1 serve` as a real subprocess on a free localhost port, driven by the SGLang client over HTTP."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import numpy as np
import pytest
import torch
from shared_fixtures import t1_serve

from t1.config import ModelConfig
from t1.engine.base import GenerateRequest, SamplingParams
from t1.engine.local import LocalEngine
from t1.engine.sglang import EngineError, SGLangEngine
from t1.engine.weight_update import tensor_checksum
from t1.model.policy import build_policy, save_policy

VOCAB = 512
GREEDY = SamplingParams(temperature=0, max_new_tokens=12)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    save_policy(build_policy(ModelConfig(), VOCAB, seed=0), root / "p0")
    save_policy(build_policy(ModelConfig(), VOCAB, seed=1), root / "p1")
    with t1_serve(
        root / "p0", "run: {threads: 1}\nengine: {dtype: float32, max_batch: 4}\n", root
    ) as url:
        yield url, root


@pytest.fixture(scope="module")
def reference():
    torch.set_num_threads(1)
    return LocalEngine(build_policy(ModelConfig(), VOCAB, seed=0), dtype="float32")


def _client(url: str) -> SGLangEngine:
    return SGLangEngine(url, layers=4, k=2, num_experts=8, timeout_s=120)


def test_health_and_model_info(server):
    url, _ = server
    assert _client(url).health()
    with urllib.request.urlopen(url + "/get_model_info", timeout=10) as r:
        info = json.loads(r.read())
    assert (info["num_hidden_layers"], info["num_experts_per_tok"], info["num_experts"]) == (
        4,
        2,
        8,
    )


def test_multi_turn_with_routed_experts_start_len(server, reference):
    """Three turns over HTTP, sending only the new routing rows; equal to the in-process engine."""
    url, _ = server
    client = _client(url)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (9,), generator=g).tolist()
    start, rows = 0, []
    for turn in range(3):
        req = GenerateRequest(ids, GREEDY, session_id="traj-A", routing_start=start)
        res = client.generate([req])[0]
        ref = reference.generate([GenerateRequest(ids, GREEDY)])[0]
        assert res.output_ids == ref.output_ids
        np.testing.assert_allclose(res.output_logprobs, ref.output_logprobs, atol=1e-5)
        assert np.array_equal(res.routing, ref.routing[start:])
        assert res.routing.shape[0] == len(ids) + len(res.output_ids) - 1 - start
        if turn:
            assert res.cached_tokens == start  # the server's prefix cache served the old part
        rows.append(res.routing)
        start = len(ids) + len(res.output_ids) - 1
        ids = ids + res.output_ids + torch.randint(0, VOCAB, (4,), generator=g).tolist()
    stitched = np.concatenate(rows)
    assert stitched.shape[0] == start  # every position but the last sampled one, once


def test_concurrent_requests_and_batch_body(server, reference):
    url, _ = server
    client = _client(url)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in (4, 7, 5)]
    got = client.generate([GenerateRequest(p, GREEDY) for p in prompts])
    for p, r in zip(prompts, got, strict=True):
        assert r.output_ids == reference.generate([GenerateRequest(p, GREEDY)])[0].output_ids
    body = {
        "input_ids": prompts,
        "sampling_params": {"temperature": 0, "max_new_tokens": 3},
        "rid": "b",
    }
    req = urllib.request.Request(url + "/generate", data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        out = json.loads(r.read())
    assert [o["meta_info"]["id"] for o in out] == ["b-0", "b-1", "b-2"]
    assert [o["output_ids"] for o in out] == [r.output_ids[:3] for r in got]
    assert all("routed_experts" not in o["meta_info"] for o in out)  # not requested


def test_bad_requests_are_400(server):
    url, _ = server
    req = urllib.request.Request(url + "/generate", data=b'{"text": "hello"}', method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 400 and b"input_ids" in e.value.read()
    with pytest.raises(EngineError, match="routing_start|routed_experts_start_len|outside"):
        body_start_too_far = GenerateRequest([1, 2, 3], GREEDY)
        body_start_too_far.routing_start = 7  # bypass the client-side check
        _client(url).generate([body_start_too_far])


def test_abort_over_http(server):
    url, _ = server
    client = _client(url)
    long = SamplingParams(temperature=1.0, max_new_tokens=5000, seed=3)
    box = {}
    t = threading.Thread(
        target=lambda: box.update(
            r=client.generate([GenerateRequest([1, 2, 3], long, request_id="long-1")])[0]
        )
    )
    t.start()
    time.sleep(1.0)
    client.abort("long-1")
    t.join(timeout=120)
    res = box["r"]
    assert res.finish_reason == "abort" and 0 < len(res.output_ids) < 5000


def test_update_weights_from_disk(server):
    url, root = server
    client = _client(url)
    prompt = [5, 6, 7, 8]
    client.update_weights(str(root / "p1"))
    got = client.generate([GenerateRequest(prompt, GREEDY)])[0].output_ids
    want = LocalEngine(build_policy(ModelConfig(), VOCAB, seed=1), dtype="float32")
    assert got == want.generate([GenerateRequest(prompt, GREEDY)])[0].output_ids
    with urllib.request.urlopen(url + "/weights_checksum", timeout=30) as r:
        sums = json.loads(r.read())["tensors"]  # what the replica holds, tensor by tensor
    p1 = build_policy(ModelConfig(), VOCAB, seed=1).state_dict()
    assert sums == {n: tensor_checksum(t) for n, t in p1.items()}
    assert sums != {
        n: tensor_checksum(t) for n, t in build_policy(ModelConfig(), VOCAB).state_dict().items()
    }
    with pytest.raises(EngineError, match="failed"):
        client.update_weights(str(root / "missing"))
    client.update_weights(str(root / "p0"))

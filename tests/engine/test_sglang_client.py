"""The SGLang client against response bodies written to SGLang's documented schema.

Fixtures in tests/engine/fixtures/sglang/ follow SGLang's `/generate` response as assembled in
sgl-project/sglang `python/sglang/srt/managers/tokenizer_manager.py` (meta_info: id,
finish_reason dict, prompt_tokens, completion_tokens, cached_tokens, output_token_logprobs as
[logprob, token_id, text], routed_experts = base64 of raw int32) and the request fields of
`python/sglang/srt/managers/io_struct.py` (`GenerateReqInput`: `routed_experts_start_len`,
"response covers [routed_experts_start_len, seqlen - 1)"); `UpdateWeightFromDiskReqOutput`
gives success/message/num_paused_requests. Model shape: 4 MoE layers, top-2 of 8 experts.
The client over real HTTP is tested against `t1 serve` in test_serve_http.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from t1.engine.base import GenerateRequest, SamplingParams
from t1.engine.sglang import EngineError, SGLangEngine, finish_type, parse_response, request_body
from t1.model import routing as rt

FIX = Path(__file__).parent / "fixtures" / "sglang"
SHAPE = dict(layers=4, k=2, num_experts=8)
IM_END = 151645


def _load(name: str) -> dict:
    return json.loads((FIX / name).read_text())


def test_request_body_uses_sglang_field_names():
    req = GenerateRequest(
        [1, 2, 3],
        SamplingParams(
            temperature=0.7, top_p=0.9, max_new_tokens=64, stop_token_ids=(IM_END,), seed=5
        ),
        session_id="traj-1",
        request_id="traj-1/turn-2",
        routing_start=2,
    )
    body = request_body(req)
    assert body == {
        "input_ids": [1, 2, 3],
        "sampling_params": {
            "temperature": 0.7,
            "top_p": 0.9,
            "max_new_tokens": 64,
            "stop_token_ids": [IM_END],
            "sampling_seed": 5,
        },
        "return_logprob": True,
        "return_routed_experts": True,
        "routed_experts_start_len": 2,
        "rid": "traj-1/turn-2",
        "session_id": "traj-1",
    }
    assert "session_id" not in request_body(req, send_session_id=False)
    assert "sampling_seed" not in request_body(GenerateRequest([1]))["sampling_params"]
    json.dumps(body)  # serializable as is


def test_first_turn_stop_with_full_routing():
    req = GenerateRequest([10, 11, 12, 13, 14, 15], SamplingParams(stop_token_ids=(IM_END,)))
    res = parse_response(req, _load("generate_stop.json"), **SHAPE)
    assert res.output_ids == [4730, 481, IM_END]
    assert res.output_logprobs == pytest.approx([-0.3121, -1.0486, -0.0021])
    assert res.finish_reason == "stop" and res.prompt_tokens == 6
    # seq_len - 1 - start rows: the last sampled token was never fed back.
    assert res.routing.shape == (6 + 3 - 1, 4, 2) and res.routing.dtype == np.uint8
    assert np.array_equal(res.routing, np.load(FIX / "generate_stop.routing.npy"))


def test_second_turn_with_routed_experts_start_len():
    req = GenerateRequest(list(range(12)), SamplingParams(max_new_tokens=4), routing_start=8)
    res = parse_response(req, _load("generate_length_start8.json"), **SHAPE)
    assert res.finish_reason == "length" and res.cached_tokens == 8
    assert res.routing.shape == (12 + 4 - 1 - 8, 4, 2)
    assert np.array_equal(res.routing, np.load(FIX / "generate_length_start8.routing.npy"))
    # The same body read with a wrong start no longer adds up: refused, never padded.
    with pytest.raises(EngineError, match="expected 15 rows"):
        parse_response(
            GenerateRequest(list(range(12))), _load("generate_length_start8.json"), **SHAPE
        )


def test_aborted_request_may_lack_routing():
    res = parse_response(GenerateRequest([1, 2, 3, 4, 5]), _load("generate_abort.json"), **SHAPE)
    assert res.finish_reason == "abort" and res.output_ids == [68] and res.routing is None


def test_missing_routing_is_an_error():
    with pytest.raises(EngineError, match="enable-return-routed-experts"):
        parse_response(GenerateRequest([1, 2, 3]), _load("generate_no_routing.json"), **SHAPE)
    res = parse_response(
        GenerateRequest([1, 2, 3], return_routing=False), _load("generate_no_routing.json"), **SHAPE
    )
    assert res.routing is None and res.output_ids == [562, IM_END]


def test_schema_breaks_are_errors():
    body = _load("generate_stop.json")
    req = GenerateRequest([10, 11, 12, 13, 14, 15])
    bad = json.loads(json.dumps(body))
    bad["meta_info"]["output_token_logprobs"][0][1] = 1
    with pytest.raises(EngineError, match="differ"):
        parse_response(req, bad, **SHAPE)
    with pytest.raises(EngineError, match="multiple"):
        parse_response(req, body, layers=3, k=2, num_experts=8)
    minus = json.loads(json.dumps(body))
    minus["meta_info"]["routed_experts"] = rt.encode_sglang(np.full((8, 4, 2), -1))
    with pytest.raises(EngineError, match="outside"):
        parse_response(req, minus, **SHAPE)
    with pytest.raises(EngineError, match="lacks"):
        parse_response(req, {"text": ""}, **SHAPE)
    assert finish_type("length") == "length"
    with pytest.raises(EngineError):
        finish_type({"type": "weird"})


def test_unreachable_server_names_the_url():
    eng = SGLangEngine("http://127.0.0.1:9", **SHAPE, timeout_s=2)
    assert not eng.health()
    with pytest.raises(EngineError, match="127.0.0.1:9/generate"):
        eng.generate([GenerateRequest([1, 2])])
    with pytest.raises(ValueError, match="engine.url"):
        SGLangEngine("", **SHAPE)

"""The language-model synthesizer: bad answers are rejected with reasons, never a crash.

The endpoint tests use a real HTTP server in this process (stdlib) that answers in the
OpenAI and SGLang schemas with fixed bodies; `t1 serve` with the tiny model (garbage output)
is exercised in test_llm_serve.py.
"""

from __future__ import annotations

import json
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from t1.synth import draft
from t1.synth.llm import LLMClient, LLMSynthesizer, extract_json, parse_candidate

VALID = {
    "instruction": "Write the number of lines of the file /app/notes/n.txt to /app/reports/n_count.txt.",
    "solution": "mkdir -p /app/reports\nwc -l < /app/notes/n.txt > /app/reports/n_count.txt",
    "tests": "def test_count():\n    from pathlib import Path\n    assert Path('/app/reports/n_count.txt').read_text().strip() == '3'\n",
    "files": {"/app/notes/n.txt": "a\nb\nc\n"},
    "category": "data-processing",
}


@pytest.fixture
def parent():
    return draft.seed_draft(random.Random(2), 0)


def _json(obj) -> str:
    return json.dumps(obj)


BAD = [
    ("I'd be happy to help! Here is a task.", "no JSON object"),
    ('{"instruction": "x", "solution": "y",}', "invalid JSON"),
    ('{"instruction": "x", "solution": "echo"', "not closed"),
    ("[1, 2, 3]", "no JSON object"),
    (_json({"instruction": "x", "solution": "echo"}), "missing field(s): tests"),
    (_json({**VALID, "solution": ""}), "'solution' must be a non-empty string"),
    (_json({**VALID, "tests": 42}), "'tests' must be a non-empty string"),
    (_json({**VALID, "tests": "def test_x(:\n  pass"}), "tests do not parse"),
    (_json({**VALID, "tests": "x = 1\n"}), "no top-level test_ function"),
    (_json({**VALID, "solution": "if then fi (("}), "not valid bash"),
    (_json({**VALID, "files": {"/etc/passwd": "x"}}), "outside /app"),
    (_json({**VALID, "files": ["a"]}), "'files' must map paths to text"),
    (
        _json({**VALID, "instruction": "Count the lines."}),
        "instruction does not name: /app/reports/n_count.txt",
    ),
    (_json({**VALID, "instruction": "x" * 5000}), "longer than"),
]


@pytest.mark.parametrize(("raw", "reason"), BAD)
def test_bad_candidates_are_rejected_with_a_reason(parent, raw, reason):
    step, reasons = parse_candidate(raw, parent, 0)
    assert step is None
    assert any(reason in r for r in reasons), reasons


def test_valid_candidate_becomes_a_step(parent):
    raw = "Sure:\n```json\n" + _json(VALID) + "\n```\nDone."
    step, reasons = parse_candidate(raw, parent, 0)
    assert reasons == []
    assert step.assertions == (f"test_s{len(parent.steps) + 1:02d}_llm_count",)
    assert f"def {step.assertions[0]}(" in step.tests
    assert [f.path for f in step.files] == ["/app/notes/n.txt"]
    assert step.category == "data-processing"
    child = draft.with_step(parent, step, 1, origin="llm")
    assert child.new_assertions == [f"test_outputs::{step.assertions[0]}"]


def test_candidate_over_an_existing_file_is_rejected(parent):
    existing = parent.steps[0].files[0].path if parent.steps[0].files else parent.artifacts[0].path
    bad = {**VALID, "files": {existing: "x"}, "instruction": VALID["instruction"] + f" {existing}"}
    step, reasons = parse_candidate(_json(bad), parent, 0)
    assert step is None and any("already exists" in r for r in reasons)


def test_extract_json_handles_fences_and_escapes():
    obj, why = extract_json('text ```json\n{"a": "b}\\"c", "n": {"m": [1]}}\n``` more {')
    assert why is None and obj == {"a": 'b}"c', "n": {"m": [1]}}


class _Stub:
    """A real HTTP server answering each POST with the next body of `bodies`."""

    def __init__(self, bodies: list):
        self.bodies = list(bodies)
        self.requests: list[tuple[str, dict]] = []
        stub = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append((self.path, body))
                status, payload = stub.bodies.pop(0) if stub.bodies else (500, {"error": "empty"})
                data = (
                    payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                )
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def _chat(content):
    return 200, {"choices": [{"message": {"role": "assistant", "content": content}}]}


def test_openai_endpoint_answers_are_parsed_or_rejected(parent):
    stub = _Stub(
        [
            _chat("garbage tokens <|im_end|> )))"),
            _chat('{"instruction": 1'),
            (200, {"unexpected": True}),
            (500, {"error": "overloaded"}),
            (200, "not json at all"),
            _chat(_json(VALID)),
        ]
    )
    try:
        synth = LLMSynthesizer(LLMClient(stub.url, api="openai", model="m", timeout=10))
        results = [synth.propose(parent, random.Random(i)) for i in range(6)]
    finally:
        stub.close()
    reasons = [r for _, r, _ in results]
    assert [s is None for s, _, _ in results] == [True] * 5 + [False]
    assert "no JSON object" in reasons[0][0]
    assert "not closed" in reasons[1][0] or "invalid JSON" in reasons[1][0]
    assert "choices[0].message.content" in reasons[2][0]
    assert "HTTP 500" in reasons[3][0]
    assert "not JSON" in reasons[4][0]
    assert results[5][0].params["model"] == "m"
    path, body = stub.requests[0]
    assert path == "/v1/chat/completions"
    assert body["model"] == "m" and body["messages"][0]["role"] == "system"
    assert "The task so far" in body["messages"][1]["content"]


def test_sglang_text_endpoint(parent):
    stub = _Stub(
        [(200, {"text": _json(VALID), "meta_info": {}}), (200, {"text": "", "output_ids": [1, 2]})]
    )
    try:
        synth = LLMSynthesizer(LLMClient(stub.url, api="sglang", timeout=10))
        ok, r1, _ = synth.propose(parent, random.Random(0))
        bad, r2, _ = synth.propose(parent, random.Random(1))
    finally:
        stub.close()
    assert ok is not None and r1 == []
    assert bad is None and r2 == ["no JSON object in the response"]
    assert stub.requests[0][0] == "/generate" and "text" in stub.requests[0][1]


def test_unreachable_endpoint_is_a_reason(parent):
    synth = LLMSynthesizer(LLMClient("http://127.0.0.1:9", api="openai", timeout=5))
    step, reasons, raw = synth.propose(parent, random.Random(0))
    assert step is None and reasons[0].startswith("endpoint error:") and raw == ""

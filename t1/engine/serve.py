"""`t1 serve`: the local engine behind SGLang's native HTTP schema.

    t1 serve --config workflow/config/tiny.yaml --model results/tiny/policy/init \
        [--host 127.0.0.1] [--port 30000]      # --port 0 picks a free port

Prints one JSON line `{"url": ..., "pid": ...}` once it listens. Endpoints (same bodies as
SGLang's, see t1/engine/sglang.py): POST `/generate` (one request, or a batch when
`input_ids` is a list of lists), POST `/abort_request` {`rid`}, POST
`/update_weights_from_disk` {`model_path`, `weight_version`} -> {`success`, `message`,
`num_paused_requests`}, POST `/close_session` {`session_id`}, GET `/health`,
`/health_generate`, `/get_model_info` (with `weight_version`, as SGLang's). Every `/generate`
answer carries `meta_info.weight_version`, so a client can refuse stale-weight samples
(t1/engine/fleet.py). Rollout workers and the `sglang` client thus talk HTTP to
either server, and the client is tested for real without a GPU.

Concurrency: a `ThreadingHTTPServer` thread per connection; the engine's single worker
thread owns the model (that is the lock around it) and decodes concurrent requests as one
batch. `session_id` keys the prefix cache.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from t1.config import load_config
from t1.engine.base import GenerateRequest, GenerateResult, SamplingParams
from t1.engine.local import LocalEngine
from t1.model import routing as rt


def generate_request(body: dict[str, Any], index: int | None = None) -> GenerateRequest:
    """One GenerateRequest from a `/generate` body (item `index` of a batch body)."""

    def pick(value: Any) -> Any:
        return value[index] if index is not None and isinstance(value, list) else value

    ids = body.get("input_ids")
    if index is not None:
        ids = ids[index]
    if not isinstance(ids, list) or not ids or not all(isinstance(t, int) for t in ids):
        raise ValueError("input_ids must be a non-empty list of ints (text prompts are not served)")
    sp = pick(body.get("sampling_params")) or {}
    temperature = sp.get("temperature", 1.0)
    sampling = SamplingParams(
        temperature=1.0 if temperature is None else float(temperature),
        top_p=float(sp.get("top_p") or 1.0),
        max_new_tokens=int(sp.get("max_new_tokens", 128)),
        stop_token_ids=tuple(int(t) for t in sp.get("stop_token_ids") or ()),
        seed=sp.get("sampling_seed"),
    )
    kwargs: dict[str, Any] = {}
    rid = body.get("rid")
    if isinstance(rid, list):
        rid = rid[index]
    elif rid is not None and index is not None:
        rid = f"{rid}-{index}"  # SGLang expands a batch's string rid as a prefix
    if rid is not None:
        kwargs["request_id"] = str(rid)
    return GenerateRequest(
        input_ids=ids,
        sampling=sampling,
        session_id=pick(body.get("session_id")),
        routing_start=int(body.get("routed_experts_start_len") or 0),
        return_routing=bool(body.get("return_routed_experts", False)),
        **kwargs,
    )


def response_body(
    res: GenerateResult, return_logprob: bool, weight_version: str = "default"
) -> dict[str, Any]:
    """SGLang's `/generate` response for one result."""
    finish: dict[str, Any] = {"type": res.finish_reason}
    if res.finish_reason == "stop" and res.output_ids:
        finish["matched"] = res.output_ids[-1]
    elif res.finish_reason == "length":
        finish["length"] = len(res.output_ids)
    elif res.finish_reason == "abort":
        finish["message"] = "aborted"
    meta: dict[str, Any] = {
        "id": res.request_id,
        "finish_reason": finish,
        "prompt_tokens": res.prompt_tokens,
        "completion_tokens": len(res.output_ids),
        "cached_tokens": res.cached_tokens,
        "weight_version": weight_version,
    }
    if return_logprob:
        meta["output_token_logprobs"] = [
            [lp, t, None] for lp, t in zip(res.output_logprobs, res.output_ids, strict=True)
        ]
    if res.routing is not None:
        meta["routed_experts"] = rt.encode_sglang(res.routing)
    return {"text": "", "output_ids": res.output_ids, "meta_info": meta}


def make_server(
    engine: LocalEngine,
    host: str,
    port: int,
    model_dir: str = "",
    weight_version: str = "default",
    routed_experts: bool = True,
) -> ThreadingHTTPServer:
    """An HTTP server bound to (host, port) serving `engine`; call `serve_forever()` on it."""
    weights = {"path": model_dir, "version": weight_version}  # SGLang's server_args.weight_version

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: Any) -> None:  # quiet: one line per error only
            pass

        def _send(self, status: int, payload: Any) -> None:
            data = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str) -> None:
            self._send(status, {"error": {"message": message}})

        def do_GET(self) -> None:
            if self.path in ("/health", "/health_generate"):
                self._send(200, None)
            elif self.path == "/get_model_info":
                self._send(
                    200,
                    {
                        "model_path": weights["path"],
                        "weight_version": weights["version"],
                        "is_generation": True,
                        "num_hidden_layers": engine.layers,
                        "num_experts_per_tok": engine.k,
                        "num_experts": engine.num_experts,
                    },
                )
            else:
                self._error(404, f"no route GET {self.path}")

        def do_POST(self) -> None:
            try:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("body must be a JSON object")
            except ValueError as e:
                self._error(400, f"bad request body: {e}")
                return
            try:
                status, payload = self._route(body)
            except ValueError as e:
                self._error(400, str(e))
                return
            except Exception as e:  # the server stays up; the caller sees what failed
                self._error(500, f"{type(e).__name__}: {e}")
                return
            self._send(status, payload)

        def _route(self, body: dict[str, Any]) -> tuple[int, Any]:
            if self.path == "/generate":
                batch = (
                    isinstance(body.get("input_ids"), list)
                    and body["input_ids"]
                    and isinstance(body["input_ids"][0], list)
                )
                reqs = (
                    [generate_request(body, i) for i in range(len(body["input_ids"]))]
                    if batch
                    else [generate_request(body)]
                )
                if not routed_experts:  # as SGLang without --enable-return-routed-experts
                    reqs = [dataclasses.replace(r, return_routing=False) for r in reqs]
                version = weights["version"]  # before: a sample is never labelled newer than it is
                results = engine.generate(reqs)
                want_lp = bool(body.get("return_logprob", False))
                out = [response_body(r, want_lp, version) for r in results]
                return 200, out if batch else out[0]
            if self.path == "/abort_request":
                if body.get("abort_all"):
                    raise ValueError("abort_all is not supported by t1 serve; pass rid")
                engine.abort(str(body.get("rid", "")))
                return 200, None
            if self.path == "/update_weights_from_disk":
                path = body.get("model_path")
                if not path:
                    raise ValueError("model_path is required")
                try:
                    engine.update_weights(path)
                except (OSError, ValueError, RuntimeError) as e:
                    return 200, {
                        "success": False,
                        "message": f"{path}: {e}",
                        "num_paused_requests": 0,
                    }
                weights["path"] = str(path)
                if body.get("weight_version") is not None:
                    weights["version"] = str(body["weight_version"])
                return 200, {"success": True, "message": f"loaded {path}", "num_paused_requests": 0}
            if self.path == "/close_session":
                engine.close_session(str(body.get("session_id", "")))
                return 200, None
            return 404, {"error": {"message": f"no route POST {self.path}"}}

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="campaign YAML (engine:, run.threads)")
    parser.add_argument(
        "--model", required=True, help="policy directory (t1 init-policy / a checkpoint)"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000, help="0 = any free port")
    parser.add_argument(
        "--weight-version", default="default", help="as SGLang's: reported with every sample"
    )
    parser.add_argument(
        "--without-routed-experts",
        action="store_true",
        help="never return routed_experts, as SGLang without --enable-return-routed-experts "
        "(the client must abort such trajectories)",
    )


def main(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    engine = LocalEngine.from_config(cfg, args.model)
    server = make_server(
        engine,
        args.host,
        args.port,
        model_dir=str(args.model),
        weight_version=args.weight_version,
        routed_experts=not args.without_routed_experts,
    )
    host, port = server.server_address[:2]
    print(json.dumps({"url": f"http://{host}:{port}", "pid": os.getpid()}), flush=True)

    def stop(signum, frame) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        engine.close()
    print(json.dumps({"stopped": True}), file=sys.stderr, flush=True)
    return 0

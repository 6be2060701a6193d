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

Weights over a process group (SGLang's requests and `{success, message}` answers, HTTP 400 on
failure; the trainer side is t1/engine/weight_update.py): POST `/init_weights_update_group`
{`master_address`, `master_port`, `rank_offset`, `world_size`, `group_name`, `backend`} joins
a custom gloo group (one rank: `rank_offset`; blocks until every rank joined);
`/update_weights_from_distributed` {`names`, `dtypes`, `shapes`, `group_name`, `flush_cache`,
`weight_version`} receives each tensor by broadcast from group rank 0 in that order, then
answers (the call blocks until the broadcast is done, as SGLang's); `/destroy_weights_update_group`
{`group_name`}. A bucket is always received in full (the stream stays in step) but kept only
if every name is a parameter of the model with that shape: it is staged (one staging area for
all groups, so pipeline stages' groups add up), and a request with `flush_cache` (SGLang's
default true) loads everything staged at once, stamps its `weight_version` (if given) and drops
the prefix cache; `names: []` with `flush_cache` is a commit alone. So an update is all or
nothing: a refused bucket or a failed receive drops what was staged and the old weights and
version stay (staged tensors also go when the last open group is destroyed). t1-only: GET
`/weights_checksum` -> {`weight_version`, `tensors`: {name: sha256}, `staged_peak_bytes`}
(`t1.engine.weight_update.tensor_checksum` of each tensor as the model holds it).

Concurrency: a `ThreadingHTTPServer` thread per connection; the engine's single worker
thread owns the model (that is the lock around it) and decodes concurrent requests as one
batch. Loading pushed weights takes a gate that `/generate` holds shared: it waits for the
batches in flight and no batch starts until it is done (never half-updated weights).
`session_id` keys the prefix cache.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch
import torch.distributed as dist

from t1.config import load_config
from t1.engine.base import GenerateRequest, GenerateResult, SamplingParams
from t1.engine.lean import LeanQwen3Moe
from t1.engine.local import LocalEngine
from t1.engine.weight_update import (
    DEFAULT_GROUP,
    init_custom_process_group,
    parse_dtype,
    tensor_checksum,
)
from t1.model import routing as rt
from t1.model.checkpoint_names import slot


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


class _Gate:
    """Many `/generate` calls at once (shared) or one weight load (exclusive, waiting first)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = self._waiting = 0
        self._writer = False

    @contextlib.contextmanager
    def shared(self):
        with self._cond:
            self._cond.wait_for(lambda: not (self._writer or self._waiting))
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self):
        with self._cond:
            self._waiting += 1
            self._cond.wait_for(lambda: not (self._writer or self._readers))
            self._waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class _Receiver:
    """The replica side of SGLang's distributed weight update (see the module docstring)."""

    def __init__(self, engine: LocalEngine, weights: dict, gate: _Gate, timeout_s: float) -> None:
        self.engine, self.weights, self.gate, self.timeout_s = engine, weights, gate, timeout_s
        self.groups: dict[str, dist.ProcessGroup] = {}
        self.staged: dict[str, torch.Tensor] = {}  # received, not yet loaded (every group)
        self.staged_peak_bytes = 0
        self.receiving: set[dist.ProcessGroup] = set()  # groups with a transfer in flight
        self.lock = threading.Lock()  # the tables above

    def init(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = str(body.get("group_name") or DEFAULT_GROUP)
        backend = str(body.get("backend") or "nccl")  # SGLang's default
        if backend != "gloo":
            return _fail(f"t1 serve runs on the CPU: backend must be gloo, got {backend!r}")
        try:
            addr, port = str(body["master_address"]), int(body["master_port"])
            rank, world = int(body["rank_offset"]), int(body["world_size"])
        except (KeyError, TypeError, ValueError) as e:
            return _fail(f"init_weights_update_group: missing or bad field: {e}")
        with self.lock:
            if name in self.groups:
                return _fail(f"weight-update group {name!r} already exists")
        try:  # blocks until every rank has joined (rank 0 is the trainer)
            pg = init_custom_process_group(
                backend, f"tcp://{addr}:{port}", world, rank, name, self.timeout_s
            )
        except Exception as e:  # noqa: BLE001 - answered, the server stays up
            return _fail(f"joining {name!r} at {addr}:{port} as rank {rank}/{world}: {e}")
        with self.lock:
            self.groups[name] = pg
        return 200, {"success": True, "message": f"joined {name!r} as rank {rank} of {world}"}

    def destroy(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = str(body.get("group_name") or DEFAULT_GROUP)
        with self.lock:
            pg = self.groups.pop(name, None)
            if not self.groups:  # nothing can commit what is staged any more
                self.staged.clear()
            busy = pg in self.receiving  # that transfer drops the group when it ends
        if pg is None:
            return _fail(f"no weight-update group {name!r}")
        if not busy:
            _drop(pg)
        return 200, {"success": True, "message": f"destroyed {name!r}"}

    def update(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = str(body.get("group_name") or DEFAULT_GROUP)
        with self.lock:
            pg = self.groups.get(name)
            if pg is None:
                return _fail(f"no weight-update group {name!r} (call /init_weights_update_group)")
            if pg in self.receiving:
                return _fail(f"a transfer is already in flight on weight-update group {name!r}")
            self.receiving.add(pg)
        try:
            return self._update(name, pg, body)
        finally:
            with self.lock:
                self.receiving.discard(pg)
                orphan = self.groups.get(name) is not pg  # destroyed meanwhile
            if orphan:
                _drop(pg)

    def _update(self, name: str, pg: dist.ProcessGroup, body: dict[str, Any]) -> tuple[int, Any]:
        names, dtypes, shapes = body.get("names"), body.get("dtypes"), body.get("shapes")
        try:
            if not (
                isinstance(names, list) and isinstance(dtypes, list) and isinstance(shapes, list)
            ):
                raise ValueError("names, dtypes and shapes must be lists")
            if not len(names) == len(dtypes) == len(shapes):
                raise ValueError(f"{len(names)} names, {len(dtypes)} dtypes, {len(shapes)} shapes")
            if not all(isinstance(n, str) for n in names):
                raise ValueError("names must be strings")
            bufs = [
                torch.empty([int(d) for d in s], dtype=parse_dtype(t))
                for t, s in zip(dtypes, shapes, strict=True)
            ]
        except (TypeError, ValueError) as e:  # cannot receive: the stream is out of step for good
            self.destroy({"group_name": name})
            return _fail(f"update_weights_from_distributed: {e}; group {name!r} destroyed")
        try:
            works = [dist.broadcast(b, group=pg, group_src=0, async_op=True) for b in bufs]
            for w in works:
                w.wait()
        except Exception as e:  # noqa: BLE001 - the sender or the group is gone
            self.destroy({"group_name": name})
            with self.lock:
                self.staged.clear()  # this update is incomplete here
            return _fail(f"receiving {len(bufs)} tensors over {name!r}: {e}; nothing loaded")
        params = self.engine.model.state_dict()
        got = list(zip(names, bufs, strict=True))
        slots = {n: slot(params, n) for n in names}  # checkpoint names too (per expert)
        bad = [
            f"{n} {list(b.shape)}" for n, b in got if slots[n] is None or slots[n].shape != b.shape
        ]
        with self.lock:
            if bad:
                self.staged.clear()
            else:
                self.staged.update(got)
                size = sum(t.nbytes for t in self.staged.values())
                self.staged_peak_bytes = max(self.staged_peak_bytes, size)
            take, staged = dict(self.staged), len(self.staged)
            if not bad and body.get("flush_cache", True):
                self.staged.clear()
        if bad:
            return _fail(
                f"not parameters of this model (name or shape): {bad[:8]}"
                f"{' ...' if len(bad) > 8 else ''}; nothing loaded, weights "
                f"{self.weights['version']!r} kept"
            )
        if not body.get("flush_cache", True):
            return 200, {"success": True, "message": f"staged {staged} tensors"}
        with self.gate.exclusive(), torch.no_grad():
            for n, t in take.items():
                slot(params, n).copy_(t)
            self.engine._sessions.clear()  # the prefix cache was computed with other weights
            if self.engine._lean is not None:  # its fused matrices are copies
                self.engine._lean = LeanQwen3Moe(self.engine.model, self.engine.batch_invariant)
            if body.get("weight_version") is not None:
                self.weights["version"] = str(body["weight_version"])
        return 200, {"success": True, "message": f"loaded {len(take)} tensors"}

    def checksums(self) -> dict[str, Any]:
        with self.gate.shared():
            sums = {n: tensor_checksum(t) for n, t in self.engine.model.state_dict().items()}
            version = self.weights["version"]
        return {
            "weight_version": version,
            "tensors": sums,
            "staged_peak_bytes": self.staged_peak_bytes,
        }


def _fail(message: str) -> tuple[int, dict[str, Any]]:
    return 400, {"success": False, "message": message}  # SGLang's failure answer


def _drop(pg: dist.ProcessGroup) -> None:
    try:
        dist.destroy_process_group(pg)
    except Exception:  # noqa: BLE001 - a broken group: at least close its connections
        with contextlib.suppress(Exception):
            pg.shutdown()


def make_server(
    engine: LocalEngine,
    host: str,
    port: int,
    model_dir: str = "",
    weight_version: str = "default",
    routed_experts: bool = True,
    group_timeout_s: float = 600.0,
) -> ThreadingHTTPServer:
    """An HTTP server bound to (host, port) serving `engine`; call `serve_forever()` on it."""
    weights = {"path": model_dir, "version": weight_version}  # SGLang's server_args.weight_version
    gate = _Gate()
    receiver = _Receiver(engine, weights, gate, group_timeout_s)

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
            elif self.path == "/weights_checksum":
                self._send(200, receiver.checksums())
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
                with gate.shared():  # never during a weight load
                    version = weights["version"]
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
            if self.path == "/init_weights_update_group":
                return receiver.init(body)
            if self.path == "/update_weights_from_distributed":
                return receiver.update(body)
            if self.path == "/destroy_weights_update_group":
                return receiver.destroy(body)
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
    parser.add_argument(
        "--group-timeout-s",
        type=float,
        default=600.0,
        help="a weight-update group's rendezvous and broadcast timeout",
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
        group_timeout_s=args.group_timeout_s,
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

"""The `sglang` engine: an HTTP client of SGLang's native `/generate` API (or of `t1 serve`).

    engine = SGLangEngine("http://127.0.0.1:30000", layers=4, k=2, num_experts=8)
    [res] = engine.generate([GenerateRequest(ids, SamplingParams(...), routing_start=start)])

The server must run with `--enable-return-routed-experts` (SGLang) or be `t1 serve`. Schema
(SGLang `python/sglang/srt/managers/io_struct.py`, `GenerateReqInput`, and
`python/sglang/srt/managers/tokenizer_manager.py`, where meta_info is assembled):

request  `input_ids`, `sampling_params` {`temperature`, `top_p`, `max_new_tokens`,
         `stop_token_ids`, `sampling_seed`}, `return_logprob`, `return_routed_experts`,
         `routed_experts_start_len` (absolute start; the response covers
         `[start, seq_len - 1)`, start in `[0, prompt_tokens]`), `rid`, `session_id`
response `output_ids`; `meta_info`: `id`, `finish_reason` ({"type": "stop", "matched": id} |
         {"type": "length", "length": n} | {"type": "abort", "message": ...}),
         `prompt_tokens`, `completion_tokens`, `cached_tokens`, `output_token_logprobs`
         ([[logprob, token_id, text|null], ...]), `routed_experts` (base64 of raw int32,
         `[seq_len - 1 - start, layers, top_k]`)

Also `/abort_request` {`rid`}, `/update_weights_from_disk` {`model_path`} -> {`success`,
`message`}, `/health`. Only the standard library is used (HTTP through t1.httpjson). Requests of one `generate` call go
out concurrently (SGLang batches them server-side; `routed_experts_start_len` is one int per
HTTP request, so each request travels alone).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from t1.engine.base import GenerateRequest, GenerateResult
from t1.httpjson import get_ok, post_json
from t1.model import routing as rt


class EngineError(RuntimeError):
    """The server answered with an error, or its answer breaks the schema."""


def request_body(req: GenerateRequest, send_session_id: bool = True) -> dict[str, Any]:
    """The JSON body of SGLang's `/generate` for one request."""
    sp = req.sampling
    sampling: dict[str, Any] = {
        "temperature": sp.temperature,
        "top_p": sp.top_p,
        "max_new_tokens": sp.max_new_tokens,
        "stop_token_ids": list(sp.stop_token_ids),
    }
    if sp.seed is not None:
        sampling["sampling_seed"] = sp.seed
    body: dict[str, Any] = {
        "input_ids": list(req.input_ids),
        "sampling_params": sampling,
        "return_logprob": True,
        "return_routed_experts": req.return_routing,
        "routed_experts_start_len": req.routing_start,
        "rid": req.request_id,
    }
    if send_session_id and req.session_id is not None:
        body["session_id"] = req.session_id
    return body


def parse_response(
    req: GenerateRequest, body: dict[str, Any], layers: int, k: int, num_experts: int
) -> GenerateResult:
    """SGLang `/generate` response body -> GenerateResult; raises EngineError on schema breaks.

    A requested routing record that is missing (and the request was not aborted) is an error:
    a missing capture must abort the rollout, never be dropped or padded (DESIGN §2, R³).
    """
    rid = req.request_id
    try:
        meta = body["meta_info"]
        output_ids = [int(t) for t in body["output_ids"]]
        pairs = meta.get("output_token_logprobs") or []
    except (KeyError, TypeError) as e:
        raise EngineError(f"request {rid}: response lacks {e} (keys: {sorted(body)})") from None
    logprobs = [float(p[0]) for p in pairs]
    if [int(p[1]) for p in pairs] != output_ids:
        raise EngineError(f"request {rid}: output_token_logprobs ids differ from output_ids")
    finish = finish_type(meta.get("finish_reason"))
    payload = meta.get("routed_experts")
    routing = None
    if req.return_routing and payload is None and finish != "abort":
        raise EngineError(
            f"request {rid}: no meta_info.routed_experts (is the server started with "
            "--enable-return-routed-experts?)"
        )
    if req.return_routing and payload is not None:
        try:
            routing = rt.decode_sglang(payload, layers, k, num_experts)
        except ValueError as e:
            raise EngineError(f"request {rid}: routed_experts: {e}") from None
    result = GenerateResult(
        request_id=str(meta.get("id", rid)),
        output_ids=output_ids,
        output_logprobs=logprobs,
        finish_reason=finish,
        routing=routing,
        routing_start=req.routing_start,
        prompt_tokens=int(meta.get("prompt_tokens", len(req.input_ids))),
        cached_tokens=int(meta.get("cached_tokens", 0)),
    )
    try:
        result.check(layers, k)
    except ValueError as e:
        raise EngineError(str(e)) from None
    return result


def finish_type(reason: Any) -> str:
    """SGLang's finish_reason (dict, or a bare string in some versions) -> stop | length | abort."""
    kind = reason.get("type") if isinstance(reason, dict) else reason
    if kind in ("stop", "length", "abort"):
        return kind
    raise EngineError(f"unexpected finish_reason {reason!r}")


class SGLangEngine:
    """Engine over HTTP; the model shape (layers, k, experts) comes from the config."""

    def __init__(
        self,
        url: str,
        *,
        layers: int,
        k: int,
        num_experts: int,
        timeout_s: float = 600.0,
        send_session_id: bool = True,
        max_concurrency: int = 64,
    ) -> None:
        if not url:
            raise ValueError("engine.url is empty: the sglang backend needs the server's base URL")
        self.url = url.rstrip("/")
        self.layers, self.k, self.num_experts = layers, k, num_experts
        self.timeout_s = timeout_s
        self.send_session_id = send_session_id
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="t1-sglang")

    @classmethod
    def from_config(cls, cfg) -> SGLangEngine:
        e, m = cfg.engine, cfg.model
        return cls(
            e.url,
            layers=m.layers,
            k=m.top_k,
            num_experts=m.experts,
            timeout_s=e.timeout_s,
            send_session_id=e.send_session_id,
        )

    # ------------------------------------------------------------ Engine protocol

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]:
        return list(self._pool.map(self._generate_one, requests))

    def abort(self, request_id: str) -> None:
        self._post("/abort_request", {"rid": request_id})

    def close_session(self, session_id: str) -> None:
        """Best effort: SGLang's radix cache needs no closing; `t1 serve` frees the session."""
        try:
            self._post("/close_session", {"session_id": session_id})
        except EngineError:
            pass

    def update_weights(self, path: str) -> None:
        out = self._post("/update_weights_from_disk", {"model_path": str(path)})
        if not (isinstance(out, dict) and out.get("success")):
            raise EngineError(f"{self.url}: update_weights_from_disk({path}) failed: {out}")

    def health(self) -> bool:
        return get_ok(self.url + "/health", timeout=5)

    def close(self) -> None:
        self._pool.shutdown(wait=False)

    # ------------------------------------------------------------ HTTP

    def _generate_one(self, req: GenerateRequest) -> GenerateResult:
        body = self._post("/generate", request_body(req, self.send_session_id))
        return parse_response(req, body, self.layers, self.k, self.num_experts)

    def _post(self, path: str, payload: dict[str, Any]) -> Any:
        return post_json(
            self.url + path, payload, timeout=self.timeout_s, error=EngineError, allow_empty=True
        )

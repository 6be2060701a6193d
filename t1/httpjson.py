"""JSON over HTTP, the one client both HTTP callers use (the SGLang engine and the LLM synthesizer).

    from t1.httpjson import post_json, get_ok
    out = post_json("http://127.0.0.1:30000/generate", {"input_ids": [1, 2]}, timeout=600)
    up = get_ok("http://127.0.0.1:30000/health")

Standard library only (urllib). `post_json` sends `payload` as a JSON body and returns the
decoded answer. Every failure (unreachable, HTTP status >= 400 with the first 500 bytes of its
body, an answer that is not JSON, an empty answer unless `allow_empty`) raises `error` (default
`HTTPJSONError`; callers pass their own exception class, e.g. `t1.engine.base.EngineError`)
with a message that starts with the URL. There is no command of its own; `t1/engine/sglang.py`
and `t1/synth/llm.py` call it; tests/test_httpjson.py runs it against a real local server.
(Not named `http.py`: a script run from inside t1/ would shadow the standard library's `http`.)
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from typing import Any

__all__ = ["HTTPJSONError", "post_json", "get_ok"]

DETAIL_BYTES = 500  # of an error response's body, in the message


class HTTPJSONError(RuntimeError):
    """A JSON request failed; the message names the URL and what went wrong."""


def post_json(
    url: str,
    payload: Any,
    *,
    timeout: float,
    error: type[Exception] = HTTPJSONError,
    unreachable: type[Exception] | None = None,
    allow_empty: bool = False,
) -> Any:
    """POST `payload` as JSON to `url`; the decoded JSON answer (None for an empty body when
    `allow_empty`). Raises `error(message)` on any failure; with `unreachable`, a host that did
    not answer (refused, reset, timed out, cut short) raises that class instead, so a caller
    can tell a dead server from a bad request (the rollout fleet does)."""
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            raw = r.read()
    except urllib.error.HTTPError as e:
        detail = e.read()[:DETAIL_BYTES].decode(errors="replace")
        raise error(f"{url}: HTTP {e.code}: {detail}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        raise (unreachable or error)(f"{url}: {type(e).__name__}: {e}") from None
    if not raw.strip():
        if allow_empty:
            return None
        raise error(f"{url}: empty response, not JSON")
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        raise error(f"{url}: response is not JSON: {raw[:200]!r}") from None


def get_ok(url: str, timeout: float = 5.0) -> bool:
    """True iff a GET of `url` answers 200 within `timeout` seconds."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError):
        return False

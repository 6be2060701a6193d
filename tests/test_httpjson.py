"""t1.httpjson against a real local HTTP server: answers, and every failure named with its URL."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from t1.httpjson import HTTPJSONError, get_ok, post_json


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._send(200 if self.path == "/health" else 503, b"")

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/echo":
            assert self.headers["Content-Type"] == "application/json"
            self._send(200, json.dumps({"got": json.loads(body)}).encode())
        elif self.path == "/fail":
            self._send(500, b"boom " * 200)
        elif self.path == "/text":
            self._send(200, b"<html>hi</html>")
        else:
            self._send(200, b" \n")


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


class Mine(RuntimeError):
    pass


def test_round_trip(server):
    assert post_json(server + "/echo", {"a": [1, 2]}, timeout=5) == {"got": {"a": [1, 2]}}


def test_http_error_names_url_status_and_first_bytes_of_body(server):
    with pytest.raises(Mine) as e:
        post_json(server + "/fail", {}, timeout=5, error=Mine)
    msg = str(e.value)
    assert msg.startswith(f"{server}/fail: HTTP 500: boom")
    assert len(msg) < len(server) + 530  # the body is cut at 500 bytes


def test_not_json_and_empty(server):
    with pytest.raises(HTTPJSONError, match="/text: response is not JSON: b'<html>"):
        post_json(server + "/text", {}, timeout=5)
    with pytest.raises(HTTPJSONError, match="/empty: empty response"):
        post_json(server + "/empty", {}, timeout=5)
    assert post_json(server + "/empty", {}, timeout=5, allow_empty=True) is None


def test_unreachable_and_health(server):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(Mine, match=f"^{dead}/x: "):
        post_json(dead + "/x", {}, timeout=2, error=Mine)
    assert get_ok(server + "/health") is True
    assert get_ok(server + "/other") is False
    assert get_ok(dead + "/health", timeout=1) is False

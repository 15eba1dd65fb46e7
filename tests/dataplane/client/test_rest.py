"""``dataplane.client.rest`` against a real HTTP server on 127.0.0.1: the token and JSON
body go out; every status comes back as an answer; a body that is not JSON comes back
as text; an API that cannot be reached raises ``OSError``."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from dataplane.client import rest
from dataplane.client.auth import StaticToken

ANSWERS = {
    "/json": (200, b'{"version": 3}', "application/json"),
    "/missing": (404, b'{"error": {"code": "not_found"}}', "application/json"),
    "/text": (502, b"bad gateway", "text/plain"),
    "/empty": (304, b"", "application/json"),
}


class _Handler(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append({"method": self.command, "headers": dict(self.headers), "body": body})
        status, raw, kind = ANSWERS[self.path]
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("ETag", '"3"')
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    do_GET = do_POST = _answer  # noqa: N815

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_answers_of_every_status_and_shape(server: str) -> None:
    _Handler.seen.clear()
    answer = rest.request(
        "POST", f"{server}/json", body={"a": 1}, tokens=StaticToken("t0k"), timeout_s=5
    )
    assert (answer.status, answer.body, answer.json) == (200, {"version": 3}, True)
    assert answer.headers["ETag"] == '"3"'
    sent = _Handler.seen[-1]
    assert sent["headers"]["Authorization"] == "Bearer t0k"
    assert sent["headers"]["Content-Type"] == "application/json"
    assert json.loads(sent["body"]) == {"a": 1}
    missing = rest.request("GET", f"{server}/missing", timeout_s=5)
    assert (missing.status, missing.body) == (404, {"error": {"code": "not_found"}})
    text = rest.request("GET", f"{server}/text", timeout_s=5)
    assert (text.status, text.body, text.json) == (502, "bad gateway", False)
    empty = rest.request("GET", f"{server}/empty", headers={"If-None-Match": '"3"'}, timeout_s=5)
    assert (empty.status, empty.body) == (304, None)
    assert _Handler.seen[-1]["headers"]["If-None-Match"] == '"3"'


def test_an_api_that_cannot_be_reached_raises_oserror() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(OSError, match="refused"):
        rest.request("GET", f"http://127.0.0.1:{port}/json", timeout_s=5)

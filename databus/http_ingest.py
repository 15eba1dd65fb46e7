"""The agent's HTTP front end (127.0.0.1): writes, health and metrics.

``POST /v1/streams/{stream}/records`` — one write, all of its records or none:

- ``Content-Type: application/json``: ``{"records": [record, ...], "lane": "ppe"}`` or a
  bare array of records. A record: ``{"key": "...", "value": <any JSON>, "headers":
  {"name": "text", ...}, "timestamp_ms": 1700000000000}``; a string value is stored as
  its UTF-8 text, any other JSON value as its compact JSON text, ``null`` as a null
  value; ``key_b64`` / ``value_b64`` carry bytes in base64 instead.
- ``Content-Type: application/octet-stream``: the body is one record's value; the key
  is the ``X-Databus-Key`` header (UTF-8), the lane ``X-Databus-Lane``.
- ``?lane=ppe`` names the write's lane in either form.

Answers: 200 ``{"accepted": n, "delivery": "ack_on_spool", "config_version": v}``, or
``{"error": kind, "message": ...}`` with the status of ``stream.KIND_HTTP_STATUS``
(400 malformed, 401 no or wrong token, 404 unknown stream, 413 a record over the
topic's largest or a body over ``MAX_BODY_BYTES``, 429 spool full, with
``Retry-After``, 503 no configuration yet, 504 ``ack_on_broker`` not confirmed in time).
Every write carries ``Authorization: Bearer <ingest token>``.

``GET /healthz`` (200 with a configuration, 503 without; no token), ``GET /metrics``
(Prometheus; no token), ``GET /v1/streams`` (the streams and their settings; token).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from databus.agent import Agent
from databus.stream import KIND_HTTP_STATUS, WriteError, WriteRecord

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_RECORDS = 100_000
MAX_JSON_DEPTH = 64
_PREFIX = "/v1/streams/"


class IngestServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], agent: Agent, token: str, registry: CollectorRegistry
    ) -> None:
        super().__init__(address, _Handler)
        self.agent = agent
        self.token = token
        self.registry = registry

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.info("HTTP connection from %s failed", client_address, exc_info=True)

    def start(self) -> threading.Thread:
        thread = threading.Thread(
            target=self.serve_forever, args=(0.1,), name="databus-http", daemon=True
        )
        thread.start()
        return thread


class _Handler(BaseHTTPRequestHandler):
    server: IngestServer
    protocol_version = "HTTP/1.1"
    timeout = 60  # a client silent this long mid-request loses its connection
    # An answer goes out as two sends (headers, body): with Nagle's algorithm the second
    # waits for the client's delayed ACK, about 40 ms a write on a kept-alive connection.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    # -- routes ---------------------------------------------------------------------------
    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/healthz":
            health = self.server.agent.health()
            self._json(200 if health["status"] == "ok" else 503, health)
        elif path == "/metrics":
            body = generate_latest(self.server.registry)
            self._send(200, body, CONTENT_TYPE_LATEST)
        elif path == "/v1/streams":
            if self._authorized():
                config = self.server.agent.config
                streams = {} if config is None else config.to_json()["streams"]
                self._json(200, {"version": self.server.agent.version, "streams": streams})
        else:
            self._error(404, "not_found", f"no route {path}")

    def do_POST(self) -> None:
        parts = urlsplit(self.path)
        path = parts.path
        if not (path.startswith(_PREFIX) and path.endswith("/records")):
            self._drain_body()
            self._error(404, "not_found", f"no route {path}")
            return
        stream = unquote(path[len(_PREFIX) : -len("/records")])
        if not self._authorized():
            return
        body = self._body()
        if body is None:
            return
        query = parse_qs(parts.query)
        lane = (query.get("lane") or [self.headers.get("X-Databus-Lane") or ""])[0] or None
        try:
            records, body_lane = self._records(body)
            accepted, delivery, version = self.server.agent.write(
                stream, records, lane or body_lane
            )
        except WriteError as err:
            headers = {}
            if err.retry_after_s is not None:
                headers["Retry-After"] = str(max(1, round(err.retry_after_s)))
            self._error(KIND_HTTP_STATUS[err.kind], err.kind, err.message, headers)
            return
        self._json(200, {"accepted": accepted, "delivery": delivery, "config_version": version})

    # -- parsing --------------------------------------------------------------------------
    def _authorized(self) -> bool:
        given = self.headers.get("Authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            token.strip().encode(), self.server.token.encode()
        ):
            return True
        self._drain_body()
        self._error(
            401, "unauthenticated", "missing or wrong ingest token", {"WWW-Authenticate": "Bearer"}
        )
        return False

    def _body(self) -> bytes | None:
        length = self.headers.get("Content-Length")
        if length is None or not (length.isascii() and length.isdigit()):
            self._error(411 if length is None else 400, "invalid", "a Content-Length is required")
            self.close_connection = True
            return None
        if int(length) > MAX_BODY_BYTES:
            self._error(413, "too_large", f"bodies are at most {MAX_BODY_BYTES} bytes")
            self.close_connection = True
            return None
        body = self.rfile.read(int(length))
        if len(body) != int(length):
            self._error(400, "invalid", "the body ended before its Content-Length")
            self.close_connection = True
            return None
        return body

    def _drain_body(self) -> None:
        length = self.headers.get("Content-Length", "")
        if length.isascii() and length.isdigit() and int(length) <= MAX_BODY_BYTES:
            self.rfile.read(int(length))
        else:
            self.close_connection = True

    def _records(self, body: bytes) -> tuple[list[WriteRecord], str | None]:
        kind = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        if kind == "application/octet-stream":
            key = self.headers.get("X-Databus-Key")
            # http.server reads header values as ISO-8859-1: back to the bytes sent.
            raw_key = None if key is None else key.encode("iso-8859-1")
            return [WriteRecord(raw_key, body)], None
        if kind != "application/json":
            raise WriteError("invalid", f"unsupported Content-Type {kind!r}")
        return parse_json_write(body)

    # -- answering ------------------------------------------------------------------------
    def _json(self, status: int, data: object, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(data).encode(), "application/json", headers)

    def _error(
        self, status: int, kind: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        self._json(status, {"error": kind, "message": message}, headers)

    def _send(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


def parse_json_write(body: bytes) -> tuple[list[WriteRecord], str | None]:
    """The records and lane of a JSON write body; ``WriteError("invalid")`` naming the
    first problem."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as err:
        raise WriteError("invalid", f"the body is not JSON: {err}") from None
    _check_depth(document)
    lane = None
    if isinstance(document, dict):
        unknown = set(document) - {"records", "lane"}
        if unknown:
            raise WriteError("invalid", f"unknown fields {sorted(unknown)}")
        lane = document.get("lane")
        if lane is not None and not isinstance(lane, str):
            raise WriteError("invalid", "lane must be a string")
        document = document.get("records")
    if not isinstance(document, list) or not document:
        raise WriteError("invalid", "records must be a non-empty array")
    if len(document) > MAX_RECORDS:
        raise WriteError("invalid", f"at most {MAX_RECORDS} records per write")
    return [_record(i, item) for i, item in enumerate(document)], lane


_RECORD_FIELDS = {"key", "key_b64", "value", "value_b64", "headers", "timestamp_ms"}


def _record(index: int, item: object) -> WriteRecord:
    where = f"records[{index}]"
    if not isinstance(item, dict):
        raise WriteError("invalid", f"{where} must be an object")
    unknown = set(item) - _RECORD_FIELDS
    if unknown:
        raise WriteError("invalid", f"{where}: unknown fields {sorted(unknown)}")
    key = _bytes_field(item, "key", where, json_value=False)
    value = _bytes_field(item, "value", where, json_value=True)
    timestamp = item.get("timestamp_ms")
    if timestamp is not None and (
        isinstance(timestamp, bool) or not isinstance(timestamp, int) or not 0 <= timestamp < 2**63
    ):
        raise WriteError("invalid", f"{where}.timestamp_ms must be epoch milliseconds")
    return WriteRecord(key, value, _headers(item.get("headers"), where), timestamp)


def _bytes_field(item: dict[str, Any], name: str, where: str, *, json_value: bool) -> bytes | None:
    if f"{name}_b64" in item:
        if name in item:
            raise WriteError("invalid", f"{where}: give {name} or {name}_b64, not both")
        raw = item[f"{name}_b64"]
        if not isinstance(raw, str):
            raise WriteError("invalid", f"{where}.{name}_b64 must be a base64 string")
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise WriteError("invalid", f"{where}.{name}_b64 is not base64") from None
    value = item.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    if not json_value:
        raise WriteError("invalid", f"{where}.{name} must be a string (or {name}_b64)")
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _headers(raw: object, where: str) -> list[tuple[str, bytes | None]]:
    if raw is None:
        return []
    if isinstance(raw, dict):
        items: list[Any] = list(raw.items())
    elif isinstance(raw, list):
        items = raw
    else:
        raise WriteError("invalid", f"{where}.headers must be an object or a list of pairs")
    out: list[tuple[str, bytes | None]] = []
    for pair in items:
        if not (isinstance(pair, list | tuple) and len(pair) == 2 and isinstance(pair[0], str)):
            raise WriteError("invalid", f"{where}.headers: each is a name and a text value")
        name, value = pair
        if value is not None and not isinstance(value, str):
            raise WriteError("invalid", f"{where}.headers.{name} must be text or null")
        out.append((name, None if value is None else value.encode()))
    return out


def _check_depth(document: object) -> None:
    stack = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise WriteError("invalid", f"the body nests deeper than {MAX_JSON_DEPTH} levels")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)

"""A small client of the control plane's REST API, for the commands whose objects live
there (lanes, Databus configurations and agents), not on the brokers.

Standard library only (``urllib``): the SDK distribution gains no dependency. Requests
carry the same bearer token the CLI gives the brokers (``--token``, or a token of
``--token-url`` with the client credentials), and JSON bodies.

Every failure is an ``ApiError``: an answer of 4xx/5xx with the API's error body
(``{"error": {"code", "message", "details"}}``) keeps its code, message and per-field
messages; an API that cannot be reached, or that answers something other than JSON, is
code ``unavailable`` or ``bad_answer``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from dataplane.client.auth import TokenSource

DEFAULT_API_URL = "http://127.0.0.1:8000"
TIMEOUT_S = 30.0
MAX_ANSWER_BYTES = 16 * 1024 * 1024


class ApiError(Exception):
    """The API refused a request, or could not be asked. ``status``: the HTTP status
    (0 when no answer came); ``fields``: the messages per field of the request."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        fields: Mapping[str, list[str]] | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.fields = dict(fields or {})

    def lines(self) -> list[str]:
        """What the CLI prints: ``error: CODE: message``, then one line per field
        message (``  field: message``)."""
        out = [f"error: {self.code}: {self.message}"]
        for name, messages in self.fields.items():
            out.extend(f"  {name}: {message}" if name else f"  {message}" for message in messages)
        return out


class Api:
    """The REST API at ``base_url`` (``http://host:port``, ``/api/v1`` is added)."""

    def __init__(self, base_url: str, credentials: TokenSource | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.credentials = credentials

    def get(self, path: str, query: Mapping[str, str] | None = None) -> Any:
        return self.call("GET", path, query=query)

    def post(self, path: str, body: Mapping[str, Any]) -> Any:
        return self.call("POST", path, body=body)

    def patch(
        self, path: str, body: Mapping[str, Any], query: Mapping[str, str] | None = None
    ) -> Any:
        return self.call("PATCH", path, query=query, body=body)

    def delete(self, path: str, query: Mapping[str, str] | None = None) -> Any:
        return self.call("DELETE", path, query=query)

    def call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> Any:
        """The decoded JSON answer (None for an empty one); ``ApiError`` otherwise."""
        url = self.url(path, query)
        request = urllib.request.Request(url, method=method, headers=self._headers(body))
        if body is not None:
            request.data = json.dumps(body).encode()
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
                return _decoded(answer.read(MAX_ANSWER_BYTES), answer.status)
        except urllib.error.HTTPError as exc:
            raise _refusal(exc) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiError(0, "unavailable", f"cannot reach the API at {url}: {reason}") from None

    def url(self, path: str, query: Mapping[str, str] | None = None) -> str:
        url = f"{self.base_url}/api/v1/{path.lstrip('/')}"
        return f"{url}?{urllib.parse.urlencode(query)}" if query else url

    def _headers(self, body: Mapping[str, Any] | None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.credentials is not None:
            headers["Authorization"] = f"Bearer {self.credentials.token()}"
        return headers


def quoted(segment: str) -> str:
    """One path segment, every reserved character escaped (``/`` too)."""
    return urllib.parse.quote(segment, safe="")


def _decoded(raw: bytes, status: int) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise ApiError(status, "bad_answer", "the API answered something other than JSON") from None


def _refusal(exc: urllib.error.HTTPError) -> ApiError:
    """The API's error body as an ``ApiError`` (a body of another shape: its status)."""
    try:
        error = json.loads(exc.read(MAX_ANSWER_BYTES))["error"]
        code, message, details = str(error["code"]), str(error["message"]), error["details"]
    except (ValueError, KeyError, TypeError):
        return ApiError(exc.code, f"http_{exc.code}", str(exc.reason or "refused"))
    return ApiError(exc.code, code, message, _field_messages(details))


def _field_messages(details: Any) -> dict[str, list[str]]:
    """The ``details`` entries that are messages per field (lists of strings, or a
    nested list field's messages per item)."""
    out: dict[str, list[str]] = {}
    if not isinstance(details, dict):
        return out
    for name, value in details.items():
        messages = _strings(value)
        if messages:
            out[str(name)] = messages
    return out


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return []  # a detail value (``name=...``), not a message
    if isinstance(value, list):
        return [m for item in value for m in ([item] if isinstance(item, str) else _strings(item))]
    if isinstance(value, dict):  # per item index, or per field within the field
        return [
            m if str(key).isdigit() else f"{key}: {m}"
            for key, item in value.items()
            for m in _strings(item)
        ]
    return []

"""A small client of the control plane's REST API, for the commands whose objects live
there (lanes, Databus configurations and agents), not on the brokers.

Calls go through ``dataplane.client.rest`` (standard library only). Requests carry the
same bearer token the CLI gives the brokers (``--token``, or a token of
``--token-url`` with the client credentials), and JSON bodies.

Every failure is an ``ApiError``: an answer of 4xx/5xx with the API's error body
(``{"error": {"code", "message", "details"}}``) keeps its code, message and per-field
messages; an API that cannot be reached, or that answers something other than JSON, is
code ``unavailable`` or ``bad_answer``.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator, Mapping
from http import HTTPStatus
from typing import Any

from dataplane.client import rest
from dataplane.client.auth import TokenSource

DEFAULT_API_URL = "http://127.0.0.1:8000"
TIMEOUT_S = 30.0
_STATUSES = {status.value for status in HTTPStatus}


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
        try:
            answer = rest.request(
                method, url, body=body, tokens=self.credentials, timeout_s=TIMEOUT_S
            )
        except OSError as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiError(0, "unavailable", f"cannot reach the API at {url}: {reason}") from None
        if answer.status >= 400:
            raise _refusal(answer)
        if not answer.json:
            raise ApiError(
                answer.status, "bad_answer", "the API answered something other than JSON"
            )
        return answer.body

    def url(self, path: str, query: Mapping[str, str] | None = None) -> str:
        url = f"{self.base_url}/api/v1/{path.lstrip('/')}"
        return f"{url}?{urllib.parse.urlencode(query)}" if query else url


def quoted(segment: str) -> str:
    """One path segment, every reserved character escaped (``/`` too)."""
    return urllib.parse.quote(segment, safe="")


def _refusal(answer: rest.Answer) -> ApiError:
    """The API's error body as an ``ApiError`` (a body of another shape: its status)."""
    try:
        error = answer.body["error"]
        code, message, details = str(error["code"]), str(error["message"]), error["details"]
    except (KeyError, TypeError):
        reason = HTTPStatus(answer.status).phrase if answer.status in _STATUSES else "refused"
        return ApiError(answer.status, f"http_{answer.status}", reason)
    return ApiError(answer.status, code, message, _field_messages(details))


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


PAGE_LIMIT = 1000


def every_row(api: Api, path: str, query: Mapping[str, str]) -> Iterator[Any]:
    """Every row of a list endpoint (``{"count", "results"}`` pages), page by page."""
    offset = 0
    while True:
        answer = api.get(path, {**query, "limit": str(PAGE_LIMIT), "offset": str(offset)})
        page = answer["results"] if isinstance(answer, dict) else answer
        yield from page
        offset += len(page)
        if not isinstance(answer, dict) or not page or offset >= answer.get("count", 0):
            return


def tenant_query(tenant: str | None) -> dict[str, str]:
    """``?tenant=`` when the caller named one (else the API takes its only tenant)."""
    return {"tenant": tenant} if tenant else {}

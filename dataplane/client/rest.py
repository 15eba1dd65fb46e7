"""One JSON call to the control plane's REST API, standard library only (``urllib``), so
the SDK distribution gains no dependency: the CLI's commands for objects that live in
the control plane (``dataplane.cli.api``) and the Databus agent's configuration watch and
heartbeats (``databus.watch``) both go through ``request``.

A request carries ``Accept: application/json``, a JSON body when one is given, and the
bearer token of ``tokens`` (asked for at each call, so a refreshed token is used). Every
HTTP answer, 4xx and 5xx included, comes back as an ``Answer``; an API that cannot be
reached raises ``OSError`` (``urllib.error.URLError`` is one). At most
``MAX_ANSWER_BYTES`` of an answer are read.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dataplane.client.auth import TokenSource

MAX_ANSWER_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Answer:
    """``status``; ``headers``; ``body``: the decoded JSON (None when empty), or the text
    when it is not JSON (``json`` False)."""

    status: int
    headers: dict[str, str]
    body: Any
    json: bool = True


def request(
    method: str,
    url: str,
    *,
    body: object = None,
    tokens: TokenSource | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float,
) -> Answer:
    """``method`` ``url`` with ``body`` as JSON; the answer, whatever its status."""
    sent = {"Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        sent["Content-Type"] = "application/json"
    if tokens is not None:
        sent["Authorization"] = f"Bearer {tokens.token()}"
    sent.update(headers or {})
    call = urllib.request.Request(url, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(call, timeout=timeout_s) as answer:
            return _answer(answer.status, dict(answer.headers), answer.read(MAX_ANSWER_BYTES))
    except urllib.error.HTTPError as refused:
        raw = refused.read(MAX_ANSWER_BYTES)
        return _answer(refused.code, dict(refused.headers or {}), raw)


def _answer(status: int, headers: dict[str, str], raw: bytes) -> Answer:
    if not raw:
        return Answer(status, headers, None)
    try:
        return Answer(status, headers, json.loads(raw))
    except ValueError:
        return Answer(status, headers, raw.decode(errors="replace"), json=False)

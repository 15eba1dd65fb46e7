"""Keeps the console session's access token fresh with the refresh-token grant: a
token within ``CONSOLE_TOKEN_REFRESH_MARGIN_S`` of expiry is replaced before the
request goes on, so a page never acts with an expired token. A refresh the provider
refuses (the session ended there, the user was removed) signs the person out of the
console; one refused because another request of the same session rotated the token
first takes that request's tokens instead. Within a process, a session's refreshes take
turns, so the second finds the first's tokens before it would present a rotated refresh
token (a replay, to the local issuer). A provider that does not answer ends nothing."""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import requests
from django.conf import settings
from django.contrib import auth
from django.http import HttpRequest, HttpResponse

from controlplane.accounts.clients import console_client_id
from controlplane.accounts.identity import get_identity
from web.auth import session

log = logging.getLogger(__name__)
# Only the console's requests: the REST API's callers bring their own bearer tokens, and
# their responses stay free of the session (no Vary: Cookie).
CONSOLE_PATH_PREFIX = "/console/"
ID_TOKEN = "oidc_id_token"  # mozilla-django-oidc's key: the provider's logout hint
REFRESHED, REFUSED, UNREACHABLE = "refreshed", "refused", "unreachable"


class RefreshAccessToken:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if _due(request):
            with _lock_of(request.session.session_key or ""):
                _refresh_once(request)
        return self.get_response(request)


# Refreshes of one session take turns (in this process): the second finds the first's
# tokens stored and takes them instead of presenting the refresh token the first
# rotated, which the local issuer takes for a replay and answers by revoking the whole
# sign-in. Striped locks: a bounded number whatever the number of sessions.
_LOCKS = tuple(threading.Lock() for _ in range(64))


def _lock_of(session_key: str) -> threading.Lock:
    return _LOCKS[zlib.crc32(session_key.encode()) % len(_LOCKS)]


def _refresh_once(request: HttpRequest) -> None:
    if _refreshed_meanwhile(request):
        return
    outcome = _refresh(request)
    if outcome == REFRESHED:
        request.session.save()  # stored now, for a request of the session waiting its turn
    elif outcome == REFUSED and not _refreshed_meanwhile(request):
        auth.logout(request)


def _due(request: HttpRequest) -> bool:
    if not request.path.startswith(CONSOLE_PATH_PREFIX):
        return False
    if not request.user.is_authenticated or session.ACCESS_TOKEN not in request.session:
        return False
    expires_at = float(request.session.get(session.EXPIRES_AT, 0))
    return time.time() >= expires_at - settings.CONSOLE_TOKEN_REFRESH_MARGIN_S


def _refreshed_meanwhile(request: HttpRequest) -> bool:
    """Whether another request of this session (another tab, an htmx update) refreshed
    while this one tried with the same, now rotated, refresh token: if so this request
    takes the tokens it stored instead of signing the person out."""
    stored = request.session.__class__(session_key=request.session.session_key)
    if float(stored.get(session.EXPIRES_AT, 0)) <= float(
        request.session.get(session.EXPIRES_AT, 0)
    ):
        return False
    for key in (session.ACCESS_TOKEN, session.REFRESH_TOKEN, session.EXPIRES_AT, ID_TOKEN):
        if key in stored:
            request.session[key] = stored[key]
    return True


def _refresh(request: HttpRequest) -> str:
    """``REFRESHED``, ``REFUSED`` (by the provider: the session ended there) or
    ``UNREACHABLE`` (the page goes on with the token it has, which pages refuse
    once it expires, without ending the session)."""
    refresh_token = request.session.get(session.REFRESH_TOKEN)
    if not refresh_token:
        return REFUSED
    try:
        response = requests.post(
            get_identity().oidc_endpoints().token,
            data={
                "grant_type": "refresh_token",
                "refresh_token": refresh_token,
                "client_id": console_client_id(),
            },
            timeout=settings.OIDC_TIMEOUT,
        )
    except requests.RequestException as exc:
        log.warning("console token refresh failed: %s", exc)
        return UNREACHABLE
    if response.status_code >= 500:
        log.warning("console token refresh failed (%s)", response.status_code)
        return UNREACHABLE
    if response.status_code != 200:
        log.info("console token refresh refused (%s)", response.status_code)
        return REFUSED
    token_info: dict[str, Any] = response.json()
    session.store_tokens(request.session, token_info)
    return REFRESHED

"""Keeps the console session's access token fresh with the refresh-token grant: a
token within ``CONSOLE_TOKEN_REFRESH_MARGIN_S`` of expiry is replaced before the
request goes on, so a page never acts with an expired token. A refresh the provider
refuses (the session ended there, the user was removed) signs the person out of the
console."""

from __future__ import annotations

import logging
import time
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


class RefreshAccessToken:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if _due(request) and not _refresh(request):
            auth.logout(request)
        return self.get_response(request)


def _due(request: HttpRequest) -> bool:
    if not request.path.startswith(CONSOLE_PATH_PREFIX):
        return False
    if not request.user.is_authenticated or session.ACCESS_TOKEN not in request.session:
        return False
    expires_at = float(request.session.get(session.EXPIRES_AT, 0))
    return time.time() >= expires_at - settings.CONSOLE_TOKEN_REFRESH_MARGIN_S


def _refresh(request: HttpRequest) -> bool:
    """Whether the session got new tokens."""
    refresh_token = request.session.get(session.REFRESH_TOKEN)
    if not refresh_token:
        return False
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
        return False
    if response.status_code != 200:
        log.info("console token refresh refused (%s)", response.status_code)
        return False
    token_info: dict[str, Any] = response.json()
    session.store_tokens(request.session, token_info)
    return True

"""What a signed-in console session holds and who it is.

Session keys: ``oidc_access_token`` (mozilla-django-oidc's; the pages act with it, as a
REST caller acts with its bearer token), ``oidc_id_token`` (the provider's logout hint),
``oidc_refresh_token`` and ``oidc_access_token_expires_at`` (epoch seconds), kept fresh
by ``middleware.RefreshAccessToken``."""

from __future__ import annotations

import time
from typing import Any

from django.contrib.sessions.backends.base import SessionBase
from django.http import HttpRequest
from rest_framework.exceptions import AuthenticationFailed

from controlplane.accounts.authentication import live_actor
from controlplane.accounts.identity import InvalidToken, get_identity
from controlplane.core.actors import Actor
from dataplane.client.claims import MalformedClaims

ACCESS_TOKEN = "oidc_access_token"
REFRESH_TOKEN = "oidc_refresh_token"
EXPIRES_AT = "oidc_access_token_expires_at"
DEFAULT_EXPIRES_IN_S = 300  # when a token response names no lifetime


def store_tokens(session: SessionBase, token_info: dict[str, Any]) -> None:
    """Keeps a token response's access and refresh tokens and when the access token
    expires."""
    session[ACCESS_TOKEN] = token_info["access_token"]
    if token_info.get("refresh_token"):
        session[REFRESH_TOKEN] = token_info["refresh_token"]
    expires_in = int(token_info.get("expires_in") or DEFAULT_EXPIRES_IN_S)
    session[EXPIRES_AT] = time.time() + expires_in


def session_actor(request: HttpRequest) -> Actor | None:
    """The signed-in person as the REST API would see the bearer of the session's
    access token (verified, claims parsed, only live tenants' roles), or None when the
    session holds no token the API would accept."""
    token = request.session.get(ACCESS_TOKEN)
    if not token:
        return None
    try:
        return live_actor(Actor.from_claims(get_identity().verify(token)))
    except (InvalidToken, MalformedClaims, AuthenticationFailed):
        return None

"""The console's token refresh when two requests of one session (two tabs, an htmx
update beside a page) find the access token due at once: the local issuer rotates
refresh tokens, so the second request's refresh is refused, and it must take the tokens
the first stored instead of signing the person out. The refresh grants are real (the
local issuer's token endpoint, through Django's test client): only the HTTP hop from
the middleware to the issuer is routed in-process, since the issuer is this same app."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory

from controlplane.accounts.identity import LocalIdentity
from controlplane.tenants.models import Membership
from tests.controlplane.accounts.test_local_sign_in import (
    LOOPBACK,
    _code,
    _pkce,
    _redeem,
    _token,
    developer,
)
from web.auth import session as console_session
from web.auth.middleware import RefreshAccessToken

__all__ = ["developer"]
REFRESH = console_session.REFRESH_TOKEN


def _signed_in_session(issuer: Client) -> str:
    verifier, challenge = _pkce()
    tokens = _redeem(issuer, _code(issuer, challenge), verifier).json()
    store = SessionStore()
    console_session.store_tokens(store, tokens)
    store[console_session.EXPIRES_AT] = 0  # due for a refresh
    store.create()
    return str(store.session_key)


def _request(key: str, user: User) -> HttpRequest:
    request = RequestFactory().get("/console/t/acme/topics/")
    request.session = SessionStore(session_key=key)
    assert request.session[console_session.REFRESH_TOKEN]  # read now, as a request would
    request.user = user
    return request


@pytest.fixture
def issuer_transport(monkeypatch: pytest.MonkeyPatch) -> Client:
    issuer = Client(SERVER_NAME=LOOPBACK)

    def post(url: str, data: dict[str, str], timeout: float) -> Any:
        answer = _token(issuer, data)
        return SimpleNamespace(status_code=answer.status_code, json=answer.json)

    monkeypatch.setattr("web.auth.middleware.requests.post", post)
    return issuer


def test_a_refresh_lost_to_another_request_keeps_the_session(
    developer: Membership, local_identity: LocalIdentity, issuer_transport: Client
) -> None:
    key = _signed_in_session(issuer_transport)
    user = User.objects.create_user("dev-subject")
    first, second = _request(key, user), _request(key, user)  # both loaded before either
    middleware = RefreshAccessToken(lambda request: HttpResponse())
    middleware(first)
    first.session.save()
    middleware(second)
    assert SessionStore().exists(key)
    assert (
        second.session[console_session.ACCESS_TOKEN] == first.session[console_session.ACCESS_TOKEN]
    )
    assert float(second.session[console_session.EXPIRES_AT]) > 0
    # The second took the first's tokens without presenting the rotated refresh token,
    # which the issuer would have taken for a replay, revoking the whole sign-in.
    refresh = {"grant_type": "refresh_token", "client_id": "meridian-console"}
    again = _token(issuer_transport, refresh | {"refresh_token": second.session[REFRESH]})
    assert again.status_code == 200, again.content


def test_a_refused_refresh_still_signs_out(
    developer: Membership, local_identity: LocalIdentity, issuer_transport: Client
) -> None:
    key = _signed_in_session(issuer_transport)
    user = User.objects.create_user("dev-subject")
    request = _request(key, user)
    request.session[console_session.REFRESH_TOKEN] = "not-a-token"
    RefreshAccessToken(lambda request: HttpResponse())(request)
    assert not SessionStore().exists(key)


def test_an_unreachable_provider_ends_nothing(
    developer: Membership, local_identity: LocalIdentity, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = _signed_in_session(Client(SERVER_NAME=LOOPBACK))
    user = User.objects.create_user("dev-subject")

    def unreachable(*args: object, **kwargs: object) -> None:
        raise requests.ConnectionError("connection refused")

    monkeypatch.setattr("web.auth.middleware.requests.post", unreachable)
    RefreshAccessToken(lambda request: HttpResponse())(_request(key, user))
    assert SessionStore().exists(key)

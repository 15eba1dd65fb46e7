"""The local issuer's authorization-code endpoints, driven with Django's test client as
the console's sign-in drives them: the form, codes bound to PKCE S256, tokens with
Keycloak's user claims, refresh-token rotation, userinfo, end-session and discovery."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from io import StringIO
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from controlplane.accounts import services
from controlplane.accounts.clients import console_redirect_uri, console_signed_out_uri
from controlplane.accounts.identity import LocalIdentity
from controlplane.accounts.local import group_path, member_subject
from controlplane.accounts.local_oidc import authenticate, member_claims
from controlplane.accounts.models import AuthorizationCode, RefreshToken, SignInThrottle
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.tenants.models import Membership
from tests.controlplane.api_base import make_tenant

SYSTEM = Actor.system("tests")
PASSWORD = "correct horse battery staple"
LOOPBACK = "127.0.0.1"  # Authlib refuses plain HTTP except on a loopback address


def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _authorize_params(challenge: str | None, **extra: str) -> dict[str, str]:
    params = {
        "response_type": "code",
        "client_id": "meridian-console",
        "redirect_uri": console_redirect_uri(),
        "scope": "openid profile",
        "state": "state-1",
        "nonce": secrets.token_urlsafe(8),
        **extra,
    }
    if challenge is not None:
        params |= {"code_challenge": challenge, "code_challenge_method": "S256"}
    return params


def _sign_in(client: Client, params: dict[str, str], password: str = PASSWORD) -> Any:
    form = client.get("/api/v1/auth/authorize", params)
    assert form.status_code == 200
    assert b'name="password"' in form.content
    return client.post(form.wsgi_request.get_full_path(), {"username": "dev", "password": password})


def _code(client: Client, challenge: str) -> str:
    params = _authorize_params(challenge)
    signed_in = _sign_in(client, params)
    assert signed_in.status_code == 302
    redirected = client.get(signed_in["Location"])
    assert redirected.status_code == 302, redirected.content
    location = urlsplit(redirected["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == console_redirect_uri()
    query = parse_qs(location.query)
    assert query["state"] == ["state-1"]
    return query["code"][0]


def _token(client: Client, data: dict[str, str]) -> Any:
    """A token request as OAuth clients send it (form-encoded)."""
    form = "application/x-www-form-urlencoded"
    return client.post("/api/v1/auth/token", urlencode(data), content_type=form)


def _redeem(client: Client, code: str, verifier: str) -> Any:
    return _token(
        client,
        {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": console_redirect_uri(),
            "client_id": "meridian-console",
            "code_verifier": verifier,
        },
    )


@pytest.fixture
def developer(db: None, local_identity: LocalIdentity) -> Membership:
    tenant = make_tenant("acme")
    services.set_local_password("dev", PASSWORD, actor=SYSTEM)
    return Membership.objects.create(
        tenant=tenant,
        subject=member_subject("dev"),
        username="dev",
        role="developer",
        status=ProvisioningStatus.READY,
    )


def test_code_flow_gives_tokens_with_keycloak_claims(
    developer: Membership, local_identity: LocalIdentity
) -> None:
    client = Client(SERVER_NAME=LOOPBACK)
    verifier, challenge = _pkce()
    response = _redeem(client, _code(client, challenge), verifier)
    assert response.status_code == 200, response.content
    body = response.json()
    claims = local_identity.verify(body["access_token"])
    assert claims["sub"] == member_subject("dev")
    assert claims["preferred_username"] == "dev"
    assert claims["groups"] == [group_path(developer.tenant, "developer")]
    assert Actor.from_claims(claims).role_in("acme") == "developer"
    assert body["refresh_token"]
    assert body["id_token"]
    assert AuthorizationCode.objects.get().redeemed_at is not None  # spent (kept: replays)


def test_wrong_password_is_refused_on_the_form(developer: Membership) -> None:
    response = _sign_in(
        Client(SERVER_NAME=LOOPBACK), _authorize_params(_pkce()[1]), password="wrong"
    )
    assert response.status_code == 401
    assert b"Wrong username or password." in response.content


def test_authorization_without_pkce_s256_is_refused(developer: Membership) -> None:
    client = Client(SERVER_NAME=LOOPBACK)
    for params in (
        _authorize_params(None),
        _authorize_params(None, code_challenge="x" * 43, code_challenge_method="plain"),
    ):
        response = client.get("/api/v1/auth/authorize", params)
        assert response.status_code in (302, 400)
        assert "code=" not in response.get("Location", "")
        assert b"PKCE" in response.content or "PKCE" in response.get("Location", "")


def test_a_wrong_verifier_or_a_second_use_of_a_code_is_refused(developer: Membership) -> None:
    client = Client(SERVER_NAME=LOOPBACK)
    verifier, challenge = _pkce()
    code = _code(client, challenge)
    assert _redeem(client, code, _pkce()[0]).status_code == 400
    assert _redeem(client, code, verifier).status_code == 200
    assert _redeem(client, code, verifier).status_code == 400


def test_refresh_tokens_rotate(developer: Membership, local_identity: LocalIdentity) -> None:
    client = Client(SERVER_NAME=LOOPBACK)
    verifier, challenge = _pkce()
    first = _redeem(client, _code(client, challenge), verifier).json()

    def refresh(token: str) -> Any:
        data = {"grant_type": "refresh_token", "refresh_token": token}
        return _token(client, data | {"client_id": "meridian-console"})

    second = refresh(first["refresh_token"])
    assert second.status_code == 200, second.content
    assert local_identity.verify(second.json()["access_token"])["sub"] == member_subject("dev")
    assert refresh(first["refresh_token"]).status_code == 400  # used once already
    # That replay revoked the sign-in's every token, the one it rotated to included.
    assert not RefreshToken.objects.exists()
    assert refresh(second.json()["refresh_token"]).status_code == 400


def test_a_rotated_refresh_token_ends_when_the_sign_in_does(
    developer: Membership,
) -> None:
    """Rotation keeps the first token's end: a session refreshed for ever still ends
    CONSOLE_SESSION_S after sign-in."""
    client = Client(SERVER_NAME=LOOPBACK)
    verifier, challenge = _pkce()
    token = _redeem(client, _code(client, challenge), verifier).json()["refresh_token"]
    ends = RefreshToken.objects.get().expires_at
    for _ in range(3):
        data = {"grant_type": "refresh_token", "refresh_token": token}
        answer = _token(client, data | {"client_id": "meridian-console"})
        assert answer.status_code == 200, answer.content
        token = answer.json()["refresh_token"]
        assert RefreshToken.objects.get(used_at=None).expires_at == ends
    RefreshToken.objects.update(expires_at=timezone.now())  # the sign-in's end is reached
    data = {"grant_type": "refresh_token", "refresh_token": token}
    assert _token(client, data | {"client_id": "meridian-console"}).status_code == 400


def test_userinfo_and_discovery(developer: Membership) -> None:
    client = Client(SERVER_NAME=LOOPBACK)
    verifier, challenge = _pkce()
    token = _redeem(client, _code(client, challenge), verifier).json()["access_token"]
    info = client.get("/api/v1/auth/userinfo", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert info["sub"] == member_subject("dev")
    assert info["preferred_username"] == "dev"
    assert client.get("/api/v1/auth/userinfo").status_code == 401
    metadata = client.get("/.well-known/openid-configuration").json()
    assert metadata["code_challenge_methods_supported"] == ["S256"]
    assert metadata["authorization_endpoint"].endswith("/api/v1/auth/authorize")


def test_end_session_forgets_the_sign_in(developer: Membership) -> None:
    client = Client(SERVER_NAME=LOOPBACK)
    verifier, challenge = _pkce()
    id_token = _redeem(client, _code(client, challenge), verifier).json()["id_token"]
    still = client.get("/api/v1/auth/authorize", _authorize_params(_pkce()[1]))
    assert "code=" in still["Location"]  # signed in at the issuer: no form
    out = client.get(
        "/api/v1/auth/logout",
        {"id_token_hint": id_token, "post_logout_redirect_uri": console_signed_out_uri()},
    )
    assert out.status_code == 302
    assert out["Location"] == console_signed_out_uri()
    again = client.get("/api/v1/auth/authorize", _authorize_params(_pkce()[1]))
    assert b'name="password"' in again.content


def test_end_session_without_a_hint_asks_first(developer: Membership) -> None:
    client = Client(enforce_csrf_checks=True, SERVER_NAME=LOOPBACK)
    response = client.get("/api/v1/auth/logout")
    assert response.status_code == 200
    assert b"Sign out of Meridian?" in response.content
    assert client.post("/api/v1/auth/logout").status_code == 403  # no CSRF token


def test_create_platform_admin_makes_a_local_operator(
    db: None, local_identity: LocalIdentity
) -> None:
    call_command("create_platform_admin", username="ops", password=PASSWORD, stdout=StringIO())
    user = authenticate("ops", PASSWORD)
    assert user is not None
    assert authenticate("ops", "wrong") is None
    assert member_claims(user) == {"groups": [], "realm_roles": ["platform-admin"]}


def test_the_sign_in_form_is_styled_within_the_console_csp(developer: Membership) -> None:
    """The page's CSP allows only the server's own styles: they come from a file it
    serves, never an inline <style> the browser would refuse."""
    client = Client(SERVER_NAME=LOOPBACK)
    _, challenge = _pkce()
    form = client.get("/api/v1/auth/authorize", _authorize_params(challenge))
    assert b"<style" not in form.content
    href = re.search(rb'<link rel="stylesheet" href="([^"]+)"', form.content)
    assert href is not None
    assert client.get(href.group(1).decode()).status_code == 200


def test_another_persons_id_token_does_not_end_this_session(developer: Membership) -> None:
    """A link carrying someone else's ID token asks before signing this person out."""
    services.set_local_password("other", PASSWORD, actor=SYSTEM)
    victim = Client(SERVER_NAME=LOOPBACK)
    verifier, challenge = _pkce()
    _redeem(victim, _code(victim, challenge), verifier)
    attacker = Client(SERVER_NAME=LOOPBACK)
    attacker_verifier, attacker_challenge = _pkce()
    params = _authorize_params(attacker_challenge)
    form = attacker.get("/api/v1/auth/authorize", params)
    signed = attacker.post(
        form.wsgi_request.get_full_path(), {"username": "other", "password": PASSWORD}
    )
    assert signed.status_code == 302, signed.content
    redirected = attacker.get(signed["Location"])
    code = parse_qs(urlsplit(redirected["Location"]).query)["code"][0]
    hint = _redeem(attacker, code, attacker_verifier).json()["id_token"]
    answer = victim.get("/api/v1/auth/logout", {"id_token_hint": hint})
    assert answer.status_code == 200
    assert b'name="csrfmiddlewaretoken"' in answer.content  # the confirmation form
    still = victim.get("/api/v1/auth/authorize", _authorize_params(_pkce()[1]))
    assert "code=" in still["Location"]  # still signed in at the issuer


def _refresh(client: Client, token: str) -> Any:
    data = {"grant_type": "refresh_token", "refresh_token": token}
    return _token(client, data | {"client_id": "meridian-console"})


def test_a_replayed_refresh_token_revokes_the_whole_sign_in(developer: Membership) -> None:
    """A rotated token presented again (it leaked) revokes every token descended from
    the same sign-in, however far the chain went; another sign-in's are untouched."""
    client = Client(SERVER_NAME=LOOPBACK)
    verifier, challenge = _pkce()
    chain = [_redeem(client, _code(client, challenge), verifier).json()["refresh_token"]]
    for _ in range(3):
        chain.append(_refresh(client, chain[-1]).json()["refresh_token"])
    other_verifier, other_challenge = _pkce()
    elsewhere = Client(SERVER_NAME=LOOPBACK)
    other = _redeem(elsewhere, _code(elsewhere, other_challenge), other_verifier).json()

    replay = _refresh(client, chain[1])

    assert replay.status_code == 400
    assert replay.json()["error"] == "invalid_grant"
    for token in chain:
        assert _refresh(client, token).status_code == 400
    assert _refresh(client, other["refresh_token"]).status_code == 200


def test_a_second_redemption_of_a_code_revokes_what_the_first_bought(
    developer: Membership,
) -> None:
    client = Client(SERVER_NAME=LOOPBACK)
    verifier, challenge = _pkce()
    code = _code(client, challenge)
    first = _redeem(client, code, verifier)
    assert first.status_code == 200, first.content

    second = _redeem(client, code, verifier)

    assert second.status_code == 400
    assert second.json()["error"] == "invalid_grant"
    assert _refresh(client, first.json()["refresh_token"]).status_code == 400


@pytest.mark.django_db(transaction=True)
def test_a_code_redeemed_twice_at_once_buys_tokens_once(local_identity: LocalIdentity) -> None:
    """Two redemptions racing on the real Postgres, each in its own connection: one
    claims the code (a conditional update), the other waits for the row and gets
    invalid_grant; whichever loses revokes the winner's refresh token."""
    developer_on_committed_rows()
    client = Client(SERVER_NAME=LOOPBACK)
    verifier, challenge = _pkce()
    code = _code(client, challenge)
    barrier = threading.Barrier(4)

    def redeem(_: int) -> tuple[int, str]:
        try:
            barrier.wait(timeout=30)
            response = _redeem(Client(SERVER_NAME=LOOPBACK), code, verifier)
            return response.status_code, response.json().get("refresh_token", "")
        finally:
            connection.close()

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(redeem, range(4)))

    assert sorted(status for status, _ in answers) == [200, 400, 400, 400]
    [won] = [token for status, token in answers if status == 200]
    assert _refresh(client, won).status_code == 400  # a later redemption revoked it
    assert AuthorizationCode.objects.get(code=code).redeemed_at is not None


def developer_on_committed_rows() -> None:
    services.set_local_password("dev", PASSWORD, actor=SYSTEM)
    Membership.objects.create(
        tenant=make_tenant("acme"),
        subject=member_subject("dev"),
        username="dev",
        role="developer",
        status=ProvisioningStatus.READY,
    )


def _attempt(client: Client, username: str, password: str) -> Any:
    form = client.get("/api/v1/auth/authorize", _authorize_params(_pkce()[1]))
    return client.post(
        form.wsgi_request.get_full_path(), {"username": username, "password": password}
    )


def test_failed_sign_ins_are_limited_per_username(developer: Membership, settings: Any) -> None:
    settings.LOCAL_SIGN_IN_FAILURES_PER_USERNAME = 3
    client = Client(SERVER_NAME=LOOPBACK)
    for _ in range(3):
        assert _attempt(client, "dev", "wrong").status_code == 401

    refused = _attempt(client, "dev", PASSWORD)  # even the right password, for now

    assert refused.status_code == 429
    assert b"Too many failed sign-ins. Try again in 15 minute(s)." in refused.content
    assert 0 < int(refused["Retry-After"]) <= 900
    assert _attempt(client, "someone-else", "wrong").status_code == 401  # not that name
    SignInThrottle.objects.update(window_start=timezone.now() - timedelta(seconds=901))
    assert _attempt(client, "dev", PASSWORD).status_code == 302  # the window ended


def test_failed_sign_ins_are_limited_per_client_address(
    developer: Membership, settings: Any
) -> None:
    settings.LOCAL_SIGN_IN_FAILURES_PER_ADDRESS = 4
    guesser = Client(SERVER_NAME=LOOPBACK, REMOTE_ADDR="198.51.100.7")
    for n in range(4):
        assert _attempt(guesser, f"user-{n}", "wrong").status_code == 401

    assert _attempt(guesser, "dev", PASSWORD).status_code == 429
    elsewhere = Client(SERVER_NAME=LOOPBACK, REMOTE_ADDR="198.51.100.8")
    assert _attempt(elsewhere, "dev", PASSWORD).status_code == 302

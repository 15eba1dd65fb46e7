"""The local issuer's sign-in for people: OpenID Connect authorization code with PKCE
(S256, required) and refresh tokens, built on Authlib's OAuth 2.0 server
(``authlib.integrations.django_oauth2``), for the one client the demo has, the web
console (``clients.console_client_id()``, a public client).

What Authlib does: parsing and validating the requests, redirect-URI and client checks,
the PKCE comparison (``CodeChallenge``), the ``id_token`` (``OpenIDCode``), the error
responses. What is ours: where codes and refresh tokens live (``AuthorizationCode``,
``RefreshToken``: single-use codes valid ``CODE_TTL_S``; refresh tokens stored as
digests and replaced at each use), replays (a code redeemed again, or a rotated refresh
token presented again, revokes every refresh token of that sign-in, its family: OAuth
2.0 Security BCP, RFC 9700 §2.2.2 and §4.14), the sign-in form's limit on failed
attempts (``sign_in_refusal``), and the access token, which is the local issuer's
RS256 JWT with the claims Keycloak's user tokens carry (``member_claims``): ``sub`` the
user's subject, ``preferred_username``, ``groups`` from the user's live ``Membership``
rows, ``realm_access.roles`` ``platform-admin`` for an operator.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from authlib.integrations.django_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import ClientMixin, InvalidGrantError, InvalidRequestError, grants
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oidc.core import UserInfo
from authlib.oidc.core.grants import OpenIDCode
from cryptography.hazmat.primitives import serialization
from django.conf import settings
from django.contrib.auth.hashers import check_password, make_password
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from joserfc.jwk import RSAKey

from controlplane.accounts.clients import console_client_id, console_redirect_uri
from controlplane.accounts.identity import LocalIdentity, get_identity
from controlplane.accounts.local import group_path
from controlplane.accounts.models import (
    AuthorizationCode,
    LocalUser,
    RefreshToken,
    SignInThrottle,
)
from controlplane.core.choices import PLATFORM_ADMIN_ROLE, ProvisioningStatus
from controlplane.tenants.models import Membership

CODE_TTL_S = 60
CODE_GRANTS = frozenset({"authorization_code", "refresh_token"})
SCOPES = ("openid", "profile", "email")
# The password a missing user's check runs against, so an unknown username costs what a
# wrong password does.
_NO_USER_PASSWORD = make_password(secrets.token_urlsafe(16))


@dataclass(frozen=True)
class ConsoleClient(ClientMixin):  # type: ignore[misc]
    """The console as Authlib sees a client: public (no secret, ``none`` at the token
    endpoint, so PKCE is what binds a code to whoever asked for it), code and refresh
    grants, the one redirect URI of the console."""

    client_id: str
    redirect_uris: tuple[str, ...] = field(default_factory=tuple)

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return self.redirect_uris[0]

    def get_allowed_scope(self, scope: str) -> str:
        return " ".join(s for s in (scope or "").split() if s in SCOPES)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        return False

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == "none"

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in {"authorization_code", "refresh_token"}


def console_client() -> ConsoleClient:
    return ConsoleClient(console_client_id(), (console_redirect_uri(),))


# -- local users -------------------------------------------------------------------------
def authenticate(username: str, password: str) -> LocalUser | None:
    """The user whose password this is, or None (the same work either way)."""
    user = LocalUser.objects.filter(username=username).first()
    matches = check_password(password, user.password if user else _NO_USER_PASSWORD)
    return user if user is not None and matches else None


# -- the sign-in form's limit on failed attempts ------------------------------------------
def _throttle_keys(username: str, address: str) -> dict[str, int]:
    """The counters a sign-in attempt counts against, with their limits."""
    return {
        f"user:{username[:150]}": int(settings.LOCAL_SIGN_IN_FAILURES_PER_USERNAME),
        f"addr:{address[:150]}": int(settings.LOCAL_SIGN_IN_FAILURES_PER_ADDRESS),
    }


def _window() -> timedelta:
    return timedelta(seconds=int(settings.LOCAL_SIGN_IN_WINDOW_S))


def sign_in_refusal(username: str, address: str) -> int | None:
    """Seconds until a sign-in as ``username`` from ``address`` may be tried again, when
    either has reached its limit of failures in the current window; else None."""
    now = timezone.now()
    keys = _throttle_keys(username, address)
    waits = [
        int((row.window_start + _window() - now).total_seconds()) + 1
        for row in SignInThrottle.objects.filter(key__in=keys, window_start__gt=now - _window())
        if row.failures >= keys[row.key]
    ]
    return max(waits, default=None)


@transaction.atomic
def record_failed_sign_in(username: str, address: str) -> None:
    """Count a failed sign-in against the username and the address (a counter whose
    window has ended starts a new one)."""
    now = timezone.now()
    SignInThrottle.objects.filter(window_start__lte=now - _window()).delete()
    for key in _throttle_keys(username, address):
        SignInThrottle.objects.get_or_create(key=key, defaults={"window_start": now})
        row = SignInThrottle.objects.select_for_update().get(key=key)
        row.failures += 1
        row.save(update_fields=["failures"])


def member_claims(user: LocalUser) -> dict[str, Any]:
    """What a Keycloak user token says of this person: tenant groups of their ready
    memberships in live tenants, and the platform-admin realm role."""
    memberships = (
        Membership.objects.filter(subject=user.subject, status=ProvisioningStatus.READY)
        .exclude(tenant__status=ProvisioningStatus.DELETING)
        .select_related("tenant")
    )
    return {
        "groups": sorted(group_path(m.tenant, m.role) for m in memberships),
        "realm_roles": [PLATFORM_ADMIN_ROLE] if user.platform_admin else [],
    }


def _identity() -> LocalIdentity:
    identity = get_identity()
    if not isinstance(identity, LocalIdentity):
        raise LookupError("the identity provider is not the local issuer")
    return identity


def _access_token(client: ConsoleClient, grant_type: str, user: LocalUser, scope: str) -> str:
    claims = member_claims(user)
    return _identity().issue_token(
        subject=user.subject,
        username=user.username,
        groups=claims["groups"],
        realm_roles=claims["realm_roles"],
        extra={"azp": client.client_id, "scope": scope},
    )


def _refresh_token(*args: Any, **kwargs: Any) -> str:
    return secrets.token_urlsafe(36)


def _digest(token: str) -> str:
    return "sha256$" + hashlib.sha256(token.encode()).hexdigest()


# -- Authlib's pieces --------------------------------------------------------------------
class _Code:
    """An ``AuthorizationCode`` row as Authlib's ``AuthorizationCodeMixin`` (with the
    OpenID Connect and PKCE getters)."""

    def __init__(self, row: AuthorizationCode) -> None:
        self.row = row
        self.code_challenge = row.code_challenge
        self.code_challenge_method = row.code_challenge_method

    def get_redirect_uri(self) -> str:
        return self.row.redirect_uri

    def get_scope(self) -> str:
        return self.row.scope

    def get_nonce(self) -> str | None:
        return self.row.nonce or None

    def get_auth_time(self) -> int:
        return self.row.auth_time

    def get_acr(self) -> None:
        return None

    def get_amr(self) -> None:
        return None


class _Refresh:
    """A ``RefreshToken`` row as Authlib's ``TokenMixin``."""

    def __init__(self, row: RefreshToken) -> None:
        self.row = row

    def check_client(self, client: ConsoleClient) -> bool:
        return self.row.client_id == client.client_id

    def get_scope(self) -> str:
        return self.row.scope

    def get_expires_in(self) -> int:
        return int((self.row.expires_at - timezone.now()).total_seconds())

    def is_expired(self) -> bool:
        return self.row.expires_at <= timezone.now()

    def is_revoked(self) -> bool:
        return False  # a revoked refresh token is a deleted row


class _CodeGrant(grants.AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["none"]

    def save_authorization_code(self, code: str, request: Any) -> None:
        data = request.payload.data
        # Codes never redeemed go here, a minute late at most, redeemed ones once the
        # sign-in they started has ended: the table stays small.
        now = timezone.now()
        AuthorizationCode.objects.filter(expires_at__lte=now, redeemed_at=None).delete()
        session_start = now - timedelta(seconds=settings.CONSOLE_SESSION_S)
        AuthorizationCode.objects.filter(redeemed_at__lte=session_start).delete()
        AuthorizationCode.objects.create(
            code=code,
            client_id=request.client.client_id,
            user=request.user,
            redirect_uri=request.payload.redirect_uri or "",
            scope=request.payload.scope or "",
            nonce=data.get("nonce") or "",
            code_challenge=data.get("code_challenge") or "",
            code_challenge_method=data.get("code_challenge_method") or "",
            auth_time=int(time.time()),
            expires_at=timezone.now() + timedelta(seconds=CODE_TTL_S),
        )

    def query_authorization_code(self, code: str, client: ConsoleClient) -> _Code | None:
        """The code, its row locked until the token request ends: a concurrent
        redemption waits, then finds it redeemed. A code redeemed before is a replay:
        the refresh tokens it bought are revoked, and the answer is ``invalid_grant``."""
        row = (
            AuthorizationCode.objects.select_for_update()
            .select_related("user")
            .filter(code=code, client_id=client.client_id)
            .first()
        )
        if row is None:
            return None
        if row.redeemed_at is not None:
            revoke_family(row.family)
            return None
        return _Code(row) if row.expires_at > timezone.now() else None

    def delete_authorization_code(self, authorization_code: _Code) -> None:
        """Mark the code redeemed (kept to recognise a replay until the sign-in it
        started would have ended). The update is conditional: where the row lock is
        not a lock (SQLite), a redemption that lost a race finds nothing to mark."""
        row = authorization_code.row
        now = timezone.now()
        if not AuthorizationCode.objects.filter(pk=row.pk, redeemed_at=None).update(
            redeemed_at=now
        ):
            raise ReplayError(row.family)

    def authenticate_user(self, authorization_code: _Code) -> LocalUser:
        return authorization_code.row.user


class _RefreshGrant(grants.RefreshTokenGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["none"]
    INCLUDE_NEW_REFRESH_TOKEN = True  # rotation: each refresh token works once

    def authenticate_refresh_token(self, refresh_token: str) -> _Refresh | None:
        """The token, its row locked until the request ends (as codes are). A token used
        before is a replay — it leaked, or it was stolen and used first — and revokes
        its whole family: ``invalid_grant``."""
        row = (
            RefreshToken.objects.select_for_update()
            .select_related("user")
            .filter(digest=_digest(refresh_token))
            .first()
        )
        if row is None:
            return None
        if row.used_at is not None:
            revoke_family(row.family)
            return None
        return _Refresh(row) if row.expires_at > timezone.now() else None

    def authenticate_user(self, refresh_token: _Refresh) -> LocalUser:
        return refresh_token.row.user

    def revoke_old_credential(self, refresh_token: _Refresh) -> None:
        """Mark the token used (kept to recognise a replay until the sign-in ends;
        ``save_token`` deletes it then), conditionally as codes are."""
        row = refresh_token.row
        now = timezone.now()
        if not RefreshToken.objects.filter(pk=row.pk, used_at=None).update(used_at=now):
            raise ReplayError(row.family)


class ReplayError(Exception):
    """A code or refresh token that another request spent while this one used it: this
    request's tokens are rolled back, and its family revoked (``token_response``)."""

    def __init__(self, family: str) -> None:
        super().__init__(family)
        self.family = family


def revoke_family(family: str) -> int:
    """Revoke every refresh token descended from one sign-in; the count revoked. Access
    tokens already issued are not recallable (signed JWTs): they end with their TTL."""
    return int(RefreshToken.objects.filter(family=family).delete()[0])


class _S256Required(CodeChallenge):  # type: ignore[misc]
    """PKCE on every authorization request, S256 only: a code is useless to whoever
    intercepts it without the verifier."""

    SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]

    def validate_code_challenge(self, grant: Any, redirect_uri: str) -> None:
        data = grant.request.payload.data
        if not data.get("code_challenge") or data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("PKCE is required: code_challenge with method S256")
        super().validate_code_challenge(grant, redirect_uri)


class _OpenIDCode(OpenIDCode):  # type: ignore[misc]
    """The ``id_token``: signed with the issuer's current key, for the client."""

    def exists_nonce(self, nonce: str, request: Any) -> bool:
        return AuthorizationCode.objects.filter(
            client_id=request.payload.client_id, nonce=nonce
        ).exists()

    def resolve_client_private_key(self, client: ConsoleClient) -> RSAKey:
        kid, private = _identity().signing_key()
        pem = private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return RSAKey.import_key(pem, {"kid": kid})

    def get_encode_header(self, client: ConsoleClient) -> dict[str, str]:
        kid, _ = _identity().signing_key()
        return {"alg": "RS256", "kid": kid}

    def get_client_algorithm(self, client: ConsoleClient) -> str:
        return "RS256"

    def get_client_claims(self, client: ConsoleClient) -> dict[str, Any]:
        now = int(time.time())
        return {
            "iss": _identity().issuer,
            "aud": [client.client_id],
            "exp": now + int(settings.LOCAL_TOKEN_TTL_S),
        }

    def generate_user_info(self, user: LocalUser, scope: str) -> UserInfo:
        return UserInfo(sub=user.subject, preferred_username=user.username)


class LocalAuthorizationServer(AuthorizationServer):  # type: ignore[misc]
    """Authlib's Django server with the console as its one client and refresh tokens
    kept as digests."""

    def __init__(self) -> None:
        super().__init__(client_model=None, token_model=None)
        self.register_grant(_CodeGrant, [_S256Required(required=True), _OpenIDCode()])
        self.register_grant(_RefreshGrant)

    def create_bearer_token_generator(self) -> BearerTokenGenerator:
        return BearerTokenGenerator(
            access_token_generator=_access_token,
            refresh_token_generator=_refresh_token,
            expires_generator=lambda client, grant_type: int(settings.LOCAL_TOKEN_TTL_S),
        )

    def query_client(self, client_id: str) -> ConsoleClient | None:
        client = console_client()
        return client if client_id == client.client_id else None

    def save_token(self, token: dict[str, Any], request: Any) -> None:
        RefreshToken.objects.filter(expires_at__lte=timezone.now()).delete()
        if token.get("refresh_token"):
            family, expires_at = _lineage(request)
            RefreshToken.objects.create(
                digest=_digest(token["refresh_token"]),
                client_id=request.client.client_id,
                user=request.user,
                scope=token.get("scope", ""),
                family=family,
                expires_at=expires_at,
            )


def _lineage(request: Any) -> tuple[str, datetime]:
    """The family and end of a new refresh token: a rotated one keeps its predecessor's
    (a session lasts at most CONSOLE_SESSION_S from sign-in, however often it
    refreshes); a first one takes its authorization code's family."""
    previous = getattr(request, "refresh_token", None)
    if isinstance(previous, _Refresh):
        return previous.row.family, previous.row.expires_at
    code: _Code = request.authorization_code
    return code.row.family, timezone.now() + timedelta(seconds=settings.CONSOLE_SESSION_S)


_server: LocalAuthorizationServer | None = None


def server() -> LocalAuthorizationServer:
    global _server
    if _server is None:
        _server = LocalAuthorizationServer()
    return _server


def token_response(request: HttpRequest) -> HttpResponse:
    """The token endpoint's answer to an ``authorization_code`` or ``refresh_token``
    grant (atomic: a code or refresh token is spent only with the tokens it bought; one
    spent twice buys nothing the second time and revokes what it bought the first)."""
    try:
        with transaction.atomic():
            response: HttpResponse = server().create_token_response(request)
    except ReplayError as replay:
        revoke_family(replay.family)
        error = InvalidGrantError("the code or refresh token was already used")
        response = server().handle_error_response(request, error)
    response["Cache-Control"] = "no-store"
    return response

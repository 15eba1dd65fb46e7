"""The local issuer's sign-in for people: OpenID Connect authorization code with PKCE
(S256, required) and refresh tokens, built on Authlib's OAuth 2.0 server
(``authlib.integrations.django_oauth2``), for the one client the demo has, the web
console (``clients.console_client_id()``, a public client).

What Authlib does: parsing and validating the requests, redirect-URI and client checks,
the PKCE comparison (``CodeChallenge``), the ``id_token`` (``OpenIDCode``), the error
responses. What is ours: where codes and refresh tokens live (``AuthorizationCode``,
``RefreshToken``: single-use codes valid ``CODE_TTL_S``; refresh tokens stored as
digests and replaced at each use), and the access token, which is the local issuer's
RS256 JWT with the claims Keycloak's user tokens carry (``member_claims``): ``sub`` the
user's subject, ``preferred_username``, ``groups`` from the user's live ``Membership``
rows, ``realm_access.roles`` ``platform-admin`` for an operator.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from authlib.integrations.django_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import ClientMixin, InvalidRequestError, grants
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
from controlplane.accounts.models import AuthorizationCode, LocalUser, RefreshToken
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
        # Codes never redeemed go here, a minute late at most: the table stays small.
        AuthorizationCode.objects.filter(expires_at__lte=timezone.now()).delete()
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
        row = (
            AuthorizationCode.objects.select_related("user")
            .filter(code=code, client_id=client.client_id, expires_at__gt=timezone.now())
            .first()
        )
        return _Code(row) if row else None

    def delete_authorization_code(self, authorization_code: _Code) -> None:
        authorization_code.row.delete()

    def authenticate_user(self, authorization_code: _Code) -> LocalUser:
        return authorization_code.row.user


class _RefreshGrant(grants.RefreshTokenGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["none"]
    INCLUDE_NEW_REFRESH_TOKEN = True  # rotation: each refresh token works once

    def authenticate_refresh_token(self, refresh_token: str) -> _Refresh | None:
        row = (
            RefreshToken.objects.select_related("user")
            .filter(digest=_digest(refresh_token), expires_at__gt=timezone.now())
            .first()
        )
        return _Refresh(row) if row else None

    def authenticate_user(self, refresh_token: _Refresh) -> LocalUser:
        return refresh_token.row.user

    def revoke_old_credential(self, refresh_token: _Refresh) -> None:
        refresh_token.row.delete()


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
            # A rotated token keeps its predecessor's end: a session lasts at most
            # CONSOLE_SESSION_S from sign-in, however often it refreshes.
            previous = getattr(request, "refresh_token", None)
            RefreshToken.objects.create(
                digest=_digest(token["refresh_token"]),
                client_id=request.client.client_id,
                user=request.user,
                scope=token.get("scope", ""),
                expires_at=previous.row.expires_at
                if isinstance(previous, _Refresh)
                else timezone.now() + timedelta(seconds=settings.CONSOLE_SESSION_S),
            )


_server: LocalAuthorizationServer | None = None


def server() -> LocalAuthorizationServer:
    global _server
    if _server is None:
        _server = LocalAuthorizationServer()
    return _server


def token_response(request: HttpRequest) -> HttpResponse:
    """The token endpoint's answer to an ``authorization_code`` or ``refresh_token``
    grant (atomic: a code or refresh token is spent only with the tokens it bought)."""
    with transaction.atomic():
        response: HttpResponse = server().create_token_response(request)
    response["Cache-Control"] = "no-store"
    return response

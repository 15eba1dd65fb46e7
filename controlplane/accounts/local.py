"""The control plane's own issuer (DESIGN decision 7, the embedded demo where no
Keycloak runs). Its RSA keys live in the database (``SigningKey``); its JWKS is served at
``/api/v1/auth/jwks.json``; service accounts get tokens from ``/api/v1/auth/token`` with
the client-credentials grant. Tokens carry the same claims as Keycloak's
(``dataplane.client.claims``); a service account's also its ``account_id``."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
import uuid
from typing import Any

import jwt
from django.conf import settings
from django.db import transaction

from controlplane.accounts import signing_keys
from controlplane.accounts.clients import (
    CONTROLLER_CLIENT_ID,
    INTERNAL_CLIENT_IDS,
    OidcEndpoints,
    local_internal_secret,
)
from controlplane.accounts.models import ServiceAccount, SigningKey
from controlplane.accounts.tokens import InvalidToken, JwksKeys, verify_token
from controlplane.core.choices import ProvisioningStatus
from controlplane.tenants.models import Tenant
from dataplane.client.auth import TokenSource
from dataplane.client.claims import tenant_group

SERVICE_ACCOUNT_USER_PREFIX = "service-account-"  # as Keycloak names them
_SECRET_BYTES = 32
_REFRESH_MARGIN_S = 60.0  # an internal token is renewed this long before it expires
# Secrets are 256 random bits, so one SHA-256 stores them safely: a slow password KDF
# adds nothing against guessing and makes every token request (and every unknown
# client) cost CPU.
_SECRET_DIGEST_PREFIX = "sha256$"
# What an unknown client's secret is compared with: a digest no secret has, so an unknown
# client does the same work as a known one with a wrong secret.
_NO_CLIENT_DIGEST = _SECRET_DIGEST_PREFIX + "0" * 64


def member_subject(username: str) -> str:
    """The local issuer's stable user id for ``username`` (one person, one subject across
    tenants)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, username))


class LocalIdentity:
    """The local issuer: signs RS256 tokens with the newest active ``SigningKey`` and
    verifies them against every active key. Members and service accounts live only in
    the control plane's database."""

    @staticmethod
    def settings_key() -> tuple[Any, ...]:
        """The settings the provider is built from: when they change, a new one is."""
        return (settings.LOCAL_ISSUER, settings.TOKEN_AUDIENCE)

    def __init__(self) -> None:
        self.issuer: str = settings.LOCAL_ISSUER
        self._keys = JwksKeys(self.jwks, ttl_s=settings.JWKS_CACHE_S)

    # -- keys ---------------------------------------------------------------------------
    def signing_key(self) -> tuple[str, Any]:
        """``(kid, private key)`` of the newest active key, creating the first one."""
        key = SigningKey.objects.filter(active=True).first()
        if key is None:
            key = self._create_key()
        return str(key.kid), signing_keys.private_key(key.kid, key.sealed_private_key)

    def rotate_signing_key(self, *, keep: int = 2) -> str:
        """Start signing with a new key; the ``keep - 1`` previous keys stay in the JWKS so
        tokens they signed remain valid until they expire. Returns the new ``kid``."""
        with transaction.atomic():
            key = self._create_key()
            retired = SigningKey.objects.filter(active=True).values_list("pk", flat=True)
            SigningKey.objects.filter(pk__in=list(retired[keep:])).update(active=False)
        self._keys.invalidate()
        return str(key.kid)

    def _create_key(self) -> Any:
        new = signing_keys.generate(uuid.uuid4().hex)
        return SigningKey.objects.create(kid=new.kid, sealed_private_key=new.sealed_private_key)

    def jwks(self) -> dict[str, Any]:
        """The public half of every active key, as a JWKS document (derived from the
        sealed private half: nothing else in the database is trusted for it)."""
        if not SigningKey.objects.filter(active=True).exists():
            self.signing_key()
        keys = []
        for key in SigningKey.objects.filter(active=True):
            public = signing_keys.private_key(key.kid, key.sealed_private_key).public_key()
            jwk = jwt.algorithms.RSAAlgorithm.to_jwk(public, as_dict=True)
            keys.append({**jwk, "kid": key.kid, "use": "sig", "alg": "RS256"})
        return {"keys": keys}

    # -- tokens -------------------------------------------------------------------------
    def issue_token(
        self,
        *,
        subject: str,
        username: str,
        groups: list[str] | None = None,
        realm_roles: list[str] | None = None,
        ttl_s: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> str:
        """A signed access token with Keycloak's claim layout; ``extra`` overrides any."""
        kid, private = self.signing_key()
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": subject,
            "aud": settings.TOKEN_AUDIENCE,
            "iat": now,
            "exp": now + (ttl_s or settings.LOCAL_TOKEN_TTL_S),
            "jti": uuid.uuid4().hex,
            "typ": "Bearer",
            "preferred_username": username,
            "groups": groups or [],
            "realm_access": {"roles": realm_roles or []},
            **(extra or {}),
        }
        return jwt.encode(claims, private, algorithm="RS256", headers={"kid": kid})

    def verify(self, token: str) -> dict[str, Any]:
        return verify_token(token, self._keys, issuer=self.issuer)

    def token_for_client(self, client_id: str, client_secret: str) -> tuple[str, int]:
        """``(access token, expires_in)`` for a service account's client credentials;
        ``InvalidToken`` when the client is unknown, disabled or the secret is wrong."""
        if client_id in INTERNAL_CLIENT_IDS:
            return self._internal_token(client_id, client_secret)
        account = (
            ServiceAccount.objects.select_related("tenant")
            .filter(client_id=client_id, status=ProvisioningStatus.READY)
            .exclude(secret_hash="")
            .first()
        )
        stored = account.secret_hash if account else _NO_CLIENT_DIGEST
        if not secret_matches(client_secret, stored) or account is None:
            raise InvalidToken("unknown client or wrong secret")
        ttl_s = int(settings.LOCAL_TOKEN_TTL_S)
        token = self.issue_token(
            subject=account.identity_ref,
            username=SERVICE_ACCOUNT_USER_PREFIX + account.client_id,
            groups=[group_path(account.tenant, account.role)],
            ttl_s=ttl_s,
            extra={
                "azp": account.client_id,
                "client_id": account.client_id,
                "account_id": str(account.uid),
            },
        )
        return token, ttl_s

    def _internal_token(self, client_id: str, client_secret: str) -> tuple[str, int]:
        """A token with the internal role for the controller's or the brokers' client."""
        expected = local_internal_secret()
        if not hmac.compare_digest(client_secret.encode(), expected.encode()):
            raise InvalidToken("unknown client or wrong secret")
        ttl_s = int(settings.LOCAL_TOKEN_TTL_S)
        return self.issue_internal_token(client_id, ttl_s), ttl_s

    # -- the issuer's endpoints and the cluster's own clients ----------------------------
    def token_url(self) -> str:
        return f"{settings.API_BASE_URL.rstrip('/')}/api/v1/auth/token"

    def jwks_url(self) -> str:
        return f"{settings.API_BASE_URL.rstrip('/')}/api/v1/auth/jwks.json"

    def oidc_endpoints(self) -> OidcEndpoints:
        """The authorization-code endpoints (``accounts.local_oidc``) beside the token
        endpoint, which serves every grant."""
        base = f"{settings.API_BASE_URL.rstrip('/')}/api/v1/auth"
        return OidcEndpoints(
            authorization=f"{base}/authorize",
            token=self.token_url(),
            userinfo=f"{base}/userinfo",
            jwks=self.jwks_url(),
            end_session=f"{base}/logout",
        )

    def internal_client_secret(self, client_id: str) -> str:
        """Both internal clients share one secret, kept in a private file."""
        return local_internal_secret()

    def internal_tokens(self) -> TokenSource:
        """The controller's tokens, signed in this process (no HTTP)."""
        return LocalInternalTokens(self)

    def issue_internal_token(self, client_id: str, ttl_s: int) -> str:
        """A token with the internal role for internal client ``client_id``."""
        return self.issue_token(
            subject=f"{client_id}@internal",
            username=f"service-account-{client_id}",
            realm_roles=[settings.INTERNAL_ROLE],
            ttl_s=ttl_s,
            extra={"azp": client_id, "client_id": client_id},
        )

    # -- tenants, members, service accounts (the database is the directory) -------------
    def provision_tenant(self, tenant: Tenant) -> str:
        return tenant_group_path(tenant)

    def deprovision_tenant(self, tenant: Tenant) -> None:
        """Revokes the tenant's service-account credentials: no new tokens for them."""
        ServiceAccount.objects.filter(tenant=tenant).update(secret_hash="")

    def invite_member(self, tenant: Tenant, *, username: str, email: str, role: str) -> str:
        return member_subject(username)

    def change_member_role(self, tenant: Tenant, *, subject: str, role: str) -> None:
        """Nothing to do: the ``Membership`` row is the local directory."""

    def remove_member(self, tenant: Tenant, *, subject: str) -> None:
        """Nothing to do: the ``Membership`` row is the local directory."""

    def create_service_account(self, account: ServiceAccount) -> tuple[str, str]:
        """Sets ``account.secret_hash`` (the caller saves the row); returns
        ``(identity_ref, secret)``."""
        secret = new_secret()
        account.secret_hash = secret_digest(secret)
        return str(uuid.uuid4()), secret

    def rotate_service_account_secret(self, account: ServiceAccount) -> str:
        """Sets a new ``account.secret_hash`` (the caller saves the row)."""
        secret = new_secret()
        account.secret_hash = secret_digest(secret)
        return secret

    def change_service_account_role(self, account: ServiceAccount, role: str) -> None:
        """Nothing to do: tokens are built from the row's role."""

    def delete_service_account(self, account: ServiceAccount) -> None:
        account.secret_hash = ""


def new_secret() -> str:
    return secrets.token_urlsafe(_SECRET_BYTES)


def secret_digest(secret: str) -> str:
    """What ``ServiceAccount.secret_hash`` stores for ``secret``: ``sha256$<hex digest>``."""
    return _SECRET_DIGEST_PREFIX + hashlib.sha256(secret.encode()).hexdigest()


def secret_matches(secret: str, stored: str) -> bool:
    """Whether ``secret`` is the one ``stored`` was made from, compared in constant time.
    A value in another format (a password hash from before) never matches: its account
    needs a new secret."""
    return hmac.compare_digest(secret_digest(secret).encode(), stored.encode())


def tenant_group_path(tenant: Tenant) -> str:
    """``/tenants/<slug>@<uid>``: the slug for people, the immutable id for the checks."""
    return tenant_group(tenant.slug, str(tenant.uid))


def group_path(tenant: Tenant, role: str) -> str:
    """The group whose members hold ``role`` in ``tenant`` (the ``groups`` claim)."""
    return f"{tenant_group_path(tenant)}/{role}"


__all__ = ["InvalidToken", "LocalIdentity", "group_path", "member_subject", "tenant_group_path"]


class LocalInternalTokens:
    """An internal client's tokens signed by the local issuer in this process (no HTTP),
    reused until a minute before they expire. Thread-safe."""

    def __init__(self, identity: LocalIdentity, client_id: str = CONTROLLER_CLIENT_ID) -> None:
        self.identity = identity
        self.client_id = client_id
        self._lock = threading.Lock()
        self._token: str | None = None
        self._expires_at = 0.0

    def cached(self) -> str | None:
        if self._token is not None and time.monotonic() < self._expires_at - _REFRESH_MARGIN_S:
            return self._token
        return None

    def token(self) -> str:
        with self._lock:
            current = self.cached()
            if current is not None:
                return current
            ttl_s = int(settings.LOCAL_TOKEN_TTL_S)
            started = time.monotonic()
            self._token = self.identity.issue_internal_token(self.client_id, ttl_s)
            self._expires_at = started + ttl_s
            return self._token

"""Identity providers. ``get_identity()`` returns the configured one:

- ``KeycloakIdentity`` (``MERIDIAN_IDENTITY=keycloak``): tenants, members and service
  accounts are provisioned in Keycloak through python-keycloak; tokens are Keycloak's.
- ``LocalIdentity`` (``local``, the embedded demo): the control plane is its own issuer,
  with RSA keys in the database and a JWKS at ``/api/v1/auth/jwks.json``.

Both issue RS256 JWTs with the same claims: ``sub``, ``preferred_username``, ``aud``
(``TOKEN_AUDIENCE``), ``groups`` (``/tenants/<slug>/<role>``) and
``realm_access.roles`` (``platform-admin`` for operators), so the API and the brokers
verify either offline, the same way.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any, Protocol

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings
from django.db import transaction


class InvalidToken(Exception):
    """A bearer token that is malformed, forged, expired or not for us."""


class IdentityProvider(Protocol):
    issuer: str

    def verify(self, token: str) -> dict[str, Any]:
        """The token's claims, once its signature, expiry, issuer and audience check out;
        else ``InvalidToken``."""
        ...


class LocalIdentity:
    """The control plane's own issuer (DESIGN decision 7, the embedded demo)."""

    def __init__(self) -> None:
        self.issuer = settings.LOCAL_ISSUER
        self._lock = threading.Lock()
        self._public: dict[str, Any] = {}  # kid -> public key
        self._loaded_at = 0.0

    # -- keys ---------------------------------------------------------------------------
    def signing_key(self) -> tuple[str, Any]:
        from controlplane.accounts.models import SigningKey

        key = SigningKey.objects.filter(active=True).first()
        if key is None:
            with transaction.atomic():
                private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
                pem = private.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                ).decode()
                key = SigningKey.objects.create(kid=uuid.uuid4().hex, private_pem=pem)
        return key.kid, serialization.load_pem_private_key(key.private_pem.encode(), None)

    def jwks(self) -> dict[str, Any]:
        from controlplane.accounts.models import SigningKey

        if not SigningKey.objects.filter(active=True).exists():
            self.signing_key()
        keys = []
        for key in SigningKey.objects.filter(active=True):
            private = serialization.load_pem_private_key(key.private_pem.encode(), None)
            jwk = jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key(), as_dict=True)
            keys.append({**jwk, "kid": key.kid, "use": "sig", "alg": "RS256"})
        return {"keys": keys}

    def _public_key(self, kid: str) -> Any:
        with self._lock:
            stale = time.monotonic() - self._loaded_at > settings.JWKS_CACHE_S
            if kid not in self._public or stale:
                self._public = {
                    k["kid"]: jwt.algorithms.RSAAlgorithm.from_jwk(k) for k in self.jwks()["keys"]
                }
                self._loaded_at = time.monotonic()
            if kid not in self._public:
                raise InvalidToken(f"unknown signing key {kid!r}")
            return self._public[kid]

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
        kid, private = self.signing_key()
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": subject,
            "aud": settings.TOKEN_AUDIENCE,
            "iat": now,
            "exp": now + (ttl_s or settings.LOCAL_TOKEN_TTL_S),
            "jti": uuid.uuid4().hex,
            "preferred_username": username,
            "groups": groups or [],
            "realm_access": {"roles": realm_roles or []},
            **(extra or {}),
        }
        return jwt.encode(claims, private, algorithm="RS256", headers={"kid": kid})

    def verify(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
            if header.get("alg") != "RS256":
                raise InvalidToken(f"algorithm {header.get('alg')!r} is not accepted")
            key = self._public_key(str(header.get("kid", "")))
            return jwt.decode(
                token,
                key,
                algorithms=["RS256"],
                audience=settings.TOKEN_AUDIENCE,
                issuer=self.issuer,
                options={"require": ["exp", "iat", "sub", "aud", "iss"]},
            )
        except jwt.PyJWTError as exc:
            raise InvalidToken(str(exc)) from exc


_identity: IdentityProvider | None = None
_identity_lock = threading.Lock()


def get_identity() -> IdentityProvider:
    global _identity
    with _identity_lock:
        if _identity is None:
            if settings.IDENTITY_PROVIDER == "local":
                _identity = LocalIdentity()
            else:
                raise NotImplementedError(settings.IDENTITY_PROVIDER)
        return _identity


def reset_identity() -> None:
    """Forget the provider (tests that switch settings)."""
    global _identity
    with _identity_lock:
        _identity = None

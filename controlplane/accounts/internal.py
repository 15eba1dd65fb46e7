"""The cluster's own identities: the controller and the reconciler calling brokers, and
brokers calling each other, with tokens carrying the internal role
(``settings.INTERNAL_ROLE``), which brokers require of Admin, Replication and peer
Metadata calls.

Two confidential clients, whatever the issuer: ``meridian-controller`` (the control
plane) and ``meridian-broker`` (every broker). With Keycloak they are clients of the
realm whose service accounts hold the internal realm role (``bootstrap_identity``); their
secrets come from the settings or from the realm. With the local issuer they share one
secret kept in a file (``internal_secret_file()``), and the local issuer's token endpoint
hands them tokens like Keycloak's; the control plane itself signs its own without HTTP.

``controller_tokens()`` is the control plane's token source; the channels that carry
it to brokers are opened by ``controlplane.gateway.channels``.
"""

from __future__ import annotations

import secrets
import threading
import time
from pathlib import Path
from typing import Any

from django.conf import settings

from controlplane.core.private_files import read_or_create_private
from dataplane.client.auth import ClientCredentials, TokenSource

CONTROLLER_CLIENT_ID = "meridian-controller"
BROKER_CLIENT_ID = "meridian-broker"
INTERNAL_CLIENT_IDS = (CONTROLLER_CLIENT_ID, BROKER_CLIENT_ID)
_REFRESH_MARGIN_S = 60.0


def internal_secret_file() -> Path:
    """The local issuer's file holding the internal clients' secret."""
    configured = settings.INTERNAL_CLIENT_SECRET_FILE
    return Path(configured or Path(settings.DATA_DIR) / "internal-client-secret")


def local_internal_secret() -> str:
    """The internal clients' secret of the local issuer, made (0600, in a private
    directory) on first use; the first process to make it wins."""
    made = read_or_create_private(internal_secret_file(), _new_internal_secret)
    return made.decode().strip()


def _new_internal_secret() -> bytes:
    return secrets.token_urlsafe(32).encode() + b"\n"


def client_secret(client_id: str) -> str:
    """The secret of internal client ``client_id`` under the configured issuer."""
    if settings.IDENTITY_PROVIDER == "local":
        return local_internal_secret()
    configured = {
        CONTROLLER_CLIENT_ID: settings.CONTROLLER_CLIENT_SECRET,
        BROKER_CLIENT_ID: settings.BROKER_CLIENT_SECRET,
    }[client_id]
    if configured:
        return str(configured)
    from controlplane.accounts.keycloak_setup import internal_client_secret

    return internal_client_secret(client_id)


def token_url() -> str:
    """Where clients get tokens with the client-credentials grant."""
    if settings.IDENTITY_PROVIDER == "local":
        return f"{settings.API_BASE_URL.rstrip('/')}/api/v1/auth/token"
    from controlplane.accounts.keycloak import realm_url

    return f"{realm_url()}/protocol/openid-connect/token"


def jwks_url() -> str:
    """Where verifiers fetch the issuer's public keys."""
    if settings.IDENTITY_PROVIDER == "local":
        return f"{settings.API_BASE_URL.rstrip('/')}/api/v1/auth/jwks.json"
    from controlplane.accounts.keycloak import realm_url

    return f"{realm_url()}/protocol/openid-connect/certs"


def issuer() -> str:
    from controlplane.accounts.identity import get_identity

    return get_identity().issuer


class LocalInternalTokens:
    """The controller's tokens signed by the local issuer in this process (no HTTP),
    reused until a minute before they expire. Thread-safe."""

    def __init__(self, client_id: str = CONTROLLER_CLIENT_ID) -> None:
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
            self._token = issue_local_internal_token(self.client_id, ttl_s)
            self._expires_at = started + ttl_s
            return self._token


def issue_local_internal_token(client_id: str, ttl_s: int) -> str:
    from controlplane.accounts.identity import LocalIdentity, get_identity

    identity = get_identity()
    assert isinstance(identity, LocalIdentity)
    return identity.issue_token(
        subject=f"{client_id}@internal",
        username=f"service-account-{client_id}",
        realm_roles=[settings.INTERNAL_ROLE],
        ttl_s=ttl_s,
        extra={"azp": client_id, "client_id": client_id},
    )


_tokens: TokenSource | None = None
_tokens_config: tuple[Any, ...] = ()
_tokens_lock = threading.Lock()


def controller_tokens() -> TokenSource:
    """The control plane's internal token source (one per configuration and process)."""
    global _tokens, _tokens_config
    config = (settings.IDENTITY_PROVIDER, settings.KEYCLOAK_URL, settings.KEYCLOAK_REALM)
    with _tokens_lock:
        if _tokens is None or config != _tokens_config:
            if settings.IDENTITY_PROVIDER == "local":
                _tokens = LocalInternalTokens()
            else:
                secret = client_secret(CONTROLLER_CLIENT_ID)
                _tokens = ClientCredentials(token_url(), CONTROLLER_CLIENT_ID, secret)
            _tokens_config = config
        return _tokens


def reset_controller_tokens() -> None:
    """Forget the token source (tests that switch settings)."""
    global _tokens
    with _tokens_lock:
        _tokens = None

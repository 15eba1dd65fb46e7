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

What differs between issuers is the identity provider's (``IdentityProvider``:
``token_url``, ``jwks_url``, ``internal_client_secret``, ``internal_tokens``); the
functions here ask the configured one. ``controller_tokens()`` is the control plane's
token source; the channels that carry it to brokers are opened by
``controlplane.gateway.channels``.
"""

from __future__ import annotations

import threading

from controlplane.accounts.clients import (
    BROKER_CLIENT_ID,
    CONTROLLER_CLIENT_ID,
    INTERNAL_CLIENT_IDS,
    internal_secret_file,
    local_internal_secret,
)
from controlplane.accounts.identity import IdentityProvider, get_identity
from dataplane.client.auth import TokenSource

__all__ = [
    "BROKER_CLIENT_ID",
    "CONTROLLER_CLIENT_ID",
    "INTERNAL_CLIENT_IDS",
    "client_secret",
    "controller_tokens",
    "internal_secret_file",
    "issuer",
    "jwks_url",
    "local_internal_secret",
    "reset_controller_tokens",
    "token_url",
]


def client_secret(client_id: str) -> str:
    """The secret of internal client ``client_id`` under the configured issuer."""
    return get_identity().internal_client_secret(client_id)


def token_url() -> str:
    """Where clients get tokens with the client-credentials grant."""
    return get_identity().token_url()


def jwks_url() -> str:
    """Where verifiers fetch the issuer's public keys."""
    return get_identity().jwks_url()


def issuer() -> str:
    return get_identity().issuer


_tokens: TokenSource | None = None
_tokens_of: IdentityProvider | None = None
_tokens_lock = threading.Lock()


def controller_tokens() -> TokenSource:
    """The control plane's internal token source: one per identity provider (a new
    configuration builds a new provider) and process."""
    global _tokens, _tokens_of
    identity = get_identity()
    with _tokens_lock:
        if _tokens is None or _tokens_of is not identity:
            _tokens = identity.internal_tokens()
            _tokens_of = identity
        return _tokens


def reset_controller_tokens() -> None:
    """Forget the token source (tests that switch settings)."""
    global _tokens
    with _tokens_lock:
        _tokens = None

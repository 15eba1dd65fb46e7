"""Authentication and authorization in the broker (DESIGN decision 7).

``interceptor``: every call's bearer token is verified (``verifier``) into a
``Principal`` (``principal.current()``); ``authorizer``: tenant-scoped names, roles and
the controller's ACLs decide what it may do; ``guard``: the checks around the handlers.
``identities``: the live tenants and service accounts of the controller's push that a
token must still name. ``build_authenticator(config, pushed)`` is None when the config
names no ``jwks_url`` (auth off).
"""

from __future__ import annotations

from dataplane.broker.auth.authorizer import ALLOW_ALL, Authorizer
from dataplane.broker.auth.identities import PushedIdentities, PushSource
from dataplane.broker.auth.interceptor import Authenticator, AuthInterceptor
from dataplane.broker.auth.principal import Principal, current
from dataplane.broker.auth.verifier import JwksKeys, TokenVerifier
from dataplane.broker.config import BrokerConfig


def build_authenticator(
    config: BrokerConfig, pushed: PushSource = lambda: None
) -> Authenticator | None:
    """``pushed()`` returns the controller's last accepted push (or None)."""
    if not config.jwks_url:
        return None
    keys = JwksKeys.from_url(config.jwks_url)
    verifier = TokenVerifier(
        keys,
        issuer=config.token_issuer,
        audience=config.token_audience,
        internal_role=config.internal_role,
    )
    return Authenticator(verifier, identities=PushedIdentities(pushed))


__all__ = [
    "ALLOW_ALL",
    "AuthInterceptor",
    "Authenticator",
    "Authorizer",
    "Principal",
    "build_authenticator",
    "current",
]

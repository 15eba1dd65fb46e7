"""Bearer tokens in the control plane: the one RS256 verifier of the data plane
(``dataplane.broker.auth.verifier``: PyJWT's JWKS client, the key cache that keeps
serving through an issuer outage, the refresh rate limit for unknown kids), the same way
for Keycloak's tokens and the local issuer's (DESIGN decision 7). What is the control
plane's own: the audience comes from settings, and an issuer that cannot be reached while
no key is known is ``Unavailable`` (HTTP 503), not a bad token."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from controlplane.core.errors import Unavailable
from dataplane.broker.auth.verifier import InvalidToken, JwksKeys, JwksUnavailable, verify_rs256

__all__ = ["InvalidToken", "JwksKeys", "verify_token"]


def verify_token(token: str, keys: JwksKeys, *, issuer: str) -> dict[str, Any]:
    """The claims of ``token`` from ``issuer`` for ``settings.TOKEN_AUDIENCE``;
    ``InvalidToken`` for a token refused, ``Unavailable`` when no key can be had."""
    try:
        return verify_rs256(token, keys, issuer=issuer, audience=settings.TOKEN_AUDIENCE)
    except JwksUnavailable as exc:
        raise Unavailable(str(exc)) from exc

"""``Authorization: Bearer <jwt>``: verified offline against the identity provider's
JWKS (Keycloak's, or the local issuer's); the request's user becomes an ``Actor``.
A refused token is a 401; an issuer whose keys cannot be fetched at all is a 503
(``Unavailable``, raised through)."""

from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from controlplane.core.actors import Actor


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Actor, str] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != self.keyword.lower() or not token.strip():
            raise exceptions.AuthenticationFailed("expected 'Authorization: Bearer <token>'")
        from controlplane.accounts.identity import InvalidToken, get_identity

        try:
            claims: dict[str, Any] = get_identity().verify(token.strip())
        except InvalidToken as exc:
            raise exceptions.AuthenticationFailed(f"invalid token: {exc}") from exc
        return Actor.from_claims(claims), token

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="meridian"'

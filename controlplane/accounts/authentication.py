"""``Authorization: Bearer <jwt>``: verified offline against the identity provider's
JWKS (Keycloak's, or the local issuer's); the request's user becomes an ``Actor``.

The token must also still name live identities, checked in the database at every
request: a role counts only in a tenant that exists (not being deleted) with the id the
token names (a deleted tenant's tokens never act in a later tenant of the same slug),
and a service account's token (``account_id``) only while its account exists. A token
whose every tenant is so dropped, or whose account is gone, is refused, with one message
whether the tenant was deleted, replaced or never existed.

A refused token — forged, expired, a claim of the wrong type, no live identity — is a
401; an issuer whose keys cannot be fetched at all is a 503 (``Unavailable``, raised
through)."""

from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from controlplane.accounts.identity import InvalidToken, get_identity
from controlplane.accounts.models import ServiceAccount
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.tenants.models import Tenant
from dataplane.client.claims import NO_LIVE_ACCOUNT, NO_LIVE_TENANT, MalformedClaims

MIRROR_WORKER_REFUSED = "a mirror worker's identity may not use the API"


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Actor, str] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != self.keyword.lower() or not token.strip():
            raise exceptions.AuthenticationFailed("expected 'Authorization: Bearer <token>'")
        try:
            claims: dict[str, Any] = get_identity().verify(token.strip())
            actor = Actor.from_claims(claims)
        except (InvalidToken, MalformedClaims) as exc:
            raise exceptions.AuthenticationFailed(f"invalid token: {exc}") from exc
        return live_actor(actor), token

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="meridian"'


def live_actor(actor: Actor) -> Actor:
    """``actor`` with only its live tenants' roles; ``AuthenticationFailed`` when its
    service account is gone or it named tenants and none is live, or it is a mirror
    worker's account (``managed_by_link``): it exists for the brokers
    only and may not use the API, whatever its role."""
    if actor.account_id:
        account = ServiceAccount.objects.filter(uid=actor.account_id).first()
        if account is None:
            raise exceptions.AuthenticationFailed(f"invalid token: {NO_LIVE_ACCOUNT}")
        if account.managed_by_link_id is not None:
            raise exceptions.AuthenticationFailed(MIRROR_WORKER_REFUSED)
    if not actor.roles:
        return actor
    live = (
        Tenant.objects.filter(slug__in=list(actor.roles))
        .exclude(status=ProvisioningStatus.DELETING)
        .values_list("slug", "uid")
    )
    bound = actor.only_in({slug: str(uid) for slug, uid in live})
    if not bound.roles and not actor.platform_admin:
        raise exceptions.AuthenticationFailed(f"invalid token: {NO_LIVE_TENANT}")
    return bound

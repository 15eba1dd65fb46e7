"""Who is calling: the identity a verified token describes, or the system itself."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controlplane.core.choices import PLATFORM_ADMIN_ROLE
from dataplane.client.claims import ROLE_RANK, TokenClaims, live_roles


@dataclass(frozen=True)
class Actor:
    """An authenticated caller. ``roles`` maps tenant slug to the caller's role there,
    read from the token's ``groups`` claim (``/tenants/<slug>@<tenant uid>/<role>``,
    ``dataplane.client.claims``), and ``tenant_ids`` the same slugs to the tenant ids the
    token names; platform admins hold the realm role ``platform-admin``; ``account_id``
    is the service account a token was issued to. ``from_claims`` raises
    ``MalformedClaims`` when a claim has the wrong type; the authentication keeps only
    the roles of live tenants (``only_in``)."""

    subject: str
    name: str
    roles: Mapping[str, str] = field(default_factory=dict)
    platform_admin: bool = False
    kind: str = "user"  # user | service | system
    claims: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    tenant_ids: Mapping[str, str] = field(default_factory=dict)
    account_id: str = ""

    is_authenticated = True  # what DRF asks of request.user

    @classmethod
    def system(cls, part: str) -> Actor:
        return cls(subject=f"system:{part}", name=part, platform_admin=True, kind="system")

    @classmethod
    def from_claims(cls, claims: Mapping[str, Any]) -> Actor:
        parsed = TokenClaims.parse(claims)
        username = parsed.username or parsed.client_id or parsed.subject
        is_service = username.startswith("service-account-") or "client_id" in claims
        return cls(
            subject=parsed.subject,
            name=username,
            roles={slug: held.role for slug, held in parsed.tenants.items()},
            platform_admin=PLATFORM_ADMIN_ROLE in parsed.realm_roles,
            kind="service" if is_service or parsed.account_id else "user",
            claims=claims,
            tenant_ids={slug: held.tenant_id for slug, held in parsed.tenants.items()},
            account_id=parsed.account_id,
        )

    def only_in(self, tenants: Mapping[str, str]) -> Actor:
        """This actor with the roles of the tenants whose id is not the one ``tenants``
        (slug -> live tenant uid) gives dropped."""
        roles = live_roles(self.roles, self.tenant_ids, tenants)
        return self if len(roles) == len(self.roles) else dataclasses.replace(self, roles=roles)

    def role_in(self, tenant_slug: str) -> str | None:
        return self.roles.get(tenant_slug)

    def can(self, tenant_slug: str, needed: str) -> bool:
        """Whether the actor holds ``needed`` (or a stronger role) in the tenant."""
        if self.platform_admin:
            return True
        held = self.roles.get(tenant_slug)
        return held is not None and ROLE_RANK[held] >= ROLE_RANK[needed]

    @property
    def tenant_slugs(self) -> list[str]:
        return sorted(self.roles)

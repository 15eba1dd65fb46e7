"""Who is calling: the identity a verified token describes, or the system itself."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controlplane.tenants.choices import PLATFORM_ADMIN_ROLE, Role

TENANT_GROUP_PREFIX = "/tenants/"
_RANK = {Role.VIEWER: 1, Role.DEVELOPER: 2, Role.TENANT_ADMIN: 3}


@dataclass(frozen=True)
class Actor:
    """An authenticated caller. ``roles`` maps tenant slug to the caller's role there,
    read from the token's ``groups`` claim (``/tenants/<slug>/<role>``); platform admins
    hold the realm role ``platform-admin``."""

    subject: str
    name: str
    roles: Mapping[str, str] = field(default_factory=dict)
    platform_admin: bool = False
    kind: str = "user"  # user | service | system
    claims: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    is_authenticated = True  # what DRF asks of request.user

    @classmethod
    def system(cls, part: str) -> Actor:
        return cls(subject=f"system:{part}", name=part, platform_admin=True, kind="system")

    @classmethod
    def from_claims(cls, claims: Mapping[str, Any]) -> Actor:
        roles: dict[str, str] = {}
        for group in claims.get("groups") or []:
            if not isinstance(group, str) or not group.startswith(TENANT_GROUP_PREFIX):
                continue
            parts = group[len(TENANT_GROUP_PREFIX) :].split("/")
            if len(parts) == 2 and parts[1] in _RANK:
                slug, role = parts
                current = roles.get(slug)
                if current is None or _RANK[Role(role)] > _RANK[Role(current)]:
                    roles[slug] = role
        realm_roles = (claims.get("realm_access") or {}).get("roles") or []
        username = claims.get("preferred_username") or claims.get("azp") or claims["sub"]
        is_service = str(username).startswith("service-account-") or "client_id" in claims
        return cls(
            subject=str(claims["sub"]),
            name=str(username),
            roles=roles,
            platform_admin=PLATFORM_ADMIN_ROLE in realm_roles,
            kind="service" if is_service else "user",
            claims=claims,
        )

    def role_in(self, tenant_slug: str) -> str | None:
        return self.roles.get(tenant_slug)

    def can(self, tenant_slug: str, needed: str) -> bool:
        """Whether the actor holds ``needed`` (or a stronger role) in the tenant."""
        if self.platform_admin:
            return True
        held = self.roles.get(tenant_slug)
        return held is not None and _RANK[Role(held)] >= _RANK[Role(needed)]

    @property
    def tenant_slugs(self) -> list[str]:
        return sorted(self.roles)

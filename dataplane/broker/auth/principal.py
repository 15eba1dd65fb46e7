"""Who is calling a broker: the ``Principal`` a verified token describes.

The claim layout is the control plane's (``controlplane/core/actors.py``), the same for
Keycloak's tokens and the local issuer's: ``groups`` holds ``/tenants/<slug>/<role>``
paths (roles ``tenant-admin``, ``developer``, ``viewer``), ``realm_access.roles`` holds
``platform-admin`` for operators and the internal role (``meridian-internal`` by default)
for the control plane's and the brokers' own service accounts; ``azp`` names the client
that obtained the token.

The principal of the call being served lives in a context variable (``current()``);
None means authentication is off.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TENANT_GROUP_PREFIX = "/tenants/"
PLATFORM_ADMIN_ROLE = "platform-admin"
TENANT_ADMIN, DEVELOPER, VIEWER = "tenant-admin", "developer", "viewer"
_RANK = {VIEWER: 1, DEVELOPER: 2, TENANT_ADMIN: 3}


@dataclass(frozen=True)
class Principal:
    """An authenticated caller. ``roles`` maps tenant slug to the strongest role held
    there; ``expires_at`` is the token's ``exp`` (seconds since the epoch)."""

    subject: str
    client_id: str = ""
    roles: Mapping[str, str] = field(default_factory=dict)
    platform_admin: bool = False
    internal: bool = False
    expires_at: float = 0.0

    @classmethod
    def from_claims(cls, claims: Mapping[str, Any], *, internal_role: str) -> Principal:
        realm_roles = (claims.get("realm_access") or {}).get("roles") or []
        return cls(
            subject=str(claims["sub"]),
            client_id=str(claims.get("azp") or claims.get("client_id") or ""),
            roles=tenant_roles(claims.get("groups") or []),
            platform_admin=PLATFORM_ADMIN_ROLE in realm_roles,
            internal=internal_role in realm_roles,
            expires_at=float(claims["exp"]),
        )

    def role_in(self, tenant: str) -> str | None:
        return self.roles.get(tenant)

    @property
    def names(self) -> tuple[str, ...]:
        """What an ACL entry's ``principal`` may name: the client id or the subject."""
        return tuple(name for name in (self.client_id, self.subject) if name)


def tenant_roles(groups: Any) -> dict[str, str]:
    """Tenant slug -> strongest role, from ``/tenants/<slug>/<role>`` group paths."""
    roles: dict[str, str] = {}
    for group in groups:
        if not isinstance(group, str) or not group.startswith(TENANT_GROUP_PREFIX):
            continue
        parts = group[len(TENANT_GROUP_PREFIX) :].split("/")
        if len(parts) == 2 and parts[1] in _RANK:
            slug, role = parts
            current = roles.get(slug)
            if current is None or _RANK[role] > _RANK[current]:
                roles[slug] = role
    return roles


_current: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "meridian_principal", default=None
)


def current() -> Principal | None:
    """The caller of the call being served; None when authentication is off."""
    return _current.get()


def set_current(principal: Principal | None) -> contextvars.Token[Principal | None]:
    return _current.set(principal)


def reset_current(token: contextvars.Token[Principal | None]) -> None:
    _current.reset(token)

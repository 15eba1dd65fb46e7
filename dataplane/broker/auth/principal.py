"""Who is calling a broker: the ``Principal`` a verified token describes.

The claim layout is ``dataplane.client.claims`` (the control plane's, the same for
Keycloak's tokens and the local issuer's): ``groups`` holds
``/tenants/<slug>@<tenant id>/<role>`` paths (roles ``tenant-admin``, ``developer``,
``viewer``), ``realm_access.roles`` holds ``platform-admin`` for operators and the
internal role (``meridian-internal`` by default) for the control plane's and the
brokers' own service accounts; ``azp`` names the client that obtained the token and
``account_id`` the service account it was issued to. A claim of the wrong type is
``MalformedClaims``.

The principal of the call being served lives in a context variable (``current()``);
None means authentication is off.
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dataplane.client.claims import PLATFORM_ADMIN_ROLE, TokenClaims, live_roles


@dataclass(frozen=True)
class Principal:
    """An authenticated caller. ``roles`` maps tenant slug to the strongest role held
    there and ``tenant_ids`` the same slugs to the tenant ids the token names;
    ``account_id`` is the service account's id (empty for people and internal clients);
    ``expires_at`` is the token's ``exp`` (seconds since the epoch)."""

    subject: str
    client_id: str = ""
    roles: Mapping[str, str] = field(default_factory=dict)
    platform_admin: bool = False
    internal: bool = False
    expires_at: float = 0.0
    tenant_ids: Mapping[str, str] = field(default_factory=dict)
    account_id: str = ""

    @classmethod
    def from_claims(cls, claims: Mapping[str, Any], *, internal_role: str) -> Principal:
        """``MalformedClaims`` when a claim has the wrong type."""
        parsed = TokenClaims.parse(claims)
        return cls(
            subject=parsed.subject,
            client_id=parsed.client_id,
            roles={slug: held.role for slug, held in parsed.tenants.items()},
            platform_admin=PLATFORM_ADMIN_ROLE in parsed.realm_roles,
            internal=internal_role in parsed.realm_roles,
            expires_at=parsed.expires_at,
            tenant_ids={slug: held.tenant_id for slug, held in parsed.tenants.items()},
            account_id=parsed.account_id,
        )

    def role_in(self, tenant: str) -> str | None:
        return self.roles.get(tenant)

    def only_in(self, tenants: Mapping[str, str]) -> Principal:
        """This principal with the roles of the tenants whose id is not the one
        ``tenants`` (slug -> live tenant id) gives dropped."""
        roles = live_roles(self.roles, self.tenant_ids, tenants)
        return self if len(roles) == len(self.roles) else dataclasses.replace(self, roles=roles)

    @property
    def names(self) -> tuple[str, ...]:
        """What an ACL entry's ``principal`` may name: the client id or the subject."""
        return tuple(name for name in (self.client_id, self.subject) if name)


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

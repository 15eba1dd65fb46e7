"""The claim layout of Meridian's access tokens, read strictly (DESIGN decision 7).

The same for Keycloak's tokens and the control plane's local issuer, and read the same
way by the REST API and the brokers:

- ``sub`` (string): the caller's subject; ``exp`` (number): when the token expires.
- ``groups`` (list of strings, optional): ``/tenants/<slug>@<tenant id>/<role>`` for each
  tenant role held (roles ``tenant-admin``, ``developer``, ``viewer``). The tenant id is
  the tenant's immutable UUID, so a role names one tenant for ever: a later tenant that
  reuses the slug has another id. Other groups, and tenant groups without an id (the
  layout before ids), give no role.
- ``realm_access`` (object, optional) whose ``roles`` (list of strings) may hold
  ``platform-admin`` and the internal role.
- ``preferred_username``, ``azp``, ``client_id`` (strings, optional).
- ``account_id`` (string, optional): the immutable id of the service account the token
  was issued to; the API and the brokers refuse it once the account is deleted.

A claim of the wrong type (``realm_access`` a list, ``groups`` a string, ``sub`` a
number...) makes the whole token ``MalformedClaims``: an authentication failure, never
a crash, and never a silently ignored claim.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TENANT_GROUP_PREFIX = "/tenants/"
TENANT_ID_SEPARATOR = "@"
PLATFORM_ADMIN_ROLE = "platform-admin"
TENANT_ADMIN, DEVELOPER, VIEWER = "tenant-admin", "developer", "viewer"
ROLE_RANK = {VIEWER: 1, DEVELOPER: 2, TENANT_ADMIN: 3}
_OPTIONAL_STRINGS = ("preferred_username", "azp", "client_id", "account_id", "typ", "jti")


# Why a verified token is refused when its tenants or account are gone: one message for
# a deleted tenant, a slug taken by a new tenant and a tenant that never was.
NO_LIVE_TENANT = "the token names no live tenant"
NO_LIVE_ACCOUNT = "the token's service account no longer exists"


def live_roles(
    roles: Mapping[str, str], tenant_ids: Mapping[str, str], live: Mapping[str, str]
) -> dict[str, str]:
    """The ``roles`` (slug -> role) held in tenants that ``live`` (slug -> id of the live
    tenant) lists with the id the token names for them (``tenant_ids``)."""
    return {slug: role for slug, role in roles.items() if live.get(slug) == tenant_ids.get(slug)}


class MalformedClaims(ValueError):  # noqa: N818 (a kind of invalid token)
    """A verified token whose claims do not have the types of the layout above."""


@dataclass(frozen=True)
class TenantRole:
    """The strongest role held in one tenant, and the tenant's id the token names."""

    tenant_id: str
    role: str


@dataclass(frozen=True)
class TokenClaims:
    """What a token says about its caller, every claim checked for its type."""

    subject: str
    expires_at: float
    tenants: Mapping[str, TenantRole] = field(default_factory=dict)  # by slug
    realm_roles: tuple[str, ...] = ()
    username: str = ""
    client_id: str = ""
    account_id: str = ""

    @classmethod
    def parse(cls, claims: Mapping[str, Any]) -> TokenClaims:
        """The claims' meaning; ``MalformedClaims`` when any claim has the wrong type."""
        if not isinstance(claims, Mapping):
            raise MalformedClaims("the token's payload is not an object")
        strings = {name: _optional_string(claims, name) for name in _OPTIONAL_STRINGS}
        account_id = strings["account_id"]
        if account_id and not _is_uuid(account_id):
            raise MalformedClaims("claim 'account_id' is not a UUID")
        return cls(
            subject=_required_string(claims, "sub"),
            expires_at=_number(claims, "exp"),
            tenants=tenant_roles(_string_list(claims.get("groups"), "groups")),
            realm_roles=tuple(_realm_roles(claims.get("realm_access"))),
            username=strings["preferred_username"],
            client_id=strings["azp"] or strings["client_id"],
            account_id=account_id,
        )


def tenant_group(slug: str, tenant_id: str) -> str:
    """The group path of a tenant (its role groups are beneath it)."""
    return f"{TENANT_GROUP_PREFIX}{slug}{TENANT_ID_SEPARATOR}{tenant_id}"


def tenant_roles(groups: list[str]) -> dict[str, TenantRole]:
    """Tenant slug -> strongest role and the tenant id, from ``groups`` paths. A token
    naming one slug with two different ids is malformed (no issuer makes one)."""
    roles: dict[str, TenantRole] = {}
    for group in groups:
        parsed = _tenant_group_role(group)
        if parsed is None:
            continue
        slug, held = parsed
        current = roles.get(slug)
        if current is not None and current.tenant_id != held.tenant_id:
            raise MalformedClaims(f"the token names tenant {slug!r} with two ids")
        if current is None or ROLE_RANK[held.role] > ROLE_RANK[current.role]:
            roles[slug] = held
    return roles


def _tenant_group_role(group: str) -> tuple[str, TenantRole] | None:
    if not group.startswith(TENANT_GROUP_PREFIX):
        return None
    parts = group[len(TENANT_GROUP_PREFIX) :].split("/")
    if len(parts) != 2 or parts[1] not in ROLE_RANK:
        return None
    slug, separator, tenant_id = parts[0].partition(TENANT_ID_SEPARATOR)
    if not slug or not separator or not _is_uuid(tenant_id):
        return None
    return slug, TenantRole(tenant_id=tenant_id, role=parts[1])


def _is_uuid(value: str) -> bool:
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False


def _required_string(claims: Mapping[str, Any], name: str) -> str:
    value = claims.get(name)
    if not isinstance(value, str) or not value:
        raise MalformedClaims(f"claim {name!r} must be a non-empty string")
    return value


def _optional_string(claims: Mapping[str, Any], name: str) -> str:
    value = claims.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MalformedClaims(f"claim {name!r} must be a string")
    return value


def _number(claims: Mapping[str, Any], name: str) -> float:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedClaims(f"claim {name!r} must be a number")
    return float(value)


def _string_list(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise MalformedClaims(f"claim {name!r} must be a list of strings")
    return value


def _realm_roles(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, Mapping):
        raise MalformedClaims("claim 'realm_access' must be an object")
    return _string_list(value.get("roles"), "realm_access.roles")

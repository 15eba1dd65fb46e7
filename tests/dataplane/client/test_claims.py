"""The token claim layout, read strictly: tenant roles name the tenant's id, and a claim
of the wrong type makes the whole token malformed."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from dataplane.client.claims import MalformedClaims, TenantRole, TokenClaims, tenant_group

ACME = str(uuid.uuid4())


def _claims(**overrides: Any) -> dict[str, Any]:
    return {"sub": "someone", "exp": 2_000_000_000, "iat": 1_900_000_000, **overrides}


def test_roles_name_the_tenant_id_and_the_strongest_role_wins() -> None:
    groups = [
        f"{tenant_group('acme', ACME)}/viewer",
        f"{tenant_group('acme', ACME)}/developer",
        "/tenants/beta/tenant-admin",  # no id (the layout before ids): no role
        f"{tenant_group('gamma', 'not-a-uuid')}/viewer",
        f"{tenant_group('delta', str(uuid.uuid4()))}/owner",  # no such role
        "/elsewhere/x",
    ]
    parsed = TokenClaims.parse(_claims(groups=groups))
    assert parsed.tenants == {"acme": TenantRole(tenant_id=ACME, role="developer")}


def test_one_slug_with_two_ids_is_malformed() -> None:
    groups = [
        f"{tenant_group('acme', ACME)}/viewer",
        f"{tenant_group('acme', str(uuid.uuid4()))}/viewer",
    ]
    with pytest.raises(MalformedClaims, match="two ids"):
        TokenClaims.parse(_claims(groups=groups))


def test_optional_claims_may_be_absent() -> None:
    parsed = TokenClaims.parse(_claims())
    assert (parsed.tenants, parsed.realm_roles, parsed.account_id) == ({}, (), "")


@pytest.mark.parametrize(
    ("claim", "value"),
    [
        ("realm_access", ["platform-admin"]),
        ("realm_access", {"roles": "platform-admin"}),
        ("groups", "/tenants/acme/viewer"),
        ("groups", [1]),
        ("sub", 7),
        ("sub", ""),
        ("exp", "soon"),
        ("exp", True),
        ("azp", ["x"]),
        ("account_id", "42"),
    ],
)
def test_a_claim_of_the_wrong_type_is_malformed(claim: str, value: Any) -> None:
    with pytest.raises(MalformedClaims):
        TokenClaims.parse(_claims(**{claim: value}))

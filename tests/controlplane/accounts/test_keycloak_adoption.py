"""``adopt_tenant_ids`` on the real Keycloak: a tenant provisioned before tenant ids were
in the layout (group ``/tenants/<slug>``, clients without ``account_id``) keeps its
members' and service accounts' access, now bound to the tenant's and account's ids."""

from __future__ import annotations

import uuid
from io import StringIO

from django.core.management import call_command
from keycloak import KeycloakAdmin

from controlplane.accounts.keycloak import TENANT_ATTRIBUTE
from controlplane.accounts.local import tenant_group_path
from controlplane.accounts.models import ServiceAccount
from controlplane.core.choices import Role
from tests.controlplane.accounts.test_keycloak import (
    _api,
    _client_token,
    _password_token,
    _user_accepts_invite,
    keycloak,
    keycloak_realm,
)
from tests.controlplane.api_base import make_tenant

__all__ = ["keycloak", "keycloak_realm"]  # fixtures this module uses


def _legacy_tenant(admin: KeycloakAdmin, slug: str) -> dict[str, str]:
    """The old layout: ``/tenants/<slug>`` and its role groups; returns them by role."""
    root = admin.get_group_by_path("/tenants")["id"]
    admin.create_group({"name": slug}, parent=root, skip_exists=True)
    group = admin.get_group_by_path(f"/tenants/{slug}")["id"]
    for role in Role.values:
        admin.create_group({"name": role}, parent=group, skip_exists=True)
    return {role: admin.get_group_by_path(f"/tenants/{slug}/{role}")["id"] for role in Role.values}


def _legacy_client(admin: KeycloakAdmin, client_id: str, slug: str, group: str) -> tuple[str, str]:
    client = admin.create_client(
        {
            "clientId": client_id, "enabled": True, "publicClient": False,
            "serviceAccountsEnabled": True, "standardFlowEnabled": False,
            "attributes": {TENANT_ATTRIBUTE: slug},
        }
    )  # fmt: skip
    admin.group_user_add(admin.get_client_service_account_user(client)["id"], group)
    return client, str(admin.get_client_secrets(client)["value"])


def test_adoption_keeps_the_access_of_a_tenant_provisioned_before_ids(
    db: None, keycloak: KeycloakAdmin
) -> None:
    tenant = make_tenant(f"old-{uuid.uuid4().hex[:6]}")
    groups = _legacy_tenant(keycloak, tenant.slug)
    username = f"carol-{uuid.uuid4().hex[:6]}"
    user = keycloak.create_user(
        {"username": username, "email": f"{username}@example.com", "enabled": True}
    )
    _user_accepts_invite(keycloak, user, "carol-password")
    keycloak.group_user_add(user, groups["developer"])
    client_id = f"{tenant.slug}--app"
    client, secret = _legacy_client(keycloak, client_id, tenant.slug, groups["developer"])
    account = ServiceAccount.objects.create(
        tenant=tenant, name="app", client_id=client_id, identity_ref=client
    )
    before = _api(_password_token(username, "carol-password")).get("/api/v1/auth/whoami")
    assert before.json()["tenants"] == []  # the old layout names no tenant id: no role

    out = StringIO()
    call_command("adopt_tenant_ids", stdout=out)
    assert f"{tenant.slug}: group /tenants/{tenant.slug} renamed" in out.getvalue()
    assert keycloak.get_group_by_path(tenant_group_path(tenant))["id"]

    me = _api(_password_token(username, "carol-password")).get("/api/v1/auth/whoami").json()
    assert me["tenants"] == [{"slug": tenant.slug, "role": "developer"}]
    robot = _api(_client_token(client_id, secret))
    assert robot.get("/api/v1/auth/whoami").json()["tenants"] == [
        {"slug": tenant.slug, "role": "developer"}
    ]
    account.delete()
    assert robot.get("/api/v1/auth/whoami").status_code == 401  # bound to the account now

    again = StringIO()
    call_command("adopt_tenant_ids", stdout=again)
    assert tenant.slug not in again.getvalue()

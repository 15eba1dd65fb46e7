"""A deleted tenant's credentials never act in a later tenant of the same slug, over the
REST API (local issuer): the tokens name the tenant's immutable id, and the slug can be
taken again only once the deletion has finished."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from controlplane.accounts.identity import LocalIdentity
from controlplane.accounts.models import ServiceAccount
from controlplane.core.actors import Actor
from controlplane.core.errors import Conflict
from controlplane.tenants.lifecycle import deprovision_tenant
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import create_tenant, delete_tenant
from controlplane.topics.models import Topic
from dataplane.client.claims import tenant_group
from tests.controlplane.api_base import make_cluster, make_tenant
from tests.controlplane.conftest import token_for

OPERATOR = Actor.system("tests")


def _client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _answers(client: APIClient) -> list[tuple[int, Any]]:
    """What the caller gets from every tenant-scoped resource, reading and writing."""
    calls = [
        client.get("/api/v1/service-accounts"),
        client.post("/api/v1/service-accounts", {"name": "backdoor"}, format="json"),
        client.get("/api/v1/topics"),
        client.post("/api/v1/topics", {"name": "stolen", "partitions": 1}, format="json"),
        client.get("/api/v1/quotas"),
        client.get("/api/v1/audit-events"),
        client.get("/api/v1/members"),
        client.get("/api/v1/tenants/phoenix"),
    ]
    return [(response.status_code, response.json()) for response in calls]


def _delete(tenant: Tenant) -> None:
    delete_tenant(tenant, actor=OPERATOR)
    assert deprovision_tenant(tenant.pk, actor=OPERATOR)


def test_an_old_tenants_token_is_refused_by_a_new_tenant_of_its_slug(
    db: None, local_identity: LocalIdentity
) -> None:
    make_cluster("local")
    old = make_tenant("phoenix")
    old_admin = token_for(local_identity, roles={"phoenix": "tenant-admin"}, username="ash")
    assert _client(old_admin).get("/api/v1/service-accounts").status_code == 200
    _delete(old)
    new = make_tenant("phoenix")
    assert new.uid != old.uid

    answers = _answers(_client(old_admin))
    assert {status for status, _ in answers} == {401}
    # Exactly what a token for a phoenix that never existed gets.
    made_up = local_identity.issue_token(
        subject="someone",
        username="ash",
        groups=[f"{tenant_group('phoenix', '00000000-0000-4000-8000-000000000000')}/tenant-admin"],
    )
    assert _answers(_client(made_up)) == answers
    assert not ServiceAccount.objects.exists()
    assert not Topic.objects.exists()

    new_admin = token_for(local_identity, roles={"phoenix": "tenant-admin"}, username="bea")
    created = _client(new_admin).post("/api/v1/service-accounts", {"name": "app"}, format="json")
    assert created.status_code == 201, created.content


def test_the_slug_is_taken_again_only_once_the_deletion_has_finished(
    db: None, local_identity: LocalIdentity
) -> None:
    old = make_tenant("phoenix")
    delete_tenant(old, actor=OPERATOR)
    with pytest.raises(Conflict):
        create_tenant(slug="phoenix", name="Phoenix again", actor=OPERATOR)
    assert deprovision_tenant(old.pk, actor=OPERATOR)
    again = create_tenant(slug="phoenix", name="Phoenix again", actor=OPERATOR)
    assert again.uid != old.uid


def test_a_token_with_claims_of_the_wrong_type_is_401(
    db: None, local_identity: LocalIdentity
) -> None:
    """Signed by the issuer, but a misconfigured mapper made ``realm_access`` a list (and
    so on): an authentication failure, never a 500."""
    make_tenant("phoenix")
    group = f"{tenant_group('phoenix', str(Tenant.objects.get().uid))}/tenant-admin"
    for claim, value in [
        ("realm_access", ["platform-admin"]),
        ("realm_access", {"roles": "platform-admin"}),
        ("groups", group),
        ("groups", [None]),
        ("preferred_username", {"name": "ash"}),
        ("azp", 7),
        ("account_id", "not-a-uuid"),
    ]:
        token = local_identity.issue_token(
            subject="ash", username="ash", groups=[group], extra={claim: value}
        )
        response = _client(token).get("/api/v1/auth/whoami")
        assert response.status_code == 401, (claim, value, response.content)
        assert response.json()["error"]["code"] == "authentication_failed"
        assert "claim" in response.json()["error"]["message"]

"""Members, service accounts and the token endpoint with the local issuer (the embedded
demo's identity): the generic tenant-scoped contract, secrets shown once, client
credentials that work and stop working, and the audit trail."""

from __future__ import annotations

import base64
import hashlib
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.hashers import make_password
from rest_framework.test import APIClient

from controlplane.accounts import local, services
from controlplane.accounts.identity import LocalIdentity
from controlplane.accounts.models import ServiceAccount
from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.core.models import AuditEvent
from controlplane.tenants.models import Membership, Tenant
from controlplane.tenants.services import delete_tenant
from tests.controlplane.api_base import TenantScopedAPIContract, assert_error, make_tenant

TOKEN_URL = "/api/v1/auth/token"
OPERATOR = Actor.system("tests")


@pytest.fixture(autouse=True)
def _local(local_identity: LocalIdentity) -> None:
    """Every test here runs with the local issuer."""


class TestMemberAPI(TenantScopedAPIContract):
    base_url = "/api/v1/members"
    write_role = Role.TENANT_ADMIN
    weak_role = Role.DEVELOPER
    delete_status = 204

    def make_object(self, tenant: Tenant) -> str:
        member = services.invite_member(
            tenant, username=f"bob-{tenant.slug}", email="bob@example.com", role="viewer",
            actor=OPERATOR,
        )  # fmt: skip
        return str(member.pk)

    def create_payload(self, tenant: Tenant) -> dict[str, Any]:
        return {
            "tenant": tenant.slug,
            "username": "carol",
            "email": "c@example.com",
            "role": "developer",
        }

    def update_payload(self) -> dict[str, Any]:
        return {"role": "tenant-admin"}

    def lookup_of(self, body: dict[str, Any]) -> str:
        return str(body["id"])


class TestServiceAccountAPI(TenantScopedAPIContract):
    base_url = "/api/v1/service-accounts"
    write_role = Role.TENANT_ADMIN
    weak_role = Role.DEVELOPER
    delete_status = 204

    def make_object(self, tenant: Tenant) -> str:
        account, _ = services.create_service_account(
            tenant, name="ingest", role="developer", actor=OPERATOR
        )
        return str(account.pk)

    def create_payload(self, tenant: Tenant) -> dict[str, Any]:
        return {"tenant": tenant.slug, "name": "billing", "role": "viewer", "description": "x"}

    def update_payload(self) -> dict[str, Any]:
        return {"description": "ingests orders", "role": "viewer"}

    def lookup_of(self, body: dict[str, Any]) -> str:
        return str(body["id"])

    def test_create(self) -> None:
        """The secret is in the create answer and nowhere else."""
        response = self.client(self.write_role).post(
            self.url(), self.create_payload(self.tenant), format="json"
        )
        assert response.status_code == 201, response.content
        created = response.json()
        assert created["client_id"] == "acme--billing"
        assert len(created.pop("client_secret")) >= 32
        fetched = self.client(Role.VIEWER).get(self.url(self.lookup_of(created)))
        assert fetched.json() == created
        listed = self.client(Role.VIEWER).get(self.url()).json()["results"]
        assert all("client_secret" not in row for row in listed)


def _token(client_id: str, secret: str, *, as_json: bool = False) -> Any:
    body = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
    if as_json:
        return APIClient().post(TOKEN_URL, body, format="json")
    return _form(body)


def _form(body: dict[str, str], **headers: str) -> Any:
    """A form post, as OAuth clients send it."""
    return APIClient().post(
        TOKEN_URL, urlencode(body), content_type="application/x-www-form-urlencoded", **headers
    )


@pytest.fixture
def acme(db: None) -> Tenant:
    return make_tenant("acme")


def test_client_credentials_give_a_token_that_works_on_the_api(acme: Tenant) -> None:
    account, secret = services.create_service_account(acme, name="ingest", actor=OPERATOR)
    response = _token(account.client_id, secret)
    assert response.status_code == 200, response.content
    assert response["Cache-Control"] == "no-store"
    token = response.json()
    assert token["token_type"] == "Bearer"
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token['access_token']}")
    me = client.get("/api/v1/auth/whoami").json()
    assert me == {
        "subject": account.identity_ref,
        "name": "service-account-acme--ingest",
        "kind": "service",
        "platform_admin": False,
        "tenants": [{"slug": "acme", "role": "developer"}],
    }
    listed = client.get("/api/v1/service-accounts").json()["results"]
    assert [row["client_id"] for row in listed] == ["acme--ingest"]


def test_json_body_and_http_basic_are_accepted(acme: Tenant) -> None:
    account, secret = services.create_service_account(acme, name="ingest", actor=OPERATOR)
    assert _token(account.client_id, secret, as_json=True).status_code == 200
    basic = base64.b64encode(f"{account.client_id}:{secret}".encode()).decode()
    response = _form({"grant_type": "client_credentials"}, HTTP_AUTHORIZATION=f"Basic {basic}")
    assert response.status_code == 200, response.content


def test_a_wrong_secret_or_client_is_401(acme: Tenant) -> None:
    account, _ = services.create_service_account(acme, name="ingest", actor=OPERATOR)
    assert_error(_token(account.client_id, "wrong"), 401, "invalid_client")
    assert_error(_token("acme--nobody", "wrong"), 401, "invalid_client")


def test_other_grants_are_refused(acme: Tenant) -> None:
    response = _form({"grant_type": "password", "username": "x"})
    assert_error(response, 400, "unsupported_grant_type")
    assert_error(_form({}), 400, "invalid")


def test_rotating_the_secret_retires_the_old_one(acme: Tenant, client_for: Any) -> None:
    account, old = services.create_service_account(acme, name="ingest", actor=OPERATOR)
    admin = client_for(roles={"acme": "tenant-admin"})
    response = admin.post(f"/api/v1/service-accounts/{account.pk}/rotate-secret")
    assert response.status_code == 200, response.content
    new = response.json()["client_secret"]
    assert new != old
    assert_error(_token(account.client_id, old), 401, "invalid_client")
    assert _token(account.client_id, new).status_code == 200
    actions = list(
        AuditEvent.objects.filter(object_id=str(account.pk)).values_list("action", flat=True)
    )
    assert sorted(actions) == ["service_account.create", "service_account.rotate_secret"]


def test_a_deleted_account_gets_no_token(acme: Tenant, client_for: Any) -> None:
    account, secret = services.create_service_account(acme, name="ingest", actor=OPERATOR)
    admin = client_for(roles={"acme": "tenant-admin"})
    assert admin.delete(f"/api/v1/service-accounts/{account.pk}").status_code == 204
    assert not ServiceAccount.objects.filter(pk=account.pk).exists()
    assert_error(_token(account.client_id, secret), 401, "invalid_client")
    event = AuditEvent.objects.get(action="service_account.delete")
    assert event.before["client_id"] == "acme--ingest"
    assert "secret_hash" not in event.before


def test_a_deprovisioned_tenant_s_accounts_get_no_token(acme: Tenant) -> None:
    account, secret = services.create_service_account(acme, name="ingest", actor=OPERATOR)
    LocalIdentity().deprovision_tenant(acme)
    assert_error(_token(account.client_id, secret), 401, "invalid_client")


def test_the_secret_is_stored_as_its_sha256_digest(acme: Tenant) -> None:
    account, secret = services.create_service_account(acme, name="ingest", actor=OPERATOR)
    account.refresh_from_db()
    assert secret not in account.secret_hash
    assert account.secret_hash == "sha256$" + hashlib.sha256(secret.encode()).hexdigest()


def test_a_wrong_secret_and_an_unknown_client_get_the_same_answer_for_the_same_work(
    acme: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither the answer nor the work done tells whether the client id exists."""
    account, _ = services.create_service_account(acme, name="ingest", actor=OPERATOR)
    compared: list[str] = []
    real_matches = local.secret_matches

    def spy(secret: str, stored: str) -> bool:
        compared.append(secret)
        return real_matches(secret, stored)

    monkeypatch.setattr(local, "secret_matches", spy)
    wrong = _token(account.client_id, "wrong")
    unknown = _token("acme--nobody", "wrong")
    assert_error(wrong, 401, "invalid_client")
    assert (unknown.status_code, unknown.content) == (wrong.status_code, wrong.content)
    assert unknown["WWW-Authenticate"] == wrong["WWW-Authenticate"]
    assert compared == ["wrong", "wrong"]


def test_a_password_hash_stored_before_never_matches(acme: Tenant) -> None:
    """A secret stored by the earlier scheme needs rotating: it is refused, not checked
    with a slow password hasher."""
    account, secret = services.create_service_account(acme, name="ingest", actor=OPERATOR)
    ServiceAccount.objects.filter(pk=account.pk).update(secret_hash=make_password(secret))
    assert_error(_token(account.client_id, secret), 401, "invalid_client")


def test_a_non_ascii_secret_or_client_id_is_a_401(acme: Tenant) -> None:
    account, _ = services.create_service_account(acme, name="ingest", actor=OPERATOR)
    odd = "é" * 10_000
    assert_error(_token(account.client_id, odd), 401, "invalid_client")
    assert_error(_token(odd, odd, as_json=True), 401, "invalid_client")


def test_service_account_names_are_validated(acme: Tenant, client_for: Any) -> None:
    admin = client_for(roles={"acme": "tenant-admin"})
    response = admin.post("/api/v1/service-accounts", {"name": "Bad_Name!"}, format="json")
    error = assert_error(response, 400, "invalid")
    assert "name" in error["details"]
    services.create_service_account(acme, name="ingest", actor=OPERATOR)
    again = admin.post("/api/v1/service-accounts", {"name": "ingest"}, format="json")
    assert_error(again, 409, "conflict")


def test_a_service_account_name_with_a_double_hyphen_is_a_400(
    acme: Tenant, client_for: Any
) -> None:
    """``--`` separates the tenant from the name in the client id."""
    admin = client_for(roles={"acme": "tenant-admin"})
    response = admin.post("/api/v1/service-accounts", {"name": "prod--ci"}, format="json")
    assert "name" in assert_error(response, 400, "invalid")["details"]
    assert not ServiceAccount.objects.exists()


def test_nothing_is_created_in_a_tenant_being_deleted(acme: Tenant, client_for: Any) -> None:
    """The tenant's own credentials die with the deletion (401); a platform admin's
    create is refused by the service (409)."""
    tenant_admin = client_for(roles={"acme": "tenant-admin"})
    delete_tenant(acme, actor=OPERATOR)
    late = {"name": "late", "tenant": "acme"}
    assert_error(tenant_admin.post("/api/v1/service-accounts", late, format="json"), 401)
    admin = client_for(platform_admin=True)
    assert_error(admin.post("/api/v1/service-accounts", late, format="json"), 409, "conflict")
    bob = {"username": "bob", "role": "viewer", "tenant": "acme"}
    assert_error(admin.post("/api/v1/members", bob, format="json"), 409, "conflict")
    assert not ServiceAccount.objects.exists()
    assert not Membership.objects.exists()


def test_an_update_from_a_stale_copy_keeps_a_rotated_secret(acme: Tenant) -> None:
    account, _ = services.create_service_account(acme, name="ingest", actor=OPERATOR)
    stale = ServiceAccount.objects.get(pk=account.pk)
    new_secret = services.rotate_service_account_secret(account, actor=OPERATOR)
    updated = services.update_service_account(stale, description="orders", actor=OPERATOR)
    assert updated.description == "orders"
    assert _token(account.client_id, new_secret).status_code == 200


def test_a_role_change_from_a_stale_copy_changes_only_the_role(acme: Tenant) -> None:
    member = services.invite_member(acme, username="dave", role="viewer", actor=OPERATOR)
    stale = Membership.objects.get(pk=member.pk)
    Membership.objects.filter(pk=member.pk).update(email="dave@example.com")
    changed = services.change_member_role(stale, role="developer", actor=OPERATOR)
    assert (changed.role, changed.email) == ("developer", "dave@example.com")
    member.refresh_from_db()
    assert (member.role, member.email) == ("developer", "dave@example.com")


def test_inviting_a_member_twice_is_a_conflict(acme: Tenant, client_for: Any) -> None:
    admin = client_for(roles={"acme": "tenant-admin"})
    body = {"username": "dave", "email": "dave@example.com", "role": "viewer"}
    first = admin.post("/api/v1/members", body, format="json")
    assert first.status_code == 201, first.content
    assert_error(admin.post("/api/v1/members", body, format="json"), 409, "conflict")
    assert Membership.objects.filter(tenant=acme, username="dave").count() == 1


def test_member_changes_are_audited(acme: Tenant, client_for: Any) -> None:
    admin = client_for(roles={"acme": "tenant-admin"}, username="erin")
    created = admin.post("/api/v1/members", {"username": "dave", "role": "viewer"}, format="json")
    url = f"/api/v1/members/{created.json()['id']}"
    assert admin.patch(url, {"role": "developer"}, format="json").json()["role"] == "developer"
    assert admin.delete(url).status_code == 204
    events = AuditEvent.objects.filter(tenant_slug="acme").order_by("id")
    assert [e.action for e in events] == ["member.invite", "member.change_role", "member.remove"]
    assert {e.actor_name for e in events} == {"erin"}
    change = events[1]
    assert (change.before["role"], change.after["role"]) == ("viewer", "developer")


def test_with_keycloak_the_local_endpoints_point_at_keycloak(db: None, settings: Any) -> None:
    settings.IDENTITY_PROVIDER = "keycloak"
    settings.KEYCLOAK_REALM = "meridian"
    error = assert_error(_form({"grant_type": "client_credentials"}), 404, "not_found")
    assert error["details"]["url"].endswith("/realms/meridian/protocol/openid-connect/token")
    jwks = assert_error(APIClient().get("/api/v1/auth/jwks.json"), 404, "not_found")
    assert jwks["details"]["url"].endswith("/realms/meridian/protocol/openid-connect/certs")

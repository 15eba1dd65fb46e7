"""Tenant onboarding against the real Keycloak (``./dev services up``): a realm of its
own per test session (``meridian-test-<random>``, bootstrapped by the command operators
run, deleted at the end); tokens come from Keycloak's own endpoints (password grant for
people, client credentials for service accounts) and are checked by the API offline."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from django.conf import settings as django_settings
from django.core.management import call_command
from django.db import IntegrityError
from django.test import override_settings
from keycloak import KeycloakAdmin, KeycloakOpenID
from keycloak.exceptions import KeycloakError
from rest_framework.test import APIClient

from controlplane.accounts import services
from controlplane.accounts.identity import KeycloakIdentity, get_identity
from controlplane.accounts.keycloak import admin_for
from controlplane.accounts.keycloak_setup import delete_realm
from controlplane.accounts.local import group_path, tenant_group_path
from controlplane.accounts.models import ServiceAccount
from controlplane.core.actors import Actor
from controlplane.core.errors import Conflict, Unavailable
from controlplane.tenants.models import Membership, Tenant
from tests.controlplane.api_base import assert_error, make_tenant

OPERATOR = ("operator", "operator-password")
OPERATOR_ACTOR = Actor.system("tests")


def _keycloak_up() -> bool:
    try:
        return requests.get(f"{django_settings.KEYCLOAK_URL}/realms/master", timeout=5).ok
    except requests.RequestException:
        return False


@pytest.fixture(scope="session")
def keycloak_realm() -> Iterator[str]:
    """A fresh realm set up by ``bootstrap_identity``, with a platform admin."""
    if not _keycloak_up():
        pytest.fail(
            f"Keycloak is not answering at {django_settings.KEYCLOAK_URL}: ./dev services up"
        )
    realm = f"meridian-test-{uuid.uuid4().hex[:8]}"
    # Keycloak only while bootstrapping: the tests after this one use the local issuer
    # unless they ask for Keycloak (the ``keycloak`` fixture).
    with override_settings(IDENTITY_PROVIDER="keycloak", KEYCLOAK_REALM=realm):
        call_command("bootstrap_identity")
        call_command("bootstrap_identity")  # idempotent: a second run changes nothing
        username, password = OPERATOR
        call_command(
            "create_platform_admin", username=username, password=password,
            email="operator@example.com",
        )  # fmt: skip
    try:
        yield realm
    finally:
        delete_realm(realm)


@pytest.fixture
def keycloak(settings: Any, keycloak_realm: str) -> KeycloakAdmin:
    """The API and services use Keycloak; returns an admin client of the test realm."""
    settings.IDENTITY_PROVIDER = "keycloak"
    settings.KEYCLOAK_REALM = keycloak_realm
    assert isinstance(get_identity(), KeycloakIdentity)
    return admin_for(keycloak_realm)


def _openid(client_id: str, secret: str | None = None) -> KeycloakOpenID:
    return KeycloakOpenID(
        server_url=django_settings.KEYCLOAK_URL + "/",
        realm_name=django_settings.KEYCLOAK_REALM,
        client_id=client_id,
        client_secret_key=secret,
    )


def _password_token(username: str, password: str) -> str:
    return str(_openid("meridian-cli").token(username, password)["access_token"])


def _client_token(client_id: str, secret: str) -> str:
    token = _openid(client_id, secret).token(grant_type="client_credentials")
    return str(token["access_token"])


def _api(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _operator() -> APIClient:
    return _api(_password_token(*OPERATOR))


def _tenant(prefix: str) -> Tenant:
    tenant = make_tenant(f"{prefix}-{uuid.uuid4().hex[:6]}")
    tenant.identity_ref = get_identity().provision_tenant(tenant)
    tenant.save()
    return tenant


def _group_names(admin: KeycloakAdmin, path: str) -> set[str]:
    group = admin.get_group_by_path(path)
    return {g["name"] for g in admin.get_group_children(group["id"])}


def _user_accepts_invite(admin: KeycloakAdmin, user_id: str, password: str) -> None:
    """What the invited person does on first login: verify the email, fill in the
    profile, choose a password."""
    admin.set_user_password(user_id, password, temporary=False)
    admin.update_user(
        user_id,
        {"firstName": "Alice", "lastName": "Liddell", "emailVerified": True, "requiredActions": []},
    )


def test_provisioning_a_tenant_creates_its_groups_once(db: None, keycloak: KeycloakAdmin) -> None:
    tenant = _tenant("acme")
    path = tenant_group_path(tenant)
    assert path == f"/tenants/{tenant.slug}@{tenant.uid}"
    assert keycloak.get_group_by_path(path)["id"] == tenant.identity_ref
    assert _group_names(keycloak, path) == {"tenant-admin", "developer", "viewer"}
    assert get_identity().provision_tenant(tenant) == tenant.identity_ref  # reused


def test_an_invited_member_logs_in_and_sees_only_their_tenant(
    db: None, keycloak: KeycloakAdmin
) -> None:
    tenant, other = _tenant("acme"), _tenant("globex")
    Membership.objects.create(tenant=other, subject="x", username="someone-else")
    username = f"alice-{uuid.uuid4().hex[:6]}"
    invite = {"tenant": tenant.slug, "username": username, "email": f"{username}@example.com"}
    response = _operator().post("/api/v1/members", {**invite, "role": "developer"}, format="json")
    assert response.status_code == 201, response.content
    member = response.json()
    user = keycloak.get_user(member["subject"])
    assert set(user["requiredActions"]) == {"VERIFY_EMAIL", "UPDATE_PASSWORD"}
    assert [g["path"] for g in keycloak.get_user_groups(member["subject"])] == [
        group_path(tenant, "developer")
    ]

    _user_accepts_invite(keycloak, member["subject"], "alice-password")
    alice = _api(_password_token(username, "alice-password"))
    me = alice.get("/api/v1/auth/whoami").json()
    assert me["subject"] == member["subject"]
    assert me["kind"] == "user"
    assert me["tenants"] == [{"slug": tenant.slug, "role": "developer"}]
    listed = alice.get("/api/v1/members").json()["results"]
    assert {row["tenant"] for row in listed} == {tenant.slug}
    assert_error(alice.post("/api/v1/members", {**invite, "role": "viewer"}, format="json"), 403)

    # Promoted: the next token carries the new role, and only it.
    url = f"/api/v1/members/{member['id']}"
    assert _operator().patch(url, {"role": "tenant-admin"}, format="json").status_code == 200
    me = _api(_password_token(username, "alice-password")).get("/api/v1/auth/whoami").json()
    assert me["tenants"] == [{"slug": tenant.slug, "role": "tenant-admin"}]

    assert _operator().delete(url).status_code == 204
    assert keycloak.get_user_groups(member["subject"]) == []


def test_a_service_account_gets_tokens_until_rotated_and_deleted(
    db: None, keycloak: KeycloakAdmin
) -> None:
    tenant, other = _tenant("acme"), _tenant("globex")
    ServiceAccount.objects.create(tenant=other, name="theirs", client_id=f"{other.slug}--theirs")
    body = {"tenant": tenant.slug, "name": "ingest", "role": "developer"}
    response = _operator().post("/api/v1/service-accounts", body, format="json")
    assert response.status_code == 201, response.content
    account = response.json()
    client_id, secret = account["client_id"], account["client_secret"]
    assert client_id == f"{tenant.slug}--ingest"

    robot = _api(_client_token(client_id, secret))
    me = robot.get("/api/v1/auth/whoami").json()
    assert (me["kind"], me["name"]) == ("service", f"service-account-{client_id}")
    assert me["tenants"] == [{"slug": tenant.slug, "role": "developer"}]
    listed = robot.get("/api/v1/service-accounts").json()["results"]
    assert [row["client_id"] for row in listed] == [client_id]

    url = f"/api/v1/service-accounts/{account['id']}"
    demoted = _operator().patch(url, {"role": "viewer"}, format="json")
    assert demoted.status_code == 200, demoted.content
    me = _api(_client_token(client_id, secret)).get("/api/v1/auth/whoami").json()
    assert me["tenants"] == [{"slug": tenant.slug, "role": "viewer"}]

    rotated = _operator().post(f"{url}/rotate-secret")
    assert rotated.status_code == 200, rotated.content
    new_secret = rotated.json()["client_secret"]
    with pytest.raises(KeycloakError) as refused:
        _client_token(client_id, secret)
    assert refused.value.response_code == 401
    assert _api(_client_token(client_id, new_secret)).get("/api/v1/auth/whoami").status_code == 200

    assert _operator().delete(url).status_code == 204
    assert keycloak.get_client_id(client_id) is None
    assert not ServiceAccount.objects.filter(pk=account["id"]).exists()


def test_deprovisioning_removes_groups_and_clients(db: None, keycloak: KeycloakAdmin) -> None:
    tenant = _tenant("acme")
    account, _ = services.create_service_account(tenant, name="ingest", actor=OPERATOR_ACTOR)
    assert keycloak.get_client_id(account.client_id) is not None
    get_identity().deprovision_tenant(tenant)
    get_identity().deprovision_tenant(tenant)  # idempotent
    assert keycloak.get_client_id(account.client_id) is None
    with pytest.raises(KeycloakError) as gone:
        keycloak.get_group_by_path(tenant_group_path(tenant))
    assert gone.value.response_code == 404


def test_a_failed_transaction_leaves_no_client_behind(
    db: None, keycloak: KeycloakAdmin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database failing after Keycloak created the client (simulated: a real
    concurrent insert cannot be timed here) undoes the client."""
    tenant = _tenant("acme")

    def fail(*args: object, **kwargs: object) -> None:
        raise IntegrityError("simulated")

    monkeypatch.setattr(ServiceAccount, "save", fail)
    with pytest.raises(Conflict):
        services.create_service_account(tenant, name="ingest", actor=OPERATOR_ACTOR)
    assert keycloak.get_client_id(f"{tenant.slug}--ingest") is None


def test_keycloak_unreachable_is_503_and_nothing_is_written(
    db: None, keycloak: KeycloakAdmin, settings: Any
) -> None:
    tenant = _tenant("acme")
    settings.KEYCLOAK_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
    with pytest.raises(Unavailable, match="unreachable"):
        services.create_service_account(tenant, name="ingest", actor=OPERATOR_ACTOR)
    with pytest.raises(Unavailable):
        services.invite_member(tenant, username="bob", role="viewer", actor=OPERATOR_ACTOR)
    assert not ServiceAccount.objects.filter(tenant=tenant).exists()
    assert not Membership.objects.filter(tenant=tenant).exists()


def test_a_token_of_another_realm_is_refused(db: None, keycloak: KeycloakAdmin) -> None:
    """Same Keycloak, same keys server, but the master realm's issuer (and no audience)."""
    master = KeycloakOpenID(
        server_url=django_settings.KEYCLOAK_URL + "/", realm_name="master", client_id="admin-cli"
    )
    token = master.token(
        django_settings.KEYCLOAK_ADMIN_USER, django_settings.KEYCLOAK_ADMIN_PASSWORD
    )["access_token"]
    assert_error(_api(token).get("/api/v1/auth/whoami"), 401, "authentication_failed")

"""Service account pages: list and create, detail, change role, rotate the secret,
delete; each role, the secret shown exactly once, the API's messages on the form,
isolation by URL and by form field, escaping."""

from __future__ import annotations

import html
from typing import Any

import pytest
from rest_framework.test import APIClient

from controlplane.accounts import services
from controlplane.accounts.identity import InvalidToken, LocalIdentity
from controlplane.accounts.models import ServiceAccount
from controlplane.core.actors import Actor
from controlplane.core.errors import Unavailable
from controlplane.core.models import AuditEvent
from controlplane.tenants.models import Tenant
from tests.controlplane.conftest import token_for
from tests.web.pages.conftest import ConsoleFactory, unmasked
from tests.web.pages.test_topics import field_errors, input_value

ROLES = ["viewer", "developer", "tenant-admin"]
WEAK_ROLES = ["viewer", "developer"]
SYSTEM = Actor.system("test")
LIST = "/console/t/acme/service-accounts/"


def make_account(tenant: Tenant, name: str = "ingest", role: str = "developer") -> str:
    """The account's secret."""
    _, secret = services.create_service_account(tenant, name=name, role=role, actor=SYSTEM)
    return secret


def secret_on(page: str) -> str | None:
    start = page.find('id="client-secret"')
    if start < 0:
        return None
    value = page.index('value="', start) + len('value="')
    return page[value : page.index('"', value)]


def works(identity: LocalIdentity, client_id: str, secret: str) -> bool:
    try:
        identity.token_for_client(client_id, secret)
    except InvalidToken:
        return False
    return True


# -- reads ---------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_every_role_reads_the_list_and_the_detail(
    role: str, acme: Tenant, console_for: ConsoleFactory
) -> None:
    make_account(acme)
    client = console_for(roles={"acme": role})
    listing = client.get(LIST)
    assert listing.status_code == 200
    assert b"acme--ingest" in listing.content
    detail = client.get(f"{LIST}ingest/")
    assert detail.status_code == 200
    page = detail.content.decode()
    assert "acme--ingest" in page
    writes = 'name="confirm"' in page and 'id="create-name"' in listing.content.decode()
    assert writes == (role == "tenant-admin")
    assert 'id="client-secret"' not in page


def test_the_nav_links_the_section(acme: Tenant, console_for: ConsoleFactory) -> None:
    page = console_for(roles={"acme": "viewer"}).get(LIST).content.decode()
    assert f'<a href="{LIST}" aria-current="page">Service accounts</a>' in page


# -- create and the secret -----------------------------------------------------------------


def test_the_secret_is_shown_once_and_never_cached(
    acme: Tenant, console_for: ConsoleFactory, local_identity: LocalIdentity
) -> None:
    client = console_for(roles={"acme": "tenant-admin"})
    response = client.post(LIST, {"name": "ingest", "role": "viewer", "description": "etl"})
    assert response.status_code == 201
    assert response["Cache-Control"] == "no-store"
    page = response.content.decode()
    assert "Copy the secret now." in page
    secret = secret_on(page)
    assert secret
    assert works(local_identity, "acme--ingest", secret)
    account = ServiceAccount.objects.get(tenant=acme, name="ingest")
    assert (account.role, account.description) == ("viewer", "etl")
    assert AuditEvent.objects.filter(action="service_account.create").count() == 1
    for url in (LIST, f"{LIST}ingest/", f"{LIST}ingest/rotate/"):
        again = client.get(url, follow=True)
        assert again.status_code == 200, url
        assert secret not in again.content.decode(), url
        assert 'id="client-secret"' not in again.content.decode(), url


def test_rotating_shows_the_new_secret_once_and_the_old_one_stops_working(
    acme: Tenant, console_for: ConsoleFactory, local_identity: LocalIdentity
) -> None:
    old = make_account(acme)
    client = console_for(roles={"acme": "tenant-admin"})
    response = client.post(f"{LIST}ingest/rotate/")
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    new = secret_on(response.content.decode())
    assert new
    assert new != old
    assert works(local_identity, "acme--ingest", new)
    assert not works(local_identity, "acme--ingest", old)
    detail = client.get(f"{LIST}ingest/").content.decode()
    assert new not in detail
    assert AuditEvent.objects.filter(action="service_account.rotate_secret").count() == 1


@pytest.mark.parametrize(
    ("typed", "field", "message"),
    [
        ({"name": "Bad Name!"}, "name", "3-32 characters: lowercase letters"),
        ({"name": ""}, "name", "This field is required."),
        ({"name": "x" * 40}, "name", "no more than 32 characters"),
        ({"name": "ingest", "role": "owner"}, "role", "is not a valid choice."),
    ],
)
def test_create_errors_appear_on_their_field_and_keep_what_was_typed(
    typed: dict[str, str], field: str, message: str, acme: Tenant, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "tenant-admin"})
    response = client.post(LIST, {**typed, "description": "kept"})
    assert response.status_code == 422
    assert "no-store" not in response.get("Cache-Control", "")
    page = response.content.decode()
    errors = [html.unescape(m) for m in field_errors(page, field, "create-")]
    assert any(message in error for error in errors), errors
    assert input_value(page, "create-description") == "kept"
    if typed["name"]:
        assert input_value(page, "create-name") == html.escape(typed["name"], quote=True)
    assert not ServiceAccount.objects.exists()


@pytest.mark.parametrize(
    "typed",
    [{"name": "Bad Name!"}, {"name": "ok-name", "role": "owner"}, {"name": "ingest"}],
)
def test_the_form_shows_the_apis_own_messages(
    typed: dict[str, str], acme: Tenant, console_for: ConsoleFactory, local_identity: Any
) -> None:
    make_account(acme)
    api = APIClient()
    api.credentials(
        HTTP_AUTHORIZATION=f"Bearer {token_for(local_identity, roles={'acme': 'tenant-admin'})}"
    )
    body = api.post("/api/v1/service-accounts", {**typed, "tenant": "acme"}, format="json")
    details = body.json()["error"]["details"]
    messages = {k: v for k, v in details.items() if isinstance(v, list)}
    if not messages:  # a conflict: the message names the field by ``name``
        messages = {"name": [body.json()["error"]["message"]]}
    page = console_for(roles={"acme": "tenant-admin"}).post(LIST, typed)
    (field,) = messages
    shown = [html.unescape(m) for m in field_errors(page.content.decode(), field, "create-")]
    assert shown == messages[field]


# -- role and delete -----------------------------------------------------------------------


def test_a_tenant_admin_changes_the_role(acme: Tenant, console_for: ConsoleFactory) -> None:
    make_account(acme)
    client = console_for(roles={"acme": "tenant-admin"})
    response = client.post(f"{LIST}ingest/role/", {"role": "viewer"})
    assert response.status_code == 302
    assert ServiceAccount.objects.get(name="ingest").role == "viewer"
    refused = client.post(f"{LIST}ingest/role/", {"role": "owner"})
    assert refused.status_code == 422
    errors = field_errors(refused.content.decode(), "role", "role-")
    assert errors
    assert "is not a valid choice." in errors[0]
    assert ServiceAccount.objects.get(name="ingest").role == "viewer"


def test_delete_needs_the_name_typed(acme: Tenant, console_for: ConsoleFactory) -> None:
    make_account(acme)
    client = console_for(roles={"acme": "tenant-admin"})
    wrong = client.post(f"{LIST}ingest/delete/", {"confirm": "ingest2"})
    assert wrong.status_code == 422
    assert field_errors(wrong.content.decode(), "confirm", "delete-") == [
        "type the account&#x27;s name, ingest, to delete it"
    ]
    assert input_value(wrong.content.decode(), "delete-confirm") == "ingest2"
    assert ServiceAccount.objects.filter(name="ingest").exists()
    right = client.post(f"{LIST}ingest/delete/", {"confirm": "ingest"})
    assert right.status_code == 302
    assert not ServiceAccount.objects.exists()
    assert AuditEvent.objects.filter(action="service_account.delete").count() == 1


# -- who may ---------------------------------------------------------------------------------


@pytest.mark.parametrize("role", WEAK_ROLES)
def test_viewers_and_developers_cannot_change_anything(
    role: str, acme: Tenant, console_for: ConsoleFactory, local_identity: LocalIdentity
) -> None:
    secret = make_account(acme)
    client = console_for(roles={"acme": role})
    posts = [
        (LIST, {"name": "other"}),
        (f"{LIST}ingest/role/", {"role": "tenant-admin"}),
        (f"{LIST}ingest/rotate/", {}),
        (f"{LIST}ingest/delete/", {"confirm": "ingest"}),
    ]
    for url, data in posts:
        response = client.post(url, data)
        assert response.status_code == 403, url
        assert b'id="client-secret"' not in response.content
    account = ServiceAccount.objects.get()
    assert (account.name, account.role) == ("ingest", "developer")
    assert works(local_identity, "acme--ingest", secret)


def test_another_tenants_account_answers_like_a_missing_one(
    acme: Tenant, globex: Tenant, console_for: ConsoleFactory, local_identity: LocalIdentity
) -> None:
    secret = make_account(globex, name="secret")
    client = console_for(roles={"acme": "tenant-admin"})
    for name in ("secret", "missing"):
        base = f"{LIST}{name}/"
        answers = [
            client.get(base),
            client.post(base + "role/", {"role": "viewer"}),
            client.post(base + "rotate/"),
            client.post(base + "delete/", {"confirm": name}),
        ]
        assert [a.status_code for a in answers] == [404] * 4, name
    missing = client.get(f"{LIST}missing/").content
    assert unmasked(client.get(f"{LIST}secret/").content) == unmasked(missing)
    assert works(local_identity, "globex--secret", secret)
    assert ServiceAccount.objects.get(name="secret").role == "developer"


def test_a_form_naming_another_tenant_answers_404(
    acme: Tenant, globex: Tenant, console_for: ConsoleFactory
) -> None:
    make_account(acme)
    client = console_for(roles={"acme": "tenant-admin", "globex": "tenant-admin"})
    assert client.post(LIST, {"tenant": "globex", "name": "x-y-z"}).status_code == 404
    rotate = client.post(f"{LIST}ingest/rotate/", {"tenant": "globex"})
    assert rotate.status_code == 404
    assert b'id="client-secret"' not in rotate.content
    assert ServiceAccount.objects.count() == 1


def test_a_platform_admin_manages_any_tenants_accounts(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    client = console_for(platform_admin=True)
    assert client.post(LIST, {"name": "ops"}).status_code == 201
    assert ServiceAccount.objects.filter(tenant=acme, name="ops").exists()


def test_user_text_is_escaped(acme: Tenant, console_for: ConsoleFactory) -> None:
    script = "<script>alert(1)</script>"
    services.create_service_account(acme, name="ingest", description=script, actor=SYSTEM)
    client = console_for(roles={"acme": "tenant-admin"}, username=script)
    for url in (LIST, f"{LIST}ingest/", f"{LIST}?name={script}"):
        page = client.get(url).content.decode()
        assert script not in page, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page, url
    typed = client.post(LIST, {"name": script, "description": script})
    assert typed.status_code == 422
    assert script not in typed.content.decode()


def test_an_unreachable_identity_provider_changes_nothing_and_names_no_address(
    acme: Tenant,
    console_for: ConsoleFactory,
    local_identity: LocalIdentity,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = make_account(acme)

    def unreachable(*args: object, **kwargs: object) -> None:
        raise Unavailable("Keycloak is unreachable (rotate): http://10.9.8.7:8080/admin")

    for method in ("create_service_account", "rotate_service_account_secret"):
        monkeypatch.setattr(LocalIdentity, method, unreachable)
    client = console_for(roles={"acme": "tenant-admin"})
    for url, data in ((LIST, {"name": "other"}), (f"{LIST}ingest/rotate/", {})):
        response = client.post(url, data)
        assert response.status_code == 503, url
        page = response.content.decode()
        assert "The identity provider did not answer" in page
        assert "10.9.8.7" not in page
        assert 'id="client-secret"' not in page
    assert list(ServiceAccount.objects.values_list("name", flat=True)) == ["ingest"]
    assert works(local_identity, "acme--ingest", secret)

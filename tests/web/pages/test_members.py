"""Member pages: the list, invite, change role, remove; each role, the API's messages on
the form, isolation by URL and by form field, escaping. The identity provider is the
local one (the tests' default): the ``Membership`` rows are its directory."""

from __future__ import annotations

import html
from typing import Any

import pytest
from rest_framework.test import APIClient

from controlplane.accounts import services
from controlplane.core.actors import Actor
from controlplane.core.models import AuditEvent
from controlplane.tenants.models import Membership, Tenant
from tests.controlplane.conftest import token_for
from tests.web.pages.conftest import ConsoleFactory, unmasked
from tests.web.pages.test_topics import field_errors, input_value

ROLES = ["viewer", "developer", "tenant-admin"]
WEAK_ROLES = ["viewer", "developer"]
SYSTEM = Actor.system("test")
LIST = "/console/t/acme/members/"
INVITE = "/console/t/acme/members/invite/"


def invite(
    tenant: Tenant, username: str = "alice", role: str = "developer", **kw: Any
) -> Membership:
    return services.invite_member(tenant, username=username, role=role, actor=SYSTEM, **kw)


# -- reads ---------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_every_role_reads_the_list(role: str, acme: Tenant, console_for: ConsoleFactory) -> None:
    invite(acme, email="alice@example.com")
    response = console_for(roles={"acme": role}).get(LIST)
    assert response.status_code == 200
    page = response.content.decode()
    assert "<td>alice<br>" in page
    assert "alice@example.com" in page
    assert "ready" in page
    writes = 'id="invite-username"' in page and ">Remove</button>" in page
    assert writes == (role == "tenant-admin")
    if role != "tenant-admin":
        assert "<td>developer</td>" in page


def test_the_list_shows_only_the_tenants_members(
    acme: Tenant, globex: Tenant, console_for: ConsoleFactory
) -> None:
    invite(globex, username="globex-person")
    page = console_for(roles={"acme": "tenant-admin"}).get(LIST).content.decode()
    assert "globex-person" not in page


# -- invite --------------------------------------------------------------------------------


def test_a_tenant_admin_invites(acme: Tenant, console_for: ConsoleFactory) -> None:
    client = console_for(roles={"acme": "tenant-admin"})
    response = client.post(
        INVITE, {"username": "bob", "email": "bob@example.com", "role": "viewer"}
    )
    assert response.status_code == 302
    member = Membership.objects.get(tenant=acme)
    assert (member.username, member.email, member.role) == ("bob", "bob@example.com", "viewer")
    assert AuditEvent.objects.filter(action="member.invite").count() == 1
    assert "bob@example.com" in client.get(LIST).content.decode()


@pytest.mark.parametrize(
    ("typed", "field", "message"),
    [
        ({"username": "bad name", "role": "viewer"}, "username", "This value does not match"),
        ({"username": "bob", "email": "not-an-email", "role": "viewer"}, "email", "valid email"),
        ({"username": "bob", "role": ""}, "role", "This field is required."),
        ({"username": "bob", "role": "owner"}, "role", "is not a valid choice."),
        ({"username": "alice", "role": "viewer"}, "username", "is already a member of"),
    ],
)
def test_invite_errors_appear_on_their_field_and_keep_what_was_typed(
    typed: dict[str, str], field: str, message: str, acme: Tenant, console_for: ConsoleFactory
) -> None:
    invite(acme)
    response = console_for(roles={"acme": "tenant-admin"}).post(INVITE, typed)
    assert response.status_code == 422
    page = response.content.decode()
    errors = [html.unescape(m) for m in field_errors(page, field, "invite-")]
    assert any(message in error for error in errors), errors
    assert input_value(page, "invite-username") == html.escape(typed["username"])
    if "email" in typed:
        assert input_value(page, "invite-email") == typed["email"]
    assert Membership.objects.count() == 1


@pytest.mark.parametrize(
    "typed",
    [
        {"username": "bad name", "role": "viewer"},
        {"username": "bob", "email": "nope", "role": "viewer"},
        {"username": "bob", "role": "owner"},
    ],
)
def test_the_form_shows_the_apis_own_messages(
    typed: dict[str, str], acme: Tenant, console_for: ConsoleFactory, local_identity: Any
) -> None:
    api = APIClient()
    api.credentials(
        HTTP_AUTHORIZATION=f"Bearer {token_for(local_identity, roles={'acme': 'tenant-admin'})}"
    )
    body = api.post("/api/v1/members", {**typed, "tenant": "acme"}, format="json")
    details = body.json()["error"]["details"]
    page = console_for(roles={"acme": "tenant-admin"}).post(INVITE, typed)
    (field,) = details
    shown = [html.unescape(m) for m in field_errors(page.content.decode(), field, "invite-")]
    assert shown == details[field]


# -- role and remove -------------------------------------------------------------------------


def test_a_tenant_admin_changes_a_role(acme: Tenant, console_for: ConsoleFactory) -> None:
    member = invite(acme)
    client = console_for(roles={"acme": "tenant-admin"})
    response = client.post(f"{LIST}{member.pk}/role/", {"role": "tenant-admin"})
    assert response.status_code == 302
    member.refresh_from_db()
    assert member.role == "tenant-admin"
    assert AuditEvent.objects.filter(action="member.change_role").count() == 1
    refused = client.post(f"{LIST}{member.pk}/role/", {"role": "owner"})
    assert refused.status_code == 422
    errors = field_errors(refused.content.decode(), "role", f"member-{member.pk}-")
    assert errors
    assert "is not a valid choice." in errors[0]


def test_a_tenant_admin_removes(acme: Tenant, console_for: ConsoleFactory) -> None:
    member = invite(acme)
    response = console_for(roles={"acme": "tenant-admin"}).post(f"{LIST}{member.pk}/remove/")
    assert response.status_code == 302
    assert not Membership.objects.exists()
    assert AuditEvent.objects.filter(action="member.remove").count() == 1


@pytest.mark.parametrize("role", WEAK_ROLES)
def test_viewers_and_developers_cannot_change_members(
    role: str, acme: Tenant, console_for: ConsoleFactory
) -> None:
    member = invite(acme)
    client = console_for(roles={"acme": role})
    answers = [
        client.post(INVITE, {"username": "mallory", "role": "tenant-admin"}),
        client.post(f"{LIST}{member.pk}/role/", {"role": "tenant-admin"}),
        client.post(f"{LIST}{member.pk}/remove/"),
    ]
    assert [a.status_code for a in answers] == [403] * 3
    assert list(Membership.objects.values_list("username", "role")) == [("alice", "developer")]


def test_another_tenants_member_answers_like_a_missing_one(
    acme: Tenant, globex: Tenant, console_for: ConsoleFactory
) -> None:
    theirs = invite(globex)
    client = console_for(roles={"acme": "tenant-admin"})
    bodies = []
    for pk in (theirs.pk, theirs.pk + 1000):
        role = client.post(f"{LIST}{pk}/role/", {"role": "viewer"})
        remove = client.post(f"{LIST}{pk}/remove/")
        assert (role.status_code, remove.status_code) == (404, 404), pk
        bodies.append(unmasked(role.content))
    assert bodies[0] == bodies[1]
    theirs.refresh_from_db()
    assert theirs.role == "developer"


def test_a_form_naming_another_tenant_answers_404(
    acme: Tenant, globex: Tenant, console_for: ConsoleFactory
) -> None:
    member = invite(acme)
    client = console_for(roles={"acme": "tenant-admin", "globex": "tenant-admin"})
    invited = client.post(INVITE, {"tenant": "globex", "username": "bob", "role": "viewer"})
    assert invited.status_code == 404
    changed = client.post(f"{LIST}{member.pk}/role/", {"tenant": "globex", "role": "viewer"})
    assert changed.status_code == 404
    assert list(Membership.objects.values_list("username", "role")) == [("alice", "developer")]


def test_user_text_is_escaped(acme: Tenant, console_for: ConsoleFactory) -> None:
    script = "<script>alert(1)</script>"
    Membership.objects.create(tenant=acme, subject="s", username=script, email="a@example.com")
    client = console_for(roles={"acme": "tenant-admin"}, username=script)
    for url in (LIST, f"{LIST}?username={script}"):
        page = client.get(url).content.decode()
        assert script not in page, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page, url
    typed = client.post(INVITE, {"username": script, "email": script, "role": "viewer"})
    assert typed.status_code == 422
    assert script not in typed.content.decode()


def test_a_platform_admin_manages_any_tenants_members(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    client = console_for(platform_admin=True)
    assert client.post(INVITE, {"username": "carol", "role": "viewer"}).status_code == 302
    member = Membership.objects.get(tenant=acme)
    assert client.post(f"{LIST}{member.pk}/role/", {"role": "developer"}).status_code == 302
    assert client.post(f"{LIST}{member.pk}/remove/").status_code == 302
    assert not Membership.objects.exists()

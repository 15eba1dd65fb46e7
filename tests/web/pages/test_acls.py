"""Topic ACL pages: the list by topic and by principal, grant, revoke; each role, the
API's messages on the form, isolation by URL and by form field, escaping."""

from __future__ import annotations

import html
from typing import Any

import pytest
from rest_framework.test import APIClient

from controlplane.accounts import services as accounts
from controlplane.core.actors import Actor
from controlplane.core.models import AuditEvent
from controlplane.tenants.models import Tenant
from controlplane.topics import acls
from controlplane.topics.models import Topic, TopicAcl
from tests.controlplane.conftest import token_for
from tests.web.pages.conftest import ConsoleFactory, unmasked
from tests.web.pages.test_topics import field_errors, input_value, make_topic

ROLES = ["viewer", "developer", "tenant-admin"]
WEAK_ROLES = ["viewer", "developer"]
SYSTEM = Actor.system("test")
LIST = "/console/t/acme/acls/"
GRANT = "/console/t/acme/acls/grant/"


def grant(topic: Topic, principal: str, *operations: str) -> TopicAcl:
    return acls.grant_topic_acl(
        topic, principal=principal, operations=list(operations or ["consume"]), actor=SYSTEM
    )


@pytest.fixture
def orders(acme: Tenant) -> Topic:
    return make_topic(acme)


# -- reads ---------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_every_role_reads_the_list(
    role: str, acme: Tenant, orders: Topic, console_for: ConsoleFactory
) -> None:
    grant(orders, "subject-1", "produce", "consume")
    response = console_for(roles={"acme": role}).get(LIST)
    assert response.status_code == 200
    page = response.content.decode()
    assert "subject-1" in page
    writes = 'id="grant-topic"' in page and ">Revoke</button>" in page
    assert writes == (role == "tenant-admin")
    if writes:  # the operations as the entry's form, ticked
        for op, ticked in (("produce", True), ("consume", True), ("admin", False)):
            box = (
                f'id="acl-1-operations-{op}" checked' if ticked else f'id="acl-1-operations-{op}">'
            )
            assert box.replace("acl-1", f"acl-{TopicAcl.objects.get().pk}") in page
    else:
        assert "<td>produce, consume</td>" in page


def test_the_list_filters_by_topic_and_by_principal(
    acme: Tenant, orders: Topic, console_for: ConsoleFactory
) -> None:
    payments = make_topic(acme, name="payments")
    grant(orders, "alice")
    grant(orders, "bob")
    grant(payments, "alice")
    client = console_for(roles={"acme": "viewer"})

    def rows(query: str) -> set[tuple[str, str]]:
        page = client.get(f"{LIST}?{query}").content.decode()
        return {
            (t, p)
            for t in ("acme.orders", "acme.payments")
            for p in ("alice", "bob")
            if f'?topic={t}">{t}</a></td>\n      <td><a href="?principal={p}">' in page
        }

    assert rows("topic=acme.orders") == {("acme.orders", "alice"), ("acme.orders", "bob")}
    assert rows("principal=alice") == {("acme.orders", "alice"), ("acme.payments", "alice")}
    assert rows("topic=acme.payments&principal=bob") == set()


def test_the_list_shows_only_the_tenants_entries(
    acme: Tenant, globex: Tenant, orders: Topic, console_for: ConsoleFactory
) -> None:
    grant(make_topic(globex, name="secret"), "globex-subject")
    page = console_for(roles={"acme": "tenant-admin"}).get(LIST).content.decode()
    assert "globex-subject" not in page


# -- grant ---------------------------------------------------------------------------------


def test_a_tenant_admin_grants_to_a_service_account(
    acme: Tenant, orders: Topic, console_for: ConsoleFactory
) -> None:
    accounts.create_service_account(acme, name="ingest", actor=SYSTEM)
    client = console_for(roles={"acme": "tenant-admin"})
    response = client.post(
        GRANT,
        {"topic": "acme.orders", "principal": "acme--ingest", "operations": ["consume", "produce"]},
    )
    assert response.status_code == 302
    assert response["Location"] == f"{LIST}?topic=acme.orders"
    acl = TopicAcl.objects.get()
    assert (acl.principal, acl.operations) == ("acme--ingest", ["produce", "consume"])
    assert AuditEvent.objects.filter(action="topic_acl.grant").count() == 1
    assert "acme--ingest" in client.get(response["Location"]).content.decode()


@pytest.mark.parametrize(
    ("typed", "field", "message"),
    [
        ({"principal": "alice"}, "operations", "name at least one operation"),
        ({"principal": "alice", "operations": ["write"]}, "operations", "not a valid choice"),
        ({"principal": "has space", "operations": ["consume"]}, "principal", "printable ASCII"),
        ({"principal": "", "operations": ["consume"]}, "principal", "This field is required."),
        (
            {"principal": "acme--nobody", "operations": ["consume"]},
            "principal",
            "is not a service account of tenant",
        ),
    ],
)
def test_grant_errors_appear_on_their_field_and_keep_what_was_typed(
    typed: dict[str, Any], field: str, message: str, orders: Topic, console_for: ConsoleFactory
) -> None:
    response = console_for(roles={"acme": "tenant-admin"}).post(
        GRANT, {"topic": "acme.orders", **typed}
    )
    assert response.status_code == 422
    page = response.content.decode()
    errors = [html.unescape(m) for m in field_errors(page, field, "grant-")]
    assert any(message in error for error in errors), (errors, page)
    assert input_value(page, "grant-topic") == "acme.orders"
    if typed["principal"]:
        assert input_value(page, "grant-principal") == typed["principal"]
    for op in typed.get("operations", []):
        if op == "consume":
            assert 'value="consume" id="grant-operations-consume" checked' in page
    assert not TopicAcl.objects.exists()


@pytest.mark.parametrize(
    "typed",
    [
        {"principal": "alice", "operations": []},
        {"principal": "alice", "operations": ["write"]},
        {"principal": "has space", "operations": ["consume"]},
        {"principal": "acme--nobody", "operations": ["consume"]},
        {"principal": "taken", "operations": ["consume"]},
    ],
)
def test_the_form_shows_the_apis_own_messages(
    typed: dict[str, Any], orders: Topic, console_for: ConsoleFactory, local_identity: Any
) -> None:
    grant(orders, "taken")
    api = APIClient()
    api.credentials(
        HTTP_AUTHORIZATION=f"Bearer {token_for(local_identity, roles={'acme': 'tenant-admin'})}"
    )
    data = {"topic": "acme.orders", **typed}
    details = api.post("/api/v1/topic-acls", data, format="json").json()["error"]["details"]
    page = console_for(roles={"acme": "tenant-admin"}).post(GRANT, data)
    (field,) = details
    shown = [html.unescape(m) for m in field_errors(page.content.decode(), field, "grant-")]
    assert shown == _flat(details[field])


def test_a_principal_of_another_tenant_is_refused_like_a_missing_one(
    acme: Tenant, globex: Tenant, orders: Topic, console_for: ConsoleFactory
) -> None:
    accounts.create_service_account(globex, name="ingest", actor=SYSTEM)
    client = console_for(roles={"acme": "tenant-admin"})
    shown = []
    for principal in ("globex--ingest", "globex--missing"):
        response = client.post(
            GRANT, {"topic": "acme.orders", "principal": principal, "operations": "consume"}
        )
        assert response.status_code == 422
        errors = field_errors(response.content.decode(), "principal", "grant-")
        shown.append([e.replace(principal, "P") for e in errors])
    assert shown[0] == shown[1]
    assert shown[0]
    assert not TopicAcl.objects.exists()


def test_a_topic_of_another_tenant_answers_like_a_missing_one(
    acme: Tenant, globex: Tenant, orders: Topic, console_for: ConsoleFactory
) -> None:
    make_topic(globex, name="secret")
    client = console_for(roles={"acme": "tenant-admin", "globex": "tenant-admin"})
    shown = []
    for topic in ("globex.secret", "acme.missing"):
        response = client.post(
            GRANT, {"topic": topic, "principal": "alice", "operations": "consume"}
        )
        assert response.status_code == 404
        page = response.content.decode()
        assert input_value(page, "grant-topic") == topic
        shown.append([e.replace(topic, "T") for e in field_errors(page, "topic", "grant-")])
    assert shown[0] == shown[1] == ["topic &#x27;T&#x27; not found in tenant &#x27;acme&#x27;"]
    named = client.post(
        GRANT,
        {"tenant": "globex", "topic": "globex.secret", "principal": "a", "operations": "consume"},
    )
    assert named.status_code == 404
    assert not TopicAcl.objects.exists()


# -- revoke --------------------------------------------------------------------------------


def test_a_tenant_admin_changes_the_operations_in_place(
    orders: Topic, console_for: ConsoleFactory
) -> None:
    acl = grant(orders, "alice", "consume")
    client = console_for(roles={"acme": "tenant-admin"})
    url = f"{LIST}{acl.pk}/operations/"
    response = client.post(url, {"operations": ["admin", "produce"]})
    assert response.status_code == 302
    acl.refresh_from_db()
    assert acl.operations == ["produce", "admin"]
    assert AuditEvent.objects.filter(action="topic_acl.update").count() == 1
    refused = client.post(url, {})
    assert refused.status_code == 422
    page = refused.content.decode()
    errors = field_errors(page, "operations", f"acl-{acl.pk}-")
    assert "name at least one operation" in errors
    assert f'id="acl-{acl.pk}-operations-produce">' in page  # as ticked: nothing
    acl.refresh_from_db()
    assert acl.operations == ["produce", "admin"]


def test_a_tenant_admin_revokes(orders: Topic, console_for: ConsoleFactory) -> None:
    acl = grant(orders, "alice")
    response = console_for(roles={"acme": "tenant-admin"}).post(f"{LIST}{acl.pk}/revoke/")
    assert response.status_code == 302
    assert not TopicAcl.objects.exists()
    assert AuditEvent.objects.filter(action="topic_acl.revoke").count() == 1


@pytest.mark.parametrize("role", WEAK_ROLES)
def test_viewers_and_developers_cannot_grant_or_revoke(
    role: str, orders: Topic, console_for: ConsoleFactory
) -> None:
    acl = grant(orders, "alice")
    client = console_for(roles={"acme": role})
    refused = client.post(
        GRANT, {"topic": "acme.orders", "principal": "bob", "operations": "consume"}
    )
    assert refused.status_code == 403
    assert client.post(f"{LIST}{acl.pk}/revoke/").status_code == 403
    operations = client.post(f"{LIST}{acl.pk}/operations/", {"operations": "admin"})
    assert operations.status_code == 403
    assert list(TopicAcl.objects.values_list("principal", "operations")) == [("alice", ["consume"])]


def test_another_tenants_entry_answers_like_a_missing_one(
    acme: Tenant, globex: Tenant, console_for: ConsoleFactory
) -> None:
    theirs = grant(make_topic(globex, name="secret"), "alice")
    client = console_for(roles={"acme": "tenant-admin"})
    for action, data in (("revoke", {}), ("operations", {"operations": "admin"})):
        other = client.post(f"{LIST}{theirs.pk}/{action}/", data)
        missing = client.post(f"{LIST}{theirs.pk + 1000}/{action}/", data)
        assert other.status_code == missing.status_code == 404
        assert unmasked(other.content) == unmasked(missing.content)
    theirs.refresh_from_db()
    assert theirs.operations == ["consume"]
    assert TopicAcl.objects.filter(pk=theirs.pk).exists()


def test_user_text_is_escaped(orders: Topic, console_for: ConsoleFactory) -> None:
    script = "<script>alert(1)</script>"
    grant(orders, script)
    client = console_for(roles={"acme": "tenant-admin"}, username=script)
    for url in (LIST, f"{LIST}?principal={script}", f"{LIST}?topic={script}"):
        page = client.get(url).content.decode()
        assert script not in page, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page, url
    typed = client.post(GRANT, {"topic": script, "principal": script, "operations": "consume"})
    assert script not in typed.content.decode()


def test_a_members_subject_is_shown_with_the_username(
    acme: Tenant, globex: Tenant, orders: Topic, console_for: ConsoleFactory
) -> None:
    alice = accounts.invite_member(acme, username="alice", role="developer", actor=SYSTEM)
    bob = accounts.invite_member(globex, username="bob", role="developer", actor=SYSTEM)
    grant(orders, alice.subject)
    grant(orders, bob.subject)  # not a member of this tenant: shown as given
    page = console_for(roles={"acme": "viewer"}).get(LIST).content.decode()
    assert f'{alice.subject}</a> <span class="muted">(member alice)</span>' in page
    assert f"{bob.subject}</a></td>" in page
    assert "member bob" not in page
    members = console_for(roles={"acme": "viewer"}).get("/console/t/acme/members/")
    assert f"<code>{alice.subject}</code>" in members.content.decode()


def test_a_platform_admin_grants_and_revokes_in_any_tenant(
    orders: Topic, console_for: ConsoleFactory
) -> None:
    client = console_for(platform_admin=True)
    typed = {"topic": "acme.orders", "principal": "alice", "operations": "admin"}
    assert client.post(GRANT, typed).status_code == 302
    acl = TopicAcl.objects.get()
    assert client.post(f"{LIST}{acl.pk}/revoke/").status_code == 302
    assert not TopicAcl.objects.exists()


def test_a_service_accounts_page_links_its_entries(
    acme: Tenant, orders: Topic, console_for: ConsoleFactory
) -> None:
    accounts.create_service_account(acme, name="ingest", actor=SYSTEM)
    grant(orders, "acme--ingest")
    client = console_for(roles={"acme": "viewer"})
    page = client.get("/console/t/acme/service-accounts/ingest/").content.decode()
    assert f'href="{LIST}?principal=acme--ingest"' in page
    assert "acme.orders" in client.get(f"{LIST}?principal=acme--ingest").content.decode()


@pytest.mark.parametrize("operations", [[], ["write"]])
def test_the_change_shows_the_apis_own_messages(
    operations: list[str], orders: Topic, console_for: ConsoleFactory, local_identity: Any
) -> None:
    acl = grant(orders, "alice")
    api = APIClient()
    api.credentials(
        HTTP_AUTHORIZATION=f"Bearer {token_for(local_identity, roles={'acme': 'tenant-admin'})}"
    )
    body = api.patch(f"/api/v1/topic-acls/{acl.pk}", {"operations": operations}, format="json")
    details = body.json()["error"]["details"]["operations"]
    page = console_for(roles={"acme": "tenant-admin"}).post(
        f"{LIST}{acl.pk}/operations/", {"operations": operations}
    )
    shown = field_errors(page.content.decode(), "operations", f"acl-{acl.pk}-")
    assert [html.unescape(m) for m in shown] == [str(m) for m in _flat(details)]


def _flat(messages: Any) -> list[Any]:
    """The API's messages for a list field: a list, or per item index a list."""
    if isinstance(messages, dict):
        return [m for item in messages.values() for m in item]
    return list(messages)

"""Topic pages: list, detail, create, change config, add partitions, delete; each role,
the API's messages on the form, isolation by URL and by form field, escaping."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from controlplane.core.actors import Actor
from controlplane.core.models import AuditEvent
from controlplane.quotas.models import Quota
from controlplane.tenants.models import Tenant
from controlplane.topics import services
from controlplane.topics.models import Topic
from tests.controlplane.conftest import token_for
from tests.web.pages.conftest import ConsoleFactory, unmasked

ROLES = ["viewer", "developer", "tenant-admin"]
SYSTEM = Actor.system("test")


def make_topic(tenant: Tenant, name: str = "orders", partitions: int = 2) -> Topic:
    return services.create_topic(tenant, name=name, partitions=partitions, actor=SYSTEM)


def field_errors(page: str, field: str, prefix: str = "") -> list[str]:
    """The messages shown under form field ``field``."""
    match = re.search(rf'<ul class="errors" id="{prefix}{field}-errors">(.*?)</ul>', page, re.S)
    return re.findall(r"<li>(.*?)</li>", match.group(1)) if match else []


def input_value(page: str, field_id: str) -> str | None:
    match = re.search(rf'<input id="{field_id}" name="[^"]+" type="[^"]+" value="([^"]*)"', page)
    return match.group(1) if match else None


# -- reads ---------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_every_role_reads_the_list_and_the_detail(
    role: str, acme: Tenant, console_for: ConsoleFactory
) -> None:
    make_topic(acme)
    client = console_for(roles={"acme": role})
    listing = client.get("/console/t/acme/topics/")
    assert listing.status_code == 200
    assert b"acme.orders" in listing.content
    detail = client.get("/console/t/acme/topics/acme.orders/")
    assert detail.status_code == 200
    page = detail.content.decode()
    assert "Partitions" in page
    assert page.count("<td>broker") + page.count("<td>none</td>") == 2  # one row per partition
    writes = 'name="confirm"' in page and "Create a topic" in listing.content.decode()
    assert writes == (role != "viewer")


def test_the_detail_shows_replicas_and_isr_and_no_broker_address(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    topic = make_topic(acme, partitions=1)
    assignment = topic.assignments.get()
    page = console_for(roles={"acme": "viewer"}).get("/console/t/acme/topics/acme.orders/")
    text = page.content.decode()
    assert f"<td>{', '.join(map(str, assignment.replicas))}</td>" in text
    assert f"<td>{', '.join(map(str, assignment.isr))}</td>" in text
    assert "127.0.0.1" not in text
    assert ":4000" not in text  # the broker rows' ports


def test_another_tenants_topic_answers_like_a_missing_one(
    acme: Tenant, globex: Tenant, console_for: ConsoleFactory
) -> None:
    make_topic(globex, name="secret")
    client = console_for(roles={"acme": "tenant-admin"})
    pairs = (
        ("/console/t/acme/topics/globex.secret/", "/console/t/acme/topics/acme.nosuch/"),
        ("/console/t/globex/topics/globex.secret/", "/console/t/nosuch/topics/nosuch.x/"),
    )
    for url, missing_url in pairs:
        response, missing = client.get(url), client.get(missing_url)
        assert response.status_code == missing.status_code == 404
        assert unmasked(response.content) == unmasked(missing.content)
    for action in ("config", "partitions", "delete"):
        response = client.post(
            f"/console/t/acme/topics/globex.secret/{action}/",
            {"partitions": "9", "confirm": "globex.secret"},
        )
        assert response.status_code == 404
    assert Topic.objects.get(full_name="globex.secret").status != "deleting"


# -- list paging ------------------------------------------------------------------------------


def bulk_topics(tenant: Tenant, count: int) -> None:
    cluster = tenant.home_region.clusters.get()  # type: ignore[union-attr]
    Topic.objects.bulk_create(
        Topic(
            tenant=tenant,
            cluster=cluster,
            name=f"t{i:05d}",
            full_name=f"{tenant.slug}.t{i:05d}",
            partitions=1 + i % 7,
            retention_ms=86_400_000,
            retention_bytes=2**20,
        )
        for i in range(count)
    )


def test_the_list_pages_through_ten_thousand_topics_in_the_database(
    acme: Tenant, console_for: ConsoleFactory, django_assert_max_num_queries: Any
) -> None:
    bulk_topics(acme, 10_000)
    client = console_for(roles={"acme": "viewer"})
    with django_assert_max_num_queries(8):
        first = client.get("/console/t/acme/topics/").content.decode()
    assert "10000 topics" in first
    assert "Page 1 of 200" in first
    assert first.count("/console/t/acme/topics/acme.t") == 50
    assert "acme.t00000" in first
    assert "acme.t00050" not in first
    middle = client.get("/console/t/acme/topics/?page=101").content.decode()
    assert "acme.t05000" in middle
    assert "acme.t05049" in middle
    assert "acme.t04999" not in middle
    last = client.get("/console/t/acme/topics/?sort=-name&page=200").content.decode()
    assert "acme.t00000" in last
    assert 'rel="next"' not in last


def test_the_list_filters_by_name_and_sorts(acme: Tenant, console_for: ConsoleFactory) -> None:
    bulk_topics(acme, 300)
    client = console_for(roles={"acme": "viewer"})
    page = client.get("/console/t/acme/topics/?name=t0012&sort=-partitions").content.decode()
    assert "10 topics" in page
    names = re.findall(r">(acme\.t\d{5})</a>", page)
    partitions = [1 + int(name[-5:]) % 7 for name in names]
    assert partitions == sorted(partitions, reverse=True)
    assert client.get("/console/t/acme/topics/?sort=bogus&page=999").status_code == 200


# -- create ------------------------------------------------------------------------------------


def test_a_developer_creates_a_topic(acme: Tenant, console_for: ConsoleFactory) -> None:
    client = console_for(roles={"acme": "developer"})
    assert client.get("/console/t/acme/topics/new/").status_code == 200
    response = client.post(
        "/console/t/acme/topics/new/",
        {"name": "orders", "partitions": "3", "retention_ms": "", "durability": "always"},
    )
    assert response.status_code == 302
    assert response["Location"] == "/console/t/acme/topics/acme.orders/"
    topic = Topic.objects.get(full_name="acme.orders")
    assert (topic.partitions, topic.durability) == (3, "always")
    assert AuditEvent.objects.filter(action="topic.create", object_repr="acme.orders").exists()


def test_a_viewer_cannot_create(acme: Tenant, console_for: ConsoleFactory) -> None:
    client = console_for(roles={"acme": "viewer"})
    assert client.get("/console/t/acme/topics/new/").status_code == 403
    response = client.post("/console/t/acme/topics/new/", {"name": "orders", "partitions": "1"})
    assert response.status_code == 403
    assert not Topic.objects.exists()


def test_a_form_naming_another_tenant_answers_404(
    acme: Tenant, globex: Tenant, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "developer", "globex": "viewer"})
    response = client.post(
        "/console/t/acme/topics/new/", {"tenant": "globex", "name": "x", "partitions": "1"}
    )
    assert response.status_code == 404
    assert not Topic.objects.exists()


@pytest.mark.parametrize(
    ("typed", "field", "message"),
    [
        ({"name": "bad name!", "partitions": "1"}, "name", "1-200 characters: letters, digits"),
        ({"name": "__internal", "partitions": "1"}, "name", "reserved for internal topics"),
        ({"name": "ok", "partitions": "0"}, "partitions", "must be between 1 and"),
        ({"name": "ok", "partitions": "many"}, "partitions", "A valid integer is required."),
        ({"name": "ok"}, "partitions", "This field is required."),
        ({"name": "ok", "partitions": "1", "retention_ms": "1"}, "retention_ms", "must be"),
        (
            {"name": "ok", "partitions": "1", "durability": "sometimes"},
            "durability",
            "is not a valid choice.",
        ),
        ({"name": "ok", "partitions": "1", "replication_factor": "9"}, "replication_factor", ""),
    ],
)
def test_create_errors_appear_on_their_field_and_keep_what_was_typed(
    typed: dict[str, str], field: str, message: str, acme: Tenant, console_for: ConsoleFactory
) -> None:
    response = console_for(roles={"acme": "developer"}).post("/console/t/acme/topics/new/", typed)
    assert response.status_code == 422
    page = response.content.decode()
    errors = field_errors(page, field, "create-")
    assert errors, page
    assert any(message in error for error in errors), errors
    for name, value in typed.items():
        if name != "durability":
            assert input_value(page, f"create-{name}") == value
    assert not Topic.objects.exists()


@pytest.mark.parametrize(
    "typed",
    [
        {"name": "bad name!", "partitions": "1"},
        {"name": "ok", "partitions": "0"},
        {"name": "ok", "partitions": "many"},
        {"name": "ok", "partitions": "1", "max_message_bytes": "5"},
        {"name": "ok", "partitions": "1", "durability": "sometimes"},
    ],
)
def test_the_form_shows_the_apis_own_messages(
    typed: dict[str, str], acme: Tenant, console_for: ConsoleFactory, local_identity: Any
) -> None:
    api = APIClient()
    token = token_for(local_identity, roles={"acme": "developer"})
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    api_errors = api.post("/api/v1/topics", typed, format="json").json()["error"]["details"]
    page = console_for(roles={"acme": "developer"}).post("/console/t/acme/topics/new/", typed)
    (field,) = api_errors
    shown = [html.unescape(m) for m in field_errors(page.content.decode(), field, "create-")]
    assert shown == api_errors[field]


def test_a_name_in_use_is_refused_on_the_name_field(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    make_topic(acme)
    response = console_for(roles={"acme": "developer"}).post(
        "/console/t/acme/topics/new/", {"name": "orders", "partitions": "1"}
    )
    assert response.status_code == 422
    assert field_errors(response.content.decode(), "name", "create-") == [
        "&#x27;orders&#x27; is in use"
    ]


def test_a_quota_overshoot_is_shown_above_the_form(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    Quota.objects.filter(tenant=acme).update(max_partitions=2)
    response = console_for(roles={"acme": "developer"}).post(
        "/console/t/acme/topics/new/", {"name": "orders", "partitions": "3"}
    )
    assert response.status_code == 422
    assert "quota max_partitions exceeded" in response.content.decode()


# -- change ------------------------------------------------------------------------------------


def test_a_developer_changes_the_config(acme: Tenant, console_for: ConsoleFactory) -> None:
    make_topic(acme)
    client = console_for(roles={"acme": "developer"})
    response = client.post(
        "/console/t/acme/topics/acme.orders/config/",
        {"retention_ms": "7200000", "durability": "never", "unclean_leader_election": "false"},
    )
    assert response.status_code == 302
    topic = Topic.objects.get(full_name="acme.orders")
    assert (topic.retention_ms, topic.durability) == (7_200_000, "never")


def test_a_bad_config_is_refused_on_its_field(acme: Tenant, console_for: ConsoleFactory) -> None:
    make_topic(acme)
    response = console_for(roles={"acme": "developer"}).post(
        "/console/t/acme/topics/acme.orders/config/", {"max_message_bytes": "5"}
    )
    assert response.status_code == 422
    page = response.content.decode()
    assert field_errors(page, "max_message_bytes", "config-")
    assert input_value(page, "config-max_message_bytes") == "5"


def test_partitions_only_grow(acme: Tenant, console_for: ConsoleFactory) -> None:
    make_topic(acme, partitions=3)
    client = console_for(roles={"acme": "developer"})
    shrink = client.post("/console/t/acme/topics/acme.orders/partitions/", {"partitions": "2"})
    assert shrink.status_code == 422
    assert (
        "partitions can only grow"
        in field_errors(shrink.content.decode(), "partitions", "grow-")[0]
    )
    grow = client.post("/console/t/acme/topics/acme.orders/partitions/", {"partitions": "5"})
    assert grow.status_code == 302
    assert Topic.objects.get(full_name="acme.orders").partitions == 5


def test_a_viewer_cannot_change_or_delete(acme: Tenant, console_for: ConsoleFactory) -> None:
    make_topic(acme)
    client = console_for(roles={"acme": "viewer"})
    for action, data in (
        ("config", {"retention_ms": "7200000"}),
        ("partitions", {"partitions": "9"}),
        ("delete", {"confirm": "acme.orders"}),
    ):
        assert client.post(f"/console/t/acme/topics/acme.orders/{action}/", data).status_code == 403
    topic = Topic.objects.get(full_name="acme.orders")
    assert (topic.partitions, topic.status) == (2, "pending")


# -- delete -----------------------------------------------------------------------------------


def test_delete_needs_the_name_typed(acme: Tenant, console_for: ConsoleFactory) -> None:
    make_topic(acme)
    client = console_for(roles={"acme": "developer"})
    wrong = client.post("/console/t/acme/topics/acme.orders/delete/", {"confirm": "orders"})
    assert wrong.status_code == 422
    page = wrong.content.decode()
    assert field_errors(page, "confirm", "delete-")
    assert input_value(page, "delete-confirm") == "orders"
    assert Topic.objects.get(full_name="acme.orders").status == "pending"
    right = client.post("/console/t/acme/topics/acme.orders/delete/", {"confirm": "acme.orders"})
    assert right.status_code == 302
    assert Topic.objects.get(full_name="acme.orders").status == "deleting"
    assert AuditEvent.objects.filter(action="topic.delete").exists()


# -- escaping ---------------------------------------------------------------------------------


def test_user_text_is_escaped(
    acme: Tenant, console_for: ConsoleFactory, local_identity: Any
) -> None:
    script = "<script>alert(1)</script>"
    client: Client = console_for(roles={"acme": "developer"}, username=script)
    created = client.post("/console/t/acme/topics/new/", {"name": "orders", "partitions": "1"})
    assert created.status_code == 302
    Topic.objects.filter(full_name="acme.orders").update(status_reason=script)
    for url in (
        "/console/t/acme/topics/acme.orders/",
        f"/console/t/acme/topics/?name={script}",
        "/console/t/acme/",
    ):
        page = client.get(url).content.decode()
        assert script not in page, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page, url
    typed = client.post("/console/t/acme/topics/new/", {"name": script, "partitions": "1"})
    assert script not in typed.content.decode()


def test_a_platform_admin_manages_any_tenants_topics(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    client = console_for(platform_admin=True, username="operator")
    created = client.post("/console/t/acme/topics/new/", {"name": "orders", "partitions": "1"})
    assert created.status_code == 302
    deleted = client.post("/console/t/acme/topics/acme.orders/delete/", {"confirm": "acme.orders"})
    assert deleted.status_code == 302
    assert Topic.objects.get(full_name="acme.orders").status == "deleting"

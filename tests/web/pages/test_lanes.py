"""Lane pages: list with create, detail with edit, delete (typed, and ``force`` for a
lane with live consumers); each role, the API's messages on the form named by the API's
fields, isolation by URL and by form field, lane topics linked from the lane and shown
with their trunk in the topic list."""

from __future__ import annotations

import html
from typing import Any

import pytest
from rest_framework.test import APIClient

from controlplane.core.actors import Actor
from controlplane.core.models import AuditEvent
from controlplane.lanes import services
from controlplane.lanes.models import Lane
from controlplane.tenants.models import Tenant
from controlplane.topics.models import Topic
from tests.controlplane.conftest import token_for
from tests.web.pages.conftest import ConsoleFactory, unmasked
from tests.web.pages.test_topics import field_errors, input_value, make_topic

ROLES = ["viewer", "developer", "tenant-admin"]
SYSTEM = Actor.system("test")
LIST = "/console/t/acme/lanes/"


def make_lane(tenant: Tenant, name: str = "ppe", **changes: Any) -> Lane:
    return services.create_lane(tenant, name=name, actor=SYSTEM, **changes)


def lane_topic(tenant: Tenant, full_name: str) -> Topic:
    """The lane topic a broker's demand makes (``ensure_lane_topic``)."""
    topic = services.ensure_lane_topic(tenant.slug, full_name, actor=SYSTEM)
    assert topic is not None
    return topic


def make_live(lane: Lane, *topics: str) -> None:
    """What the controller records when the brokers report the lane's consumers."""
    Lane.objects.filter(pk=lane.pk).update(live_topics=list(topics))


# -- reads -----------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_every_role_reads_the_list_and_the_detail(
    role: str, acme: Tenant, console_for: ConsoleFactory
) -> None:
    make_topic(acme)
    make_lane(acme, consume_trunk=True, orphan_policy="hold", ttl_s=3600)
    lane_topic(acme, "acme.orders~ppe")
    client = console_for(roles={"acme": role})
    listing = client.get(LIST).content.decode()
    assert f'<a href="{LIST}ppe/">ppe</a>' in listing
    assert "<td>hold</td>" in listing
    assert "<td>1 hour</td>" in listing
    assert "<td>not live</td>" in listing
    assert '<a href="/console/t/acme/topics/acme.orders~ppe/">acme.orders~ppe</a>' in listing
    detail = client.get(f"{LIST}ppe/")
    assert detail.status_code == 200
    page = detail.content.decode()
    assert '<a href="/console/t/acme/topics/acme.orders/">acme.orders</a>' in page
    forms = ('id="create-name"' in listing, 'name="confirm"' in page, 'id="edit-ttl_s"' in page)
    assert forms == (role != "viewer",) * 3


def test_the_nav_links_the_section(acme: Tenant, console_for: ConsoleFactory) -> None:
    page = console_for(roles={"acme": "viewer"}).get(LIST).content.decode()
    assert f'<a href="{LIST}" aria-current="page">Lanes</a>' in page


def test_a_live_lane_shows_for_which_topics(acme: Tenant, console_for: ConsoleFactory) -> None:
    make_topic(acme)
    make_live(make_lane(acme), "acme.orders")
    page = console_for(roles={"acme": "viewer"}).get(LIST).content.decode()
    assert "<td>live for acme.orders</td>" in page


# -- create ----------------------------------------------------------------------------------


def test_a_developer_creates_a_lane(acme: Tenant, console_for: ConsoleFactory) -> None:
    make_topic(acme)
    make_topic(acme, name="payments")
    client = console_for(roles={"acme": "developer"})
    typed = {
        "name": "boe-alice",
        "topics": "orders, acme.payments",
        "consume_trunk": "true",
        "orphan_policy": "hold",
        "ttl_s": "600",
        "partitions": "1",
    }
    response = client.post(LIST, typed)
    assert response.status_code == 302
    assert response["Location"] == f"{LIST}boe-alice/"
    lane = Lane.objects.get(tenant=acme, name="boe-alice")
    assert sorted(t.full_name for t in lane.topics.all()) == ["acme.orders", "acme.payments"]
    assert (lane.all_topics, lane.consume_trunk, lane.orphan_policy) == (False, True, "hold")
    assert (lane.ttl_s, lane.partitions) == (600, 1)
    assert AuditEvent.objects.filter(action="lane.create").count() == 1


def test_empty_fields_take_the_apis_defaults(acme: Tenant, console_for: ConsoleFactory) -> None:
    response = console_for(roles={"acme": "developer"}).post(LIST, {"name": "ppe"})
    assert response.status_code == 302
    lane = Lane.objects.get(name="ppe")
    assert (lane.all_topics, lane.consume_trunk, lane.orphan_policy) == (True, False, "trunk")
    assert lane.partitions is None
    assert lane.ttl_s == Lane._meta.get_field("ttl_s").get_default()


@pytest.mark.parametrize(
    ("typed", "field", "message"),
    [
        ({"name": "Bad_Name"}, "name", "3-32 characters: lowercase letters"),
        ({"name": "a--b"}, "name", "single '-'"),
        ({"name": ""}, "name", "This field is required."),
        ({"name": "ppe", "topics": "nosuch"}, "topics", "no topic 'acme.nosuch' in tenant"),
        ({"name": "ppe", "orphan_policy": "never"}, "orphan_policy", "is not a valid choice."),
        ({"name": "ppe", "ttl_s": "0"}, "ttl_s", "between 1 and"),
        ({"name": "ppe", "ttl_s": "soon"}, "ttl_s", "A valid integer is required."),
        ({"name": "ppe", "partitions": "0"}, "partitions", "between 1 and"),
    ],
)
def test_create_errors_appear_on_their_field_and_keep_what_was_typed(
    typed: dict[str, str], field: str, message: str, acme: Tenant, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "developer"})
    response = client.post(LIST, {"ttl_s": "60", **typed})
    assert response.status_code == 422
    page = response.content.decode()
    errors = [html.unescape(m) for m in field_errors(page, field, "create-")]
    assert any(message in error for error in errors), errors
    assert input_value(page, "create-name") == html.escape(typed["name"], quote=True)
    assert input_value(page, "create-ttl_s") == typed.get("ttl_s", "60")
    assert not Lane.objects.exists()


@pytest.mark.parametrize(
    "typed",
    [{"name": "Bad_Name"}, {"name": "ok", "topics": ["nosuch"]}, {"name": "ppe"}],
)
def test_the_form_shows_the_apis_own_messages(
    typed: dict[str, Any], acme: Tenant, console_for: ConsoleFactory, local_identity: Any
) -> None:
    make_lane(acme)
    api = APIClient()
    api.credentials(
        HTTP_AUTHORIZATION=f"Bearer {token_for(local_identity, roles={'acme': 'developer'})}"
    )
    body = api.post("/api/v1/lanes", {**typed, "tenant": "acme"}, format="json").json()
    messages = {k: v for k, v in body["error"]["details"].items() if isinstance(v, list)}
    form = {**typed, "topics": " ".join(typed.get("topics", []))}
    page = console_for(roles={"acme": "developer"}).post(LIST, form)
    assert page.status_code == 422
    (field,) = messages
    shown = [html.unescape(m) for m in field_errors(page.content.decode(), field, "create-")]
    assert shown == messages[field]


def test_a_quota_overshoot_is_shown_above_the_form(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    make_lane(acme)
    acme.quota.max_lanes = 1
    acme.quota.save()
    response = console_for(roles={"acme": "developer"}).post(LIST, {"name": "other"})
    assert response.status_code == 422
    assert "max_lanes" in response.content.decode()
    assert Lane.objects.count() == 1


# -- edit ------------------------------------------------------------------------------------


def test_a_developer_changes_a_lane(acme: Tenant, console_for: ConsoleFactory) -> None:
    make_topic(acme)
    make_lane(acme, partitions=2, consume_trunk=True)
    client = console_for(roles={"acme": "developer"})
    detail = client.get(f"{LIST}ppe/").content.decode()
    assert 'id="edit-consume_trunk" name="consume_trunk" type="checkbox" value="true" checked' in (
        detail
    )
    assert input_value(detail, "edit-partitions") == "2"
    response = client.post(
        f"{LIST}ppe/edit/", {"topics": "orders", "orphan_policy": "hold", "ttl_s": "120"}
    )
    assert response.status_code == 302
    lane = Lane.objects.get(name="ppe")
    assert [t.full_name for t in lane.topics.all()] == ["acme.orders"]
    assert (lane.all_topics, lane.consume_trunk, lane.orphan_policy) == (False, False, "hold")
    assert (lane.ttl_s, lane.partitions) == (120, None)  # empty partitions: the trunk's count
    assert AuditEvent.objects.filter(action="lane.update").count() == 1
    back = client.post(f"{LIST}ppe/edit/", {"topics": "", "orphan_policy": "hold"})
    assert back.status_code == 302
    lane.refresh_from_db()
    assert (lane.all_topics, lane.ttl_s) == (True, 120)  # empty ttl_s: unchanged


def test_a_bad_change_is_refused_on_its_field(acme: Tenant, console_for: ConsoleFactory) -> None:
    make_lane(acme)
    response = console_for(roles={"acme": "developer"}).post(
        f"{LIST}ppe/edit/", {"topics": "nosuch", "ttl_s": "60"}
    )
    assert response.status_code == 422
    page = response.content.decode()
    assert field_errors(page, "topics", "edit-") == [
        "no topic &#x27;acme.nosuch&#x27; in tenant &#x27;acme&#x27;"
    ]
    assert input_value(page, "edit-topics") == "nosuch"
    assert Lane.objects.get(name="ppe").all_topics


# -- delete ----------------------------------------------------------------------------------


def test_delete_needs_the_name_typed(acme: Tenant, console_for: ConsoleFactory) -> None:
    make_topic(acme)
    make_lane(acme)
    lane_topic(acme, "acme.orders~ppe")
    client = console_for(roles={"acme": "developer"})
    assert 'name="force"' not in client.get(f"{LIST}ppe/").content.decode()
    wrong = client.post(f"{LIST}ppe/delete/", {"confirm": "pp"})
    assert wrong.status_code == 422
    assert field_errors(wrong.content.decode(), "confirm", "delete-") == [
        "type the lane&#x27;s name, ppe, to delete it"
    ]
    assert Lane.objects.exists()
    right = client.post(f"{LIST}ppe/delete/", {"confirm": "ppe"})
    assert right.status_code == 302
    assert right["Location"] == LIST
    assert not Lane.objects.exists()
    assert Topic.objects.get(full_name="acme.orders~ppe").status == "deleting"
    assert AuditEvent.objects.filter(action="lane.delete").count() == 1


def test_a_lane_with_live_consumers_is_deleted_only_with_force(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    make_topic(acme)
    make_live(make_lane(acme), "acme.orders")
    client = console_for(roles={"acme": "developer"})
    assert 'id="delete-force"' in client.get(f"{LIST}ppe/").content.decode()
    refused = client.post(f"{LIST}ppe/delete/", {"confirm": "ppe"})
    assert refused.status_code == 409
    page = html.unescape(refused.content.decode())
    assert "has live consumers (on acme.orders)" in page
    assert 'id="delete-force"' in page
    assert Lane.objects.exists()
    forced = client.post(f"{LIST}ppe/delete/", {"confirm": "ppe", "force": "true"})
    assert forced.status_code == 302
    assert not Lane.objects.exists()


# -- who may ---------------------------------------------------------------------------------


def test_a_viewer_cannot_change_anything(acme: Tenant, console_for: ConsoleFactory) -> None:
    make_lane(acme)
    client = console_for(roles={"acme": "viewer"})
    posts = [
        (LIST, {"name": "other"}),
        (f"{LIST}ppe/edit/", {"orphan_policy": "hold"}),
        (f"{LIST}ppe/delete/", {"confirm": "ppe", "force": "true"}),
    ]
    for url, data in posts:
        assert client.post(url, data).status_code == 403, url
    assert [(lane.name, lane.orphan_policy) for lane in Lane.objects.all()] == [("ppe", "trunk")]


def test_another_tenants_lane_answers_like_a_missing_one(
    acme: Tenant, globex: Tenant, console_for: ConsoleFactory
) -> None:
    make_lane(globex, name="secret")
    client = console_for(roles={"acme": "developer"})
    for name in ("secret", "missing"):
        base = f"{LIST}{name}/"
        answers = [
            client.get(base),
            client.post(base + "edit/", {"orphan_policy": "hold"}),
            client.post(base + "delete/", {"confirm": name, "force": "true"}),
        ]
        assert [a.status_code for a in answers] == [404] * 3, name
    missing = client.get(f"{LIST}missing/").content
    assert unmasked(client.get(f"{LIST}secret/").content) == unmasked(missing)
    other = client.get("/console/t/globex/lanes/secret/")
    assert unmasked(other.content) == unmasked(client.get("/console/t/nosuch/lanes/x/").content)
    assert b"secret" not in client.get(LIST).content
    assert Lane.objects.get(name="secret").orphan_policy == "trunk"


def test_a_form_naming_another_tenant_answers_404(
    acme: Tenant, globex: Tenant, console_for: ConsoleFactory
) -> None:
    make_lane(acme)
    client = console_for(roles={"acme": "developer", "globex": "developer"})
    assert client.post(LIST, {"tenant": "globex", "name": "other"}).status_code == 404
    deleted = client.post(f"{LIST}ppe/delete/", {"tenant": "globex", "confirm": "ppe"})
    assert deleted.status_code == 404
    assert list(Lane.objects.values_list("name", flat=True)) == ["ppe"]


def test_user_text_is_escaped(acme: Tenant, console_for: ConsoleFactory) -> None:
    script = "<script>alert(1)</script>"
    typed = console_for(roles={"acme": "developer"}).post(LIST, {"name": script, "topics": script})
    assert typed.status_code == 422
    assert script not in typed.content.decode()


# -- lane topics among the topics ------------------------------------------------------------


def test_the_topic_list_shows_lane_topics_with_their_trunk(
    acme: Tenant, console_for: ConsoleFactory
) -> None:
    make_topic(acme)
    make_topic(acme, name="payments")
    make_lane(acme)
    lane_topic(acme, "acme.orders~ppe")
    client = console_for(roles={"acme": "viewer"})
    page = client.get("/console/t/acme/topics/").content.decode()
    assert "2 topics" in page  # the trunks; the lane topic is shown with its trunk
    orders = page.index('<a href="/console/t/acme/topics/acme.orders/">acme.orders</a>')
    lane = page.index('<a href="/console/t/acme/topics/acme.orders~ppe/">')
    payments = page.index('<a href="/console/t/acme/topics/acme.payments/">')
    assert orders < lane < payments
    found = client.get("/console/t/acme/topics/?name=~ppe").content.decode()
    assert "1 topic matching" in found
    assert 'href="/console/t/acme/topics/acme.orders~ppe/"' in found
    detail = client.get("/console/t/acme/topics/acme.orders~ppe/").content.decode()
    assert '<a href="/console/t/acme/lanes/ppe/">ppe</a>' in detail
    assert '<a href="/console/t/acme/topics/acme.orders/">acme.orders</a>' in detail

"""The audit log page: tenant and platform administrators only (as in the API), the
tenant's own events, the API's filters (actor, action, object, time range), newest
first, paged in the database, and every field escaped."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.models import AuditEvent
from controlplane.tenants.models import Tenant
from tests.web.pages.conftest import ConsoleFactory

URL = "/console/t/acme/audit/"
ALICE = Actor(subject="sub-alice", name="alice")
BOB = Actor(subject="sub-bob", name="bob")


def event(
    tenant: Tenant, actor: Actor, action: str, object_id: str, *, at: datetime | None = None
) -> AuditEvent:
    row = audit.record_about(
        actor, action, object_type=action.split(".")[0] + "s." + action.split(".")[0],
        object_id=object_id, after={"name": object_id}, tenant=tenant,
    )  # fmt: skip
    if at is not None:
        AuditEvent.objects.filter(pk=row.pk).update(created_at=at)
    return row


def actions(page: str) -> list[tuple[str, str]]:
    """(action, object) of each row, in the page's order."""
    body = page.split('<table class="audit">', 1)[1].split("</tbody>", 1)[0]
    out = []
    for row in body.split("<tr>")[2:]:
        cells = re.findall(r"<td>(.*?)</td>", row, re.S)
        if len(cells) >= 4:
            out.append((cells[2], html.unescape(cells[3].split()[1])))
    return out


@pytest.fixture
def events(acme: Tenant, globex: Tenant) -> None:
    day = datetime(2026, 3, 1, tzinfo=UTC)
    event(acme, ALICE, "topic.create", "orders", at=day)
    event(acme, BOB, "topic.update", "orders", at=day + timedelta(hours=1))
    event(acme, ALICE, "group.offsets.reset", "acme.billing", at=day + timedelta(days=1))
    event(globex, ALICE, "topic.create", "secret", at=day)


@pytest.mark.parametrize(
    ("claims", "status"),
    [
        ({"roles": {"acme": "viewer"}}, 403),
        ({"roles": {"acme": "developer"}}, 403),
        ({"roles": {"acme": "tenant-admin"}}, 200),
        ({"platform_admin": True}, 200),
        ({"roles": {"globex": "tenant-admin"}}, 404),
    ],
)
def test_who_reads_the_log(
    claims: dict[str, Any], status: int, events: None, console_for: ConsoleFactory
) -> None:
    assert console_for(**claims).get(URL).status_code == status


def test_the_tenants_events_newest_first(events: None, console_for: ConsoleFactory) -> None:
    page = console_for(roles={"acme": "tenant-admin"}).get(URL).content.decode()
    assert actions(page) == [
        ("group.offsets.reset", "acme.billing"),
        ("topic.update", "orders"),
        ("topic.create", "orders"),
    ]
    assert "secret" not in page  # globex's
    assert '<a href="/console/t/acme/audit/" aria-current="page">Audit log</a>' in page


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"actor": "alice"}, ["group.offsets.reset", "topic.create"]),
        ({"actor": "sub-bob"}, ["topic.update"]),
        ({"action": "topic.create"}, ["topic.create"]),
        ({"object_type": "groups.group", "object_id": "acme.billing"}, ["group.offsets.reset"]),
        ({"object_id": "orders"}, ["topic.update", "topic.create"]),
        ({"since": "2026-03-01T00:30:00Z"}, ["group.offsets.reset", "topic.update"]),
        ({"since": "2026-03-01T00:00:00Z", "until": "2026-03-01T01:00:00Z"}, ["topic.create"]),
        ({"until": "2026-03-01T03:00:00+02:00"}, ["topic.create"]),
        ({"action": "tenant.delete"}, []),
    ],
)
def test_filters_are_the_apis(
    query: dict[str, str], expected: list[str], events: None, console_for: ConsoleFactory
) -> None:
    response = console_for(roles={"acme": "tenant-admin"}).get(URL, query)
    assert response.status_code == 200
    page = response.content.decode()
    assert [action for action, _ in actions(page)] == expected
    for name, value in query.items():  # the filter stays in its field
        assert f'name="{name}" type="text" value="{html.escape(value)}"' in page


def test_a_bad_time_is_shown_on_its_field(events: None, console_for: ConsoleFactory) -> None:
    response = console_for(roles={"acme": "tenant-admin"}).get(URL, {"since": "last tuesday"})
    assert response.status_code == 400
    page = response.content.decode()
    assert 'id="filter-since-errors"' in page
    assert actions(page) == []


def test_pages_of_fifty_in_the_database(
    acme: Tenant, console_for: ConsoleFactory, django_assert_max_num_queries: Any
) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    AuditEvent.objects.bulk_create(
        AuditEvent(
            actor="sub-alice", actor_name="alice", tenant=acme, tenant_slug="acme",
            action="topic.create" if i % 2 else "topic.delete", object_type="topics.topic",
            object_id=f"t{i:03d}", object_repr=f"t{i:03d}",
        )
        for i in range(120)
    )  # fmt: skip
    for i, row in enumerate(AuditEvent.objects.order_by("object_id")):
        AuditEvent.objects.filter(pk=row.pk).update(created_at=start + timedelta(minutes=i))
    client = console_for(roles={"acme": "tenant-admin"})
    with django_assert_max_num_queries(12):
        first = client.get(URL, {"action": "topic.create"}).content.decode()
    assert [obj for _, obj in actions(first)][:2] == ["t119", "t117"]
    assert len(actions(first)) == 50
    assert "Page 1 of 2" in first
    assert 'href="?action=topic.create&amp;page=2"' in first
    second = client.get(URL, {"action": "topic.create", "page": "2"}).content.decode()
    assert len(actions(second)) == 10
    assert actions(second)[-1][1] == "t001"


def test_script_in_any_field_is_escaped(acme: Tenant, console_for: ConsoleFactory) -> None:
    script = "<script>alert(1)</script>"
    audit.record_about(
        Actor(subject=script, name=script), "group.offsets.reset", object_type="groups.group",
        object_id=f"acme.{script}", object_repr=script, before={"x": script},
        after={script: script}, tenant=acme,
    )  # fmt: skip
    page = console_for(roles={"acme": "tenant-admin"}).get(URL).content.decode()
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page

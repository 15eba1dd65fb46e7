"""/api/v1/audit-events and /api/v1/drift-findings: who may read them, and the filters."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from controlplane.accounts.services import invite_member, remove_member
from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.regions.models import Broker
from controlplane.tenants.lifecycle import deprovision_tenant
from controlplane.tenants.services import delete_tenant, update_tenant
from controlplane.topics.models import DriftFinding
from controlplane.topics.services import create_topic, delete_topic
from tests.controlplane.api_base import assert_error, make_cluster, make_tenant

ALICE = Actor(subject="sub-alice", name="alice", roles={"acme": Role.DEVELOPER})


def _world() -> None:
    make_cluster("local")
    acme, globex = make_tenant("acme"), make_tenant("globex")
    topic = create_topic(acme, name="orders", partitions=1, actor=ALICE)
    delete_topic(topic, actor=ALICE)
    create_topic(globex, name="secret", partitions=1, actor=Actor.system("tests"))


def actions(client: Any, **query: str) -> list[str]:
    response = client.get("/api/v1/audit-events", query)
    assert response.status_code == 200, response.content
    return [event["action"] for event in response.json()["results"]]


def test_platform_admins_see_every_event_newest_first(db: None, admin_client: Any) -> None:
    _world()
    assert actions(admin_client) == ["topic.create", "topic.delete", "topic.create"]


def test_tenant_admins_see_only_their_tenants_events(db: None, client_for: Any) -> None:
    _world()
    client = client_for(roles={"acme": Role.TENANT_ADMIN})
    body = client.get("/api/v1/audit-events").json()
    assert {e["tenant"] for e in body["results"]} == {"acme"}
    assert [e["action"] for e in body["results"]] == ["topic.delete", "topic.create"]
    delete = body["results"][0]
    assert (delete["before"]["status"], delete["after"]["status"]) == ("pending", "deleting")
    assert (delete["actor"], delete["actor_name"]) == ("sub-alice", "alice")


def test_other_roles_cannot_read_the_audit_log(db: None, client_for: Any) -> None:
    make_tenant("acme")
    client = client_for(roles={"acme": Role.DEVELOPER})
    assert_error(client.get("/api/v1/audit-events"), 403, "permission_denied")


def test_filters(db: None, admin_client: Any) -> None:
    _world()
    assert actions(admin_client, action="topic.delete") == ["topic.delete"]
    assert actions(admin_client, tenant="globex") == ["topic.create"]
    assert actions(admin_client, actor="alice") == ["topic.delete", "topic.create"]
    assert actions(admin_client, actor="sub-alice") == ["topic.delete", "topic.create"]
    assert actions(admin_client, object_type="topics.topic", tenant="acme") == [
        "topic.delete",
        "topic.create",
    ]
    future = (timezone.now() + timezone.timedelta(hours=1)).isoformat()
    assert actions(admin_client, since=future) == []
    assert_error(admin_client.get("/api/v1/audit-events", {"since": "yesterday"}), 400)


def test_time_filters_take_any_offset_and_any_year(db: None, admin_client: Any) -> None:
    _world()
    # Offsets the database refuses (+18:46) and instants past the calendar's ends are
    # compared in UTC, not passed through.
    assert len(actions(admin_client, until="1012-08-23T02:47:18+18:46")) == 0
    assert len(actions(admin_client, since="0001-01-01T00:00:00+01:00")) == 3
    assert len(actions(admin_client, until="9999-12-31T23:00:00-05:00")) == 3


def test_drift_findings_are_for_platform_admins(
    db: None, admin_client: Any, client_for: Any
) -> None:
    cluster = make_cluster("local")
    make_tenant("acme")
    broker = Broker.objects.get(cluster=cluster, broker_id=2)
    now = timezone.now()
    DriftFinding.objects.create(
        broker=broker, topic_name="acme.orders", partition=0, kind="missing", last_seen_at=now
    )
    DriftFinding.objects.create(
        broker=broker,
        topic_name="x.y",
        partition=1,
        kind="unknown",
        last_seen_at=now,
        resolved_at=now,
    )
    body = admin_client.get("/api/v1/drift-findings", {"open": "true"}).json()
    assert [(f["topic_name"], f["broker_id"], f["kind"]) for f in body["results"]] == [
        ("acme.orders", 2, "missing")
    ]
    assert admin_client.get("/api/v1/drift-findings", {"kind": "unknown"}).json()["count"] == 1
    tenant_admin = client_for(roles={"acme": Role.TENANT_ADMIN})
    assert_error(tenant_admin.get("/api/v1/drift-findings"), 403, "permission_denied")


def test_a_tenant_reusing_a_deleted_tenants_slug_reads_none_of_its_events(
    db: None, client_for: Any, local_identity: Any
) -> None:
    system = Actor.system("tests")
    old = make_tenant("acme")
    member = invite_member(
        old, username="alice", email="alice@old.test", role="viewer", actor=system
    )
    remove_member(member, actor=system)
    delete_tenant(old, actor=system)
    deprovision_tenant(old.pk, actor=system)
    new = make_tenant("acme")
    update_tenant(new, name="New Acme", actor=system)
    client = client_for(roles={"acme": Role.TENANT_ADMIN})
    body = client.get("/api/v1/audit-events").json()
    assert [e["action"] for e in body["results"]] == ["tenant.update"]
    assert "alice" not in str(body)
    assert actions(client, tenant="acme") == ["tenant.update"]

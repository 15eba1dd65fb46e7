"""The groups API on a real broker: a tenant's groups with their lag in records and in
seconds, resetting a stopped group's offsets (preview, then apply; refused while a
member is active; audited), deleting, and another tenant's group answering as a missing
one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from controlplane.core.models import AuditEvent
from controlplane.metrics.services import collect_metrics
from controlplane.regions.models import Cluster
from controlplane.tenants.models import Tenant
from controlplane.topics.models import Topic
from dataplane.client import Admin, Consumer, Producer, TopicPartition
from tests.controlplane.api_base import assert_error
from tests.support.brokers import BrokerProcess
from tests.support.controlplane import make_tenant, register_static_cluster, wait_until

TOPIC = "acme.orders"
GROUP = "acme.billing"
URL = f"/api/v1/groups/{GROUP}"


@pytest.fixture
def acme(db: None, broker: BrokerProcess) -> Tenant:
    """Tenant acme with topic acme.orders (2 partitions, 10 records each) on a real
    broker, and group acme.billing committed at 4 and 10; tenant other exists too."""
    cluster: Cluster = register_static_cluster([broker])
    tenant = make_tenant("acme")
    make_tenant("other")
    Topic.objects.create(
        tenant=tenant, cluster=cluster, name="orders", full_name=TOPIC, partitions=2,
        retention_ms=3_600_000, retention_bytes=2**30, status="ready",
    )  # fmt: skip
    with Admin(broker.address) as admin:
        admin.create_topic(TOPIC, 2)
        with Producer(broker.address) as producer:
            for i in range(20):
                producer.send(TOPIC, b"%d" % i, partition=i % 2)
        admin.alter_group_offsets(
            GROUP, {TopicPartition(TOPIC, 0): 4, TopicPartition(TOPIC, 1): 10}
        )
    return tenant


def _positions(body: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["partition"]: p for p in body["partitions"]}


def test_a_member_lists_and_describes_the_group_with_lag_in_seconds(
    acme: Tenant, client_for: Callable[..., APIClient]
) -> None:
    viewer = client_for(roles={"acme": "viewer"})
    listed = viewer.get("/api/v1/groups").json()["results"]
    assert [(g["group_id"], g["state"], g["members"], g["lag"]) for g in listed] == [
        (GROUP, "Empty", 0, 6)
    ]
    body = viewer.get(URL).json()
    behind, caught_up = _positions(body)[0], _positions(body)[1]
    assert (behind["committed"], behind["end_offset"], behind["lag"]) == (4, 10, 6)
    assert behind["lag_seconds"] > 0
    assert behind["oldest_unconsumed_timestamp"] > 0
    assert (caught_up["lag"], caught_up["lag_seconds"]) == (0, 0)
    # Lag in time grows while the group stays behind.
    wait_until(lambda: viewer.get(URL).json()["lag_seconds"] > body["lag_seconds"])


def test_reset_previews_then_applies_and_is_audited(
    acme: Tenant, broker: BrokerProcess, client_for: Callable[..., APIClient]
) -> None:
    developer = client_for(roles={"acme": "developer"})
    preview = developer.post(
        f"{URL}/reset-offsets", {"to": "earliest", "topic": TOPIC, "dry_run": True}, format="json"
    )
    assert preview.status_code == 200, preview.content
    moves = [(m["partition"], m["current"], m["new"]) for m in preview.json()["moves"]]
    assert moves == [(0, 4, 0), (1, 10, 0)]
    assert _positions(developer.get(URL).json())[0]["committed"] == 4  # a preview moves nothing
    assert not AuditEvent.objects.filter(action="group.offsets.reset").exists()

    applied = developer.post(
        f"{URL}/reset-offsets", {"to": "offset", "offset": 7, "partitions": [0], "topic": TOPIC},
        format="json",
    )  # fmt: skip
    assert applied.status_code == 200, applied.content
    assert [(m["current"], m["new"]) for m in applied.json()["moves"]] == [(4, 7)]
    assert _positions(developer.get(URL).json())[0]["committed"] == 7
    event = AuditEvent.objects.get(action="group.offsets.reset")
    assert (event.object_id, event.tenant_slug) == (GROUP, "acme")
    assert event.after == {"offsets": {f"{TOPIC}/0": 7}, "to": "offset"}

    latest = developer.post(f"{URL}/reset-offsets", {"to": "latest"}, format="json")
    assert latest.status_code == 200, latest.content
    caught_up = developer.get(URL).json()
    assert (caught_up["lag"], caught_up["lag_seconds"]) == (0, 0)  # lag in time back to 0


def test_reset_is_refused_while_a_member_is_active(
    acme: Tenant, broker: BrokerProcess, client_for: Callable[..., APIClient]
) -> None:
    developer = client_for(roles={"acme": "developer"})
    consumer = Consumer(broker.address, group_id=GROUP, enable_auto_commit=False)
    try:
        consumer.subscribe([TOPIC])
        wait_until(lambda: consumer.poll(timeout_ms=100) is not None and consumer.assignment())
        refused = developer.post(f"{URL}/reset-offsets", {"to": "earliest"}, format="json")
        error = assert_error(refused, 409, "group_active")
        assert error["details"]["members"] == 1
        described = developer.get(URL).json()
        assert described["members"][0]["assignment"]
        assert_error(developer.delete(URL), 409, "group_active")
    finally:
        consumer.close()


def test_roles_and_tenants(
    acme: Tenant,
    client_for: Callable[..., APIClient],
    anonymous_client: APIClient,
    admin_client: APIClient,
) -> None:
    assert_error(anonymous_client.get("/api/v1/groups"), 401)
    assert_error(anonymous_client.get(URL), 401)
    assert admin_client.get(URL).json()["tenant"] == "acme"  # platform admins see every tenant
    listed = admin_client.get("/api/v1/groups?tenant=acme").json()["results"]
    assert [g["group_id"] for g in listed] == [GROUP]
    viewer = client_for(roles={"acme": "viewer"})
    assert_error(viewer.post(f"{URL}/reset-offsets", {"to": "latest"}, format="json"), 403)
    assert_error(viewer.delete(URL), 403)
    stranger = client_for(roles={"other": "tenant-admin"})
    missing = stranger.get("/api/v1/groups/other.nothing")
    foreign = stranger.get(URL)
    assert_error(missing, 404)
    assert_error(foreign, 404)
    assert foreign.json()["error"]["message"].replace(GROUP, "X") == missing.json()["error"][
        "message"
    ].replace("other.nothing", "X")
    assert_error(stranger.post(f"{URL}/reset-offsets", {"to": "latest"}, format="json"), 404)
    assert stranger.get("/api/v1/groups").json()["results"] == []


def test_bad_reset_input_is_refused_by_field(
    acme: Tenant, client_for: Callable[..., APIClient]
) -> None:
    developer = client_for(roles={"acme": "developer"})
    for body, field in (
        ({"to": "timestamp"}, "timestamp"),
        ({"to": "offset"}, "offset"),
        ({"to": "sideways"}, "to"),
        ({"to": "latest", "partitions": [0]}, "topic"),
        ({"to": "timestamp", "timestamp": 2**63}, "timestamp"),  # beyond the wire's int64
        ({"to": "offset", "offset": 2**63}, "offset"),
    ):
        error = assert_error(developer.post(f"{URL}/reset-offsets", body, format="json"), 400)
        assert field in error["details"], error


def test_a_deleted_group_is_gone(acme: Tenant, client_for: Callable[..., APIClient]) -> None:
    developer = client_for(roles={"acme": "developer"})
    assert developer.delete(URL).status_code == 204
    assert_error(developer.get(URL), 404)
    assert AuditEvent.objects.filter(action="group.delete", object_id=GROUP).exists()


def test_groups_are_listed_a_page_at_a_time_and_ids_with_a_slash_are_reachable(
    acme: Tenant, broker: BrokerProcess, client_for: Callable[..., APIClient]
) -> None:
    slashed = "acme.team/billing"
    with Admin(broker.address) as admin:
        for group in (slashed, "acme.zz-last"):
            admin.alter_group_offsets(group, {TopicPartition(TOPIC, 0): 1})
    viewer = client_for(roles={"acme": "viewer"})
    first = viewer.get("/api/v1/groups?limit=2").json()
    assert first["count"] == 3
    assert [g["group_id"] for g in first["results"]] == [GROUP, slashed]
    second = viewer.get(first["next"]).json()
    assert [g["group_id"] for g in second["results"]] == ["acme.zz-last"]
    for path in ("acme.team/billing", "acme.team%2Fbilling"):
        body = viewer.get(f"/api/v1/groups/{path}").json()
        assert body["group_id"] == slashed, body
        assert body["partitions"][0]["committed"] == 1
    developer = client_for(roles={"acme": "developer"})
    plan = developer.post(
        "/api/v1/groups/acme.team%2Fbilling/reset-offsets",
        {"to": "earliest", "dry_run": True},
        format="json",
    )
    assert plan.status_code == 200, plan.json()
    assert developer.get("/api/v1/groups/acme.team/billing").status_code == 200


def test_a_slashed_group_id_has_its_metrics_route(
    acme: Tenant, broker: BrokerProcess, client_for: Callable[..., APIClient]
) -> None:
    with Admin(broker.address) as admin:
        admin.alter_group_offsets("acme.team/billing", {TopicPartition(TOPIC, 0): 1})
    collect_metrics()
    viewer = client_for(roles={"acme": "viewer"})
    for group in (GROUP, "acme.team/billing"):
        response = viewer.get(f"/api/v1/groups/{group}/metrics")
        assert response.status_code == 200, response.content
        assert response.json()["group"] == group

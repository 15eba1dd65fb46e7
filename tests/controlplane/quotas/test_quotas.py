"""Quotas: refusals name the quota, concurrent creates cannot overshoot, limits cannot go
below usage, and /api/v1/quotas shows a tenant its own limits and usage."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from controlplane.core.actors import Actor
from controlplane.core.choices import Role
from controlplane.core.errors import QuotaExceeded
from controlplane.core.models import AuditEvent
from controlplane.quotas.models import Quota
from controlplane.quotas.services import quota_usage
from controlplane.tenants.models import Tenant
from controlplane.topics.models import PartitionAssignment, Topic
from controlplane.topics.services import create_topic
from tests.controlplane.api_base import assert_error, make_cluster, make_tenant

SYSTEM = Actor.system("tests")
GIB = 2**30


@pytest.fixture
def acme(db: None) -> Any:
    make_cluster("local")
    tenant = make_tenant("acme")
    make_tenant("globex")
    return tenant


def set_limits(tenant: Any, **limits: int) -> None:
    Quota.objects.filter(tenant=tenant).update(**limits)


@pytest.mark.parametrize(
    ("limits", "payload", "quota"),
    [
        ({"max_topics": 0}, {"partitions": 1}, "max_topics"),
        ({"max_partitions": 4}, {"partitions": 5}, "max_partitions"),
        (
            {"max_storage_bytes": 3 * GIB},
            {"partitions": 4, "retention_bytes": GIB},
            "max_storage_bytes",
        ),
    ],
)
def test_a_create_past_a_quota_is_a_409_naming_it(
    acme: Any, client_for: Any, limits: dict[str, int], payload: dict[str, Any], quota: str
) -> None:
    set_limits(acme, **limits)
    client = client_for(roles={"acme": Role.DEVELOPER})
    response = client.post("/api/v1/topics", {"name": "big", **payload}, format="json")
    error = assert_error(response, 409, "quota_exceeded")
    assert error["details"]["quota"] == quota
    assert quota in error["message"]
    assert error["details"]["limit"] == limits[quota]
    assert not Topic.objects.exists()


def test_growing_past_a_quota_is_refused_and_changes_nothing(acme: Any, client_for: Any) -> None:
    create_topic(acme, name="t", partitions=2, actor=SYSTEM)
    set_limits(acme, max_partitions=3)
    client = client_for(roles={"acme": Role.DEVELOPER})
    response = client.patch("/api/v1/topics/acme.t", {"partitions": 4}, format="json")
    error = assert_error(response, 409, "quota_exceeded")
    assert (error["details"]["quota"], error["details"]["current"]) == ("max_partitions", 2)
    topic = Topic.objects.get()
    assert (topic.partitions, topic.generation, topic.assignments.count()) == (2, 1, 2)


def test_only_the_storage_a_change_adds_counts(acme: Any) -> None:
    topic = create_topic(acme, name="t", partitions=2, retention_bytes=GIB, actor=SYSTEM)
    set_limits(acme, max_storage_bytes=2 * GIB)
    from controlplane.topics.services import update_topic

    # Shorter retention per partition frees room for more partitions at the same total.
    update_topic(topic, actor=SYSTEM, partitions=4, retention_bytes=GIB // 2)
    assert quota_usage(acme)["storage_bytes"] == 2 * GIB


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("limits", [{"max_topics": 1}, {"max_partitions": 3}])
def test_concurrent_creates_cannot_overshoot(
    limits: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two threads, each in its own transaction, race for the last unit of a quota."""
    # Commits run on_commit callbacks here; what the reconciler does with the topic is
    # its own tests' business, so its job is recorded instead of enqueued.
    from controlplane.topics import tasks

    enqueued: list[int] = []
    monkeypatch.setattr(tasks.reconcile_topic, "delay", enqueued.append)
    make_cluster("local")
    tenant = make_tenant("acme")
    set_limits(tenant, **limits)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def create(name: str) -> None:
        barrier.wait()
        try:
            create_topic(tenant, name=name, partitions=2, actor=SYSTEM)
            outcomes.append("created")
        except QuotaExceeded as exc:
            outcomes.append(exc.quota)
        finally:
            connection.close()  # each thread has its own connection

    threads = [threading.Thread(target=create, args=(f"t{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == sorted(["created", *limits])
    created = Topic.objects.get(tenant=tenant)
    assert enqueued == [created.pk]


def test_usage_counts_reserved_and_stored_bytes(acme: Any) -> None:
    topic = create_topic(acme, name="t", partitions=3, retention_bytes=GIB, actor=SYSTEM)
    PartitionAssignment.objects.filter(topic=topic).update(size_bytes=1000)
    assert quota_usage(acme) == {
        "topics": 1,
        "partitions": 3,
        "storage_bytes": 3 * GIB,
        "stored_bytes": 3000,
        "lanes": 0,
        "mirrors": 0,
        "exports": 0,
        "indexes": 0,
    }


def test_stored_bytes_count_the_remote_tier_once(acme: Any) -> None:
    """A tiered partition holds what is on its leader's disk plus what is only in the
    object store; a segment in both (uploaded, not yet past local retention) counts once."""
    topic = create_topic(acme, name="t", partitions=1, retention_bytes=GIB, actor=SYSTEM)
    PartitionAssignment.objects.filter(topic=topic).update(
        size_bytes=1000, remote_bytes=5000, remote_only_bytes=4200
    )
    assert quota_usage(acme)["stored_bytes"] == 5200


def test_a_member_reads_its_quota_with_usage_but_not_others(acme: Any, client_for: Any) -> None:
    create_topic(acme, name="t", partitions=3, actor=SYSTEM)
    client = client_for(roles={"acme": Role.VIEWER})
    body = client.get("/api/v1/quotas/acme").json()
    assert body["tenant"] == "acme"
    assert body["max_topics"] == 100
    assert (body["usage"]["topics"], body["usage"]["partitions"]) == (1, 3)
    assert [q["tenant"] for q in client.get("/api/v1/quotas").json()["results"]] == ["acme"]
    assert_error(client.get("/api/v1/quotas/globex"), 404, "not_found")


def test_only_platform_admins_change_quotas(acme: Any, client_for: Any, admin_client: Any) -> None:
    tenant_admin = client_for(roles={"acme": Role.TENANT_ADMIN})
    response = tenant_admin.patch("/api/v1/quotas/acme", {"max_topics": 500}, format="json")
    assert_error(response, 403, "permission_denied")
    assert_error(tenant_admin.patch("/api/v1/quotas/globex", {"max_topics": 5}, format="json"), 404)
    response = admin_client.patch("/api/v1/quotas/acme", {"max_topics": 500}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["max_topics"] == 500
    event = AuditEvent.objects.get(action="quota.update")
    assert (event.before["max_topics"], event.after["max_topics"], event.tenant_slug) == (
        100,
        500,
        "acme",
    )


def test_a_limit_below_usage_is_a_409_naming_the_quota(acme: Any, admin_client: Any) -> None:
    create_topic(acme, name="t", partitions=3, actor=SYSTEM)
    response = admin_client.patch("/api/v1/quotas/acme", {"max_partitions": 2}, format="json")
    error = assert_error(response, 409, "conflict")
    assert (error["details"]["quota"], error["details"]["current"]) == ("max_partitions", 3)
    assert Quota.objects.get(tenant=acme).max_partitions == 1000


def test_a_negative_limit_is_a_400(acme: Any, admin_client: Any) -> None:
    response = admin_client.patch("/api/v1/quotas/acme", {"max_lanes": -1}, format="json")
    assert "max_lanes" in assert_error(response, 400, "invalid")["details"]


@pytest.mark.django_db
def test_every_new_tenant_gets_the_default_quota_once(settings: Any) -> None:
    """The quotas app gives the quota, however the tenant row is written; saving the
    tenant again changes nothing."""
    tenant = Tenant.objects.create(slug="bare", name="Bare")

    quota = Quota.objects.get(tenant=tenant)
    assert quota.max_topics == settings.DEFAULT_QUOTA["max_topics"]
    tenant.name = "Renamed"
    tenant.save()
    assert Quota.objects.filter(tenant=tenant).count() == 1

"""Timer logs as desired state (no broker): made on a broker's demand for a tenant with a
topic on the cluster, once; hidden from the tenant's topics and topic quotas; what they
hold counts against its storage quota."""

from __future__ import annotations

from typing import Any

from controlplane.core.actors import Actor
from controlplane.delays import services
from controlplane.quotas.models import Quota
from controlplane.quotas.services import quota_usage as usage_of
from controlplane.quotas.services import tenant_quotas
from controlplane.topics.models import PartitionAssignment, Topic
from controlplane.topics.services import create_topic
from tests.controlplane.api_base import make_cluster
from tests.support.controlplane import make_tenant

SYSTEM = Actor.system("tests")


def test_a_timer_log_is_made_once_for_a_tenant_with_topics_there(db: None) -> None:
    east, other = make_cluster("east"), make_cluster("far", "c2")
    acme = make_tenant("acme", region=east.region)
    create_topic(acme, name="orders", partitions=2, actor=SYSTEM)
    assert services.ensure_timer_log(other, "acme", actor=SYSTEM) is None  # no topic there
    assert services.ensure_timer_log(east, "nobody", actor=SYSTEM) is None
    made = services.ensure_timer_log(east, "acme", actor=SYSTEM)
    assert made is not None
    assert (made.full_name, made.name, made.partitions) == ("__delay.acme", "__delay", 3)
    assert (made.retention_ms, made.retention_bytes) == (-1, -1)
    assert made.assignments.count() == 3  # placed as any topic
    assert services.ensure_timer_log(east, "acme", actor=SYSTEM) == made
    assert Topic.objects.filter(name="__delay").count() == 1


def test_a_timer_log_is_hidden_from_lists_and_counted_for_storage_only(
    db: None, client_for: Any
) -> None:
    cluster = make_cluster()
    acme = make_tenant("acme", region=cluster.region)
    create_topic(acme, name="orders", partitions=2, actor=SYSTEM)
    before = usage_of(acme)
    timer = services.ensure_timer_log(cluster, "acme", actor=SYSTEM)
    assert timer is not None
    after = usage_of(acme)
    assert (after["topics"], after["partitions"]) == (before["topics"], before["partitions"])
    names = [t["full_name"] for t in client_for(roles={"acme": "viewer"}).get(
        "/api/v1/topics").json()["results"]]  # fmt: skip
    assert names == ["acme.orders"]
    PartitionAssignment.objects.filter(topic=timer).update(size_bytes=4000)
    assert usage_of(acme)["stored_bytes"] == 3 * 4000
    Quota.objects.filter(tenant=acme).update(max_storage_bytes=10_000)
    (quota,) = [q for q in tenant_quotas(cluster) if q.tenant == "acme"]
    assert quota.storage_exceeded  # delayed records count: 12,000 > 10,000

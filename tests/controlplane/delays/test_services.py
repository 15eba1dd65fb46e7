"""Timer logs as desired state (no broker): made on a broker's demand for a tenant with a
topic on the cluster, once; hidden from the tenant's topics and topic quotas; what they
hold counts against its storage quota."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.core.actors import Actor
from controlplane.core.errors import InvalidRequest
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


def test_a_listing_cursor_names_the_cluster_of_its_timer_log() -> None:
    """A tenant's timer logs on two clusters both have a partition 0: the cursor after
    cluster 1's record at (due 100, partition 0, offset 5) resumes cluster 1's partition 0
    after offset 5, lists cluster 2's partition 0 from due 100 on, and skips what is due
    at 100 in partitions ordered before it."""
    cursor = services.Cursor.parse(str(services.Cursor(100, 1, 0, 5)))
    assert cursor == services.Cursor(100, 1, 0, 5)
    assert services._after(cursor, 1, 0) == {"after_deliver_at_ms": 100, "after_offset": 5}
    assert services._after(cursor, 2, 0) == {"after_deliver_at_ms": 100, "after_offset": -1}
    assert services._after(cursor, 1, 1)["after_offset"] == -1
    assert services._after(cursor, 0, 3)["after_offset"] == 2**62
    assert sorted([services.Cursor(100, 2, 0, 1), cursor, services.Cursor(99, 3, 0, 9)]) == [
        services.Cursor(99, 3, 0, 9),
        cursor,
        services.Cursor(100, 2, 0, 1),
    ]
    for bad in ("100.0.5", "a.1.0.5", "1.2.3.4.5"):
        with pytest.raises(InvalidRequest):
            services.Cursor.parse(bad)

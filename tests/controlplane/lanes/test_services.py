"""The lanes services on real Postgres: lane topics on demand, what they count against,
how they follow and leave with their trunk, liveness, traffic, the declarations pushed
to the brokers and the idle GC."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from controlplane.core.actors import Actor
from controlplane.core.errors import Conflict, InvalidRequest, QuotaExceeded
from controlplane.core.models import AuditEvent
from controlplane.lanes import services
from controlplane.lanes.models import Lane, LaneTopic
from controlplane.quotas.models import Quota
from controlplane.quotas.services import quota_usage, set_quota
from controlplane.tenants.models import Tenant
from controlplane.topics import reconcile
from controlplane.topics.locks import TopicBusy
from controlplane.topics.models import Topic
from controlplane.topics.services import create_topic, delete_topic, update_topic
from dataplane._gen.meridian.v1 import admin_pb2
from tests.controlplane.api_base import make_cluster
from tests.support.controlplane import make_tenant

SYSTEM = Actor.system("tests")
GIB = 2**30


@pytest.fixture
def acme(db: None) -> Tenant:
    make_cluster("local")
    return make_tenant("acme")


@pytest.fixture
def orders(acme: Tenant) -> Topic:
    topic: Topic = create_topic(
        acme, name="orders", partitions=3, retention_bytes=GIB, replication_factor=2, actor=SYSTEM
    )
    return topic


def _lane(tenant: Tenant, name: str = "ppe", **kwargs: Any) -> Lane:
    return services.create_lane(tenant, name=name, actor=SYSTEM, **kwargs)


# -- lane topics on demand ------------------------------------------------------------------
def test_a_demand_creates_the_lane_topic_like_its_trunk_once(orders: Topic) -> None:
    _lane(orders.tenant)
    topic = services.ensure_lane_topic("acme", "acme.orders~ppe", actor=SYSTEM)
    assert topic is not None
    assert (topic.full_name, topic.name, topic.lane_name) == (
        "acme.orders~ppe",
        "orders~ppe",
        "ppe",
    )
    assert (topic.trunk_id, topic.cluster_id, topic.status) == (
        orders.pk,
        orders.cluster_id,
        "pending",
    )
    assert topic.partitions == 3  # the trunk's count
    for field in ("retention_ms", "retention_bytes", "durability", "replication_factor"):
        assert getattr(topic, field) == getattr(orders, field), field
    assert topic.assignments.count() == 3  # placed: the reconciler can create it
    assert LaneTopic.objects.get(topic=topic).lane.name == "ppe"
    assert AuditEvent.objects.filter(action="topic.create", object_id=str(topic.pk)).exists()

    again = services.ensure_lane_topic("acme", "acme.orders~ppe", actor=SYSTEM)
    assert again is not None
    assert again.pk == topic.pk
    assert Topic.objects.filter(trunk=orders).count() == 1


def test_a_lane_with_partitions_gives_its_lane_topics_that_count(orders: Topic) -> None:
    _lane(orders.tenant, partitions=1)
    topic = services.ensure_lane_topic("acme", "acme.orders~ppe", actor=SYSTEM)
    assert topic is not None
    assert topic.partitions == 1


def test_a_lane_topic_is_never_wider_than_its_trunk(orders: Topic) -> None:
    _lane(orders.tenant, partitions=3)  # orders has 3
    small = create_topic(orders.tenant, name="small", partitions=1, actor=SYSTEM)
    topic = services.ensure_lane_topic("acme", "acme.small~ppe", actor=SYSTEM)
    assert topic is not None
    assert (topic.trunk_id, topic.partitions) == (small.pk, 1)


def test_partitions_above_a_covered_trunks_count_are_refused(orders: Topic) -> None:
    create_topic(orders.tenant, name="payments", partitions=1, actor=SYSTEM)
    for kwargs in (
        {"partitions": 4},  # all topics: orders has 3
        {"partitions": 2},  # all topics: payments has 1
        {"partitions": 4, "all_topics": False, "topics": ["orders"]},
    ):
        with pytest.raises(InvalidRequest) as refused:
            _lane(orders.tenant, **kwargs)
        assert "partitions" in refused.value.details, kwargs
    assert not Lane.objects.exists()
    lane = _lane(orders.tenant, partitions=3, all_topics=False, topics=["orders"])
    with pytest.raises(InvalidRequest) as refused:
        services.update_lane(lane, actor=SYSTEM, partitions=1024)
    assert "partitions" in refused.value.details
    with pytest.raises(InvalidRequest) as refused:  # payments is narrower than 3
        services.update_lane(lane, actor=SYSTEM, topics=["orders", "payments"])
    assert "partitions" in refused.value.details
    lane.refresh_from_db()
    assert lane.partitions == 3
    assert services.update_lane(lane, actor=SYSTEM, partitions=1).partitions == 1


@pytest.mark.parametrize(
    ("tenant_slug", "name"),
    [
        ("acme", "acme.orders~qa-team"),  # lane not declared
        ("acme", "acme.missing~ppe"),  # no such trunk
        ("acme", "acme.orders"),  # not a lane topic
        ("acme", "acme.orders~P"),  # not a lane name
        ("globex", "acme.orders~ppe"),  # another tenant's topic
        ("nobody", "nobody.orders~ppe"),  # no such tenant
    ],
)
def test_a_demand_the_lanes_do_not_allow_creates_nothing(
    orders: Topic, tenant_slug: str, name: str
) -> None:
    _lane(orders.tenant)
    make_tenant("globex")
    _lane(Tenant.objects.get(slug="globex"))
    assert services.ensure_lane_topic(tenant_slug, name, actor=SYSTEM) is None
    assert not Topic.objects.filter(trunk__isnull=False).exists()


def test_a_lane_of_some_topics_covers_only_those(orders: Topic) -> None:
    create_topic(orders.tenant, name="payments", partitions=1, actor=SYSTEM)
    _lane(orders.tenant, all_topics=False, topics=["payments"])
    assert services.ensure_lane_topic("acme", "acme.orders~ppe", actor=SYSTEM) is None
    assert services.ensure_lane_topic("acme", "acme.payments~ppe", actor=SYSTEM) is not None


def test_a_trunk_being_deleted_gets_no_lane_topic(orders: Topic) -> None:
    _lane(orders.tenant)
    delete_topic(orders, actor=SYSTEM)
    assert services.ensure_lane_topic("acme", "acme.orders~ppe", actor=SYSTEM) is None


# -- quotas ---------------------------------------------------------------------------------
def test_lane_topics_count_for_storage_but_not_against_max_topics(orders: Topic) -> None:
    Quota.objects.filter(tenant=orders.tenant).update(max_topics=1, max_partitions=3)
    _lane(orders.tenant)
    _lane(orders.tenant, name="boe-alice")
    assert services.ensure_lane_topic("acme", "acme.orders~ppe", actor=SYSTEM) is not None
    assert services.ensure_lane_topic("acme", "acme.orders~boe-alice", actor=SYSTEM) is not None
    usage = quota_usage(orders.tenant)
    assert (usage["topics"], usage["partitions"], usage["lanes"]) == (1, 3, 2)
    assert usage["storage_bytes"] == 3 * (3 * GIB)
    with pytest.raises(QuotaExceeded):  # the trunk alone fills max_topics
        create_topic(orders.tenant, name="more", partitions=1, actor=SYSTEM)


def test_max_lanes_is_enforced_and_cannot_go_below_use(acme: Tenant) -> None:
    Quota.objects.filter(tenant=acme).update(max_lanes=2)
    _lane(acme, name="one")
    _lane(acme, name="two")
    with pytest.raises(QuotaExceeded) as refused:
        _lane(acme, name="three")
    assert refused.value.quota == "max_lanes"
    with pytest.raises(Conflict):
        set_quota(acme, actor=SYSTEM, max_lanes=1)


# -- names ------------------------------------------------------------------------------------
def test_a_trunk_topic_name_with_a_tilde_is_refused(acme: Tenant) -> None:
    with pytest.raises(InvalidRequest) as refused:
        create_topic(acme, name="orders~ppe", partitions=1, actor=SYSTEM)
    assert "name" in refused.value.details
    assert not Topic.objects.exists()


def test_lane_values_are_checked(orders: Topic) -> None:
    for bad in (
        {"orphan_policy": "drop"},
        {"ttl_s": 0},
        {"partitions": 0},
        {"all_topics": False},  # and no topics
        {"topics": ["acme.orders"]},  # with all_topics
    ):
        with pytest.raises(InvalidRequest):
            _lane(orders.tenant, **bad)
    assert not Lane.objects.exists()
    lane = _lane(orders.tenant)
    with pytest.raises(InvalidRequest):
        services.update_lane(lane, actor=SYSTEM, name="other")


# -- following and leaving with the trunk ---------------------------------------------------
def test_a_lane_topic_follows_its_trunks_config_and_cannot_be_changed_alone(
    orders: Topic,
) -> None:
    _lane(orders.tenant)
    topic = services.ensure_lane_topic("acme", "acme.orders~ppe", actor=SYSTEM)
    assert topic is not None
    update_topic(orders, actor=SYSTEM, retention_ms=3_600_000)
    topic.refresh_from_db()
    assert topic.retention_ms == 3_600_000
    assert topic.generation == 2
    with pytest.raises(Conflict):
        update_topic(topic, actor=SYSTEM, retention_ms=7_200_000)


def test_deleting_a_trunk_deletes_its_lane_topics_first(orders: Topic) -> None:
    _lane(orders.tenant)
    _lane(orders.tenant, name="boe-alice")
    lane_topics = [
        services.ensure_lane_topic("acme", f"acme.orders~{lane}", actor=SYSTEM)
        for lane in ("ppe", "boe-alice")
    ]
    delete_topic(orders, actor=SYSTEM)
    statuses = Topic.objects.filter(trunk=orders).values_list("status", flat=True)
    assert sorted(statuses) == ["deleting", "deleting"]
    deletes = AuditEvent.objects.filter(action="topic.delete").values_list("object_id", flat=True)
    assert {str(t.pk) for t in lane_topics if t} <= set(deletes)
    # The trunk's row waits for its lane topics' rows (the reconciler retries).
    with pytest.raises(TopicBusy):
        reconcile._delete_row(Topic.objects.get(pk=orders.pk), orders.generation + 1)
    assert Topic.objects.filter(pk=orders.pk).exists()


def test_deleting_a_lane_deletes_its_lane_topics(orders: Topic) -> None:
    lane = _lane(orders.tenant)
    topic = services.ensure_lane_topic("acme", "acme.orders~ppe", actor=SYSTEM)
    assert topic is not None
    services.delete_lane(lane, actor=SYSTEM)
    assert Topic.objects.get(pk=topic.pk).status == "deleting"
    assert Topic.objects.get(pk=orders.pk).status == "pending"  # the trunk is untouched
    assert not Lane.objects.exists()
    assert services.ensure_lane_topic("acme", "acme.orders~ppe", actor=SYSTEM) is None


# -- what the brokers report ------------------------------------------------------------------
def _consumers(group: str, *topics: str) -> admin_pb2.LaneConsumers:
    return admin_pb2.LaneConsumers(group_id=group, topics=list(topics))


def test_a_lane_is_live_for_a_topic_its_groups_subscribe_to(orders: Topic) -> None:
    create_topic(orders.tenant, name="payments", partitions=1, actor=SYSTEM)
    lane = _lane(orders.tenant)
    other = _lane(orders.tenant, name="boe-alice")
    reports = [
        _consumers("acme.billing~ppe", "acme.orders~ppe", "acme.orders"),
        _consumers("acme.audit~ppe", "acme.payments~boe-alice"),  # another lane's topic
        _consumers("globex.x~boe-alice", "acme.payments~boe-alice"),  # another tenant's group
        _consumers("acme.trunk", "acme.payments~boe-alice"),  # a trunk group
    ]
    assert services.record_lane_consumers(reports) is True
    lane.refresh_from_db()
    other.refresh_from_db()
    assert lane.live_topics == ["acme.orders"]
    assert lane.last_live_at is not None
    assert (other.live_topics, other.last_live_at) == ([], None)
    assert services.record_lane_consumers(reports) is False  # nothing changed
    later = timezone.now() + timedelta(seconds=settings.LANE_ORPHAN_AFTER_S + 1)
    assert services.record_lane_consumers([], now=later) is True
    lane.refresh_from_db()
    assert lane.live_topics == []
    assert lane.last_live_at is not None  # still known: deleting within the grace is 409


def test_a_lane_stays_live_through_a_consumers_restart(orders: Topic) -> None:
    lane = _lane(orders.tenant)
    reports = [_consumers("acme.billing~ppe", "acme.orders~ppe")]
    start = timezone.now()
    assert services.record_lane_consumers(reports, now=start) is True
    hold = timedelta(seconds=settings.LANE_ORPHAN_AFTER_S)
    # Not reported for less than the hold-down: still live.
    assert services.record_lane_consumers([], now=start + hold / 2) is False
    # Back before the hold-down ends: the hold-down starts again from then.
    assert services.record_lane_consumers(reports, now=start + hold * 0.9) is False
    assert services.record_lane_consumers([], now=start + hold * 1.5) is False
    lane.refresh_from_db()
    assert lane.live_topics == ["acme.orders"]
    assert services.record_lane_consumers([], now=start + hold * 2) is True
    lane.refresh_from_db()
    assert (lane.live_topics, lane.live_seen) == ([], {})


def test_a_silent_broker_can_make_a_lane_live_but_not_end_it(orders: Topic) -> None:
    lane = _lane(orders.tenant)
    reports = [_consumers("acme.billing~ppe", "acme.orders~ppe")]
    start = timezone.now()
    assert services.record_lane_consumers(reports, complete=False, now=start) is True
    lane.refresh_from_db()
    assert lane.live_topics == ["acme.orders"]
    much_later = start + timedelta(seconds=settings.LANE_ORPHAN_AFTER_S * 10)
    assert services.record_lane_consumers([], complete=False, now=much_later) is False
    lane.refresh_from_db()
    assert lane.live_topics == ["acme.orders"]
    assert services.record_lane_consumers([], complete=True, now=much_later) is True
    lane.refresh_from_db()
    assert lane.live_topics == []


def test_liveness_is_written_in_steps_not_every_report(orders: Topic) -> None:
    lane = _lane(orders.tenant)
    reports = [_consumers("acme.billing~ppe", "acme.orders~ppe")]
    start = timezone.now()
    services.record_lane_consumers(reports, now=start)
    with CaptureQueriesContext(connection) as queries:
        services.record_lane_consumers(reports, now=start + timedelta(milliseconds=500))
    assert not [q for q in queries if q["sql"].startswith("UPDATE")]
    lane.refresh_from_db()
    assert lane.last_live_at == start
    step = services.touch_step(settings.LANE_LIVE_GRACE_S)
    services.record_lane_consumers(reports, now=start + step * 2)
    lane.refresh_from_db()
    assert lane.last_live_at == start + step * 2


def test_a_clusters_reports_decide_only_about_its_topics(orders: Topic) -> None:
    lane = _lane(orders.tenant)
    Lane.objects.filter(pk=lane.pk).update(live_topics=["acme.elsewhere", "acme.orders"])
    services.record_lane_consumers([], cluster=orders.cluster)
    lane.refresh_from_db()
    assert lane.live_topics == ["acme.elsewhere"]


def test_activity_moves_traffic_forward_only(orders: Topic) -> None:
    lane = _lane(orders.tenant)
    topic = services.ensure_lane_topic("acme", "acme.orders~ppe", actor=SYSTEM)
    now_ms = int(timezone.now().timestamp() * 1000)
    report = admin_pb2.LaneTopicActivity(
        topic="acme.orders~ppe", last_append_ms=now_ms + 60_000, last_fetch_ms=0
    )
    assert services.record_lane_activity([report]) == 1
    link = LaneTopic.objects.get(topic=topic)
    assert link.last_traffic_at is not None
    assert int(link.last_traffic_at.timestamp() * 1000) == now_ms + 60_000
    older = admin_pb2.LaneTopicActivity(topic="acme.orders~ppe", last_fetch_ms=now_ms)
    assert services.record_lane_activity([older]) == 0
    lane.refresh_from_db()
    assert lane.last_traffic_at == link.last_traffic_at


def test_activity_is_written_in_steps_in_few_queries(orders: Topic) -> None:
    lane = _lane(orders.tenant, ttl_s=600)  # a step of 30 s
    services.ensure_lane_topic("acme", "acme.orders~ppe", actor=SYSTEM)
    _lane(orders.tenant, name="boe-alice", ttl_s=600)
    services.ensure_lane_topic("acme", "acme.orders~boe-alice", actor=SYSTEM)
    now_ms = int(timezone.now().timestamp() * 1000) + 60_000

    def report(ms: int) -> list[admin_pb2.LaneTopicActivity]:
        return [
            admin_pb2.LaneTopicActivity(topic=f"acme.orders~{name}", last_append_ms=ms)
            for name in ("ppe", "boe-alice")
        ]

    with CaptureQueriesContext(connection) as queries:
        assert services.record_lane_activity(report(now_ms)) == 2
    assert len([q for q in queries if q["sql"].startswith("UPDATE")]) == 2  # topics, lanes
    with CaptureQueriesContext(connection) as queries:
        assert services.record_lane_activity(report(now_ms + 10_000)) == 0  # within the step
    assert not [q for q in queries if q["sql"].startswith("UPDATE")]
    assert services.record_lane_activity(report(now_ms + 31_000)) == 2
    lane.refresh_from_db()
    assert lane.last_traffic_at is not None
    assert int(lane.last_traffic_at.timestamp() * 1000) == now_ms + 31_000


def test_declarations_list_every_live_tenants_lanes(orders: Topic) -> None:
    _lane(orders.tenant, name="ppe", consume_trunk=True, orphan_policy="hold", partitions=2)
    _lane(orders.tenant, name="boe-alice", all_topics=False, topics=[orders])
    Lane.objects.filter(name="ppe").update(live_topics=["acme.orders"])
    gone = make_tenant("globex")
    _lane(gone, name="qa-team")
    Tenant.objects.filter(pk=gone.pk).update(status="deleting")
    assert services.lane_declarations() == [
        admin_pb2.LaneDeclaration(
            tenant="acme", name="boe-alice", all_topics=False, topics=["acme.orders"],
            orphan_policy="trunk",
        ),
        admin_pb2.LaneDeclaration(
            tenant="acme", name="ppe", all_topics=True, consume_trunk=True,
            orphan_policy="hold", live_topics=["acme.orders"], partitions=2,
        ),
    ]  # fmt: skip


# -- the GC -----------------------------------------------------------------------------------
def test_the_gc_deletes_idle_lane_topics_then_idle_lanes(orders: Topic) -> None:
    busy = _lane(orders.tenant, name="busy", ttl_s=60)
    idle = _lane(orders.tenant, name="idle", ttl_s=60)
    busy_topic = services.ensure_lane_topic("acme", "acme.orders~busy", actor=SYSTEM)
    idle_topic = services.ensure_lane_topic("acme", "acme.orders~idle", actor=SYSTEM)
    later = timezone.now() + timedelta(seconds=61)
    recent_ms = int((later - timedelta(seconds=5)).timestamp() * 1000)
    services.record_lane_activity(
        [admin_pb2.LaneTopicActivity(topic="acme.orders~busy", last_fetch_ms=recent_ms)]
    )
    collected = services.collect_idle_lanes(later, actor=SYSTEM)
    assert collected.lane_topics == ["acme.orders~idle"]
    assert collected.lanes == ["acme/idle"]
    assert idle_topic is not None
    assert busy_topic is not None
    assert Topic.objects.get(pk=idle_topic.pk).status == "deleting"
    assert Topic.objects.get(pk=busy_topic.pk).status == "pending"
    assert list(Lane.objects.values_list("pk", flat=True)) == [busy.pk]
    assert not Lane.objects.filter(pk=idle.pk).exists()
    assert AuditEvent.objects.filter(action="lane.delete", actor="system:tests").count() == 1
    assert services.collect_idle_lanes(later, actor=SYSTEM).lanes == []


def test_the_gc_keeps_a_lane_with_live_consumers(orders: Topic) -> None:
    lane = _lane(orders.tenant, ttl_s=1)
    Lane.objects.filter(pk=lane.pk).update(live_topics=["acme.orders"])
    later = timezone.now() + timedelta(seconds=10)
    assert services.collect_idle_lanes(later, actor=SYSTEM).lanes == []
    assert Lane.objects.filter(pk=lane.pk).exists()

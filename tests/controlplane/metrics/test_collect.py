"""Collection against three real broker processes, through the gateway: a topic taking
produce traffic shows a positive produce rate; a group committing offsets shows its
consume rate and lag, in records and in seconds (the age of its oldest unconsumed
record, from the partitions' leaders)."""

from __future__ import annotations

import time

import pytest

from controlplane.core.actors import Actor
from controlplane.metrics import collect, services
from controlplane.metrics.models import Block, Collection, Series
from controlplane.metrics.tiers import FINE
from controlplane.regions.models import Broker
from controlplane.topics import services as topics
from controlplane.topics.reconcile import reconcile_topic
from dataplane._gen.meridian.v1 import admin_pb2, group_pb2
from dataplane.client import Consumer, Producer
from dataplane.client.types import TopicPartition
from tests.support.brokers import BrokerProcess
from tests.support.controlplane import make_tenant, register_static_cluster

pytestmark = pytest.mark.django_db

OPERATOR = Actor.system("tests")


@pytest.fixture
def orders(cluster: list[BrokerProcess]) -> str:
    """``acme.orders`` (3 partitions), placed and created on the brokers."""
    cluster_row = register_static_cluster(cluster)
    tenant = make_tenant("acme", region=cluster_row.region)
    topic = topics.create_topic(
        tenant, name="orders", partitions=3, replication_factor=1, actor=OPERATOR
    )
    reconcile_topic(topic.pk)
    return topic.full_name


def _produce(cluster: list[BrokerProcess], topic: str, count: int) -> None:
    with Producer([b.address for b in cluster]) as producer:
        for i in range(count):
            producer.send(topic, b"x" * 100, partition=i % 3)
        producer.flush(timeout=30)


def _latest(series: Series, measure: str) -> float | None:
    run = Collection.objects.order_by("-at").first()
    assert run is not None
    block = Block.objects.filter(
        series=series, resolution_s=FINE.resolution_s, start=FINE.block_start(run.at)
    ).first()
    return getattr(block, measure)[FINE.slot(run.at) - 1] if block else None


def test_a_topic_taking_produce_traffic_shows_a_positive_rate(
    cluster: list[BrokerProcess], orders: str
) -> None:
    _produce(cluster, orders, 30)
    first = services.collect_metrics()
    assert first is not None
    assert first.brokers_answered == 3
    _produce(cluster, orders, 60)

    second = services.collect_metrics()

    assert second is not None
    assert second.points_written >= 1
    series = Series.objects.get(kind="topic", topic=orders)
    records = _latest(series, "records_per_s")
    assert records is not None
    assert records > 0
    size = _latest(series, "bytes_per_s")
    assert size is not None
    assert size > 60 * 100 / 3600


def test_a_group_committing_offsets_shows_consume_rate_and_lag(
    cluster: list[BrokerProcess], orders: str
) -> None:
    _produce(cluster, orders, 90)  # 30 per partition
    partitions = [TopicPartition(orders, p) for p in range(3)]
    with Consumer([b.address for b in cluster], group_id="acme.billing") as consumer:
        consumer.commit({tp: 5 for tp in partitions})
        services.collect_metrics()
        consumer.commit({tp: 10 for tp in partitions})
        services.collect_metrics()

    series = Series.objects.get(kind="group", group="acme.billing", topic=orders)
    assert series.tenant.slug == "acme"
    assert _latest(series, "lag_records") == 3 * (30 - 10)
    consumed = _latest(series, "records_per_s")
    assert consumed is not None
    assert consumed > 0
    lag_s = _latest(series, "lag_s")
    assert lag_s is not None
    assert lag_s > 0


def _lag_s(orders: str) -> float | None:
    observation = collect.observe(Broker.objects.exclude(port=None), {orders: 3})
    return observation.groups[("acme.billing", orders)].lag_s


def test_a_group_behind_has_a_growing_lag_in_seconds_and_zero_once_caught_up(
    cluster: list[BrokerProcess], orders: str
) -> None:
    _produce(cluster, orders, 90)  # 30 per partition
    partitions = [TopicPartition(orders, p) for p in range(3)]
    with Consumer([b.address for b in cluster], group_id="acme.billing") as consumer:
        consumer.commit({tp: 5 for tp in partitions})
        before = _lag_s(orders)
        time.sleep(1.1)
        after = _lag_s(orders)
        assert before is not None
        assert after is not None
        assert 0 < before < after
        services.collect_metrics()

        consumer.commit({tp: 30 for tp in partitions})
        assert _lag_s(orders) == 0
        services.collect_metrics()

    series = Series.objects.get(kind="group", group="acme.billing", topic=orders)
    assert _latest(series, "lag_s") == 0


def test_a_topic_is_measured_on_its_origins_cluster_only(
    cluster: list[BrokerProcess], orders: str
) -> None:
    """A mirror copy of the same name in another region's cluster is not summed into the
    origin's figures: partitions are read from the cluster the name's origin is on."""
    _produce(cluster, orders, 30)
    live = Broker.objects.exclude(port=None)
    home = live.first()
    assert home is not None
    measured = collect.observe(live, {orders: 3}, {orders: home.cluster_id})
    assert measured.topics[orders].end_offset == 30
    elsewhere = collect.observe(live, {orders: 3}, {orders: home.cluster_id + 1})
    assert orders not in elsewhere.topics


def test_a_groups_commits_count_in_its_topics_origin_cluster_only() -> None:
    """A group of the same id committing on a mirror copy in another region (cluster 2)
    neither replaces nor adds to its figures on the origin (cluster 1), whichever
    coordinator answers first; two coordinators of one cluster count once."""
    leaders = collect._Leaders()
    leaders.partitions[("acme.orders", 0)] = admin_pb2.PartitionState(
        topic="acme.orders", partition=0, high_watermark=30
    )

    def described(offset: int) -> group_pb2.GroupDescription:
        committed = group_pb2.OffsetFetchResult(topic="acme.orders", partition=0, offset=offset)
        return group_pb2.GroupDescription(group_id="acme.billing", offsets=[committed])

    descriptions = [(2, described(5)), (1, described(20)), (1, described(7))]
    counters = collect._group_counters(descriptions, leaders, {"acme.orders": 1})
    assert counters == {("acme.billing", "acme.orders"): collect.GroupCounters({0: 20}, 10)}

"""The admin client on a three-broker cluster: placement, describe, alter, delete, groups;
and producers and consumers spanning the cluster's brokers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dataplane.client import Admin, Consumer, MeridianError, Producer, TopicPartition
from dataplane.client.admin import place
from dataplane.errors import ErrorCode
from tests.support.brokers import BrokerProcess, start_cluster, stop_all, wait_for_cluster

from .support import read_all


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    started = start_cluster(tmp_path_factory.mktemp("cluster"), 3)
    try:
        wait_for_cluster(started)
        yield started
    finally:
        stop_all(started)


@pytest.fixture(scope="module")
def admin(brokers: list[BrokerProcess]) -> Iterator[Admin]:
    with Admin(brokers[0].address) as client:
        yield client


def test_placement_is_round_robin_from_the_name_hash() -> None:
    assert place("acme.orders", range(6), [3, 1, 2]) == {
        p: [1, 2, 3][(p + place("acme.orders", [0], [1, 2, 3])[0] - 1) % 3] for p in range(6)
    }
    starts = {place(f"t.{i}", [0], [1, 2, 3])[0] for i in range(30)}
    assert starts == {1, 2, 3}  # names spread their first partition over the brokers


def test_create_describe_alter_delete(admin: Admin, brokers: list[BrokerProcess]) -> None:
    placement = admin.create_topic("acme.orders", 6, {"retention_ms": 3_600_000})
    assert sorted(placement) == list(range(6))
    assert set(placement.values()) == {1, 2, 3}
    assert admin.create_topic("acme.orders", 6, {"retention_ms": 3_600_000}) == placement
    described = admin.describe_topic("acme.orders")
    assert [p.leader for p in described.partitions] == [placement[p] for p in range(6)]
    assert all(p.config["retention_ms"] == 3_600_000 for p in described.partitions)
    assert admin.list_topics()["acme.orders"] == 6
    admin.alter_topic_config("acme.orders", {"retention_ms": 60_000})
    assert {p.config["retention_ms"] for p in admin.describe_topic("acme.orders").partitions} == {
        60_000
    }
    admin.delete_topic("acme.orders")
    assert "acme.orders" not in admin.list_topics()
    with pytest.raises(MeridianError) as info:
        admin.describe_topic("acme.orders")
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_growing_a_topic_keeps_existing_partitions(admin: Admin) -> None:
    first = admin.create_topic("acme.grow", 2)
    grown = admin.create_topic("acme.grow", 5)
    assert {p: grown[p] for p in first} == first
    assert admin.list_topics()["acme.grow"] == 5


def test_bad_requests_are_typed(admin: Admin) -> None:
    for call, code in (
        (lambda: admin.create_topic("acme.x", 0), ErrorCode.INVALID_PARTITIONS),
        (lambda: admin.create_topic("acme.x", 1, {"colour": "red"}), ErrorCode.INVALID_CONFIG),
        (lambda: admin.create_topic("no-tenant", 1), ErrorCode.INVALID_TOPIC),
        (lambda: admin.create_topic("acme.x", 1, brokers=[9]), ErrorCode.BROKER_NOT_AVAILABLE),
        (lambda: admin.alter_topic_config("acme.none", {"retention_ms": 1}), 3),
    ):
        with pytest.raises(MeridianError) as info:
            call()
        assert info.value.code == code


def test_describe_cluster(admin: Admin) -> None:
    cluster = admin.describe_cluster()
    assert [b.id for b in cluster.brokers] == [1, 2, 3]
    assert all(b.reachable for b in cluster.brokers)
    assert cluster.cluster_id


def test_produce_and_consume_across_brokers_with_offsets_and_lag(
    admin: Admin, brokers: list[BrokerProcess]
) -> None:
    """Partitions on three leaders: the SDK routes each to its own; group lag adds up."""
    admin.create_topic("acme.spread", 3)
    with Producer(brokers[1].address) as producer:
        for i in range(90):
            producer.send("acme.spread", b"%d" % i, partition=i % 3, timestamp_ms=1000 + i)
    stored = read_all(brokers[2].address, "acme.spread", 3)
    assert {p: len(records) for p, records in stored.items()} == {0: 30, 1: 30, 2: 30}
    tps = [TopicPartition("acme.spread", p) for p in range(3)]
    offsets = admin.list_offsets({tp: "latest" for tp in tps})
    assert {tp: offset for tp, (offset, _) in offsets.items()} == dict.fromkeys(tps, 30)
    assert admin.list_offsets({tps[0]: 1030})[tps[0]][0] == 10
    assert admin.list_offsets({tps[0]: "earliest"})[tps[0]][0] == 0
    consumer = Consumer(brokers[0].address, group_id="lagging", enable_auto_commit=False)
    try:
        consumer.assign(tps)
        consumer.commit({tps[0]: 30, tps[1]: 10})
    finally:
        consumer.close()
    lag = admin.group_lag("lagging")
    assert {tp: (x.committed, x.end_offset, x.lag) for tp, x in lag.items()} == {
        tps[0]: (30, 30, 0),
        tps[1]: (10, 30, 20),
    }
    assert "lagging" in {g.group_id for g in admin.list_groups()}
    assert admin.delete_groups(["lagging"]) == {"lagging": None}


def test_group_lag_in_time_is_the_age_of_the_oldest_unconsumed_record(
    admin: Admin, brokers: list[BrokerProcess]
) -> None:
    """Each leader reads the record at the committed offset: its timestamp and age grow
    while the group stays behind, and are -1 / 0 once the group catches up."""
    admin.create_topic("acme.aging", 3)
    tps = [TopicPartition("acme.aging", p) for p in range(3)]
    with Producer(brokers[1].address) as producer:
        for i in range(30):
            producer.send("acme.aging", b"%d" % i, partition=i % 3, timestamp_ms=5000 + i)
    admin.alter_group_offsets("aging", {tps[0]: 10, tps[1]: 4, tps[2]: 0})
    first = admin.group_lag("aging")
    assert first[tps[0]].record_timestamp == -1
    assert first[tps[0]].lag_ms == 0
    assert first[tps[1]].record_timestamp == 5000 + 3 * 4 + 1
    assert first[tps[2]].record_timestamp == 5002
    older, newer = first[tps[2]].lag_ms, first[tps[1]].lag_ms
    assert older is not None
    assert newer is not None
    assert older > newer > 0
    with Producer(brokers[1].address) as producer:
        producer.send("acme.aging", b"now", partition=0)  # a fresh record, just behind
    behind = admin.group_lag("aging")[tps[0]]
    assert behind.lag == 1
    assert behind.lag_ms is not None
    assert behind.lag_ms < 60_000
    later = admin.group_lag("aging")[tps[0]]
    assert later.lag_ms is not None
    assert later.lag_ms >= behind.lag_ms
    admin.alter_group_offsets("aging", {tps[0]: 11, tps[1]: 10, tps[2]: 10})
    caught_up = admin.group_lag("aging")
    assert {tp: (x.lag, x.lag_ms, x.record_timestamp) for tp, x in caught_up.items()} == {
        tp: (0, 0, -1) for tp in tps
    }

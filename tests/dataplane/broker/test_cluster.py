"""Metadata across three broker processes: any broker describes the whole cluster."""

from __future__ import annotations

from dataplane.errors import ErrorCode
from tests.dataplane.broker.support import create, produce, stubs, values_batch, wait_for
from tests.support.brokers import metadata, start_cluster, stop_all, wait_for_cluster


def _leaders(response):
    return {
        (t.name, p.partition): p.leader_id
        for t in response.topics
        if not t.name.startswith("__")
        for p in t.partitions
    }


def test_metadata_from_any_broker_lists_every_brokers_partitions(cluster):
    for broker in cluster:
        with stubs(broker) as s:
            create(s, f"acme.on-{broker.broker_id}", partitions=2)
    wait_for_cluster(cluster)
    expected = {(f"acme.on-{b.broker_id}", p): b.broker_id for b in cluster for p in range(2)}
    for broker in cluster:
        response = metadata(broker)
        assert response.broker_id == broker.broker_id
        assert sorted((b.id, b.host, b.port) for b in response.brokers) == [
            (b.broker_id, "127.0.0.1", b.port) for b in cluster
        ]
        assert _leaders(response) == expected
        local = metadata(broker, local_only=True)
        assert set(_leaders(local).values()) == {broker.broker_id}


def test_offsets_partitions_are_spread_over_the_brokers_and_marked_internal(cluster):
    response = metadata(cluster[0], ["__consumer_offsets"])
    (topic,) = response.topics
    assert topic.internal
    assert topic.error == 0
    assert {p.partition: p.leader_id for p in topic.partitions} == {
        p: [1, 2, 3][p % 3] for p in range(16)
    }


def test_a_topic_created_elsewhere_is_found_when_named(cluster):
    with stubs(cluster[2]) as s:
        create(s, "acme.fresh")
        assert produce(s, "acme.fresh", 0, values_batch([b"x"])).error == 0
    (topic,) = metadata(cluster[0], ["acme.fresh"]).topics
    assert [(p.partition, p.leader_id) for p in topic.partitions] == [(0, 3)]
    (unknown,) = metadata(cluster[0], ["acme.nowhere"]).topics
    assert unknown.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_dead_brokers_partitions_leave_the_view_and_come_back(tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text("peer_expiry_ms = 1000\npeer_poll_interval_ms = 100\n")
    brokers = start_cluster(tmp_path, 3, extra_args=["--config", str(config)])
    try:
        with stubs(brokers[1]) as s:
            create(s, "acme.on-2")
        wait_for_cluster(brokers)
        brokers[1].kill()
        assert wait_for(lambda: _missing(brokers[0], "acme.on-2"), 30), "dropped from the view"
        assert 2 in {b.id for b in metadata(brokers[0]).brokers}, "membership is static"
        brokers[1].start()
        wait_for_cluster(brokers, ["acme.on-2"])
        (topic,) = metadata(brokers[0], ["acme.on-2"]).topics
        assert [(p.partition, p.leader_id) for p in topic.partitions] == [(0, 2)]
    finally:
        stop_all(brokers)


def _missing(broker, topic):
    return metadata(broker, [topic]).topics[0].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

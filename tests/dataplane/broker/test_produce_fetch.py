"""Produce and fetch through a real broker process, with raw gRPC stubs."""

from __future__ import annotations

from dataplane._gen.meridian.v1 import broker_pb2
from tests.dataplane.broker.support import (
    create,
    end_offset,
    fetch_records,
    produce,
    stubs,
    values_batch,
)


def test_produce_then_fetch_returns_the_records_at_their_offsets(broker):
    with stubs(broker) as s:
        create(s, "acme.orders")
        first = produce(s, "acme.orders", 0, values_batch([b"a", b"b", b"c"]))
        second = produce(s, "acme.orders", 0, values_batch([b"d"]))
        assert (first.error, first.base_offset, first.log_start_offset) == (0, 0, 0)
        assert (second.error, second.base_offset) == (0, 3)
        records = fetch_records(s, "acme.orders")
        assert [(r.offset, r.value) for r in records] == [
            (0, b"a"),
            (1, b"b"),
            (2, b"c"),
            (3, b"d"),
        ]
        assert end_offset(s, "acme.orders") == 4


def test_metadata_lists_this_broker_and_its_partitions(broker):
    with stubs(broker) as s:
        create(s, "acme.orders", partitions=2)
        response = s.broker.Metadata(broker_pb2.MetadataRequest(topics=["acme.orders"]))
        assert [(b.id, b.port) for b in response.brokers] == [(1, broker.port)]
        (topic,) = response.topics
        assert [(p.partition, p.leader_id, list(p.isr)) for p in topic.partitions] == [
            (0, 1, [1]),
            (1, 1, [1]),
        ]

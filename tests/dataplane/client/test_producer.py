"""The producer against a real broker: placement, codecs, headers, acks, callbacks, memory."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from kafka.partitioner.default import murmur2 as kafka_murmur2

from dataplane._gen.meridian.v1 import admin_pb2, admin_pb2_grpc
from dataplane.client import BufferFull, MeridianError, Producer, RecordMetadata
from dataplane.errors import ErrorCode
from tests.support.brokers import BrokerProcess

from .support import CODEC_NAMES, read_all

TopicMaker = Callable[..., str]


def producer(broker: BrokerProcess, **settings: Any) -> Producer:
    return Producer(broker.address, **{"linger_ms": 2, **settings})


def test_keyed_records_land_by_murmur2_in_order(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    name = topic(3)
    keys = [f"customer-{i % 17}".encode() for i in range(300)]
    with producer(shared_broker) as p:
        futures = [p.send(name, b"%d" % i, key=key) for i, key in enumerate(keys)]
        placed = [f.result(10) for f in futures]
    for key, metadata in zip(keys, placed, strict=True):
        assert metadata.partition == (kafka_murmur2(key) & 0x7FFFFFFF) % 3
    stored = read_all(shared_broker.address, name, 3)
    for partition, records in stored.items():
        sent = [b"%d" % i for i, m in enumerate(placed) if m.partition == partition]
        assert [r.value for r in records] == sent  # per-partition order kept
        assert [r.offset for r in records] == list(range(len(sent)))
        assert all(r.key is not None for r in records)


def test_keyless_records_all_arrive(shared_broker: BrokerProcess, topic: TopicMaker) -> None:
    name = topic(2)
    with producer(shared_broker, batch_bytes=2048) as p:
        for i in range(500):
            p.send(name, b"v%d" % i + b"x" * 50)
        p.flush()
    stored = read_all(shared_broker.address, name, 2)
    values = sorted(r.value for records in stored.values() for r in records)
    assert values == sorted(b"v%d" % i + b"x" * 50 for i in range(500))
    assert all(stored.values()), "full batches move the sticky partition"


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_every_codec_round_trips(
    shared_broker: BrokerProcess, topic: TopicMaker, codec: str
) -> None:
    name = topic()
    values = [(b"%05d" % i) * (i % 40) for i in range(200)]
    with producer(shared_broker, compression=codec) as p:
        for value in values:
            p.send(name, value, key=b"k")
    assert [r.value for r in read_all(shared_broker.address, name)[0]] == values


def test_headers_keys_timestamps_and_tombstones_round_trip(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    name = topic()
    with producer(shared_broker) as p:
        p.send(name, b"v", key=b"k", headers=[("x-team", b"ppe"), ("x-null", None)])
        p.send(name, None, key=b"gone", timestamp_ms=1_600_000_000_000)
        p.send(name, b"", headers={"x-trace-id": b"ab12"})
    first, tombstone, empty = read_all(shared_broker.address, name)[0]
    assert first.headers == (("x-team", b"ppe"), ("x-null", None))
    assert (first.key, first.value) == (b"k", b"v")
    assert (tombstone.key, tombstone.value, tombstone.timestamp) == (
        b"gone",
        None,
        1_600_000_000_000,
    )
    assert empty.value == b""
    assert empty.headers == (("x-trace-id", b"ab12"),)


@pytest.mark.parametrize("acks", [0, 1])
def test_acks(shared_broker: BrokerProcess, topic: TopicMaker, acks: int) -> None:
    name = topic()
    with producer(shared_broker, acks=acks) as p:
        metadata = [p.send(name, b"%d" % i).result(10) for i in range(5)]
    assert [m.offset for m in metadata] == ([-1] * 5 if acks == 0 else [0, 1, 2, 3, 4])
    assert len(read_all(shared_broker.address, name)[0]) == 5


def test_delivery_callbacks_run_once_per_record_in_order(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    name = topic()
    seen: list[tuple[MeridianError | None, RecordMetadata | None]] = []
    lock = threading.Lock()

    def on_delivery(error: MeridianError | None, metadata: RecordMetadata | None) -> None:
        with lock:
            seen.append((error, metadata))

    with producer(shared_broker, batch_bytes=1024) as p:
        futures = [p.send(name, b"x" * 100, on_delivery=on_delivery) for _ in range(50)]
        done: list[Any] = []
        futures[0].add_done_callback(done.append)
        p.flush()
        assert all(f.done() for f in futures)
    assert [m.offset for e, m in seen if m is not None] == list(range(50))
    assert all(e is None for e, _ in seen)
    assert done == [futures[0]]
    assert futures[49].result().offset == 49


def test_a_record_too_large_for_the_topic_fails_its_future(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    """The broker refuses a batch over max_message_bytes: a typed, non-retriable error."""
    name = topic(max_message_bytes=1024)
    with producer(shared_broker) as p:
        big = p.send(name, b"x" * 4000)
        with pytest.raises(MeridianError) as info:
            big.result(10)
        assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
        assert p.send(name, b"small").result(10).offset == 0


def test_without_close_gaps_nothing_lands_after_a_record_that_failed(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    """close_gaps=False: the partition stops at a batch that failed for good; the batches
    after it, queued with it or sent later, fail too and none is stored."""
    name = topic(max_message_bytes=1024)
    with producer(shared_broker, close_gaps=False, linger_ms=20) as p:
        first = p.send_batch(name, [(None, b"a%d" % i) for i in range(5)], partition=0)
        assert first.exception(10) is None
        futures = [p.send(name, b"b%d" % i, partition=0) for i in range(3)]
        futures.append(p.send(name, b"x" * 4000, partition=0))
        futures += [p.send(name, b"c%d" % i, partition=0) for i in range(20)]
        errors = [f.exception(10) for f in futures]
        later = p.send(name, b"after", partition=0)
        assert isinstance(later.exception(10), MeridianError)
    assert all(isinstance(e, MeridianError) for e in errors[3:])
    assert {e.code for e in errors[3:] if e is not None} == {ErrorCode.MESSAGE_TOO_LARGE}
    stored_b = [b"b%d" % i for i, e in enumerate(errors[:3]) if e is None]
    assert stored_b == [b"b%d" % i for i in range(len(stored_b))]  # a prefix
    records = read_all(shared_broker.address, name)[0]
    assert [r.value for r in records] == [b"a%d" % i for i in range(5)] + stored_b


def test_a_record_over_max_request_bytes_is_refused_at_send(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    name = topic()
    with producer(shared_broker, max_request_bytes=10_000) as p:
        with pytest.raises(MeridianError) as info:
            p.send(name, b"x" * 20_000)
        assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE


def test_an_unknown_topic_fails_after_max_block(shared_broker: BrokerProcess) -> None:
    with producer(shared_broker, max_block_ms=300) as p:
        with pytest.raises(MeridianError, match="max_block_ms") as info:
            p.send("test.no-such-topic", b"v")
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(MeridianError) as bad:
            p.send("test.no-such-topic", b"v", partition=-1)
        assert bad.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_missing_partition_is_refused_after_max_block(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    name = topic(2)
    with producer(shared_broker, max_block_ms=300) as p, pytest.raises(MeridianError) as info:
        p.send(name, b"v", partition=5)
    assert info.value.code == ErrorCode.INVALID_PARTITIONS
    assert "max_block_ms" in info.value.message


def test_a_partition_that_appears_while_send_waits_is_used(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    """A topic being grown (or created partition by partition by the control plane's
    reconciler): send() to a partition not yet in the metadata waits for it."""
    name = topic(2)
    with producer(shared_broker, max_block_ms=10_000) as p:
        p.send(name, b"first", partition=0).result(timeout=10)  # the topic is known: 2
        grow = threading.Timer(0.5, _create_partition, (shared_broker.address, name, 2))
        grow.start()
        try:
            metadata = p.send(name, b"late", partition=2).result(timeout=10)
        finally:
            grow.join()
    assert (metadata.partition, metadata.offset) == (2, 0)


def _create_partition(address: str, topic: str, partition: int) -> None:
    with grpc.insecure_channel(address) as channel:
        response = admin_pb2_grpc.AdminStub(channel).CreatePartitions(
            admin_pb2.CreatePartitionsRequest(
                partitions=[admin_pb2.PartitionSpec(topic=topic, partition=partition)]
            ),
            timeout=10,
        )
    assert response.results[0].error == 0, response


def test_buffer_full_fails_fast_when_not_blocking(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    name = topic()
    with producer(shared_broker, buffer_memory=4096, block_on_full=False, linger_ms=60_000) as p:
        p.send(name, b"x" * 3000)
        with pytest.raises(BufferFull, match="buffer_memory"):
            p.send(name, b"x" * 3000)


def test_a_blocked_send_resumes_once_the_buffer_drains(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    """A full buffer pushes the lingering batch out; the blocked send then goes through."""
    name = topic()
    with producer(shared_broker, buffer_memory=4096, linger_ms=60_000, max_block_ms=20_000) as p:
        first = p.send(name, b"x" * 3000)
        second = p.send(name, b"y" * 3000)
        assert first.done()
        p.flush(10)
        assert second.result(0).offset == 1


def test_flush_waits_and_close_delivers_what_is_queued(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    name = topic()
    p = producer(shared_broker, linger_ms=60_000)
    futures = [p.send(name, b"%d" % i) for i in range(10)]
    p.flush(timeout=10)
    assert all(f.done() for f in futures)
    later = p.send(name, b"last")
    p.close()
    assert later.result(0).offset == 10
    with pytest.raises(MeridianError, match="closed"):
        p.send(name, b"too late")


def test_a_batch_too_large_for_the_topic_is_split(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    """Records that fit one by one but not as one batch go out in smaller batches, in
    order, each future with its own offset."""
    name = topic(max_message_bytes=2048)
    with producer(shared_broker, linger_ms=50) as p:
        futures = [
            p.send(name, b"%03d" % i + b"x" * 97, headers=[("i", b"%d" % i)]) for i in range(60)
        ]
        offsets = [f.result(10).offset for f in futures]
    assert offsets == list(range(60))
    records = read_all(shared_broker.address, name)[0]
    assert [r.value[:3] for r in records] == [b"%03d" % i for i in range(60)]
    assert [r.headers for r in records] == [(("i", b"%d" % i),) for i in range(60)]

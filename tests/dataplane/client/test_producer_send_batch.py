"""``Producer.send_batch`` against a real broker: placement by the same partitioner as
``send``, order, per-record futures and callbacks, all-or-none refusals, splits."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from kafka.partitioner.default import murmur2 as kafka_murmur2

from dataplane.client import (
    BufferFull,
    DeliveryFutures,
    MeridianError,
    Producer,
    ProducerRecord,
    RecordMetadata,
)
from dataplane.errors import ErrorCode
from dataplane.records import builder
from tests.support.brokers import BrokerProcess

from .support import read_all

TopicMaker = Callable[..., str]


def producer(broker: BrokerProcess, **settings: Any) -> Producer:
    return Producer(broker.address, **{"linger_ms": 2, **settings})


@pytest.fixture(params=["compiled", "python"])
def encoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The compiled encoder where built, and the pure-Python one (its reference, what an
    install without a Rust toolchain runs)."""
    if request.param == "python":
        monkeypatch.setattr(builder, "encode_records", builder._encode_records)
        monkeypatch.setattr(builder, "records_size", builder._records_size)
    elif not builder.COMPILED_ENCODE:
        pytest.skip("the compiled codec is not built here")
    return str(request.param)


def test_keyless_values_arrive_in_order_with_their_offsets(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    name = topic()
    values = [b"%04d" % i for i in range(1000)]
    with producer(shared_broker, batch_bytes=4096) as p:
        futures = p.send_batch(name, values)
        placed = futures.result(10)
    assert isinstance(futures, DeliveryFutures)
    assert len(futures) == 1000
    assert [m.offset for m in placed] == list(range(1000))
    assert futures[999].result().offset == 999
    assert [r.value for r in read_all(shared_broker.address, name)[0]] == values


def test_keyed_records_go_where_send_puts_them(
    shared_broker: BrokerProcess, topic: TopicMaker, encoder: str
) -> None:
    """murmur2 of the key, as Kafka's Java client; keyless ones mixed in stick together."""
    name = topic(3)
    records = [(b"customer-%d" % (i % 17), b"%d" % i) if i % 5 else b"%d" % i for i in range(300)]
    with producer(shared_broker) as p:
        futures = p.send_batch(name, records)
        placed = futures.result(10)
    keyless = {m.partition for r, m in zip(records, placed, strict=True) if type(r) is bytes}
    assert len(keyless) == 1
    stored = read_all(shared_broker.address, name, 3)
    for record, metadata in zip(records, placed, strict=True):
        if type(record) is tuple:
            assert metadata.partition == (kafka_murmur2(record[0]) & 0x7FFFFFFF) % 3
        assert stored[metadata.partition][metadata.offset].value == (
            record[1] if type(record) is tuple else record
        )
    for partition, got in stored.items():
        sent = [m for m in placed if m.partition == partition]
        assert [r.offset for r in got] == sorted(m.offset for m in sent)


def test_keyed_producer_records_go_by_their_key(
    shared_broker: BrokerProcess, topic: TopicMaker, encoder: str
) -> None:
    """A ``ProducerRecord`` (a named tuple) is routed by its key like a plain tuple."""
    name = topic(3)
    records = [ProducerRecord(b"customer-%d" % i, b"%d" % i) for i in range(60)]
    with producer(shared_broker) as p:
        placed = p.send_batch(name, records).result(10)
    expected = [(kafka_murmur2(r.key) & 0x7FFFFFFF) % 3 for r in records]
    assert [m.partition for m in placed] == expected
    assert len(set(expected)) == 3


def test_headers_given_as_an_iterator_are_refused_not_dropped(
    shared_broker: BrokerProcess, topic: TopicMaker, encoder: str
) -> None:
    """A call's records are read twice (sized, then encoded), so a one-shot iterator of
    headers is refused with the record's index instead of being written empty."""
    name = topic()
    headers = iter([("x-team", b"ppe")])
    with producer(shared_broker) as p:
        with pytest.raises(TypeError, match="record 1: a record's headers are a mapping"):
            p.send_batch(name, [b"a", (None, b"b", headers)])
        assert p.send_batch(name, [(None, b"c", [("x-team", b"ppe")])]).result(10)[0].offset == 0
    got = read_all(shared_broker.address, name)[0]
    assert [(r.value, r.headers) for r in got] == [(b"c", (("x-team", b"ppe"),))]


def test_headers_timestamps_tombstones_and_a_partition_round_trip(
    shared_broker: BrokerProcess, topic: TopicMaker, encoder: str
) -> None:
    name = topic(2)
    records = [
        ProducerRecord(b"k", b"v", [("x-team", b"ppe"), ("x-null", None)]),
        ProducerRecord(key=b"gone", value=None, timestamp_ms=1_600_000_000_000),
        (None, b"", {"x-trace-id": b"ab12"}),
        bytearray(b"copied"),
    ]
    with producer(shared_broker) as p:
        placed = p.send_batch(name, records, partition=1).result(10)
    assert [m.partition for m in placed] == [1] * 4
    assert placed[1].timestamp == 1_600_000_000_000
    first, tombstone, empty, copied = read_all(shared_broker.address, name, 2)[1]
    assert first.headers == (("x-team", b"ppe"), ("x-null", None))
    assert (tombstone.key, tombstone.value, tombstone.timestamp) == (
        b"gone",
        None,
        1_600_000_000_000,
    )
    assert empty.headers == (("x-trace-id", b"ab12"),)
    assert copied.value == b"copied"


def test_a_bad_record_refuses_the_whole_call(
    shared_broker: BrokerProcess, topic: TopicMaker, encoder: str
) -> None:
    name = topic()
    with producer(shared_broker, max_request_bytes=10_000) as p:
        with pytest.raises(TypeError, match="record 2: a record must be a value"):
            p.send_batch(name, [b"a", b"b", "c"])
        with pytest.raises(MeridianError) as large:
            p.send_batch(name, [b"a", b"x" * 20_000])
        assert large.value.code == ErrorCode.MESSAGE_TOO_LARGE
        with pytest.raises(MeridianError) as early:
            p.send_batch(name, [(None, b"a", None, -1)])
        assert early.value.code == ErrorCode.INVALID_TIMESTAMP
        assert p.send_batch(name, [b"only"]).result(10)[0].offset == 0


def test_a_full_buffer_refuses_the_whole_call(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    name = topic()
    with producer(shared_broker, buffer_memory=4096, block_on_full=False, linger_ms=60_000) as p:
        p.send(name, b"x" * 2000)
        with pytest.raises(BufferFull, match="buffer_memory"):
            p.send_batch(name, [b"y" * 1000] * 3)
        p.flush(10)
        later = p.send_batch(name, [b"z"])
        p.flush(10)
        assert later.result(0)[0].offset == 1


def test_callbacks_run_per_record_and_once_per_call(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    name = topic()
    seen: list[tuple[MeridianError | None, RecordMetadata | None]] = []
    whole: list[DeliveryFutures] = []
    lock = threading.Lock()

    def on_delivery(error: MeridianError | None, metadata: RecordMetadata | None) -> None:
        with lock:
            seen.append((error, metadata))

    with producer(shared_broker, batch_bytes=1024) as p:
        p.send(name, b"before")
        futures = p.send_batch(name, [b"x" * 100] * 50, on_delivery=on_delivery)
        futures.add_done_callback(whole.append)
        after = p.send(name, b"after")
        p.flush()
    assert [m.offset for e, m in seen if m is not None] == list(range(1, 51))
    assert whole == [futures]
    assert after.result().offset == 51
    assert futures.errors() == []
    assert futures.exception() is None


def test_sticky_records_move_partition_as_batches_fill(
    shared_broker: BrokerProcess, topic: TopicMaker, encoder: str
) -> None:
    name = topic(2)
    values = [b"v%d" % i + b"x" * 50 for i in range(500)]
    with producer(shared_broker, batch_bytes=2048) as p:
        p.send_batch(name, values).result(10)
    stored = read_all(shared_broker.address, name, 2)
    assert sorted(r.value for rs in stored.values() for r in rs) == sorted(values)
    assert all(stored.values()), "full batches move the sticky partition"


def test_a_batch_too_large_for_the_topic_is_split_and_each_record_keeps_its_offset(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    name = topic(max_message_bytes=2048)
    values = [b"%03d" % i + b"x" * 97 for i in range(60)]
    with producer(shared_broker, linger_ms=50) as p:
        futures = p.send_batch(name, values)
        assert [m.offset for m in futures.result(10)] == list(range(60))
    assert [r.value for r in read_all(shared_broker.address, name)[0]] == values


def test_a_refused_batch_fails_every_future_of_it(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    name = topic(max_message_bytes=1024)
    with producer(shared_broker) as p:
        futures = p.send_batch(name, [b"small", b"x" * 4000])
        with pytest.raises(MeridianError) as info:
            futures.result(10)
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert [i for i, _ in futures.errors()] == [1] or [i for i, _ in futures.errors()] == [0, 1]


def test_an_empty_call_is_done_at_once_and_a_closed_producer_refuses(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    name = topic()
    p = producer(shared_broker)
    empty = p.send_batch(name, iter([]))
    called: list[DeliveryFutures] = []
    empty.add_done_callback(called.append)
    assert empty.result(0) == []
    assert called == [empty]
    p.close()
    with pytest.raises(MeridianError, match="closed"):
        p.send_batch(name, [b"too late"])

"""``Consumer.poll_batches`` with ``Producer.send_copy`` against a real broker: a copy
keeps key, value, timestamp and headers, gains provenance on its first hop, leaves out
records that came by a copy (they carry an origin), keeps order and position; a poll
mixed with a batch read copies the rest of a batch once; refusals."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from dataplane.client import (
    ConfigError,
    Consumer,
    PolledBatch,
    Producer,
    ProducerRecord,
    Provenance,
    TopicPartition,
)
from dataplane.records import copying
from tests.support.brokers import BrokerProcess

from .support import read_all

TopicMaker = Callable[..., str]
EAST = Provenance(b"east")


@pytest.fixture(params=["compiled", "python"], autouse=True)
def codec(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The compiled copy where built, and the pure-Python one (its reference, what an
    install without a Rust toolchain runs)."""
    if request.param == "python":
        monkeypatch.setattr(copying, "copy_records", copying._copy_records)
    elif not copying.COMPILED_COPY:
        pytest.skip("the compiled codec is not built here")
    return str(request.param)


def _source(broker: BrokerProcess, name: str) -> list[Any]:
    records = [
        ProducerRecord(b"k%d" % i, b"v%d" % i, None, 1_700_000_000_000 + i) for i in range(300)
    ]
    records[5] = ProducerRecord(None, b"from-west", [("x-origin-region", b"west")], 5)
    records[6] = ProducerRecord(b"k6", None, [("a", b"1"), ("x-origin-region", b"north"),
                                              ("x-origin-offset", b"77")], 6)  # fmt: skip
    records[7] = ProducerRecord(b"k7", b"v7", [("a", None)], 7)
    with Producer(broker.address, linger_ms=2, batch_bytes=2048) as p:
        p.send_batch(name, records, partition=0).result(10)
    return records


def _copy(consumer: Consumer, target: str, producer: Producer, until: int) -> list[Any]:
    sent = []
    deadline = time.monotonic() + 15
    (tp,) = consumer.assignment()
    while consumer.position(tp) < until:
        assert time.monotonic() < deadline
        for polled in consumer.poll_batches(200):
            assert isinstance(polled, PolledBatch)
            sent.append(producer.send_copy(target, polled, 0, EAST))
    producer.flush(10)
    return sent


def _expected(records: list[Any], start: int = 0) -> list[tuple[Any, ...]]:
    out = []
    for offset, r in enumerate(records):
        if offset < start:
            continue
        headers = tuple(r.headers or ())
        origin = [v for k, v in headers if k == "x-origin-region"]
        if origin and origin[-1] is not None:
            continue
        headers += (("x-origin-region", b"east"), ("x-origin-offset", b"%d" % offset))
        out.append((r.key, r.value, headers, r.timestamp_ms))
    return out


def _read(broker: BrokerProcess, name: str) -> list[tuple[Any, ...]]:
    return [(r.key, r.value, tuple(tuple(h) for h in r.headers), r.timestamp)
            for r in read_all(broker.address, name)[0]]  # fmt: skip


def test_copies_keep_records_add_provenance_and_leave_out_records_that_came_by_copy(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    source, target = topic(), topic()
    records = _source(shared_broker, source)
    consumer = Consumer(shared_broker.address, auto_offset_reset="earliest", max_poll_records=50)
    consumer.assign([TopicPartition(source, 0)])
    with Producer(shared_broker.address, route_lanes=False, linger_ms=2, batch_bytes=1024) as p:
        sent = _copy(consumer, target, p, len(records))
    consumer.close()
    assert sum(s.dropped for s in sent) == 2
    assert [m.offset for s in sent for m in s.futures.result(0)] == list(range(298))
    assert max(s.last_offset for s in sent) == 299
    assert _read(shared_broker, target) == _expected(records)


def test_a_batch_begun_by_poll_is_copied_from_the_position(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    source, target = topic(), topic()
    records = _source(shared_broker, source)
    consumer = Consumer(shared_broker.address, auto_offset_reset="earliest", max_poll_records=3)
    consumer.assign([TopicPartition(source, 0)])
    taken = []
    while not taken:
        taken = consumer.poll(200)
    start = taken[-1].offset + 1
    with Producer(shared_broker.address, route_lanes=False, linger_ms=2) as p:
        _copy(consumer, target, p, len(records))
    consumer.close()
    assert _read(shared_broker, target) == _expected(records, start)


def test_refusals(shared_broker: BrokerProcess, topic: TopicMaker) -> None:
    source = topic()
    _source(shared_broker, source)
    grouped = Consumer(shared_broker.address, group_id="g")
    with pytest.raises(ConfigError):
        grouped.poll_batches()
    grouped.close()
    consumer = Consumer(shared_broker.address, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(source, 0)])
    polled: list[PolledBatch] = []
    while not polled:
        polled = consumer.poll_batches(200)
    consumer.close()
    with Producer(shared_broker.address) as p, pytest.raises(ConfigError):
        p.send_copy(topic(), polled[0], 0, EAST)

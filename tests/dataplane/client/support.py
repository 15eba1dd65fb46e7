"""Helpers for SDK tests: topics on real brokers, kafka-python as an oracle, accumulators."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from dataplane.client.accumulator import RecordAccumulator, TopicQueues
from dataplane.client.partitioner import make_partitioner
from dataplane.records import Compression, encode_headers
from tests.support.kafka_reference import Seen, Spec

CODECS = list(Compression)
CODEC_NAMES = [codec.name.lower() for codec in Compression]


def accumulator(
    *,
    partitions: int = 1,
    batch_bytes: int = 1 << 20,
    linger_s: float = 0.0,
    buffer_memory: int = 1 << 30,
    block_on_full: bool = True,
    max_block_s: float = 1.0,
    partitioner: Any = "murmur2",
) -> tuple[RecordAccumulator, TopicQueues]:
    acc = RecordAccumulator(
        make_partitioner(partitioner),
        batch_bytes=batch_bytes,
        linger_s=linger_s,
        buffer_memory=buffer_memory,
        block_on_full=block_on_full,
        max_block_s=max_block_s,
        max_record_bytes=1 << 30,
    )
    topic = TopicQueues("t.t", partitions, list(range(partitions)))
    acc.topics["t.t"] = topic
    return acc, topic


def append_specs(
    acc: RecordAccumulator, topic: TopicQueues, specs: Sequence[Spec], partition: int | None = 0
) -> list[Any]:
    return [
        acc.append(
            topic, partition, key, value, encode_headers(headers) if headers else b"\x00", ts
        )
        for key, value, ts, headers in specs
    ]


def drain_all(acc: RecordAccumulator) -> list[Any]:
    """Every queued batch, linger or not."""
    acc.flushing += 1
    try:
        return acc.drain(time.monotonic(), lambda tp, batch: True)
    finally:
        acc.flushing -= 1


def expected(specs: Sequence[Spec], base_offset: int = 0) -> list[Seen]:
    return [
        (base_offset + i, ts, key, value, list(headers))
        for i, (key, value, ts, headers) in enumerate(specs)
    ]


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Poll ``condition`` until it holds or ``timeout_s`` passes; returns its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return condition()


def read_all(
    bootstrap: str, topic: str, partitions: int = 1, *, timeout_s: float = 15.0, **settings: Any
) -> dict[int, list[Any]]:
    """Every record of ``topic`` up to its current end, by partition, via the Consumer."""
    from dataplane.client import Admin, Consumer, TopicPartition

    with Admin(bootstrap) as admin:
        ends = admin.list_offsets({TopicPartition(topic, p): "latest" for p in range(partitions)})
    out: dict[int, list[Any]] = {p: [] for p in range(partitions)}
    consumer = Consumer(bootstrap, auto_offset_reset="earliest", **settings)
    try:
        consumer.assign(list(ends))
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < end for tp, (end, _) in ends.items()):
            assert time.monotonic() < deadline, "records did not arrive in time"
            for record in consumer.poll(timeout_ms=200):
                out[record.partition].append(record)
    finally:
        consumer.close()
    return out

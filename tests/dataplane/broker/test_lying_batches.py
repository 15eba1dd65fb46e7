"""Batches whose CRC is valid but whose records lie are refused whole, over real gRPC.

Before record-level validation a 76-byte batch claiming 2**31 - 1 records over one moved
the partition's end offset by 2**31 and stopped every consumer at that batch for good.
"""

from __future__ import annotations

import time

from kafka.record.default_records import DefaultRecordBatchBuilder

from dataplane.client import Consumer, TopicPartition
from dataplane.errors import ErrorCode
from dataplane.records import MAX_UNCOMPRESSED_BYTES, Compression, compress
from tests.dataplane.broker.support import create, end_offset, fetch_records, produce, stubs
from tests.dataplane.storage.support import INT32_MAX, frame, record, varint

TOPIC = "acme.lies"
CORRUPT, INVALID = ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD


def poison() -> bytes:
    """The probe's batch: one record under a header claiming 2**31 - 1, CRC valid."""
    batch = frame(record(0, value=b"poisoned"), count=INT32_MAX)
    assert len(batch) == 76
    return batch


def zstd(payload: bytes, count: int) -> bytes:
    return frame(compress(Compression.ZSTD, payload), count=count, attributes=int(Compression.ZSTD))


LIES = {
    "count below the records": (
        frame(record(0) + record(1) + record(2), count=2),
        INVALID,
    ),
    "record length past the batch": (frame(record(0, length=90), count=1), CORRUPT),
    "varint over 5 bytes": (frame(b"\x00" + b"\x80" * 5 + b"\x00", count=1), CORRUPT),
    "header count lie": (
        frame(record(0, headers=varint(9) + varint(1) + b"k" + varint(-1)), count=1),
        CORRUPT,
    ),
    "offset deltas out of order": (frame(record(1) + record(0), count=2), INVALID),
    "trailing garbage": (frame(record(0) + b"\x07\x07", count=1), CORRUPT),
    "max timestamp lie": (frame(record(0), count=1, max_timestamp=2**62), INVALID),
    "compressed, count lie": (zstd(record(0) + record(1), 3), INVALID),
    "compressed bomb": (
        zstd(record(0, value=bytes(MAX_UNCOMPRESSED_BYTES)), 1),
        ErrorCode.MESSAGE_TOO_LARGE,
    ),
}  # fmt: skip


def kafka_python_batch(codec: Compression, first: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, int(codec), False, -1, -1, -1, batch_size=1 << 30)
    now = int(time.time() * 1000)
    for i in range(3):
        builder.append(i, timestamp=now + i, key=None, value=b"kp-%d" % (first + i), headers=[])
    return bytes(builder.build())


def consume_all(address: str, count: int) -> list[bytes | None]:
    """What the SDK Consumer reads from the start, once it has ``count`` records."""
    consumer = Consumer(
        address, auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=100
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0)])
        values: list[bytes | None] = []
        deadline = time.monotonic() + 20
        while len(values) < count and time.monotonic() < deadline:
            values += [r.value for r in consumer.poll(200)]
        return values
    finally:
        consumer.close()


def test_the_poison_batch_is_refused_and_the_partition_stays_readable(broker):
    with stubs(broker) as s:
        create(s, TOPIC)
        assert produce(s, TOPIC, 0, frame(record(0, value=b"before"), count=1)).error == 0
        result = produce(s, TOPIC, 0, poison())
        assert result.error == ErrorCode.INVALID_RECORD, result.error_message
        assert "2147483647 records, 1 present" in result.error_message
        assert result.base_offset == -1
        assert end_offset(s, TOPIC) == 1
        assert produce(s, TOPIC, 0, frame(record(0, value=b"after"), count=1)).base_offset == 1
        assert [r.value for r in fetch_records(s, TOPIC)] == [b"before", b"after"]
    assert consume_all(broker.address, 2) == [b"before", b"after"]


def test_every_lie_is_refused_whole_and_honest_batches_of_every_codec_pass(broker):
    with stubs(broker) as s:
        create(s, TOPIC)
        for case, (batch, code) in LIES.items():
            good = frame(record(0, value=b"good"), count=1)
            result = produce(s, TOPIC, 0, good + batch)  # the good batch goes with it
            assert (case, result.error) == (case, code), result.error_message
            assert end_offset(s, TOPIC) == 0, case
        for n, codec in enumerate(Compression):
            result = produce(s, TOPIC, 0, kafka_python_batch(codec, 3 * n))
            assert result.error == 0, (codec, result.error_message)
        expected = [b"kp-%d" % i for i in range(3 * len(Compression))]
        assert [r.value for r in fetch_records(s, TOPIC)] == expected
    assert consume_all(broker.address, len(expected)) == expected

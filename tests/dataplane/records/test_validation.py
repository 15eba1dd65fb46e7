"""Record-level validation of client batches: every lie a valid CRC can carry is refused.

Batches are framed by hand here (``support.frame``/``record``: varints by kafka-python's
encoder, independent of ours) so each can lie in exactly one way. The oracle for what must be
accepted is kafka-python's builder on every codec, and for what is accepted: every
reader (ours and kafka-python's) reads it back in full.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from dataplane.client.decoder import decode_records, split_batches
from dataplane.client.types import RecordSource
from dataplane.records import (
    MAX_UNCOMPRESSED_BYTES,
    BatchBuilder,
    Compression,
    TimestampType,
    compress,
    decode_batch,
    validate_batch,
    validate_records,
)
from dataplane.records.errors import (
    CorruptBatchError,
    InvalidTimestampError,
    MalformedRecordError,
    MaxTimestampError,
    OffsetDeltaError,
    RecordCountMismatchError,
    UncompressedSizeError,
)
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.log_append import validate_batches
from tests.dataplane.storage.support import BASE_TS, INT32_MAX, frame, read_all, record, varint


def check(batch: bytes, **kwargs: Any) -> None:
    """Validate as a leader does for a client's batch (raises what it finds)."""
    view = memoryview(batch)
    validate_records(view, 0, validate_batch(view), check_max_timestamp=True, **kwargs)


def readers_agree(batch: bytes) -> int:
    """Every reader (storage's, the SDK consumer's, kafka-python's) decodes the whole
    batch, headers included, alike; the record count they agree on."""
    ours = [
        (r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in decode_batch(batch)[1]
    ]
    sdk = []
    for fetched in split_batches(batch, 0, ("t", 0)):
        source = RecordSource("t", 0, (fetched.attributes >> 3) & 1)
        sdk += [
            (r.offset, r.timestamp, r.key, r.value, list(r.headers))
            for r in decode_records(fetched, source)
        ]
    theirs = [
        (r.offset, r.timestamp, r.key, r.value, list(r.headers))
        for r in MemoryRecords(batch).next_batch()
    ]
    assert ours == sdk == theirs
    return len(ours)


# --- the poison batch and lying counts --------------------------------------------------


def test_the_76_byte_poison_batch_is_refused_naming_both_counts() -> None:
    """2**31 - 1 records claimed over one record: the count is checked against the records."""
    poison = frame(record(0, value=b"poisoned"), count=INT32_MAX)
    assert len(poison) == 76
    validate_batch(poison)  # the header alone is consistent and its CRC valid
    with pytest.raises(RecordCountMismatchError) as caught:
        check(poison)
    assert (caught.value.declared, caught.value.present) == (INT32_MAX, 1)
    assert "2147483647" in str(caught.value)


def test_a_count_below_the_records_is_refused() -> None:
    payload = b"".join(record(i) for i in range(3))
    with pytest.raises(RecordCountMismatchError) as caught:
        check(frame(payload, count=2, last_offset_delta=1))
    assert (caught.value.declared, caught.value.present) == (2, 3)


@pytest.mark.parametrize("codec", list(Compression)[1:], ids=lambda c: c.name)
def test_a_compressed_batch_with_a_lying_count_is_refused(codec: Compression) -> None:
    payload = compress(codec, b"".join(record(i) for i in range(3)))
    batch = frame(payload, count=4, attributes=int(codec))
    with pytest.raises(RecordCountMismatchError) as caught:
        check(batch)
    assert (caught.value.declared, caught.value.present) == (4, 3)


# --- records that lie about their own bytes --------------------------------------------

MALFORMED = {
    "length past the batch": (record(0, length=200), 0),
    "length past the record": (record(0) + record(1, length=9) , 1),
    "negative length": (varint(-5) + b"\x00" * 8, 0),
    "length too short for its fields": (record(0, length=3), 0),
    "record attributes set": (record(0)[:1] + b"\x80" + record(0)[2:], 0),
    "trailing garbage": (record(0) + b"\x07", 1),
    "trailing zero": (record(0) + b"\x00", 1),
    "varint over 5 bytes": (b"\x00" + b"\x80" * 5 + b"\x00", 0),
    "varint past int32": (b"\xfe\xff\xff\xff\x7f" + b"\x00" * 8, 0),
    "timestamp varlong over 10 bytes": (
        record(0)[:1] + b"\x00" + b"\xff" * 10 + b"\x00" + b"\x00\x01\x02v\x00", 0),
    "key length -2": (record(0, key=b"")[:4] + varint(-2) + b"\x02v\x00", 0),
    "value length past the record": (record(0, value=b"v") [:-3] + varint(50) + b"v\x00", 0),
    "header count above the bytes left": (record(0, headers=varint(5) + varint(1) + b"k\x00"), 0),
    "negative header count": (record(0, headers=varint(-3)), 0),
    "null header key": (record(0, headers=varint(1) + varint(-1) + varint(-1)), 0),
    "header key not UTF-8": (record(0, headers=varint(1) + varint(1) + b"\xff" + varint(-1)), 0),
    "header value length -7": (record(0, headers=varint(1) + varint(1) + b"k" + varint(-7)), 0),
}  # fmt: skip


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_record_is_refused_naming_it(case: str) -> None:
    payload, index = MALFORMED[case]
    batch = frame(payload, count=index + 1)
    with pytest.raises(MalformedRecordError) as caught:
        check(batch)
    assert caught.value.record_index == index
    assert f"record {index}" in str(caught.value)


def test_records_that_lie_in_a_compressed_batch_are_refused() -> None:
    payload = compress(Compression.ZSTD, record(0) + record(1, length=90))
    with pytest.raises(MalformedRecordError) as caught:
        check(frame(payload, count=2, attributes=int(Compression.ZSTD)))
    assert caught.value.record_index == 1


def test_a_five_byte_varint_within_int32_is_accepted_as_kafka_reads_it() -> None:
    """Non-canonical but in bounds: Java's readVarint takes it, so must we."""
    body = b"\x00\x00\x00\x01" + b"\x82\x80\x80\x80\x00" + b"v\x00"  # value length 1
    check(frame(varint(len(body)) + body, count=1))


# --- offsets and timestamps -------------------------------------------------------------


def test_offset_deltas_out_of_order_are_refused() -> None:
    payload = record(0) + record(2) + record(1)
    with pytest.raises(OffsetDeltaError) as caught:
        check(frame(payload, count=3))
    error = caught.value
    assert (error.record_index, error.delta, error.expected) == (1, 2, 1)


def test_a_last_offset_delta_beyond_the_records_is_refused() -> None:
    batch = frame(record(0) + record(1), count=2, last_offset_delta=9)
    validate_batch(batch)  # a compacted batch may look like this; a client's may not
    with pytest.raises(OffsetDeltaError) as caught:
        check(batch)
    assert (caught.value.record_index, caught.value.delta, caught.value.expected) == (None, 9, 1)


def test_a_max_timestamp_other_than_the_records_largest_is_refused() -> None:
    payload = record(0, ts_delta=5) + record(1, ts_delta=-3) + record(2, ts_delta=2)
    check(frame(payload, count=3, max_timestamp=BASE_TS + 5))
    for lie in (BASE_TS + 4, BASE_TS + 6, 2**63 - 1, -1):
        with pytest.raises(MaxTimestampError) as caught:
            check(frame(payload, count=3, max_timestamp=lie))
        assert (caught.value.declared, caught.value.computed) == (lie, BASE_TS + 5)


def test_all_negative_timestamp_deltas_give_the_right_max() -> None:
    payload = record(0, ts_delta=-5) + record(1, ts_delta=-2)
    check(frame(payload, count=2, max_timestamp=BASE_TS - 2))


def test_the_max_timestamp_is_free_for_log_append_time() -> None:
    """A log-append-time batch or log: the broker's time stands for every record."""
    payload = record(0, ts_delta=5)
    view = memoryview(frame(payload, count=1, max_timestamp=7))
    validate_records(view, 0, validate_batch(view), check_max_timestamp=False)
    check(frame(payload, count=1, max_timestamp=7, attributes=0x08))


def test_a_timestamp_outside_int64_is_refused() -> None:
    payload = record(0) + record(1, ts_delta=10)
    batch = frame(payload, count=2, base_timestamp=2**63 - 5, max_timestamp=2**63 - 5)
    with pytest.raises(InvalidTimestampError) as caught:
        check(batch)
    assert caught.value.timestamp == 2**63 + 5


# --- decompression bombs ----------------------------------------------------------------


@pytest.mark.parametrize("codec", list(Compression)[1:], ids=lambda c: c.name)
def test_a_compressed_bomb_is_refused_at_the_bound(codec: Compression) -> None:
    body = record(0, value=bytes(3 << 20))
    batch = frame(compress(codec, body), count=1, attributes=int(codec))
    assert len(batch) < 1 << 20
    with pytest.raises(UncompressedSizeError) as caught:
        check(batch, max_uncompressed_bytes=1 << 20)
    assert caught.value.max_bytes == 1 << 20
    check(batch)  # within the default bound


def test_a_bomb_past_the_readers_bound_is_refused_by_the_log(open_log) -> None:
    """The default bound is the readers': nothing stored is refused by a consumer."""
    body = record(0, value=bytes(MAX_UNCOMPRESSED_BYTES))
    batch = frame(compress(Compression.ZSTD, body), count=1, attributes=int(Compression.ZSTD))
    log = open_log(LogConfig(durability=Durability.NEVER))
    with pytest.raises(UncompressedSizeError):
        log.append(batch)
    assert log.log_end_offset == 0


# --- what must pass: independent and own builders, every codec ---------------------------


def kafka_python_batch(codec: Compression, count: int = 300) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for i in range(count):
        builder.append(
            i,
            timestamp=BASE_TS + (i * 7919) % 1000 - 500,  # not in order
            key=None if i % 3 == 0 else b"k%d" % i,
            value=None if i % 5 == 0 else bytes(i % 300),
            headers=[("x-lane", b"blue")] * (i % 3) + [("\u00e9t\u00e9", None)],
        )
    return bytes(builder.build())


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name)
def test_kafka_python_batches_pass_and_append(codec: Compression, open_log) -> None:
    batch = kafka_python_batch(codec)
    check(batch)
    log = open_log(LogConfig(durability=Durability.NEVER))
    log.append(batch + kafka_python_batch(codec, 20))
    assert log.log_end_offset == 320
    assert len(read_all(log)) == 320


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name)
def test_our_builders_batches_pass(codec: Compression) -> None:
    builder = BatchBuilder(compression=codec)
    for i in range(9000):  # offset deltas past two varint bytes
        builder.append(b"x" * (i % 50), key=None, timestamp=BASE_TS - i, headers=[("h", None)])
    check(builder.build())


# --- the log: refused means nothing stored ----------------------------------------------


def test_the_log_refuses_a_lying_batch_and_stores_nothing_of_the_request(open_log) -> None:
    good = frame(record(0), count=1)
    poison = frame(record(0, value=b"poisoned"), count=INT32_MAX)
    log = open_log(LogConfig(durability=Durability.NEVER))
    log.append(good)
    with pytest.raises(RecordCountMismatchError):
        log.append(good + poison)
    assert log.log_end_offset == 1
    log.append(good)
    assert [r.offset for r in read_all(log)] == [0, 1]


def test_a_followers_copy_is_not_scanned() -> None:
    """A follower copies bytes its leader validated: only header and CRC are checked."""
    view = memoryview(frame(record(0), count=1, max_timestamp=3))
    validate_batches(view, max_batch_bytes=1 << 20, client=False, check_max_timestamp=True)
    with pytest.raises(MaxTimestampError):
        validate_batches(view, max_batch_bytes=1 << 20, client=True, check_max_timestamp=True)


def test_a_log_append_time_log_accepts_any_max_timestamp(open_log) -> None:
    config = LogConfig(durability=Durability.NEVER, timestamp_type=TimestampType.LOG_APPEND_TIME)
    log = open_log(config)
    log.append(frame(record(0), count=1, max_timestamp=3))
    assert log.log_end_offset == 1


# --- whatever is accepted, every reader reads -------------------------------------------

SPEC = st.lists(
    st.tuples(st.binary(max_size=20), st.integers(-1000, 1000), st.booleans()),
    min_size=1,
    max_size=6,
)


def honest(spec: Sequence[tuple[bytes, int, bool]]) -> tuple[bytes, int]:
    payload = b"".join(
        record(i, ts_delta=ts, value=v, headers=varint(1) + varint(1) + b"h" + varint(-1))
        if h
        else record(i, ts_delta=ts, value=v)
        for i, (v, ts, h) in enumerate(spec)
    )
    return payload, BASE_TS + max(ts for _, ts, _ in spec)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=SPEC, data=st.data())
def test_a_batch_that_passes_is_read_whole_by_every_reader(spec, data) -> None:
    """Change any byte of honest records (CRC recomputed): refused, or readable by all."""
    payload, max_ts = honest(spec)
    at = data.draw(st.integers(0, len(payload) - 1))
    changed = bytearray(payload)
    changed[at] = data.draw(st.integers(0, 255))
    count = data.draw(st.sampled_from([len(spec), len(spec) + 1, max(1, len(spec) - 1)]))
    batch = frame(bytes(changed), count=count, max_timestamp=max_ts)
    try:
        check(batch)
    except CorruptBatchError:
        return
    assert readers_agree(batch) == count

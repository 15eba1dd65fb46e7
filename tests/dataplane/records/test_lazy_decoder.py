"""The consumer's decoder reads what records.decode_batch and kafka-python read."""

from __future__ import annotations

import struct
from collections import deque

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataplane.client.decoder import decode_records, split_batches
from dataplane.client.fetcher import CompletedFetch, PartitionState, take
from dataplane.client.types import ConsumerRecord, RecordSource, TopicPartition
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import (
    BatchBuilder,
    Compression,
    decode_batch,
    encode_headers,
    set_base_offset,
    set_log_append_time,
    varint,
)
from tests.dataplane.client.support import CODECS
from tests.support.kafka_reference import Spec, kafka_build, kafka_read

NOW = 1_700_000_000_000
TP = ("t.t", 0)
SPECS: list[Spec] = [
    (None, b"plain", NOW, []),
    (b"k", b"with a key", NOW + 1, []),
    (b"k2", None, NOW + 2, []),
    (None, b"", NOW - 5, [("x-lane", b"ppe"), ("x-null", None)]),
    (b"", b"v" * 20_000, NOW + 100_000, [("\u00e9", b"x" * 200)]),
]


def build(specs: list[Spec], base_offset: int = 0, **kwargs: object) -> bytes:
    builder = BatchBuilder(base_offset=base_offset, **kwargs)  # type: ignore[arg-type]
    for key, value, ts, headers in specs:
        builder.append(value, key=key, timestamp=ts, headers=headers)
    return builder.build()


def decode_all(data: bytes, fetch_offset: int = 0) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    for batch in split_batches(data, fetch_offset, TP):
        source = RecordSource(*TP, (batch.attributes >> 3) & 1, batch.leader_epoch)
        out += decode_records(batch, source, fetch_offset)
    return out


def seen(records: list[ConsumerRecord]) -> list[tuple[object, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_reads_what_storage_and_kafka_python_read(codec: Compression) -> None:
    """Our batches and kafka-python's decode to the same records as both reference readers."""
    for data in (build(SPECS, 40, compression=codec), kafka_build(SPECS, codec)):
        ours = seen(decode_all(data))
        _, reference = decode_batch(data)
        assert ours == [
            (r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers])
            for r in reference
        ]
        assert ours == kafka_read(data)[1]


def test_several_batches_and_a_cut_tail() -> None:
    first, second = build(SPECS[:2], 0), build(SPECS[2:], 2)
    data = first + second + second[:30]  # a fetch cut inside a third batch
    assert [r.offset for r in decode_all(data)] == [0, 1, 2, 3, 4]


def test_records_before_the_fetch_offset_are_skipped() -> None:
    data = build(SPECS, 10) + build(SPECS, 15)
    assert [r.offset for r in decode_all(data, fetch_offset=13)] == [13, 14, 15, 16, 17, 18, 19]
    assert [b.base_offset for b in split_batches(data, 15, TP)] == [15]


def test_log_append_time_batches_report_the_broker_time() -> None:
    data = bytearray(build(SPECS, 0))
    set_log_append_time(data, 0, NOW + 999)
    records = decode_all(bytes(data))
    assert {r.timestamp for r in records} == {NOW + 999}
    assert {r.timestamp_type for r in records} == {1}


def test_record_fields_and_lazy_headers() -> None:
    (_, _, _, with_headers, _) = decode_all(build(SPECS, 7))
    assert with_headers.topic == "t.t"
    assert with_headers.partition == 0
    assert with_headers.offset == 10
    assert with_headers.headers == (("x-lane", b"ppe"), ("x-null", None))
    assert with_headers == ConsumerRecord(
        "t.t", 0, 10, NOW - 5, 0, None, b"", (("x-lane", b"ppe"), ("x-null", None))
    )
    assert "x-lane" in repr(with_headers)


def test_a_flipped_byte_fails_the_crc() -> None:
    data = bytearray(build(SPECS))
    data[100] ^= 0xFF
    with pytest.raises(MeridianError, match="CRC") as info:
        split_batches(bytes(data), 0, TP)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def reseal(batch: bytes, records: bytes, count: int) -> bytes:
    """``batch`` with other record bytes and count, length and CRC fixed."""
    header = bytearray(batch[:61])
    struct.pack_into(">i", header, 8, 49 + len(records))
    struct.pack_into(">i", header, 57, count)
    body = bytes(header[21:]) + records
    struct.pack_into(">I", header, 17, crc32c(body))
    return bytes(header[:21]) + body


def test_bad_records_under_a_good_crc_are_corrupt() -> None:
    good = build([(None, b"abc", NOW, [])] * 2)
    records = good[61:]
    for bad, count in (
        (records[:-3], 2),  # the last record overruns the batch
        (records, 3),  # the header claims a third record
        (b"\x03" + records[1:], 2),  # a negative record length
    ):
        (batch,) = split_batches(reseal(good, bad, count), 0, TP)
        with pytest.raises(MeridianError) as info:
            decode_records(batch, RecordSource(*TP, 0))
        assert info.value.code == ErrorCode.CORRUPT_MESSAGE


def test_take_moves_the_position_past_used_batches_and_control_batches() -> None:
    """Positions follow returned records, and skip whole control and compacted batches."""
    control = bytearray(build([(None, b"c", NOW, [])], 3))
    struct.pack_into(">h", control, 21, 0x20)  # the control bit
    struct.pack_into(">I", control, 17, crc32c(bytes(control[21:])))
    gapped = bytearray(build([(None, b"x", NOW, [])] * 2, 4))
    struct.pack_into(">i", gapped, 23, 5)  # last offset delta 5: a compacted batch
    struct.pack_into(">I", gapped, 17, crc32c(bytes(gapped[21:])))
    data = build(SPECS[:3], 0) + bytes(control) + bytes(gapped)
    state = PartitionState(TopicPartition(*TP), position=1, fetch_offset=1)
    completed = CompletedFetch(state, 0, deque(split_batches(data, 1, TP)), len(data))
    assert [r.offset for r in take(completed, 1)] == [1]
    assert state.position == 2
    assert [r.offset for r in take(completed, 10)] == [2, 4, 5]
    assert state.position == 10  # after the compacted batch's last offset, 9


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.none() | st.binary(max_size=20),
            st.none() | st.binary(max_size=300),
            st.integers(min_value=0, max_value=2**41),
            st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2),
        ),
        min_size=1,
        max_size=20,
    ),
    st.sampled_from(CODECS),
    st.integers(min_value=0, max_value=2**40),
)
def test_random_batches_decode_like_storage(
    specs: list[Spec], codec: Compression, base: int
) -> None:
    data = bytearray(build(specs, compression=codec))
    set_base_offset(data, 0, base)
    _, reference = decode_batch(bytes(data))
    assert seen(decode_all(bytes(data), base)) == [
        (r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers])
        for r in reference
    ]


def compacted(specs: list[Spec], deltas: list[int], base_offset: int = 0) -> bytes:
    """A batch whose records keep offset deltas ``deltas`` (a compacted log's gaps)."""
    records = b""
    for (key, value, ts, headers), delta in zip(specs, deltas, strict=True):
        body = b"\x00" + varint(ts - specs[0][2]) + varint(delta)
        body += b"\x01" if key is None else varint(len(key)) + key
        body += b"\x01" if value is None else varint(len(value)) + value
        body += encode_headers(headers) if headers else b"\x00"
        records += varint(len(body)) + body
    data = bytearray(reseal(build(specs), records, len(specs)))
    struct.pack_into(">i", data, 23, deltas[-1])  # the last offset delta
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    set_base_offset(data, 0, base_offset)
    return bytes(data)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(min_value=1, max_value=300), min_size=1, max_size=len(SPECS)))
def test_compacted_batches_keep_their_offset_deltas(gaps: list[int]) -> None:
    """A batch with gaps (not dense) is read delta by delta, as storage reads it."""
    deltas = [sum(gaps[:i]) for i in range(len(gaps))]
    specs = SPECS[: len(gaps)]
    data = compacted(specs, deltas, base_offset=1000)
    _, reference = decode_batch(data)
    assert seen(decode_all(data, 1000)) == [
        (r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers])
        for r in reference
    ]
    assert [r.offset for r in decode_all(data, 1000)] == [1000 + d for d in deltas]

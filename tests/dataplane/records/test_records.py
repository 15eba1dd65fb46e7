"""RecordBatch v2 codec: golden bytes, kafka-python compatibility both ways, errors, fuzzing.

kafka-python's record codec is the independent oracle: what we build it must read field
for field, and what it builds we must read and validate.
"""

from __future__ import annotations

import contextlib
import struct
import time
import zlib
from collections.abc import Sequence
from typing import Any

import cramjam
import lz4.frame
import pytest
import zstandard
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.util import encode_varint

from dataplane.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_SEQUENCE,
    BatchBuilder,
    BatchHeader,
    Compression,
    Header,
    Record,
    TimestampType,
    build_batch,
    decode_batch,
    decode_batches,
    first_offset_at_or_after,
    iter_batches,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)
from dataplane.records.errors import (
    BatchLengthError,
    CorruptBatchError,
    CrcMismatchError,
    InvalidMagicError,
    InvalidRecordCountError,
    OversizeBatchError,
    TruncatedRecordError,
    UnsupportedCodecError,
)
from tests.support.kafka_reference import Seen, Spec, kafka_build, kafka_read

CODECS = list(Compression)

SPECS: list[Spec] = [
    (b"key-0", b"value-0" * 20, 1_700_000_000_000, [("x-lane", b"blue"), ("x-trace-id", b"t1")]),
    (None, b"null key" * 20, 1_700_000_000_005, []),
    (b"key-2", None, 1_699_999_999_990, [("x-origin-region", None)]),
    (b"", b"", 1_700_000_000_001, [("", b"")]),
    (b"key-4", bytes(range(256)) * 4, 1_700_000_000_002, [("\u00e9t\u00e9", b"\x00\xff")]),
]


def build(specs: Sequence[Spec], **kwargs: Any) -> bytes:
    builder = BatchBuilder(**kwargs)
    for key, value, timestamp, headers in specs:
        builder.append(value, key=key, timestamp=timestamp, headers=headers)
    return builder.build()


def ours(records: Sequence[Record]) -> list[Seen]:
    return [
        (r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers])
        for r in records
    ]


def expected(specs: Sequence[Spec], base_offset: int = 0) -> list[Seen]:
    return [
        (base_offset + i, ts, key, value, list(headers))
        for i, (key, value, ts, headers) in enumerate(specs)
    ]


def varint(value: int) -> bytes:
    """Zigzag varint by kafka-python's encoder, independent of ours."""
    out = bytearray()
    encode_varint(value, out.append)
    return bytes(out)


def reframe(
    batch: bytes,
    payload: bytes,
    *,
    attributes: int | None = None,
    record_count: int | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    """``batch`` with its records replaced by ``payload``, a fitting length and a valid CRC."""
    header = bytearray(batch[:HEADER_SIZE])
    for offset, fmt, value in (
        (21, ">h", attributes),
        (23, ">i", last_offset_delta),
        (57, ">i", record_count),
    ):
        if value is not None:
            struct.pack_into(fmt, header, offset, value)
    struct.pack_into(">i", header, 8, HEADER_SIZE - LOG_OVERHEAD + len(payload))
    covered = bytes(header[21:]) + payload
    struct.pack_into(">I", header, 17, crc32c(covered))
    return bytes(header[:21]) + covered


def record_bytes(body: bytes, declared: int | None = None) -> bytes:
    """One record: ``body`` after a length varint (``declared`` or the true length)."""
    return varint(len(body) if declared is None else declared) + body


# --- golden bytes ----------------------------------------------------------------------


def test_crc32c_is_castagnoli() -> None:
    """The CRC library computes CRC-32C: the standard check value of "123456789"."""
    assert crc32c(b"123456789") == 0xE3069283


def test_golden_bytes_of_a_small_batch() -> None:
    """A two-record batch equals bytes assembled by hand from the Kafka spec."""
    builder = BatchBuilder(base_offset=5, producer_id=7, producer_epoch=1, base_sequence=3)
    builder.append(b"v", key=b"k", timestamp=1000, headers=[("h", b"x")])
    builder.append(b"", key=None, timestamp=999)
    data = builder.build()

    records = bytes.fromhex(
        "18" "00" "00" "00" "02 6b" "02 76" "02" "02 68" "02 78"  # len 12, k, v, 1 header
        "0c" "00" "01" "02" "01" "00" "00"  # len 6, ts delta -1, offset 1, null key, b""
    )  # fmt: skip
    covered = (
        bytes.fromhex(
            "0000"  # attributes
            "00000001"  # last offset delta
            "00000000000003e8"  # base timestamp 1000
            "00000000000003e8"  # max timestamp 1000
            "0000000000000007"  # producer id
            "0001"  # producer epoch
            "00000003"  # base sequence
            "00000002"  # record count
        )
        + records
    )
    prefix = bytes.fromhex("0000000000000005" "00000045" "ffffffff" "02")  # fmt: skip
    assert data == prefix + crc32c(covered).to_bytes(4, "big") + covered
    assert len(data) == 81
    assert data[8:12] == (81 - 12).to_bytes(4, "big")
    assert data[16] == 2
    assert int.from_bytes(data[17:21], "big") == crc32c(data[21:])
    assert data[57:61] == (2).to_bytes(4, "big")


def test_read_header_returns_every_field() -> None:
    """read_header maps the 61 bytes onto the named fields and derived properties."""
    data = build(SPECS[:3], base_offset=100, producer_id=9, producer_epoch=3, base_sequence=17)
    header = read_header(b"junk" + data, 4)
    assert header == BatchHeader(
        base_offset=100,
        batch_length=len(data) - 12,
        partition_leader_epoch=-1,
        magic=2,
        crc=int.from_bytes(data[17:21], "big"),
        attributes=0,
        last_offset_delta=2,
        base_timestamp=SPECS[0][2],
        max_timestamp=max(spec[2] for spec in SPECS[:3]),
        producer_id=9,
        producer_epoch=3,
        base_sequence=17,
        record_count=3,
    )
    assert (header.size, header.last_offset, header.next_offset) == (len(data), 102, 103)
    assert header.compression is Compression.NONE
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert not header.is_transactional
    assert not header.is_control
    assert header.last_sequence == 19


def test_last_sequence_wraps_at_int32_max_as_kafka_does() -> None:
    """base_sequence + last_offset_delta wraps past 2**31 - 1 to 0; NO_SEQUENCE stays -1."""
    data = build_batch([b"a"] * 5, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2)
    assert read_header(data).last_sequence == 2
    assert read_header(build_batch([b"a"] * 5)).last_sequence == NO_SEQUENCE


def test_attribute_bits_land_where_kafka_puts_them() -> None:
    """Codec bits 0-2, timestamp type bit 3, transactional bit 4, control bit 5."""
    data = build_batch(
        [b"a"],
        compression=Compression.LZ4,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        is_transactional=True,
        is_control=True,
        producer_id=4,
        producer_epoch=0,
    )
    header = validate_batch(data)
    assert header.attributes == 0b111011
    assert header.compression is Compression.LZ4
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.is_transactional
    assert header.is_control
    assert not header.has_delete_horizon


# --- compatibility with kafka-python -----------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kafka_python_reads_our_batches(codec: Compression) -> None:
    """kafka-python decodes our batch field for field, producer state and flags included."""
    data = build(
        SPECS,
        compression=codec,
        base_offset=42,
        producer_id=1234,
        producer_epoch=5,
        base_sequence=77,
        is_transactional=True,
    )
    (batch,), seen = kafka_read(data)
    assert seen == expected(SPECS, 42)
    assert batch.compression_type == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1234, 5, 77)
    assert batch.is_transactional
    assert not batch.is_control_batch
    assert (batch.base_offset, batch.last_offset_delta) == (42, len(SPECS) - 1)
    assert batch.max_timestamp == max(spec[2] for spec in SPECS)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_we_read_kafka_python_batches(codec: Compression) -> None:
    """Our validate_batch accepts kafka-python's batch and decode_batch reads it identically."""
    producer = {"producer_id": 99, "producer_epoch": 2, "base_sequence": 8}
    data = kafka_build(SPECS, codec, is_transactional=True, **producer)
    header = validate_batch(data)
    assert header.compression is codec  # the values compress, so kafka-python keeps the codec
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (99, 2, 8)
    assert header.is_transactional
    decoded_header, records = decode_batch(data)
    assert decoded_header == header
    assert ours(records) == expected(SPECS)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_large_batches_cross_codec_block_boundaries_both_ways(codec: Compression) -> None:
    """Records spanning many 32 KiB snappy / 64 KiB lz4 blocks survive both codecs."""
    specs: list[Spec] = [
        (str(i).encode(), bytes([i % 251]) * 3000 + str(i).encode(), 10_000 + i, [])
        for i in range(200)
    ]
    ours_built = build(specs, compression=codec)
    assert kafka_read(ours_built)[1] == expected(specs)
    assert ours(decode_batch(kafka_build(specs, codec))[1]) == expected(specs)


def test_batches_concatenated_both_ways() -> None:
    """A buffer of several batches (mixed codecs) reads the same in both codecs."""
    parts = [build(SPECS, compression=codec, base_offset=10 * i) for i, codec in enumerate(CODECS)]
    data = b"".join(parts)
    assert ours(decode_batches(data)) == kafka_read(data)[1]
    kafka_parts = b"".join(kafka_build(SPECS, codec) for codec in CODECS)
    assert ours(decode_batches(kafka_parts)) == kafka_read(kafka_parts)[1]


def test_plain_raw_snappy_without_xerial_framing_is_read() -> None:
    """A snappy payload that is one raw block (no xerial header) decodes, as in Kafka."""
    plain = build(SPECS)
    raw = bytes(cramjam.snappy.compress_raw(plain[HEADER_SIZE:]))
    data = reframe(plain, raw, attributes=int(Compression.SNAPPY))
    assert ours(decode_batch(data)[1]) == expected(SPECS)
    assert kafka_read(data)[1] == expected(SPECS)


def test_snappy_uses_xerial_framing_with_32k_blocks() -> None:
    """Our snappy payload is the xerial header then length-prefixed blocks of <= 32 KiB."""
    data = build([(None, bytes(100_000), 0, [])], compression=Compression.SNAPPY)
    payload = data[HEADER_SIZE:]
    assert payload[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, sizes = 16, []
    while pos < len(payload):
        (length,) = struct.unpack_from(">i", payload, pos)
        block = bytes(cramjam.snappy.decompress_raw(payload[pos + 4 : pos + 4 + length]))
        sizes.append(len(block))
        pos += 4 + length
    assert max(sizes) == 32 * 1024
    assert sum(sizes) == len(build([(None, bytes(100_000), 0, [])])) - HEADER_SIZE


def test_lz4_frame_has_independent_blocks_as_kafka_requires() -> None:
    """The LZ4 frame descriptor sets block independence (Kafka rejects linked blocks)."""
    payload = build(SPECS, compression=Compression.LZ4)[HEADER_SIZE:]
    assert payload[:4] == b"\x04\x22\x4d\x18"
    flags = payload[4]
    assert flags >> 6 == 1
    assert flags & 0x20


def test_zstd_frames_without_content_size_and_concatenated_are_read() -> None:
    """zstd without a content size (as zstd-jni streams) and in two frames decodes."""
    plain = build(SPECS)
    records = plain[HEADER_SIZE:]
    no_size = zstandard.ZstdCompressor(write_content_size=False)
    for payload in (
        no_size.compress(records),
        no_size.compress(records[:50]) + zstandard.ZstdCompressor().compress(records[50:]),
    ):
        data = reframe(plain, payload, attributes=int(Compression.ZSTD))
        assert ours(decode_batch(data)[1]) == expected(SPECS)


def test_null_key_null_value_and_header_values() -> None:
    """Null key, null value, empty headers and a null header value come back as None/()."""
    data = build(
        [(None, None, 5, []), (b"", b"", 6, [("h", None), ("h", b"")])],
        compression=Compression.GZIP,
    )
    first, second = decode_batch(data)[1]
    assert (first.key, first.value, first.headers) == (None, None, ())
    assert (second.key, second.value) == (b"", b"")
    assert second.headers == (Header("h", None), Header("h", b""))
    assert kafka_read(data)[1][1][4] == [("h", None), ("h", b"")]


# --- property tests --------------------------------------------------------------------

keys = st.none() | st.binary(max_size=16)
values = st.none() | st.binary(max_size=80)
header_lists = st.lists(
    st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=8)), max_size=3
)
timestamps = st.integers(min_value=-(2**40), max_value=2**43)
spec_lists = st.lists(st.tuples(keys, values, timestamps, header_lists), min_size=1, max_size=25)
codecs = st.sampled_from(CODECS)


@settings(max_examples=150, deadline=None)
@given(
    specs=spec_lists,
    codec=codecs,
    base_offset=st.integers(0, 2**62),
    base_timestamp=st.none() | timestamps,
)
def test_build_then_decode_round_trips(
    specs: list[Spec], codec: Compression, base_offset: int, base_timestamp: int | None
) -> None:
    """Any records, any codec, any base timestamp (so negative deltas): decode == input."""
    data = build(specs, compression=codec, base_offset=base_offset, base_timestamp=base_timestamp)
    header, records = decode_batch(data)
    assert ours(records) == expected(specs, base_offset)
    assert all(type(r) is Record and type(h) is Header for r in records for h in r.headers)
    assert header.record_count == header.last_offset_delta + 1 == len(specs)
    assert header.max_timestamp == max(spec[2] for spec in specs)
    first = specs[0][2] if base_timestamp is None else base_timestamp
    assert header.base_timestamp == first


@settings(max_examples=40, deadline=None)
@given(specs=spec_lists, codec=codecs)
def test_round_trips_through_kafka_python_both_ways(specs: list[Spec], codec: Compression) -> None:
    """kafka-python reads what we build, and we read what kafka-python builds, identically."""
    assert kafka_read(build(specs, compression=codec))[1] == expected(specs)
    assert ours(decode_batch(kafka_build(specs, codec))[1]) == expected(specs)


# --- errors ----------------------------------------------------------------------------


def batch_at(position: int, **kwargs: Any) -> bytes:
    """A valid batch preceded by ``position`` bytes of another valid batch or padding."""
    first = build(SPECS[:1], base_offset=1)
    assert position >= len(first)
    return first + b"\x00" * (position - len(first)) + build(SPECS, base_offset=7, **kwargs)


def test_bad_magic_is_named() -> None:
    """A magic byte other than 2 raises InvalidMagicError with the magic, position, offset."""
    data = bytearray(batch_at(300))
    data[300 + 16] = 1
    with pytest.raises(InvalidMagicError) as caught:
        validate_batch(data, 300)
    assert (caught.value.magic, caught.value.position, caught.value.offset) == (1, 300, 7)
    assert "bad magic byte 1" in str(caught.value)
    assert "position 300" in str(caught.value)


def test_short_buffer_with_another_magic_reports_the_magic() -> None:
    """A legacy (magic 1) message shorter than a v2 header is named by its magic."""
    legacy = b"\x00" * 8 + struct.pack(">i", 30) + b"\x00" * 4 + b"\x01" + b"\x00" * 20
    with pytest.raises(InvalidMagicError) as caught:
        validate_batch(legacy)
    assert caught.value.magic == 1


@settings(max_examples=60, deadline=None)
@given(codec=codecs, data=st.data())
def test_any_flipped_byte_under_the_crc_is_caught(codec: Compression, data: st.DataObject) -> None:
    """Changing any byte in [21, end) raises CrcMismatchError with stored and computed CRC."""
    batch = bytearray(build(SPECS, compression=codec))
    index = data.draw(st.integers(21, len(batch) - 1))
    batch[index] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CrcMismatchError) as caught:
        validate_batch(batch)
    stored = int.from_bytes(batch[17:21], "big")
    assert (caught.value.stored, caught.value.computed) == (stored, crc32c(bytes(batch[21:])))
    assert caught.value.position == 0
    assert caught.value.offset == 0
    assert f"0x{stored:08x}" in str(caught.value)


def test_a_changed_stored_crc_is_caught() -> None:
    """A corrupted CRC field itself fails the check."""
    batch = bytearray(build(SPECS))
    batch[18] ^= 0x40
    with pytest.raises(CrcMismatchError):
        validate_batch(batch)


def test_crc_does_not_cover_base_offset_or_leader_epoch() -> None:
    """set_base_offset and set_partition_leader_epoch leave the CRC valid."""
    batch = bytearray(b"pad" + build(SPECS, compression=Compression.ZSTD))
    set_base_offset(batch, 3, 2**40)
    set_partition_leader_epoch(batch, 3, 12)
    header = validate_batch(batch, 3)
    assert (header.base_offset, header.partition_leader_epoch) == (2**40, 12)
    records = decode_batch(batch, 3)[1]
    assert [r.offset for r in records] == [2**40 + i for i in range(len(SPECS))]
    assert kafka_read(bytes(batch[3:]))[0][0].leader_epoch == 12


def test_truncated_buffer_is_a_length_error() -> None:
    """A batch cut short raises BatchLengthError naming declared and available bytes."""
    batch = build(SPECS)
    with pytest.raises(BatchLengthError) as caught:
        validate_batch(batch[:-1])
    assert (caught.value.declared, caught.value.available) == (len(batch), len(batch) - 1)
    assert caught.value.offset == 0
    for cut in (0, 5, 12, 40, 60):
        with pytest.raises(BatchLengthError):
            validate_batch(batch[:cut])


def test_length_field_below_the_header_size_is_a_length_error() -> None:
    """A batch length under 49 (61 - 12) raises BatchLengthError even if bytes remain."""
    batch = bytearray(build(SPECS))
    struct.pack_into(">i", batch, 8, 48)
    with pytest.raises(BatchLengthError) as caught:
        validate_batch(batch)
    assert caught.value.declared == 60
    struct.pack_into(">i", batch, 8, -5)
    with pytest.raises(BatchLengthError):
        validate_batch(batch)


def test_length_field_shorter_than_the_records_fails_the_crc() -> None:
    """A length field that cuts the records short (CRC over fewer bytes) is caught."""
    batch = bytearray(build(SPECS))
    struct.pack_into(">i", batch, 8, len(batch) - 12 - 3)
    with pytest.raises(CrcMismatchError):
        validate_batch(batch)


def test_overrunning_record_inside_a_valid_crc_is_a_truncated_record() -> None:
    """A record declaring more bytes than the batch holds passes the CRC, fails decoding."""
    good = record_bytes(b"\x00\x00\x00\x01\x02v\x00")  # ts 0, offset 0, null key, b"v"
    bad = record_bytes(b"\x00\x00\x02\x01\x02w\x00", declared=40)
    data = reframe(build_batch([b"a", b"b"], base_offset=3), good + bad)
    validate_batch(data)
    with pytest.raises(TruncatedRecordError) as caught:
        decode_batch(data)
    assert (caught.value.position, caught.value.offset) == (0, 3)
    assert "record 1" in str(caught.value)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (record_bytes(b"\x00\x00\x00\x01\x02v\x00", declared=8), "record 0"),  # too long
        (record_bytes(b"\x00\x00\x00\x01\x02v\x00", declared=6), "record 0"),  # too short
        (record_bytes(b"\x00\x00\x00\x01\x02v\x00") + b"\x01", "record 1"),  # trailing byte
        (record_bytes(b"\x00\x00\x00\x05\x02v\x00"), "key length -3"),
        (record_bytes(b"\x00\x00\x00\x01\x02v\x02\x01\x00"), "header"),  # null header key
        (record_bytes(b"\x00\x00\x00\x01\x02v\x02\x02\xff\x00"), "utf-8"),
        (record_bytes(b"\x00" + b"\xff" * 10 + b"\x01\x00\x01\x00\x00"), "varint"),
    ],
    ids=[
        "too-long",
        "too-short",
        "trailing",
        "negative-length",
        "null-header-key",
        "utf8",
        "varint",
    ],
)
def test_malformed_records_are_truncated_record_errors(payload: bytes, reason: str) -> None:
    """Each malformed-record shape raises TruncatedRecordError naming what is wrong."""
    data = reframe(build_batch([b"a"]), payload)
    with pytest.raises(TruncatedRecordError, match=f"(?i){reason}"):
        decode_batch(data)


def test_oversize_batch_is_named() -> None:
    """A batch larger than max_batch_bytes raises OversizeBatchError with both sizes."""
    batch = build(SPECS)
    validate_batch(batch, max_batch_bytes=len(batch))
    with pytest.raises(OversizeBatchError) as caught:
        validate_batch(batch, max_batch_bytes=len(batch) - 1)
    assert (caught.value.size, caught.value.max_bytes) == (len(batch), len(batch) - 1)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_with_a_valid_crc_is_named(codec: int) -> None:
    """Codec bits 5-7 raise UnsupportedCodecError even though the CRC is correct."""
    plain = build(SPECS)
    data = reframe(plain, plain[HEADER_SIZE:], attributes=codec)
    with pytest.raises(UnsupportedCodecError) as caught:
        validate_batch(data)
    assert caught.value.codec == codec
    assert f"codec {codec}" in str(caught.value)
    with pytest.raises(UnsupportedCodecError):
        decode_batch(data)
    with pytest.raises(UnsupportedCodecError):
        _ = read_header(data).compression


def test_record_count_above_the_records_is_caught_when_decoding() -> None:
    """A header claiming more records than present passes validate, fails decode."""
    plain = build(SPECS)
    data = reframe(plain, plain[HEADER_SIZE:], record_count=6, last_offset_delta=5)
    validate_batch(data)
    with pytest.raises(InvalidRecordCountError, match="declares 6 records, 5 present"):
        decode_batch(data)


def test_record_count_below_the_records_is_caught_when_decoding() -> None:
    """A header claiming fewer records than present fails decode."""
    plain = build(SPECS)
    data = reframe(plain, plain[HEADER_SIZE:], record_count=4)
    with pytest.raises(InvalidRecordCountError, match="declares 4 records, 5 present"):
        decode_batch(data)


@pytest.mark.parametrize(("count", "delta"), [(0, 4), (-1, 4), (5, 3)])
def test_impossible_count_and_offset_delta_fail_validation(count: int, delta: int) -> None:
    """record_count < 1 or last_offset_delta < record_count - 1 raise InvalidRecordCount."""
    plain = build(SPECS, base_offset=9)
    data = reframe(plain, plain[HEADER_SIZE:], record_count=count, last_offset_delta=delta)
    with pytest.raises(InvalidRecordCountError) as caught:
        validate_batch(data)
    assert caught.value.offset == 9
    assert f"record count {count}" in str(caught.value)


def test_compacted_gap_between_count_and_offset_delta_is_valid() -> None:
    """After compaction last_offset_delta may exceed record_count - 1; that is accepted."""
    plain = build(SPECS)
    validate_batch(reframe(plain, plain[HEADER_SIZE:], last_offset_delta=100))


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.name)
def test_undecompressable_payload_names_the_codec(codec: Compression) -> None:
    """Garbage under a valid CRC raises CorruptBatchError saying which codec failed."""
    data = reframe(build(SPECS), b"\x00\x01garbage" * 3, attributes=int(codec))
    with pytest.raises(CorruptBatchError, match=f"cannot decompress {codec.name.lower()}"):
        decode_batch(data)


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.name)
def test_truncated_compressed_payload_is_corrupt(codec: Compression) -> None:
    """A compressed payload cut short (CRC recomputed) is a CorruptBatchError."""
    batch = build(SPECS, compression=codec)
    data = reframe(batch, batch[HEADER_SIZE:-7])
    with pytest.raises(CorruptBatchError):
        decode_batch(data)


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.name)
def test_decompression_is_bounded(codec: Compression) -> None:
    """A payload that inflates past max_uncompressed_bytes is refused, not inflated."""
    data = build([(None, bytes(3 << 20), 0, [])], compression=codec)
    assert len(data) < 1 << 20
    with pytest.raises(CorruptBatchError, match="more than 1048576 bytes"):
        decode_batch(data, max_uncompressed_bytes=1 << 20)
    assert decode_batch(data)[1][0].value == bytes(3 << 20)


# --- broker-side rewrites --------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_set_log_append_time_rewrites_every_timestamp(codec: Compression) -> None:
    """After set_log_append_time every record reads the append time and the CRC checks."""
    batch = bytearray(b"\xff" * 10 + build(SPECS, compression=codec))
    set_log_append_time(batch, 10, 1_800_000_000_000)
    header = validate_batch(batch, 10)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 1_800_000_000_000
    assert header.compression is codec
    assert {r.timestamp for r in decode_batch(batch, 10)[1]} == {1_800_000_000_000}
    assert {seen[1] for seen in kafka_read(bytes(batch[10:]))[1]} == {1_800_000_000_000}


def test_setters_work_on_a_memoryview() -> None:
    """The set_* functions write through a writable memoryview."""
    batch = bytearray(build(SPECS))
    view = memoryview(batch)
    set_base_offset(view, 0, 77)
    set_log_append_time(view, 0, 5)
    assert validate_batch(batch).base_offset == 77


# --- iteration -------------------------------------------------------------------------


def test_iter_batches_yields_positions_then_raises_on_a_torn_tail() -> None:
    """iter_batches walks consecutive batches and stops with BatchLengthError at a torn one."""
    parts = [build(SPECS[: i + 1], base_offset=i * 10) for i in range(3)]
    data = b"".join(parts)
    positions = [0, len(parts[0]), len(parts[0]) + len(parts[1])]
    assert [(p, h.base_offset) for p, h in iter_batches(data)] == list(
        zip(positions, [0, 10, 20], strict=True)
    )
    batches = iter_batches(data[:-5], validate=False)
    seen = [next(batches)[0], next(batches)[0]]
    with pytest.raises(BatchLengthError) as caught:
        next(batches)
    assert seen == positions[:2]
    assert caught.value.position == positions[2]


def test_iter_batches_validates_each_batch() -> None:
    """With validate=True a corrupt middle batch raises with its own position."""
    parts = [build(SPECS, base_offset=i * 10) for i in range(3)]
    data = bytearray(b"".join(parts))
    data[len(parts[0]) + 70] ^= 1
    with pytest.raises(CrcMismatchError) as caught:
        list(iter_batches(data))
    assert (caught.value.position, caught.value.offset) == (len(parts[0]), 10)
    assert len(list(iter_batches(data, validate=False))) == 3


# --- builder ---------------------------------------------------------------------------


def test_builder_refuses_to_build_empty() -> None:
    """build() without records raises ValueError."""
    with pytest.raises(ValueError, match="without records"):
        BatchBuilder().build()


def test_builder_counts_and_estimates() -> None:
    """len() counts records; estimated_size() is header + uncompressed records."""
    builder = BatchBuilder(compression=Compression.GZIP)
    assert (len(builder), builder.estimated_size()) == (0, HEADER_SIZE)
    builder.append(b"x" * 100, timestamp=1)
    builder.append(b"y" * 100, timestamp=2)
    assert len(builder) == 2
    uncompressed = build([(None, b"x" * 100, 1, []), (None, b"y" * 100, 2, [])])
    assert builder.estimated_size() == len(uncompressed)


def test_builder_defaults_timestamp_to_now() -> None:
    """A record without a timestamp gets the wall clock in ms."""
    before = time.time_ns() // 1_000_000
    (record,) = decode_batch(build_batch([b"v"]))[1]
    assert before <= record.timestamp <= time.time_ns() // 1_000_000


def test_a_refused_append_leaves_the_builder_unchanged() -> None:
    """An append that fails (timestamp delta beyond int64, bad type) adds nothing."""
    builder = BatchBuilder()
    builder.append(b"a", timestamp=-(2**62))
    with pytest.raises(ValueError, match="64-bit"):
        builder.append(b"b", timestamp=2**62 + 1)
    with pytest.raises(TypeError):
        builder.append("text", timestamp=0)  # type: ignore[arg-type]
    header, records = decode_batch(builder.build())
    assert len(builder) == 1
    assert header.max_timestamp == -(2**62)
    assert [r.value for r in records] == [b"a"]


def test_transactional_batch_needs_a_producer_id() -> None:
    """is_transactional without a producer id is refused up front."""
    with pytest.raises(ValueError, match="producer id"):
        BatchBuilder(is_transactional=True)


def test_builder_accepts_header_objects_and_buffer_values() -> None:
    """Headers as Header or tuples, keys and values as bytearray or memoryview."""
    builder = BatchBuilder()
    builder.append(
        memoryview(b"mv"), key=bytearray(b"ba"), timestamp=3, headers=[Header("a", b"1")]
    )
    builder.append(b"v", timestamp=4, headers=[("b", None)])
    first, second = decode_batch(builder.build())[1]
    assert (first.key, first.value, first.headers) == (b"ba", b"mv", (Header("a", b"1"),))
    assert second.headers == (Header("b", None),)


def test_build_batch_takes_values_pairs_and_records() -> None:
    """build_batch items: a value, a (key, value) pair, or a Record (offset ignored)."""
    record = Record(offset=99, timestamp=5, key=b"rk", value=b"rv", headers=(Header("h", b""),))
    data = build_batch([b"v", (b"k", None), None, record], base_offset=10, base_timestamp=5)
    records = decode_batch(data)[1]
    assert [(r.offset, r.key, r.value) for r in records] == [
        (10, None, b"v"),
        (11, b"k", None),
        (12, None, None),
        (13, b"rk", b"rv"),
    ]
    assert records[3] == Record(13, 5, b"rk", b"rv", (Header("h", b""),))


def test_decoded_records_are_ordinary_frozen_records() -> None:
    """Decoded records equal, hash like and are as immutable as constructed ones."""
    (record,) = decode_batch(build([(b"k", b"v", 9, [("h", b"1")])]))[1]
    constructed = Record(0, 9, b"k", b"v", (Header("h", b"1"),))
    assert type(record) is Record
    assert record == constructed
    assert hash(record) == hash(constructed)
    assert repr(record) == repr(constructed)
    with pytest.raises(AttributeError):
        record.offset = 1  # type: ignore[misc]
    header = read_header(build_batch([b"v"]))
    assert type(header) is BatchHeader
    with pytest.raises(AttributeError):
        header.base_offset = 1  # type: ignore[misc]


# --- fuzzing: only CorruptBatchError may escape -----------------------------------------


def only_corrupt_batch_errors(buf: bytes | bytearray, position: int = 0) -> None:
    """Run every reader over ``buf``; anything but a CorruptBatchError fails the test."""
    for reader in (
        lambda: validate_batch(buf, position),
        lambda: decode_batch(buf, position),
        lambda: decode_batch(buf, position, verify_crc=False),
        lambda: decode_batches(buf),
    ):
        with contextlib.suppress(CorruptBatchError):
            reader()


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_corrupt_batch_errors(garbage: bytes) -> None:
    """Garbage never leaks IndexError, struct.error or a codec error."""
    only_corrupt_batch_errors(garbage)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(codec=codecs, data=st.data())
def test_single_byte_corruption_raises_only_corrupt_batch_errors(
    codec: Compression, data: st.DataObject
) -> None:
    """Any one byte of a valid batch set to any value: only CorruptBatchError (CRC off too)."""
    batch = bytearray(build(SPECS, compression=codec))
    batch[data.draw(st.integers(0, len(batch) - 1))] = data.draw(st.integers(0, 255))
    only_corrupt_batch_errors(batch)


FRAME_STARTS = [
    b"",
    b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01",
    lz4.frame.compress(b"", store_size=False)[:7],
    zstandard.ZstdCompressor().compress(b"")[:6],
    zlib.compressobj(wbits=31).compress(b"") + b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff",
]


@settings(max_examples=200, deadline=None)
@given(
    codec=codecs,
    start=st.sampled_from(FRAME_STARTS),
    garbage=st.binary(max_size=120),
    count=st.integers(1, 4),
)
def test_garbage_records_under_a_valid_crc_raise_only_corrupt_batch_errors(
    codec: Compression, start: bytes, garbage: bytes, count: int
) -> None:
    """Valid header and CRC over random (frame-shaped) records: only CorruptBatchError."""
    plain = build(SPECS)
    shape = {"attributes": int(codec), "record_count": count, "last_offset_delta": count - 1}
    data = reframe(plain, start + garbage, **shape)
    only_corrupt_batch_errors(data)


@settings(max_examples=150, deadline=None)
@given(
    timestamps=st.lists(st.integers(-(10**12), 10**12), min_size=1, max_size=40),
    codec=st.sampled_from(list(Compression)),
    target=st.integers(-(10**12) - 5, 10**12 + 5),
    min_delta=st.integers(0, 45),
)
def test_first_offset_at_or_after_agrees_with_a_full_decode(timestamps, codec, target, min_delta):
    """The timestamp-only scan finds what decoding every record finds."""
    builder = BatchBuilder(compression=codec, base_offset=1_000)
    for n, ts in enumerate(timestamps):
        builder.append(b"v" * (n * 7), key=b"k" * n, timestamp=ts, headers=[("h", b"x")] * (n % 3))
    batch = builder.build()
    min_offset = 1_000 + min_delta
    expected = next(
        (
            r.offset
            for r in decode_batch(batch)[1]
            if r.timestamp >= target and r.offset >= min_offset
        ),
        None,
    )
    assert first_offset_at_or_after(batch, 0, target, min_offset) == expected


def test_timestamp_scan_refuses_a_record_with_a_negative_length():
    """A CRC-valid batch whose record claims length -1 raises instead of looping."""
    batch = bytearray(build_batch([b"v"]))
    batch[61] = 0x01  # the first record's length: zigzag(-1)
    batch[17:21] = crc32c(bytes(batch[21:])).to_bytes(4, "big")
    with pytest.raises(TruncatedRecordError):
        first_offset_at_or_after(bytes(batch), 0, 0)
    with pytest.raises(TruncatedRecordError):
        decode_batch(bytes(batch))

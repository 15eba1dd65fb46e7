"""The consumer's decoding path: ``decode_batches`` over many batches, shared header
tuples, reused decompression contexts. Results are checked against ``decode_batch``
batch by batch and against kafka-python's independent codec."""

from __future__ import annotations

import threading

import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.records import (
    HEADER_SIZE,
    BatchBuilder,
    Compression,
    Header,
    Record,
    build_batch,
    decode_batch,
    decode_batches,
    iter_batches,
    set_log_append_time,
)
from dataplane.records.errors import CorruptBatchError, CrcMismatchError, TruncatedRecordError
from tests.support.kafka_reference import Spec, kafka_build, kafka_read

from .test_records import (
    CODECS,
    build,
    ours,
    record_bytes,
    reframe,
)

keys = st.none() | st.binary(max_size=12)
values = st.none() | st.binary(max_size=200)
header_sets = st.sampled_from(
    [
        [],
        [("x-lane", b"ppe")],
        [("x-lane", b"ppe"), ("content-type", b"application/json")],
        [("x-lane", b"boe-alice")],
        [("x-origin-region", None)],
    ]
)
batch_specs = st.lists(
    st.tuples(keys, values, st.integers(-(2**40), 2**43), header_sets), min_size=1, max_size=40
)


def per_batch(data: bytes) -> list[Record]:
    return [r for position, _ in iter_batches(data) for r in decode_batch(data, position)[1]]


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.tuples(batch_specs, st.sampled_from(CODECS)), min_size=1, max_size=6))
def test_decode_batches_equals_decode_batch_and_kafka_python(
    batches: list[tuple[list[Spec], Compression]],
) -> None:
    """Many batches with recurring header sets: one call reads what each batch reads."""
    parts, offset = [], 0
    for specs, codec in batches:
        parts.append(build(specs, compression=codec, base_offset=offset))
        offset += len(specs) + 3
    data = b"".join(parts)
    records = decode_batches(data)
    assert records == per_batch(data)
    assert ours(records) == kafka_read(data)[1]
    assert all(type(r) is Record and type(h) is Header for r in records for h in r.headers)


@settings(max_examples=30, deadline=None)
@given(specs=batch_specs, codec=st.sampled_from(CODECS))
def test_kafka_python_batches_decode_the_same_in_one_call(
    specs: list[Spec], codec: Compression
) -> None:
    data = kafka_build(specs, codec) + kafka_build(specs, codec)
    assert ours(decode_batches(data)) == kafka_read(data)[1]


def test_records_with_the_same_headers_share_one_tuple_and_differ_where_bytes_differ() -> None:
    builder = BatchBuilder()
    for n in range(300):  # more distinct sets than are kept: the rest decode as usual
        builder.append(b"v", headers=[("x-lane", b"ppe"), ("n", b"%d" % (n % 280))])
    records = decode_batches(builder.build() + builder.build())
    assert len(records) == 600
    assert records[0].headers is records[280].headers
    assert [r.headers for r in records] == [
        (Header("x-lane", b"ppe"), Header("n", b"%d" % (n % 280))) for n in range(300)
    ] * 2


def test_a_record_cut_short_inside_known_header_bytes_is_still_an_error() -> None:
    """Header bytes decoded before do not excuse a record whose length cuts into them."""
    body = b"\x00\x00%c\x01\x02v\x02\x02h\x02x"  # null key, value v, header h: x
    good = [record_bytes(body % (2 * n)) for n in range(2)]
    short = record_bytes(body % 4, declared=len(body % 4) - 1)
    data = reframe(build_batch([b"a", b"b", b"c"]), b"".join([*good, short]))
    assert decode_batches(reframe(build_batch([b"a", b"b"]), b"".join(good)))[1].headers == (
        Header("h", b"x"),
    )
    with pytest.raises(TruncatedRecordError, match="record 2"):
        decode_batches(data)


def test_log_append_time_batches_report_the_batch_time_in_one_call() -> None:
    first = bytearray(build([(None, b"a", 5, []), (None, b"b", 6, [])]))
    set_log_append_time(first, 0, 1_234)
    second = build([(None, b"c", 7, [])], base_offset=2)
    records = decode_batches(bytes(first) + second)
    assert [(r.offset, r.timestamp) for r in records] == [(0, 1_234), (1, 1_234), (2, 7)]


def test_a_bad_batch_after_good_ones_raises_what_decode_batch_raises() -> None:
    good = build([(b"k", b"v", 1, [])])
    bad = bytearray(build([(b"k", b"v", 1, [])], base_offset=1))
    bad[-1] ^= 0x01
    with pytest.raises(CrcMismatchError) as caught:
        decode_batches(good + bytes(bad))
    assert (caught.value.position, caught.value.offset) == (len(good), 1)


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
def test_reused_decompression_contexts_serve_threads_and_survive_errors(
    codec: Compression,
) -> None:
    """Each thread keeps its context; a corrupt payload leaves it usable."""
    batches = [
        build([(b"%d" % n, bytes([n]) * 500, n, [("t", b"%d" % n)])], compression=codec)
        for n in range(64)
    ]
    corrupt = bytearray(batches[0])
    corrupt[HEADER_SIZE + 8 : HEADER_SIZE + 16] = b"\xff" * 8
    corrupt_batch = reframe(batches[0], bytes(corrupt[HEADER_SIZE:]))
    failures: list[BaseException] = []

    def decode_all() -> None:
        try:
            for _ in range(20):
                with pytest.raises(CorruptBatchError):
                    decode_batch(corrupt_batch)
                for n, data in enumerate(batches):
                    (record,) = decode_batch(data)[1]
                    assert record.value == bytes([n]) * 500
        except BaseException as exc:  # handed to the test thread
            failures.append(exc)

    threads = [threading.Thread(target=decode_all) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not failures, repr(failures[0])


def test_zstd_payload_of_two_sized_frames_is_read_whole() -> None:
    """A payload of two frames that state their sizes takes the streaming path."""
    plain = build([(None, b"z" * 300, 1, [])] * 4)
    records = plain[HEADER_SIZE:]
    half = len(records) // 2
    compressor = zstandard.ZstdCompressor(write_content_size=True)
    payload = compressor.compress(records[:half]) + compressor.compress(records[half:])
    data = reframe(plain, payload, attributes=int(Compression.ZSTD))
    assert [r.value for r in decode_batch(data)[1]] == [b"z" * 300] * 4


def test_lz4_payload_expanding_beyond_its_bound_is_refused_not_truncated() -> None:
    """The output bound comes from the payload size; a frame cannot exceed it silently."""
    records = build([(None, bytes(200_000), 1, [])])[HEADER_SIZE:]
    payload = lz4.frame.compress(records, block_linked=False, store_size=False)
    data = reframe(build([(None, bytes(200_000), 1, [])]), payload, attributes=3)
    assert decode_batch(data)[1][0].value == bytes(200_000)
    with pytest.raises(CorruptBatchError, match="more than 1000 bytes"):
        decode_batch(data, max_uncompressed_bytes=1_000)

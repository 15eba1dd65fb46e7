"""The producer's batch encoder: byte for byte what ``BatchBuilder`` builds, read by
kafka-python."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataplane.records import (
    BatchBuilder,
    Compression,
    decode_batch,
    encode_headers,
    validate_batch,
    varint,
)
from tests.dataplane.client.support import (
    CODECS,
    accumulator,
    append_specs,
    drain_all,
    expected,
)
from tests.support.kafka_reference import Spec, kafka_build, kafka_read

NOW = 1_700_000_000_000
SPECS: list[Spec] = [
    (None, b"plain", NOW, []),
    (b"k", b"with a key", NOW + 1, []),
    (b"k2", None, NOW + 2, []),  # a tombstone
    (None, b"", NOW - 5, [("x-lane", b"ppe")]),  # an earlier timestamp: a negative delta
    (b"", b"v" * 70_000, NOW + 100_000, [("h", None), ("h", b""), ("\u00e9", b"x" * 200)]),
    (b"k" * 300, b"v", NOW + 2**40, []),  # deltas past the varint table
]


def build_reference(specs: list[Spec], **kwargs: object) -> bytes:
    builder = BatchBuilder(**kwargs)  # type: ignore[arg-type]
    for key, value, ts, headers in specs:
        builder.append(value, key=key, timestamp=ts, headers=headers)
    return builder.build()


def ours(specs: list[Spec], codec: Compression, **producer: int) -> bytes:
    acc, topic = accumulator()
    append_specs(acc, topic, specs)
    (batch,) = drain_all(acc)
    return batch.seal(codec, **producer)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_sealed_batch_equals_builder_bytes(codec: Compression) -> None:
    """The accumulator's inline encoder writes BatchBuilder's bytes exactly, every codec."""
    producer = {"producer_id": 77, "producer_epoch": 3, "base_sequence": 12}
    assert ours(SPECS, codec, **producer) == build_reference(SPECS, compression=codec, **producer)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_kafka_python_reads_sealed_batches(codec: Compression) -> None:
    """kafka-python decodes our batch record for record, with the producer fields."""
    data = ours(SPECS, codec, producer_id=5, producer_epoch=1, base_sequence=40)
    (batch,), seen = kafka_read(data)
    assert seen == expected(SPECS)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (5, 1, 40)
    assert batch.compression_type == int(codec)


def test_kafka_python_builds_the_same_records() -> None:
    """kafka-python's uncompressed batch equals ours but for the partition leader epoch
    (a broker-assigned field it writes as 0 and Kafka's producer as -1, as we do)."""
    specs = [s for s in SPECS if s[1] is None or len(s[1]) < 1000]
    mine, theirs = ours(specs, Compression.NONE), kafka_build(specs, Compression.NONE)
    assert mine[:12] + mine[16:] == theirs[:12] + theirs[16:]


def test_many_records_overflow_the_varint_table() -> None:
    """Offset deltas past 65,535 use the general varint and still decode."""
    specs: list[Spec] = [(None, b"", NOW, [])] * 70_000
    data = ours(specs, Compression.NONE)
    assert data == build_reference(specs)
    header, records = decode_batch(data)
    assert header.record_count == 70_000
    assert records[-1].offset == 69_999


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.none() | st.binary(max_size=40),
            st.none() | st.binary(max_size=300),
            st.integers(min_value=0, max_value=2**42),
            st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_random_records_encode_like_builder(specs: list[Spec]) -> None:
    assert ours(specs, Compression.NONE) == build_reference(specs)


def test_batches_close_at_batch_bytes_and_each_validates() -> None:
    acc, topic = accumulator(batch_bytes=1024)
    specs: list[Spec] = [(None, bytes([i]) * 100, NOW + i, []) for i in range(40)]
    futures = append_specs(acc, topic, specs)
    batches = drain_all(acc)
    assert len(batches) > 1
    assert all(b.size <= 1024 for b in batches)
    seen = [r.value for b in batches for r in decode_batch(b.seal(Compression.NONE))[1]]
    assert seen == [s[1] for s in specs]
    assert [f._index for f in futures[:3]] == [0, 1, 2]
    for batch in batches:
        validate_batch(batch.seal(Compression.LZ4))


def test_a_record_larger_than_batch_bytes_gets_a_batch_of_its_own() -> None:
    acc, topic = accumulator(batch_bytes=200)
    append_specs(acc, topic, [(None, b"a", NOW, []), (None, b"b" * 1000, NOW, [])])
    batches = drain_all(acc)
    assert [b.count for b in batches] == [1, 1]


def test_headers_encoding_and_type_errors() -> None:
    assert encode_headers({"a": b"1"}) == encode_headers([("a", b"1")])
    assert encode_headers([("k", bytearray(b"v"))]) == encode_headers([("k", b"v")])
    with pytest.raises(TypeError, match="header key"):
        encode_headers([(b"k", b"v")])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="header value"):
        encode_headers([("k", "text")])  # type: ignore[list-item]


def test_varint_matches_zigzag() -> None:
    assert varint(0) == b"\x00"
    assert varint(-1) == b"\x01"
    assert varint(1) == b"\x02"
    assert varint(-(2**63)) == b"\xff" * 9 + b"\x01"
    with pytest.raises(ValueError, match="64-bit"):
        varint(2**64)


def test_timestamps_now() -> None:
    """Records sent without a timestamp carry the current time in ms."""
    before = time.time_ns() // 1_000_000
    acc, topic = accumulator()
    append_specs(acc, topic, [(None, b"x", time.time_ns() // 1_000_000, [])])
    (batch,) = drain_all(acc)
    _header, (record,) = decode_batch(batch.seal(Compression.NONE))
    assert before <= record.timestamp <= time.time_ns() // 1_000_000


def _as_batch_records(specs: list[Spec]) -> list[tuple[object, ...]]:
    return [(key, value, headers, ts) for key, value, ts, headers in specs]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_append_many_writes_builder_bytes_that_kafka_python_reads(codec: Compression) -> None:
    """``send_batch``'s path (``append_many``, the compiled encoder where built) seals
    BatchBuilder's bytes, after records ``send`` put in the same batch."""
    acc, topic = accumulator()
    append_specs(acc, topic, SPECS[:2])
    acc.append_many(topic, 0, _as_batch_records(SPECS[2:]), NOW, 0, 2)
    (batch,) = drain_all(acc)
    producer = {"producer_id": 9, "producer_epoch": 0, "base_sequence": 3}
    data = batch.seal(codec, **producer)
    assert data == build_reference(SPECS, compression=codec, **producer)
    assert kafka_read(data)[1] == expected(SPECS)


def test_append_many_fills_batches_at_batch_bytes() -> None:
    acc, topic = accumulator(batch_bytes=1024)
    specs: list[Spec] = [(None, bytes([i]) * 100, NOW + i, []) for i in range(40)]
    segments = acc.append_many(topic, 0, _as_batch_records(specs), NOW, 0, 0)
    batches = drain_all(acc)
    assert len(batches) == len(segments) > 1
    assert all(b.size <= 1024 for b in batches)
    seen = [r.value for b in batches for r in decode_batch(b.seal(Compression.NONE))[1]]
    assert seen == [s[1] for s in specs]
    assert sum(s.length for s in segments) == 40
    assert acc.used == sum(len(b.records) for b in batches)

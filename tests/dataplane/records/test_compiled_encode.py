"""The compiled record encoder against its reference, the Python one: the same bytes,
the same return values and the same errors, for random records (keys and values None or
not, headers as pairs or a mapping, explicit timestamps far apart), chunked by ``room``;
and kafka-python reads what ``BatchBuilder.extend`` builds."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataplane.records import BatchBuilder, Compression, builder
from tests.support.kafka_reference import kafka_read

pytestmark = pytest.mark.skipif(
    builder._compiled_encode is None, reason="the compiled codec is not built here"
)
FAST = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))

BYTES = st.none() | st.binary(max_size=30) | st.binary(min_size=128, max_size=300)
HEADER_KEYS = st.sampled_from(["x-lane", "x-trace-id", "\u00e9", ""])
HEADERS = (
    st.none()
    | st.lists(st.tuples(HEADER_KEYS, BYTES), max_size=3)
    | st.dictionaries(HEADER_KEYS, BYTES, max_size=2)
)
TIMESTAMPS = st.none() | st.integers(min_value=-(2**62), max_value=2**62)
RECORD = st.one_of(
    BYTES,
    st.tuples(BYTES, BYTES),
    st.tuples(BYTES, BYTES, HEADERS),
    st.tuples(BYTES, BYTES, HEADERS, TIMESTAMPS),
)


def _outcome(encode: Any, records: list[Any], *args: Any) -> tuple[Any, ...]:
    out = bytearray(b"prefix")
    try:
        return ("ok", encode(out, records, *args), bytes(out))
    except (TypeError, ValueError) as error:
        return ("error", type(error), str(error))


def _size(size: Any, records: list[Any]) -> tuple[Any, ...]:
    try:
        return ("ok", size(records))
    except (TypeError, ValueError) as error:
        return ("error", type(error), str(error))


@FAST
@given(
    st.lists(RECORD, max_size=20),
    st.integers(min_value=0, max_value=5),
    st.none() | st.integers(min_value=-(2**40), max_value=2**40),
    st.integers(min_value=0, max_value=2000),
)
def test_records_encode_alike(records: list[Any], delta: int, base: int | None, room: int) -> None:
    start = min(len(records), delta)
    args = (start, delta, base, 1_700_000_000_000, room)
    expected = _outcome(builder._encode_records, records, *args)
    assert _outcome(builder._compiled_encode, records, *args) == expected
    assert _size(builder._compiled_size, records) == _size(builder._records_size, records)


@FAST
@given(
    st.lists(RECORD, max_size=20),
    st.none() | st.lists(st.tuples(HEADER_KEYS, BYTES), max_size=3),
    st.integers(min_value=0, max_value=2000),
)
def test_shared_headers_encode_alike(records: list[Any], shared: Any, room: int) -> None:
    """A call's shared header block goes to the records without headers of their own,
    alike in both encoders, and is what the record's own headers would have been."""
    block = builder.encode_headers(shared) if shared else None
    args = (0, 0, None, 1_700_000_000_000, room, block)
    expected = _outcome(builder._encode_records, records, *args)
    assert _outcome(builder._compiled_encode, records, *args) == expected
    sized = _size(lambda r: builder._compiled_size(r, block), records)
    assert sized == _size(lambda r: builder._records_size(r, block), records)
    if block is not None and expected[0] == "ok":
        spelled_out = [
            (r[0], r[1], (r[2] if len(r) > 2 else None) or shared, *r[3:])
            if isinstance(r, tuple)
            else (None, r, shared)
            for r in records
        ]
        assert _outcome(builder._encode_records, spelled_out, *args) == expected


def test_records_sharing_one_headers_object_encode_as_each_their_own() -> None:
    """The compiled encoder's reuse of one headers object's encoding within a call."""
    shared = [("x-lane", b"ppe")]
    records = [(None, b"a", shared), (b"k", b"b", shared), (None, b"c", [("x-lane", b"qa")])]
    args = (0, 0, None, 5, 1 << 20)
    copies = [(None, b"a", list(shared)), (b"k", b"b", list(shared)), records[2]]
    assert _outcome(builder._compiled_encode, records, *args) == _outcome(
        builder._encode_records, copies, *args
    )


BAD = [
    [b"ok", 7],
    [(b"k",)],
    [(b"k", b"v", None, None, None)],
    [(1, b"v")],
    [(None, "text")],
    [(None, b"v", [(1, b"x")])],
    [(None, b"v", [("k", 3)])],
    [(None, b"v", None, "soon")],
    [(None, b"v", None, True)],
    [(None, b"v", None, 2**70)],
    [(None, b"v", {"\ud800": b""})],
    [(None, b"v", [("k", b"v", b"extra")])],
    [(None, b"v", [["k", b"v"]])],
    [(None, b"v", None, 2**62 + 2**61), (None, b"w", None, -(2**62) - 2**61)],
    [bytearray(b"copied"), memoryview(b"too"), (bytearray(b"k"), None, [("h", bytearray(b"x"))])],
]


@pytest.mark.parametrize("records", BAD, ids=range(len(BAD)))
def test_bad_and_odd_records_alike(records: list[Any]) -> None:
    """The same error and message (with the record's index), or the same bytes."""
    args = (0, 0, None, 5, 1 << 20)
    assert _outcome(builder._compiled_encode, records, *args) == _outcome(
        builder._encode_records, records, *args
    )
    assert _size(builder._compiled_size, records) == _size(builder._records_size, records)


def test_extend_builds_what_append_builds_and_kafka_reads_it() -> None:
    records = [
        (b"k", b"v", [("x-lane", b"ppe")], 1_700_000_000_000),
        (None, None, None, 1_699_999_999_000),
        (b"", b"x" * 70_000, {"h": None}, 1_700_000_000_000 + 2**40),
    ]
    extended = BatchBuilder(compression=Compression.LZ4)
    extended.extend(records)
    appended = BatchBuilder(compression=Compression.LZ4)
    for key, value, headers, ts in records:
        appended.append(value, key=key, timestamp=ts, headers=headers or ())
    data = extended.build()
    assert data == appended.build()
    _, seen = kafka_read(data)
    assert [(s[2], s[3], s[1]) for s in seen] == [(r[0], r[1], r[3]) for r in records]
    assert seen[0][4] == [("x-lane", b"ppe")]


def test_a_bad_record_leaves_the_builder_as_it_was() -> None:
    batch = BatchBuilder(base_timestamp=10)
    batch.extend([b"a", b"b"], now=10)
    with pytest.raises(TypeError, match="record 1: "):
        batch.extend([b"c", 5])
    assert len(batch) == 2
    reference = BatchBuilder(base_timestamp=10)
    reference.append(b"a", timestamp=10)
    reference.append(b"b", timestamp=10)
    assert batch.build() == reference.build()

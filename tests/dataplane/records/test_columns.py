"""decode_columns: the columns hold what ``decode_batches`` decodes (control batches
skipped, offsets clipped, log-append time, every codec), and the compiled builder makes
the same columns, or raises the same error with the same message, as its Python
reference on random, damaged and crafted batches."""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataplane.records import (
    RECORDS_OFFSET,
    BatchBuilder,
    BinaryColumn,
    Columns,
    Compression,
    CorruptBatchError,
    Header,
    Record,
    RecordCountMismatchError,
    TimestampType,
    TruncatedRecordError,
    UncompressedSizeError,
    columns,
    decode_batch,
    decode_batches,
    decode_columns,
    read_header,
)
from dataplane.records.varint import varint

FAST = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
compiled_only = pytest.mark.skipif(not columns.COMPILED, reason="the compiled codec is not built")

HEADER_KEYS = st.sampled_from(["x-lane", "x-trace-id", "é", ""])
HEADERS = st.lists(st.tuples(HEADER_KEYS, st.none() | st.binary(max_size=8)), max_size=3)
RECORDS = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=40),
        st.integers(min_value=-(2**40), max_value=2**40),
        HEADERS,
    ),
    min_size=1,
    max_size=12,
)
BATCH = st.fixed_dictionaries(
    {
        "records": RECORDS,
        "compression": st.sampled_from(list(Compression)),
        "log_append": st.booleans(),
        "control": st.integers(min_value=0, max_value=5).map(lambda n: n == 0),
    }
)


def _batch(base_offset: int, spec: dict[str, Any]) -> bytes:
    kind = TimestampType.LOG_APPEND_TIME if spec["log_append"] else TimestampType.CREATE_TIME
    builder = BatchBuilder(
        base_offset=base_offset,
        compression=spec["compression"],
        timestamp_type=kind,
        is_control=spec["control"],
        base_timestamp=0,
    )
    for key, value, timestamp, headers in spec["records"]:
        builder.append(value, key=key, timestamp=timestamp, headers=headers)
    return builder.build()


def _batches(specs: list[dict[str, Any]]) -> bytes:
    parts, offset = [], 100
    for spec in specs:
        parts.append(_batch(offset, spec))
        offset += len(spec["records"])
    return b"".join(parts)


def _ints(kind: str, buffer: bytes | memoryview) -> array[int]:
    """A buffer's int32 (``i``) or int64 (``q``) values."""
    return array(kind, bytes(buffer))


def _binary(column: BinaryColumn) -> list[bytes | None]:
    offsets = _ints("i", column.offsets)
    valid = [
        column.validity is None or bool(column.validity[n >> 3] >> (n & 7) & 1)
        for n in range(len(column))
    ]
    return [
        bytes(column.data[offsets[n] : offsets[n + 1]]) if valid[n] else None
        for n in range(len(column))
    ]


def _rows(decoded: Columns) -> list[Record]:
    """The records the columns hold, rebuilt."""
    keys, values = _binary(decoded.keys), _binary(decoded.values)
    names, contents = _binary(decoded.header_keys), _binary(decoded.header_values)
    bounds = _ints("i", decoded.header_offsets)
    rows = []
    for n, (offset, timestamp) in enumerate(
        zip(_ints("q", decoded.offsets), _ints("q", decoded.timestamps), strict=True)
    ):
        headers = tuple(
            Header(names[h].decode(), contents[h])  # type: ignore[union-attr]
            for h in range(bounds[n], bounds[n + 1])
        )
        rows.append(Record(offset, timestamp, keys[n], values[n], headers))
    assert len(rows) == decoded.count
    return rows


def _expected(buf: bytes, low: int, high: int) -> list[Record]:
    """The oracle: ``decode_batches``, control batches dropped, offsets clipped."""
    control = set()
    position = 0
    while position < len(buf):
        header = read_header(buf, position)
        if header.is_control:
            control.update(range(header.base_offset, header.next_offset))
        position += header.size
    return [r for r in decode_batches(buf) if low <= r.offset < high and r.offset not in control]


def _picked(rows: list[Record], name: str) -> list[bytes | None]:
    picked = []
    for row in rows:
        last = None
        for key, value in row.headers:
            if key == name:
                last = value or b""
        picked.append(last)
    return picked


def _outcome(run: Any, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    try:
        return ("ok", run(*args, **kwargs))
    except (CorruptBatchError, ValueError) as err:
        return ("error", type(err).__name__, str(err))


def _modes() -> Iterator[bool]:
    """Each way ``decode_columns`` runs here: compiled (where built), then the reference."""
    compiled = columns.COMPILED
    try:
        for flag in [True, False] if compiled else [False]:
            columns.COMPILED = flag
            yield flag
    finally:
        columns.COMPILED = compiled


def _both(run: Any) -> list[tuple[Any, ...]]:
    """The outcome of ``run()`` each way."""
    return [_outcome(run) for _ in _modes()]


# --- what the columns hold -------------------------------------------------------------


@FAST
@given(st.lists(BATCH, min_size=1, max_size=4), st.data())
def test_columns_hold_the_decoded_records(specs: list[dict[str, Any]], data: Any) -> None:
    """Every codec, log-append time, control batches skipped, offsets clipped; the
    compiled builder and the reference alike."""
    buf = _batches(specs)
    total = sum(len(s["records"]) for s in specs)
    low = data.draw(st.integers(min_value=90, max_value=100 + total))
    high = data.draw(st.integers(min_value=low, max_value=110 + total))
    expected = _expected(buf, low, high)
    outcomes = _both(lambda: decode_columns(buf, low=low, high=high, pick_header="x-lane"))
    assert all(outcome == outcomes[0] for outcome in outcomes)
    kind, decoded = outcomes[0]
    assert kind == "ok"
    assert _rows(decoded) == expected
    assert decoded.picked is not None
    assert _binary(decoded.picked) == _picked(expected, "x-lane")


def test_buffers_are_arrow_layout_without_validity_when_nothing_is_null() -> None:
    builder = BatchBuilder(base_offset=7, base_timestamp=1000)
    builder.append(b"v1", key=b"k", timestamp=1001)
    builder.append(b"", key=b"kk", timestamp=1002, headers=[("a", b"1"), ("b", None)])
    decoded = decode_columns(builder.build())
    assert decoded.count == 2
    assert _ints("q", decoded.offsets).tolist() == [7, 8]
    assert _ints("q", decoded.timestamps).tolist() == [1001, 1002]
    assert decoded.keys == BinaryColumn(array("i", [0, 1, 3]).tobytes(), b"kkk", None, 0)
    assert decoded.values == BinaryColumn(array("i", [0, 2, 2]).tobytes(), b"v1", None, 0)
    assert _ints("i", decoded.header_offsets).tolist() == [0, 0, 2]
    assert decoded.header_values.validity == bytes([0b01])
    assert decoded.header_values.null_count == 1
    assert decoded.picked is None


def test_a_log_append_time_batch_stamps_every_record_with_its_max_timestamp() -> None:
    builder = BatchBuilder(timestamp_type=TimestampType.LOG_APPEND_TIME, base_timestamp=5)
    builder.append(b"a", timestamp=5)
    builder.append(b"b", timestamp=9)
    for _ in _modes():
        assert _ints("q", decode_columns(builder.build()).timestamps).tolist() == [9, 9]


def test_nothing_in_range_gives_empty_columns() -> None:
    buf = _batches([{"records": [(None, b"v", 0, [])], "compression": Compression.NONE,
                     "log_append": False, "control": False}])  # fmt: skip
    decoded = decode_columns(buf, low=500)
    assert decoded.count == 0
    assert _ints("i", decoded.keys.offsets).tolist() == [0]
    assert _ints("i", decoded.header_offsets).tolist() == [0]


# --- damaged input: the same errors either way -----------------------------------------


@FAST
@given(BATCH, st.data())
def test_damaged_batches_fail_alike(spec: dict[str, Any], data: Any) -> None:
    """Bytes of the records changed (the CRC not checked, so they reach the loop), or
    a compressed block damaged: the same error, message and position either way."""
    spec = {**spec, "control": False}
    raw = bytearray(_batch(3, spec))
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        at = data.draw(st.integers(min_value=RECORDS_OFFSET, max_value=len(raw) - 1))
        raw[at] = data.draw(st.integers(min_value=0, max_value=255))
    buf = bytes(raw)
    outcomes = _both(lambda: decode_columns(buf, verify_crc=False, pick_header="x-lane"))
    assert all(outcome == outcomes[0] for outcome in outcomes)
    if outcomes[0][0] == "error" and "past int64" not in outcomes[0][2]:
        with pytest.raises(CorruptBatchError) as caught:  # the Record decoder says the same
            decode_batch(buf, verify_crc=False)
        assert outcomes[0][2] == str(caught.value)


def test_a_bad_crc_is_refused_unless_told_not_to_check() -> None:
    raw = bytearray(_batch(0, {"records": [(None, b"v", 0, [])], "compression": 0,
                               "log_append": False, "control": False}))  # fmt: skip
    raw[-1] ^= 0xFF
    for outcome in _both(lambda: decode_columns(bytes(raw))):
        assert outcome[:2] == ("error", "CrcMismatchError")


def test_a_record_count_that_does_not_match_is_refused() -> None:
    raw = bytearray(_batch(0, {"records": [(None, b"v", 0, [])] * 2, "compression": 0,
                               "log_append": False, "control": False}))  # fmt: skip
    raw[57:61] = (3).to_bytes(4, "big")  # three records claimed, two present
    raw[23:27] = (2).to_bytes(4, "big")
    for _ in _modes():
        with pytest.raises(RecordCountMismatchError):
            decode_columns(bytes(raw), verify_crc=False)


def test_room_reserved_is_bounded_by_the_buffer_not_the_headers_claims() -> None:
    """A header claiming 2**31 records or 2 GiB reserves room for what the buffer holds."""
    spec = {"records": [(None, b"v", 0, [])] * 2, "compression": 0,
            "log_append": False, "control": False}  # fmt: skip
    raw = bytearray(_batch(0, spec) * 2)
    raw[57:61] = (2**31 - 1).to_bytes(4, "big")
    records, _ = columns._room(bytes(raw), 0, len(raw))
    assert records <= len(raw) // columns.MIN_RECORD_BYTES
    raw[8:12] = (2**31 - 1).to_bytes(4, "big")  # the first batch's length
    records, size = columns._room(bytes(raw), 0, len(raw))
    assert size <= len(raw)
    assert records <= len(raw) // columns.MIN_RECORD_BYTES


def test_decompression_is_bounded() -> None:
    spec = {"records": [(None, b"x" * 5000, 0, [])], "compression": Compression.ZSTD,
            "log_append": False, "control": False}  # fmt: skip
    with pytest.raises(UncompressedSizeError):
        decode_columns(_batch(0, spec), max_uncompressed_bytes=1000)


def test_errors_name_the_batch_position_in_the_buffer() -> None:
    good = _batch(0, {"records": [(None, b"v", 0, [])], "compression": 0,
                      "log_append": False, "control": False})  # fmt: skip
    bad = bytearray(_batch(1, {"records": [(None, b"v", 0, [])], "compression": 0,
                               "log_append": False, "control": False}))  # fmt: skip
    bad[RECORDS_OFFSET] = 0x7F  # a record length past the batch
    for outcome in _both(lambda: decode_columns(good + bytes(bad), verify_crc=False)):
        assert outcome[:2] == ("error", "TruncatedRecordError")
        assert f"position {len(good)}" in outcome[2]


# --- the record loop alone, on crafted records (as test_compiled does for _decode) ----


def _records(items: list[tuple[bytes | None, bytes | None, int, list[Any]]]) -> bytes:
    builder = BatchBuilder(base_timestamp=0)
    for key, value, timestamp, headers in items:
        builder.append(value, key=key, timestamp=timestamp, headers=headers)
    return builder.build()[RECORDS_OFFSET:]


def _added(cls: Any, data: bytes, low: int, high: int, stamp: int | None) -> tuple[Any, ...]:
    builder = cls("x-lane")
    try:
        read = builder.add(b"pad" + data + b"pad", 3, 3 + len(data), 5, 1000, stamp, low, high)
    except ValueError as err:
        return ("error", type(err).__name__, str(err))
    return ("ok", read, Columns.of(builder.finish()))


def _same_loop(data: bytes, low: int = 0, high: int = 2**63, stamp: int | None = None) -> None:
    expected = _added(columns.ColumnsReference, data, low, high, stamp)
    assert _added(columns._CompiledBuilder, data, low, high, stamp) == expected


@compiled_only
@FAST
@given(RECORDS, st.data())
def test_loop_alike_on_good_and_damaged_records(items: list[Any], data: Any) -> None:
    raw = bytearray(_records(items))
    for _ in range(data.draw(st.integers(min_value=0, max_value=3))):
        at = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
        raw[at] = data.draw(st.integers(min_value=0, max_value=255))
    cut = data.draw(st.integers(min_value=0, max_value=len(raw)))
    low = data.draw(st.integers(min_value=0, max_value=5 + len(items)))
    high = data.draw(st.integers(min_value=low, max_value=6 + len(items)))
    stamp = data.draw(st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1))
    _same_loop(bytes(raw[:cut]), low, high, stamp)
    _same_loop(bytes(raw), low, high, stamp)


@compiled_only
@FAST
@given(st.binary(max_size=64))
def test_loop_alike_on_arbitrary_bytes(raw: bytes) -> None:
    _same_loop(raw)


@compiled_only
@pytest.mark.parametrize(
    "record",
    [
        b"\x0c\x00\x00\x00\x01\x01\x02\x01\x00",  # null header key
        b"\x0e\x00\x00\x00\x01\x01\x02\x02\xff\x01",  # header key not UTF-8
        b"\x10\x00\x00\x00\x01\x01\x02\x04\xe2\x82\x01",  # header key cut inside a character
        b"\x0c\x00\x00\x00\x01\x01\x02\x02k\x01\x00",  # headers short of the record
        b"\x0c\x00\x00\x00\x01\x01\x7f",  # header count past the record
        b"\x0e\x00\x00\x00\x01\x01\x02\x02\x61\xff\xff",  # a header varint cut off
        b"\x0e\x00\x00\x00\x01\x01\x02\x00\x03\x00",  # header value length -2
        b"\x0c\x00\x00\x03\x01\x01\x00",  # a negative offset delta
        b"\x0c\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # varint past 10 bytes
        b"\x0c\x00\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x7f\x00\x01\x01\x00",  # huge time
        varint(2**31 - 1),  # a length past the batch
        b"\x0c\x00\x00\x00\x03\x01\x00",  # key length -2
        b"\x0c\x00\x00\x00\x01\x03\x00",  # value length -2
        b"\x08\x00\x00\x00\x01\x01\x00" + b"\x00" * 4,  # bytes after the last field
    ],
)
def test_crafted_records_fail_alike(record: bytes) -> None:
    for stamp in (None, 77):
        _same_loop(record, stamp=stamp)


def _record(timestamp_delta: int, offset_delta: int) -> bytes:
    body = b"\x00" + varint(timestamp_delta) + varint(offset_delta) + b"\x01\x01\x00"
    return varint(len(body)) + body


@compiled_only
def test_offsets_and_timestamps_past_int64_are_refused_alike() -> None:
    """Out of int64, a timestamp is refused unless the batch's stamp replaces it; an
    offset is refused when the range takes it (no default ``high`` does)."""
    late = _record(2**63 - 1, 0)  # base timestamp 1000 + delta: past int64
    _same_loop(late)
    assert _added(columns.ColumnsReference, late, 0, 2**63, None)[0] == "error"
    assert _added(columns.ColumnsReference, late, 0, 2**63, 5)[0] == "ok"
    _same_loop(late, stamp=5)
    far = _record(0, 2**63 - 1)  # base offset 5 + delta: past int64
    assert _added(columns.ColumnsReference, far, 0, 2**63, None)[:2] == ("ok", 1)
    assert _added(columns.ColumnsReference, far, 0, 2**70, None)[0] == "error"
    _same_loop(far)
    _same_loop(far, high=2**70)


def test_truncated_record_error_is_what_the_driver_raises() -> None:
    raw = bytearray(_batch(0, {"records": [(b"k", b"v", 0, [])], "compression": 0,
                               "log_append": False, "control": False}))  # fmt: skip
    raw[RECORDS_OFFSET + 4] = 0x7F  # a key length past the record
    with pytest.raises(TruncatedRecordError):
        decode_columns(bytes(raw), verify_crc=False)

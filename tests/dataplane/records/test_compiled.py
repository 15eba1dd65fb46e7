"""The compiled loops against their reference, the Python ones. The record scan: same
counts, timestamp range and records carrying a marked header for good records, same
record index, reason and delta for bad ones. The record loop, in both its shapes (eager
``Record`` tuples with decoded headers, and the SDK's lazy records): same records and
skipped count, or the same error and message."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataplane.records import (
    RECORDS_OFFSET,
    BatchBuilder,
    LazyHeaders,
    Record,
    decoder,
    validation,
)
from dataplane.records.varint import varint

pytestmark = pytest.mark.skipif(
    validation._compiled_scan is None or decoder._compiled_decode is None,
    reason="the compiled codec is not built here",
)
FAST = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))

HEADER_KEYS = st.sampled_from(["x-lane", "x-trace-id", "é", "", "x-deliver-at"])
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


def _records(items: list[tuple[bytes | None, bytes | None, int, list]]) -> bytes:
    builder = BatchBuilder(base_timestamp=0)
    for key, value, timestamp, headers in items:
        builder.append(value, key=key, timestamp=timestamp, headers=headers)
    return builder.build()[RECORDS_OFFSET:]


def _outcome(scan: object, data: bytes, pos: int, end: int) -> tuple[object, ...]:
    try:
        return ("ok", *scan(data, pos, end))  # type: ignore[operator]
    except validation._RecordFaultError as fault:
        return ("fault", fault.index, fault.reason, fault.delta)


def _same(data: bytes, pos: int = 0, end: int | None = None) -> None:
    """The same outcome, without a marker and counting ``x-deliver-at`` headers."""
    end = len(data) if end is None else end
    expected = _outcome(validation._scan, data, pos, end)
    assert _outcome(validation._scan_compiled, data, pos, end) == expected
    marked = _outcome(lambda *a: validation._scan(*a, b"x-deliver-at"), data, pos, end)
    compiled = _outcome(lambda *a: validation._scan_compiled(*a, b"x-deliver-at"), data, pos, end)
    assert compiled == marked


@FAST
@given(RECORDS)
def test_good_records_scan_alike(items: list) -> None:
    _same(_records(items))


@FAST
@given(RECORDS)
def test_the_scan_counts_the_records_carrying_the_marker(items: list) -> None:
    data = _records(items)
    expected = sum(any(k == "x-deliver-at" for k, _ in headers) for *_, headers in items)
    assert validation.SCAN(data, 0, len(data), b"x-deliver-at")[3] == expected
    assert validation._scan(data, 0, len(data), b"x-deliver-at")[3] == expected
    assert validation.SCAN(data, 0, len(data), b"")[3] == 0


@FAST
@given(RECORDS, st.data())
def test_damaged_records_fail_alike(items: list, data: st.DataObject) -> None:
    raw = bytearray(_records(items))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        at = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
        raw[at] = data.draw(st.integers(min_value=0, max_value=255))
    cut = data.draw(st.integers(min_value=0, max_value=len(raw)))
    _same(bytes(raw), 0, cut)  # a cut batch, the bytes after it still readable
    _same(bytes(raw[:cut]))  # nothing after the cut


@FAST
@given(st.binary(max_size=64))
def test_arbitrary_bytes_fail_alike(raw: bytes) -> None:
    _same(raw)


@pytest.mark.parametrize(
    "record",
    [
        varint(2**31 - 1),  # a length past the batch
        b"\x0c\x00\x00\x02\x01\x01\x00" + b"\x00" * 6,  # offset delta 1 for record 0
        b"\x0c\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # varlong past 10 bytes
        b"\x14\x00\x00\x00\x01\x01\x02\x04\xff\xfe\x01",  # header key not UTF-8
        b"\x0a\x00\x00\x00\xff\xff\xff\xff\x1f\x01",  # key length past int32
        b"\x08\x01\x00\x00\x01\x01\x00",  # attributes not 0
        b"\x0a\x00\x00\x00\x01\x01\x04",  # header count past the record
    ],
)
def test_crafted_faults_match(record: bytes) -> None:
    _same(record)


# --- the record loop, both shapes ---------------------------------------------------


class _Rec:
    __slots__ = ("_headers", "_source", "key", "offset", "timestamp", "value")


def _decoded(run: object, *args: object) -> tuple[object, ...]:
    try:
        records, skipped = run(*args)  # type: ignore[operator]
    except (IndexError, ValueError) as err:
        return ("error", type(err).__name__, str(err))
    rows = [
        (type(r), tuple(r)) if isinstance(r, Record) else
        (r.offset, r.timestamp, r.key, r.value, r._source,
         (r._headers.start, r._headers.stop) if isinstance(r._headers, LazyHeaders) else r._headers)
        for r in records
    ]  # fmt: skip
    return ("ok", rows, skipped)


def _same_decoding(data: bytes, end: int, base: int, min_offset: int, dense: bool) -> None:
    """The lazy shape, and the eager one without and with a cache of header sets."""
    shapes = [(_Rec, "src", LazyHeaders, False), (Record, None, decoder.decode_headers, False)]
    shapes.append((Record, None, decoder.decode_headers, True))
    for cls, source, headers_of, cached in shapes:
        args = (data, 0, end, base, 1000, min_offset, dense, cls, source, headers_of)
        python_sets: dict | None = {} if cached else None
        compiled_sets: dict | None = {} if cached else None
        expected = _decoded(decoder._decode, *args, python_sets)
        assert _decoded(decoder._compiled_decode, *args, compiled_sets) == expected, cls
        assert python_sets == compiled_sets


@FAST
@given(RECORDS, st.data())
def test_decoding_alike_on_good_and_damaged_records(items: list, data: st.DataObject) -> None:
    raw = bytearray(_records(items))
    for _ in range(data.draw(st.integers(min_value=0, max_value=3))):
        at = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
        raw[at] = data.draw(st.integers(min_value=0, max_value=255))
    end = data.draw(st.integers(min_value=0, max_value=len(raw)))
    base = data.draw(st.integers(min_value=0, max_value=2**40))
    skip = data.draw(st.integers(min_value=0, max_value=len(items)))
    for dense in (True, False):
        _same_decoding(bytes(raw), end, base, base + skip, dense)
        _same_decoding(bytes(raw), len(raw), base, base + skip, dense)


@FAST
@given(st.binary(max_size=64), st.booleans())
def test_decoding_alike_on_arbitrary_bytes(raw: bytes, dense: bool) -> None:
    _same_decoding(raw, len(raw), 7, 0, dense)


@pytest.mark.parametrize(
    "record",
    [
        b"\x0c\x00\x00\x00\x01\x01\x02\x01\x00",  # null header key
        b"\x0e\x00\x00\x00\x01\x01\x02\x02\xff\x01",  # header key not UTF-8
        b"\x0c\x00\x00\x00\x01\x01\x02\x02k\x01\x00",  # headers short of the record
        b"\x0c\x00\x00\x00\x01\x01\x7f",  # header count past the record
        b"\x0e\x00\x00\x00\x01\x01\x02\x02\x61\xff\xff",  # a header varint cut off
        b"\x0c\x00\x00\x03\x01\x01\x00",  # a negative offset delta
        b"\x0c\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # varint past 10 bytes
        b"\x0c\x00\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x7f\x00\x01\x01\x00",  # huge time
    ],
)
def test_crafted_records_decode_alike(record: bytes) -> None:
    """Header faults raised by ``decode_headers`` (eager) and oversize timestamps."""
    for dense in (True, False):
        _same_decoding(record, len(record), 5, 0, dense)


def test_eager_batches_decode_alike_compiled_and_in_python() -> None:
    """``decode_batches`` gives the same Records either way, headers and all."""
    batch = BatchBuilder(base_timestamp=10)
    for index in range(300):
        headers = [("x-lane", b"blue")] if index % 3 else [("x-trace-id", bytes([index % 256]))]
        batch.append(b"v%d" % index, key=None if index % 2 else b"k", headers=headers)
    data = batch.build()
    compiled = decoder.decode_batches(data)
    decoder.COMPILED = False
    try:
        assert decoder.decode_batches(data) == compiled
    finally:
        decoder.COMPILED = True
    assert [r.offset for r in compiled] == list(range(300))


def test_compiled_records_of_atomic_fields_are_left_to_reference_counting() -> None:
    """A Record of ints, bytes and no headers cannot be in a cycle: the collector does not
    scan it (as it does not scan such a plain tuple); one with headers stays tracked."""
    import gc

    batch = BatchBuilder(base_timestamp=10)
    batch.append(b"plain")
    batch.append(b"tagged", headers=[("x-lane", b"blue")])
    plain, tagged = decoder.decode_batches(batch.build())
    assert not gc.is_tracked(plain)
    assert gc.is_tracked(tagged)


class _Watched:
    """A record class that sees every attribute set: slots must not be written behind it."""

    __slots__ = ("_headers", "_source", "key", "offset", "seen", "timestamp", "value")

    def __setattr__(self, name: str, value: object) -> None:
        if name != "seen":
            object.__setattr__(self, "seen", (*getattr(self, "seen", ()), name))
        object.__setattr__(self, name, value)


class _Derived(_Rec):
    """A subclass that turns one slot into a property: it is set through it."""

    __slots__ = ("_offset",)

    @property  # type: ignore[override]
    def offset(self) -> int:
        return self._offset + 1_000_000

    @offset.setter
    def offset(self, value: int) -> None:
        self._offset = value


@pytest.mark.parametrize("cls", [_Watched, _Derived])
def test_record_classes_that_set_attributes_their_own_way_are_honoured(cls: type) -> None:
    """The compiled loop stores into slots directly only where ``setattr`` would."""
    batch = BatchBuilder(base_timestamp=10)
    for index in range(3):
        batch.append(b"v%d" % index, headers=[("h", b"x")] if index else [])
    data = batch.build()[RECORDS_OFFSET:]
    args = (data, 0, len(data), 5, 10, 0, True, cls, "src", LazyHeaders, None)
    shape = {
        _Watched: lambda r: (r.offset, r.key, r.value, r.seen),
        _Derived: lambda r: (r.offset, r._offset, r.value),
    }[cls]
    compiled = [shape(r) for r in decoder._compiled_decode(*args)[0]]
    assert compiled == [shape(r) for r in decoder._decode(*args)[0]]
    assert compiled[0][0] in (5, 1_000_005)


def test_compiled_lazy_records_are_left_to_reference_counting() -> None:
    """Slotted, read-only records refer to nothing that refers back: the collector does
    not scan them; a class with a ``__dict__`` could hold anything, and stays tracked."""
    import gc

    class _WithDict(_Rec):
        pass

    batch = BatchBuilder(base_timestamp=10)
    batch.append(b"plain")
    batch.append(b"tagged", headers=[("x-lane", b"blue")])
    data = batch.build()[RECORDS_OFFSET:]
    for cls, tracked in ((_Rec, False), (_WithDict, True)):
        args = (data, 0, len(data), 0, 10, 0, True, cls, ("t", 0), LazyHeaders, None)
        records, _ = decoder._compiled_decode(*args)
        assert [gc.is_tracked(r) for r in records] == [tracked, tracked]

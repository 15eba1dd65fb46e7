"""Decoding batches into columns: the records of one or more batches as the plain
buffers an Arrow record batch is made of, with no object per record.

``decode_columns(buf, position, end, low=, high=)`` reads the consecutive batches of
``buf[position:end]``, skips control batches (transaction markers carry no user
records), keeps the records at offsets in ``[low, high)`` and returns ``Columns``. The
buffers follow Arrow's columnar format, in native byte order, so a reader wraps them
without copying (``pyarrow.Array.from_buffers``); this package itself never imports
pyarrow:

==============  ===============================================================
field           buffers
==============  ===============================================================
offsets         int64 per record
timestamps      int64 per record, epoch ms (a log-append-time batch: its max
                timestamp for every record, as ``decode_batch`` reports it)
keys, values    ``BinaryColumn``: int32 offsets (count + 1, from 0), the bytes,
                a validity bitmap (LSB first; None when no record is null)
header_offsets  int32 per record + 1: record i's headers are entries
                ``[header_offsets[i], header_offsets[i + 1])`` of
header_keys     ``BinaryColumn`` of every header's key (UTF-8, never null) and
header_values   ``BinaryColumn`` of its value (null: a null value), in record order
picked          with ``pick_header``: a ``BinaryColumn`` of the value of the last
                header of that name per record, null where it has none (a null
                value reads as empty, as ``lanes.lane_of_headers`` reads
                ``x-lane``); None otherwise
==============  ===============================================================

Headers stay a list of entries, not a map: keys repeat and their order counts, which
is what Spark's ``array<struct<key:string,value:binary>>`` holds.

The batches are checked as ``decode_batch`` checks them (the CRC only with
``verify_crc``) and their records decoded by the same loop (``decoder._decode``),
raising the same errors with the same messages; records below ``low`` are counted, not
read. A column cannot pass what Arrow's 32-bit offsets address (2 GiB): a record that
would take it there raises ``TruncatedRecordError`` naming its offset, as does an
offset or timestamp outside int64.

The record loop runs compiled (``meridian_codec.ColumnBuilder``, ``native/src/
columns.rs``) where ``./dev`` built it; ``ColumnsReference``, in Python, is its
reference (``COMPILED``), and tests hold the two to the same columns and messages.

Thread safety: ``decode_columns`` is pure over its arguments; a builder is one call's.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from dataplane.records.decoder import _decode, decode_headers, records_bytes
from dataplane.records.errors import RecordCountMismatchError, TruncatedRecordError
from dataplane.records.header import (
    check_crc,
    check_fields,
    check_structure,
    read_header,
    valid_fields_or_none,
)
from dataplane.records.layout import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAX_UNCOMPRESSED_BYTES,
    MIN_BATCH_LENGTH,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    ReadableBuffer,
    Record,
)

try:  # the compiled builder (native/, built by ./dev); ``ColumnsReference`` is its reference
    from meridian_codec import ColumnBuilder as _CompiledBuilder
except ImportError:  # an install without it (no Rust toolchain): the Python one runs
    _CompiledBuilder = None

INT64_MIN: Final = -(2**63)
INT64_END: Final = 2**63
"""``high`` by default: past every offset."""
MAX_COLUMN_BYTES: Final = 2**31 - 1
"""What a column of Arrow's 32-bit offsets addresses."""
MIN_RECORD_BYTES: Final = 7
"""The least a record takes: length, attributes, timestamp delta, offset delta, key
length, value length and header count, one byte each."""
COMPRESSED_ROOM_FACTOR: Final = 4
"""How many times its size a compressed batch is counted for in ``_room``."""
ColumnBuffer: TypeAlias = bytes | memoryview
"""A column's bytes: the Python builder's, or a read-only view of the compiled one's
memory (handed over without a copy; it lives while anything holds the view)."""


@dataclass(frozen=True, slots=True)
class BinaryColumn:
    """A binary (or string) column in Arrow's layout: ``offsets`` (int32, one more than
    the entries, from 0), ``data``, ``validity`` (a bit per entry, LSB first; None when
    no entry is null) and ``null_count``."""

    offsets: ColumnBuffer
    data: ColumnBuffer
    validity: ColumnBuffer | None
    null_count: int

    def __len__(self) -> int:
        return len(self.offsets) // 4 - 1


@dataclass(frozen=True, slots=True)
class Columns:
    """The records of ``decode_columns``; see the module docstring for each field."""

    count: int
    offsets: ColumnBuffer
    timestamps: ColumnBuffer
    keys: BinaryColumn
    values: BinaryColumn
    header_offsets: ColumnBuffer
    header_keys: BinaryColumn
    header_values: BinaryColumn
    picked: BinaryColumn | None

    @classmethod
    def of(cls, parts: tuple[Any, ...]) -> Columns:
        """From a builder's ``finish()``: binary columns as ``(offsets, data, validity,
        null_count)`` tuples, each buffer bytes or any object exporting its bytes."""
        count, offsets, timestamps, keys, values, header_offsets, hkeys, hvalues, picked = parts
        return cls(
            count,
            _view(offsets),
            _view(timestamps),
            _binary(keys),
            _binary(values),
            _view(header_offsets),
            _binary(hkeys),
            _binary(hvalues),
            None if picked is None else _binary(picked),
        )


def _view(buffer: Any) -> ColumnBuffer:
    """``buffer`` as bytes, or a view of the compiled builder's memory (no copy)."""
    return buffer if type(buffer) is bytes else memoryview(buffer)


def _binary(parts: tuple[Any, Any, Any, int]) -> BinaryColumn:
    offsets, data, validity, nulls = parts
    return BinaryColumn(
        _view(offsets), _view(data), None if validity is None else _view(validity), nulls
    )


COMPILED = _CompiledBuilder is not None
"""Whether ``decode_columns`` runs the compiled builder (``meridian_codec.ColumnBuilder``:
the same columns and the same errors with the same messages as ``ColumnsReference``);
false where it is not built."""


def decode_columns(
    buf: ReadableBuffer,
    position: int = 0,
    end: int | None = None,
    *,
    low: int = 0,
    high: int = INT64_END,
    verify_crc: bool = True,
    max_uncompressed_bytes: int = MAX_UNCOMPRESSED_BYTES,
    pick_header: str | None = None,
) -> Columns:
    """The user records at offsets in ``[low, high)`` of the batches starting in
    ``buf[position:end]`` (default: to the end), as ``Columns``.

    Raises what ``decode_batch`` raises for a batch (each batch is checked as it
    checks one; the CRC only with ``verify_crc``), with the batch's position in ``buf``.
    """
    low, high = max(low, INT64_MIN), min(high, INT64_END)
    end = len(buf) if end is None else end
    if COMPILED:
        builder: Any = _CompiledBuilder(pick_header, *_room(buf, position, end))
    else:
        builder = ColumnsReference(pick_header)
    while position < end:
        fields = valid_fields_or_none(buf, position, None, crc=verify_crc)
        if fields is None:  # find out what is wrong, and say it
            header = check_structure(buf, position, None)
            if verify_crc:
                check_crc(buf, position, header)
            check_fields(header, position)
            fields = HEADER_STRUCT.unpack_from(buf, position)
        base_offset, length, attributes, last_delta = fields[0], fields[1], fields[5], fields[6]
        wanted = base_offset + last_delta >= low and base_offset < high
        if wanted and not attributes & CONTROL_MASK:
            _add(builder, buf, position, fields, max_uncompressed_bytes, low, high)
        position += length + LOG_OVERHEAD
    return Columns.of(builder.finish())


def _room(buf: ReadableBuffer, position: int, end: int) -> tuple[int, int]:
    """About how many records and key and value bytes the batches at ``position`` hold,
    from their headers alone (a hint: a short or damaged header ends the count): what
    the compiled builder makes room for at once. A compressed batch counts for 4 times
    its size; room never used costs no memory touched. The headers are untrusted: a
    batch counts for no more than the bytes left in ``buf``, and the records for no
    more than ``MIN_RECORD_BYTES`` each of the counted bytes."""
    records = size = 0
    unpack, end = HEADER_STRUCT.unpack_from, min(end, len(buf))
    while position + RECORDS_OFFSET <= end:
        fields = unpack(buf, position)
        length = fields[1]
        if length < MIN_BATCH_LENGTH:
            break
        length = min(length, end - position)
        records += max(fields[12], 0)
        size += length * (COMPRESSED_ROOM_FACTOR if fields[5] & COMPRESSION_MASK else 1)
        position += length + LOG_OVERHEAD
    return min(records, size // MIN_RECORD_BYTES), size


def _add(
    builder: Any,
    buf: ReadableBuffer,
    position: int,
    fields: tuple[int, ...],
    limit: int,
    low: int,
    high: int,
) -> None:
    """The records of the (checked) batch at ``position`` (its header ``fields``)
    appended to ``builder``."""
    base_offset, length, attributes, count = fields[0], fields[1], fields[5], fields[12]
    if attributes & COMPRESSION_MASK:
        data: ReadableBuffer = records_bytes(buf, position, read_header(buf, position), limit)
        start, stop = 0, len(data)
    else:  # read in place
        data, start, stop = buf, position + RECORDS_OFFSET, position + length + LOG_OVERHEAD
    stamp = fields[8] if attributes & TIMESTAMP_TYPE_MASK else None
    try:
        read = builder.add(data, start, stop, base_offset, fields[7], stamp, low, high)
    except ValueError as err:
        raise TruncatedRecordError(str(err), position=position, offset=base_offset) from None
    if read != count:
        raise RecordCountMismatchError(count, read, position=position, offset=base_offset)


class _BinaryReference:
    """A ``BinaryColumn`` being built, in Python."""

    __slots__ = ("data", "offsets", "valid")

    def __init__(self) -> None:
        self.offsets = array("i", [0])
        self.data = bytearray()
        self.valid: list[bool] = []

    def fits(self, extra: int, items: int) -> bool:
        return len(self.data) + extra <= MAX_COLUMN_BYTES and len(self.valid) + items < (
            MAX_COLUMN_BYTES
        )

    def push(self, item: bytes | None) -> None:
        if item is not None:
            self.data += item
        self.valid.append(item is not None)
        self.offsets.append(len(self.data))

    def finish(self) -> tuple[bytes, bytes, bytes | None, int]:
        nulls = self.valid.count(False)
        bitmap = None
        if nulls:
            bits = bytearray((len(self.valid) + 7) // 8)
            for index, valid in enumerate(self.valid):
                if valid:
                    bits[index >> 3] |= 1 << (index & 7)
            bitmap = bytes(bits)
        return _native(self.offsets), bytes(self.data), bitmap, nulls


def _native(values: array[int]) -> bytes:
    """``values`` in native byte order, as Arrow's buffers are (``array`` writes it)."""
    return values.tobytes()


class ColumnsReference:
    """The columns builder in Python: each batch decoded by ``decoder._decode`` (the one
    record loop, headers by ``decode_headers``), its records in range packed in order.
    The reference of ``meridian_codec.ColumnBuilder``, which has the same methods."""

    def __init__(self, pick_header: str | None = None) -> None:
        self._pick = pick_header
        self._offsets, self._timestamps = array("q"), array("q")
        self._keys, self._values = _BinaryReference(), _BinaryReference()
        self._header_offsets = array("i", [0])
        self._header_keys, self._header_values = _BinaryReference(), _BinaryReference()
        self._picked = _BinaryReference()
        self._header_sets: dict[bytes, Any] = {}

    def add(
        self,
        data: ReadableBuffer,
        start: int,
        stop: int,
        base_offset: int,
        base_timestamp: int,
        stamp: int | None,
        low: int,
        high: int,
    ) -> int:
        """See ``meridian_codec.ColumnBuilder.add``: the records of ``data[start:stop]``
        (one batch's, decompressed) at offsets in ``[low, high)`` appended, every one
        stamped ``stamp`` when given; returns how many the batch holds; ``ValueError``
        at the first bad record."""
        with memoryview(data) as view:
            records = bytes(view[start:stop])
        taken, skipped = _decode(
            records, 0, len(records), base_offset, base_timestamp, low, False,
            Record, None, decode_headers, self._header_sets,
        )  # fmt: skip
        for record in taken:
            if record.offset < high:
                self._append(record, record.timestamp if stamp is None else stamp)
        return len(taken) + skipped

    def _append(self, record: Record, timestamp: int) -> None:
        offset = record.offset
        if not INT64_MIN <= offset < INT64_END:
            raise ValueError(f"the record at offset {offset} has an offset past int64")
        if not INT64_MIN <= timestamp < INT64_END:
            raise ValueError(f"the record at offset {offset} has timestamp {timestamp} past int64")
        headers = record.headers
        last = None
        for name, content in headers:
            if name == self._pick:
                last = content or b""
        fits = (
            self._keys.fits(len(record.key or b""), 1)
            and self._values.fits(len(record.value or b""), 1)
            and self._header_keys.fits(sum(len(h.key.encode()) for h in headers), len(headers))
            and self._header_values.fits(sum(len(h.value or b"") for h in headers), len(headers))
            and self._picked.fits(len(last or b""), 1)
        )
        if not fits:
            raise ValueError(f"the record at offset {offset} takes a column past 2 GiB")
        self._offsets.append(offset)
        self._timestamps.append(timestamp)
        self._keys.push(record.key)
        self._values.push(record.value)
        for name, content in headers:
            self._header_keys.push(name.encode())
            self._header_values.push(content)
        self._header_offsets.append(len(self._header_keys.valid))
        if self._pick is not None:
            self._picked.push(last)

    def finish(self) -> tuple[Any, ...]:
        """What ``Columns.of`` takes (``meridian_codec.ColumnBuilder.finish``)."""
        return (
            len(self._offsets),
            _native(self._offsets),
            _native(self._timestamps),
            self._keys.finish(),
            self._values.finish(),
            _native(self._header_offsets),
            self._header_keys.finish(),
            self._header_values.finish(),
            None if self._pick is None else self._picked.finish(),
        )

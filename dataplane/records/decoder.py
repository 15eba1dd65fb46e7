"""Decoding RecordBatch v2 records (the layout is ``layout``'s): one module, two shapes.

- Eager (``decode_batch``, ``decode_batches``): validate a batch, decompress it and
  build every ``Record`` with its headers; what storage, the broker and tests read.
- Lazy (``decode_lazy``): a batch already checked and decompressed (a ``FetchedBatch``)
  to records of the caller's class, headers kept as a ``LazyHeaders`` decoded on first
  access and records below ``min_offset`` skipped unbuilt; what the SDK consumer reads.
  A dense batch (offset deltas 0..count-1, what every producer writes; a compacted
  batch is not) takes a faster path: a record's offset is its index, its delta skipped.

Both shapes come out of one record loop, ``_decode``, whose record-making step is
chosen by the class asked for. It runs compiled (``meridian_codec.decode_records``,
``native/src/decode.rs``) where ``./dev`` built it; the Python loop stays its
reference (``COMPILED``), and tests hold the two to the same records and messages.

Thread safety: functions are pure over their arguments; the cache of decoded header
keys is shared by all threads, bounded, and only grows, by whole entries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from dataplane.records.compression import DECOMPRESSION_ERRORS, DecompressionLimitError, decompress
from dataplane.records.errors import (
    CorruptBatchError,
    RecordCountMismatchError,
    TruncatedRecordError,
    UncompressedSizeError,
)
from dataplane.records.header import (
    BatchHeader,
    check_crc,
    check_fields,
    check_structure,
    read_header,
    valid_header_or_none,
)
from dataplane.records.layout import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    LOG_OVERHEAD,
    MAX_UNCOMPRESSED_BYTES,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    Header,
    ReadableBuffer,
    Record,
)
from dataplane.records.varint import read_uvarint

try:  # the compiled record loop (native/, built by ./dev); ``_decode`` is its reference
    from meridian_codec import decode_records as _compiled_decode
except ImportError:  # an install without it (no Rust toolchain): the Python loop runs
    _compiled_decode = None


def decode_batch(
    buf: ReadableBuffer,
    position: int = 0,
    *,
    verify_crc: bool = True,
    max_uncompressed_bytes: int = MAX_UNCOMPRESSED_BYTES,
) -> tuple[BatchHeader, list[Record]]:
    """Validate, decompress and decode the batch at ``position``.

    Raises what ``validate_batch`` raises (the CRC check only with ``verify_crc``);
    ``CorruptBatchError`` when the records do not decompress, ``UncompressedSizeError``
    when they would exceed ``max_uncompressed_bytes``; ``TruncatedRecordError`` when a
    record overruns its declared length or the batch, has a negative length other than
    -1, a varint longer than 10 bytes, a header key that is not UTF-8, or bytes trail
    the last record;
    ``InvalidRecordCountError`` when the number of records differs from the header's.

    ``Record.offset`` is base offset + offset delta; ``Record.timestamp`` is base
    timestamp + delta, or the max timestamp for every record of a log-append-time batch.
    """
    header = check_structure(buf, position, None)
    if verify_crc:
        check_crc(buf, position, header)
    check_fields(header, position)
    data = records_bytes(buf, position, header, max_uncompressed_bytes)
    records: list[Record] = []
    _decode_into(records, data, position, header, {})
    return header, records


def decode_batches(buf: ReadableBuffer) -> list[Record]:
    """All records of all the consecutive batches in ``buf``, in order.

    Each batch is checked as ``decode_batch`` checks it (CRC included) and raises the
    same errors.
    """
    records: list[Record] = []
    header_sets: dict[bytes, tuple[Header, ...]] = {}
    position, end = 0, len(buf)
    while position < end:
        header = valid_header_or_none(buf, position, None)
        if header is None:  # find out what is wrong, and say it
            records += decode_batch(buf, position)[1]
            header = read_header(buf, position)
        else:
            data = records_bytes(buf, position, header, MAX_UNCOMPRESSED_BYTES)
            _decode_into(records, data, position, header, header_sets)
        position += header.batch_length + LOG_OVERHEAD
    return records


def _decode_into(
    out: list[Record],
    data: bytes,
    position: int,
    header: BatchHeader,
    header_sets: dict[bytes, tuple[Header, ...]],
) -> None:
    """Append the batch's records (decompressed in ``data``) to ``out``, or raise."""
    try:  # never the dense loop: a Record's offset is what its delta says
        records, _ = _run(
            data, 0, len(data), header.base_offset, header.base_timestamp, 0, False,
            Record, None, decode_headers, header_sets,
        )  # fmt: skip
    except ValueError as err:
        raise TruncatedRecordError(str(err), position=position, offset=header.base_offset) from None
    if len(records) != header.record_count:
        raise RecordCountMismatchError(
            header.record_count, len(records), position=position, offset=header.base_offset
        )
    if header.attributes & TIMESTAMP_TYPE_MASK:  # log-append time: one time for all
        stamp = header.max_timestamp
        records = [r._replace(timestamp=stamp) for r in records]
    out += records


def first_offset_at_or_after(
    buf: ReadableBuffer, position: int, timestamp: int, min_offset: int = 0
) -> int | None:
    """Offset of the batch's first record with timestamp >= ``timestamp`` and offset >=
    ``min_offset``, or None; the batch must have been validated already.

    Reads only each record's length, timestamp delta and offset delta (no key, value or
    header is touched): timestamp lookups scan a whole batch for one answer.
    """
    header = read_header(buf, position)
    base_offset = header.base_offset
    if header.attributes & TIMESTAMP_TYPE_MASK:  # log-append time: one time for all
        first = max(base_offset, min_offset)
        found = header.max_timestamp >= timestamp and first <= header.last_offset
        return first if found else None
    data = records_bytes(buf, position, header, MAX_UNCOMPRESSED_BYTES)
    base_timestamp, slow = header.base_timestamp, read_uvarint
    pos, end = 0, len(data)
    try:
        while pos < end:
            if (u := data[pos]) < 0x80:
                pos += 1
            elif (b := data[pos + 1]) < 0x80:
                u, pos = u - 0x80 + (b << 7), pos + 2
            else:
                u, pos = slow(data, pos)
            stop = pos + ((u >> 1) ^ -(u & 1))
            if not pos + 6 <= stop <= end:  # also keeps the scan moving forward
                raise ValueError("a record overruns the batch or is too short")
            if (u := data[pos + 1]) < 0x80:  # data[pos] is the record attributes byte
                at = pos + 2
            elif (b := data[pos + 2]) < 0x80:
                u, at = u - 0x80 + (b << 7), pos + 3
            else:
                u, at = slow(data, pos + 1)
            if base_timestamp + ((u >> 1) ^ -(u & 1)) >= timestamp:
                delta, _ = slow(data, at)
                delta = (delta >> 1) ^ -(delta & 1)
                if not 0 <= delta <= header.last_offset_delta:
                    raise ValueError(f"offset delta {delta} is outside the batch")
                if base_offset + delta >= min_offset:
                    return base_offset + delta
            pos = stop
    except (IndexError, ValueError) as err:
        raise TruncatedRecordError(str(err), position=position, offset=base_offset) from None
    return None


def records_bytes(buf: ReadableBuffer, position: int, header: BatchHeader, limit: int) -> bytes:
    """The records of the batch at ``position``, decompressed to at most ``limit`` bytes.

    Raises ``UncompressedSizeError`` past ``limit``, ``CorruptBatchError`` when the
    records do not decompress.
    """
    with memoryview(buf) as view:
        payload = view[position + RECORDS_OFFSET : position + header.size]
        if not header.attributes & COMPRESSION_MASK:
            return bytes(payload)
        codec = header.compression
        try:
            return decompress(codec, payload, limit)
        except DecompressionLimitError as err:
            raise UncompressedSizeError(
                codec.name.lower(), err.limit, position=position, offset=header.base_offset
            ) from None
        except DECOMPRESSION_ERRORS as err:
            raise CorruptBatchError(
                f"cannot decompress {codec.name.lower()} records: {err}",
                position=position,
                offset=header.base_offset,
            ) from None


_HEADER_SETS_KEPT: Final = 256


def decode_headers(data: bytes, start: int, stop: int) -> tuple[Header, ...]:
    """The header block ``data[start:stop]`` (its count first), which it must fill;
    ``ValueError`` (``UnicodeDecodeError`` for a key that is not UTF-8) or
    ``IndexError`` when it is malformed."""
    headers, pos = read_headers(data, start, stop)
    if pos != stop:
        raise ValueError("headers do not fill the record")
    return headers


def read_headers(data: bytes, pos: int, stop: int) -> tuple[tuple[Header, ...], int]:
    """The headers at ``pos`` (their count first) and the position after them."""
    u = data[pos]
    if u < 0x80:
        pos += 1
    else:
        u, pos = read_uvarint(data, pos)
    count = (u >> 1) ^ -(u & 1)
    if not 0 <= count <= (stop - pos) // 2:
        raise ValueError(f"invalid header count {count}")
    headers = []
    new, cls, keys = tuple.__new__, Header, _HEADER_KEYS
    for _ in range(count):
        u = data[pos]
        if u < 0x80:
            pos += 1
        else:
            u, pos = read_uvarint(data, pos)
        if u & 1:
            raise ValueError("null header key" if u == 1 else f"invalid length {(u >> 1) ^ -1}")
        u >>= 1
        raw = data[pos : pos + u]
        pos += u
        key = keys.get(raw)
        if key is None:
            key = raw.decode()
            if len(keys) < _HEADER_KEYS_KEPT:
                keys[raw] = key
        u = data[pos]
        if u < 0x80:
            pos += 1
        else:
            u, pos = read_uvarint(data, pos)
        if not u & 1:
            u >>= 1
            value: bytes | None = data[pos : pos + u]
            pos += u
        elif u == 1:
            value = None
        else:
            raise ValueError(f"invalid length {(u >> 1) ^ -1}")
        headers.append(new(cls, (key, value)))
    return tuple(headers), pos


_HEADER_KEYS: Final[dict[bytes, str]] = {}
"""Header keys decoded so far (a few names such as ``x-trace-id`` recur endlessly)."""
_HEADER_KEYS_KEPT: Final = 4096


# --- lazy records ----------------------------------------------------------------------


@dataclass(slots=True)
class FetchedBatch:
    """One checked batch ready for ``decode_lazy``: its records in ``data[start:end]``,
    decompressed (an uncompressed batch is read in place from the bytes it came in)."""

    base_offset: int
    last_offset: int
    base_timestamp: int
    max_timestamp: int
    attributes: int
    leader_epoch: int
    count: int
    data: bytes
    start: int
    end: int
    producer_id: int = -1

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


class LazyHeaders:
    """A record's header block ``data[start:stop]``, decoded by ``decode``.

    ``decode`` raises ``ValueError`` (``UnicodeDecodeError`` for a key that is not
    UTF-8) when the block is malformed; a subclass may translate it.
    """

    __slots__ = ("data", "start", "stop")

    def __init__(self, data: bytes, start: int, stop: int) -> None:
        self.data, self.start, self.stop = data, start, stop

    def decode(self) -> tuple[tuple[str, bytes | None], ...]:
        return decode_headers(self.data, self.start, self.stop)


COMPILED = _compiled_decode is not None
"""Whether the decoders run the compiled loop (``meridian_codec.decode_records``: the same
records and the same errors with the same messages as ``_decode``); false where it is
not built."""


def decode_lazy(
    batch: FetchedBatch,
    cls: type,
    source: Any,
    min_offset: int = 0,
    lazy: type[LazyHeaders] = LazyHeaders,
) -> list[Any]:
    """The records of ``batch`` at or after ``min_offset``, as instances of ``cls``.

    ``cls`` has the slots ``offset``, ``timestamp``, ``key``, ``value``, ``_headers``
    (a tuple of headers, or a ``lazy`` instance when the record has any) and
    ``_source`` (set to ``source``, what the records of a batch share); records are
    built without calling its ``__init__``. The records are read-only by contract: the
    compiled loop leaves those of a class without ``__dict__`` to reference counting
    (the cycle collector does not scan them, as it does not scan a tuple of atomic
    values), since nothing they refer to refers back to them; a record made part of a
    reference cycle would never be freed. Raises ``TruncatedRecordError`` when a
    record overruns the batch, has a negative length other than -1 or a negative
    offset delta; ``RecordCountMismatchError`` when the batch holds another number of
    records than its header says.
    """
    dense = batch.last_offset - batch.base_offset == batch.count - 1
    try:
        records, skipped = _run(
            batch.data, batch.start, batch.end, batch.base_offset, batch.base_timestamp,
            min_offset, dense, cls, source, lazy, None,
        )  # fmt: skip
    except ValueError as err:
        raise TruncatedRecordError(str(err), offset=batch.base_offset) from None
    if len(records) + skipped != batch.count:
        present = len(records) + skipped
        raise RecordCountMismatchError(batch.count, present, offset=batch.base_offset)
    if batch.attributes & TIMESTAMP_TYPE_MASK:  # log-append time: the broker's, for all
        for record in records:
            record.timestamp = batch.max_timestamp
    return records


def _run(
    data: ReadableBuffer,
    start: int,
    end: int,
    base_offset: int,
    base_timestamp: int,
    min_offset: int,
    dense: bool,
    cls: type,
    source: Any,
    headers_of: Callable[[bytes, int, int], Any],
    header_sets: dict[bytes, Any] | None,
) -> tuple[list[Any], int]:
    """``_decode``, compiled where it is built."""
    if type(data) is not bytes:  # keys and values are bytes, whatever held the batch
        data = bytes(data)
    run = _compiled_decode if COMPILED else _decode
    return run(
        data, start, end, base_offset, base_timestamp, min_offset, dense,
        cls, source, headers_of, header_sets,
    )  # fmt: skip


def _decode(
    data: bytes,
    pos: int,
    end: int,
    base_offset: int,
    base_timestamp: int,
    min_offset: int,
    dense: bool,
    cls: type,
    source: Any,
    headers_of: Callable[[bytes, int, int], Any],
    header_sets: dict[bytes, Any] | None,
) -> tuple[list[Any], int]:
    """The records of ``data[pos:end]`` at or after ``min_offset``, as ``(records,
    records skipped)``; ``ValueError`` naming the first bad record.

    The one loop behind both decoders, and the reference of the compiled one
    (``meridian_codec.decode_records``, ``native/src/decode.rs``), which must make the
    same records and raise the same messages. The record-making step is chosen by
    ``cls``:

    - a ``tuple`` subclass (``Record``): ``cls((offset, timestamp, key, value,
      headers))`` built by ``tuple.__new__``; ``source`` is unused;
    - any other class: an instance made without ``__init__``, with the attributes
      ``offset``, ``timestamp``, ``key``, ``value``, ``_headers`` and ``_source``.

    ``headers`` is ``()`` for a record without any, else ``headers_of(data, start,
    stop)`` over the record's header block: a lazy reader (the SDK) or the decoded
    tuple (``decode_headers``), whose ``ValueError`` is raised again naming the record.
    With ``header_sets``,
    a dict, the result is kept by the block's raw bytes (at most ``_HEADER_SETS_KEPT``)
    and reused: records often carry the same headers (a lane, a content type).

    ``dense`` (offset deltas 0..count-1, what every producer writes) takes a record's
    offset from its index and skips its delta unread. Records below ``min_offset``
    are counted, not built.

    Written for the interpreter: one pass, every varint read inline (its one- and
    two-byte forms without a call, the rare longer ones in ``read_uvarint``), each
    record built without ``__init__``; a call per field would double the cost.
    """
    out: list[Any] = []
    add, slow, make_tuple, make_object = out.append, read_uvarint, tuple.__new__, object.__new__
    eager = issubclass(cls, tuple)
    offset = base_offset - 1  # a dense batch's: the previous record's offset
    skipped = 0
    try:
        while pos < end:
            if (u := data[pos]) < 0x80:
                pos += 1
            elif (b := data[pos + 1]) < 0x80:
                u, pos = u - 0x80 + (b << 7), pos + 2
            else:
                u, pos = slow(data, pos)
            stop = pos + (u >> 1)
            if u & 1 or stop > end or stop < pos + 6:
                raise ValueError(f"record {len(out) + skipped} has a bad length")
            # data[pos] holds the record attributes, which Kafka defines none of.
            if (u := data[pos + 1]) < 0x80:
                pos += 2
            elif (b := data[pos + 2]) < 0x80:
                u, pos = u - 0x80 + (b << 7), pos + 3
            else:
                u, pos = slow(data, pos + 1)
            timestamp = base_timestamp + ((u >> 1) ^ -(u & 1))
            if (u := data[pos]) < 0x80:
                pos += 1
            elif (b := data[pos + 1]) < 0x80:
                u, pos = u - 0x80 + (b << 7), pos + 2
            else:
                u, pos = slow(data, pos)
            if dense:
                offset += 1
            elif u & 1:
                raise ValueError(f"record {len(out) + skipped} has a negative offset delta")
            else:
                offset = base_offset + (u >> 1)
            if offset < min_offset:
                pos = stop
                skipped += 1
                continue
            if (u := data[pos]) == 1:
                key, pos = None, pos + 1
            else:
                if u < 0x80:
                    pos += 1
                elif (b := data[pos + 1]) < 0x80:
                    u, pos = u - 0x80 + (b << 7), pos + 2
                else:
                    u, pos = slow(data, pos)
                if u & 1:
                    raise ValueError(f"record {len(out) + skipped} has key length {(u >> 1) ^ -1}")
                key, pos = data[pos : pos + (u >> 1)], pos + (u >> 1)
            if (u := data[pos]) == 1:
                value, pos = None, pos + 1
            else:
                if u < 0x80:
                    pos += 1
                elif (b := data[pos + 1]) < 0x80:
                    u, pos = u - 0x80 + (b << 7), pos + 2
                else:
                    u, pos = slow(data, pos)
                if u & 1:
                    raise ValueError(
                        f"record {len(out) + skipped} has value length {(u >> 1) ^ -1}"
                    )
                value, pos = data[pos : pos + (u >> 1)], pos + (u >> 1)
            if not data[pos]:
                if pos + 1 != stop:
                    raise ValueError(f"record {len(out) + skipped}'s fields do not fill its length")
                headers: Any = ()
            elif header_sets is None or (headers := header_sets.get(raw := data[pos:stop])) is None:
                try:
                    headers = headers_of(data, pos, stop)
                except ValueError as err:
                    raise ValueError(f"record {len(out) + skipped}'s headers: {err}") from None
                if header_sets is not None and len(header_sets) < _HEADER_SETS_KEPT:
                    header_sets[raw] = headers
            pos = stop
            if eager:
                add(make_tuple(cls, (offset, timestamp, key, value, headers)))
            else:
                record: Any = make_object(cls)
                record.offset = offset
                record.timestamp = timestamp
                record.key = key
                record.value = value
                record._headers = headers
                record._source = source
                add(record)
    except IndexError:
        raise ValueError(f"record {len(out) + skipped} runs past the end of the batch") from None
    return out, skipped

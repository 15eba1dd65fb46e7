"""Record-level validation of a client's batches, as Kafka's ``LogValidator`` does it.

``header.validate_batch`` proves that a batch arrived as its sender built it (length,
magic, CRC, codec), not that the sender built it right: a 76-byte batch with a valid
CRC can claim 2**31 - 1 records and hold one. A log that stored it would move its end
offset by 2**31, and every consumer would stop at that batch for good. So a leader
checks every record of every batch a client sends, before it stores any of them
(``validate_records``, called by ``log_append.validate_batches``):

- compressed records decompress to at most ``max_uncompressed_bytes``: the bound every
  reader applies (``layout.MAX_UNCOMPRESSED_BYTES``), so nothing stored is refused by
  a reader, and a few bytes cannot expand into a memory bomb (``UncompressedSizeError``);
- each record's length varint is 0..2**31 - 1 and the record ends inside the batch;
  its attributes byte is 0 (Kafka defines none; kafka-python reads it as a varint);
  its key, value and headers fill exactly that length; every varint is at most 5 bytes
  (10 for the timestamp delta) and its value fits its Java type, as Kafka's
  ``ByteUtils.readVarint``/``readVarlong`` require; key and value lengths are -1
  (null) or within the record; the header count is 0 or more and no more than the
  bytes left could hold; a header key is not null and is UTF-8 (our readers decode
  it); nothing follows the last record (``MalformedRecordError``, naming the record);
- the header's record count equals the records present (``RecordCountMismatchError``);
- offset deltas are 0, 1, 2, ... in order, so last offset delta = count - 1
  (``OffsetDeltaError``): offsets are assigned here, densely;
- every record timestamp (base timestamp + delta) is an int64 and, for a create-time
  batch appended to a create-time log, the header's max timestamp is the largest of
  them (``MaxTimestampError``; Kafka rewrites a wrong one, Meridian never re-encodes a
  batch). Time lookups and retention trust the max timestamp.

A follower does not repeat this: it copies bytes its leader validated, and its CRC
check proves they are those bytes (Kafka's replica appends skip the validator too).

The scan also counts the records carrying a header named ``marker`` (the broker passes
``x-deliver-at``, so a record due later is noticed on the way: one comparison per
header key, none for a record without headers).

The scan builds no object per record: it walks the varints in place (one- and two-byte
forms inline, as ``decoder.decode_batch`` does); it slices only a record's header
bytes (headers already seen in the batch are not scanned again) and header keys not
yet known to be UTF-8.

Thread safety: pure functions; the cache of header keys found to be UTF-8 is shared by
all threads, bounded, and only grows, by whole entries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from dataplane.records.decoder import records_bytes
from dataplane.records.errors import (
    InvalidTimestampError,
    MalformedRecordError,
    MaxTimestampError,
    OffsetDeltaError,
    RecordCountMismatchError,
)
from dataplane.records.header import BatchHeader
from dataplane.records.layout import (
    COMPRESSION_MASK,
    MAX_UNCOMPRESSED_BYTES,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    ReadableBuffer,
)
from dataplane.records.varint import UINT64_LIMIT, ZIGZAG, read_uvarint32, read_uvarint64

_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
_KEYS_KEPT: Final = 1024
_KEY_BYTES_KEPT: Final = 64
_HEADER_SETS_KEPT: Final = 256  # distinct header byte strings remembered per batch
try:  # the compiled scan (native/, built by ./dev); ``_scan`` below is its reference
    from meridian_codec import scan_records as _compiled_scan
except ImportError:  # an install without it (no Rust toolchain): the Python scan runs
    _compiled_scan = None
COMPILED = _compiled_scan is not None
_VALID_KEYS: Final[set[bytes]] = set()
"""Header keys found to be UTF-8 (a few names such as ``x-trace-id`` recur endlessly);
at most ``_KEYS_KEPT`` of at most ``_KEY_BYTES_KEPT`` bytes, so clients cannot grow it."""


class _RecordFaultError(Exception):
    """A bad record, found by the scan; ``validate_records`` turns it into a typed error
    that names the batch."""

    def __init__(self, index: int, reason: str, *, delta: int | None = None) -> None:
        super().__init__(reason)
        self.index = index
        self.reason = reason
        self.delta = delta  # set when the record's offset delta is the fault


def validate_records(
    buf: ReadableBuffer,
    position: int,
    header: BatchHeader,
    *,
    check_max_timestamp: bool,
    max_uncompressed_bytes: int = MAX_UNCOMPRESSED_BYTES,
    marker: bytes = b"",
) -> int:
    """Check every record of the batch at ``position`` (see the module docstring);
    returns how many carry a header named ``marker`` (0 when it is empty).

    ``header`` is the batch's, already through ``header.validate_batch``.
    ``check_max_timestamp``: the log keeps create time (for a log-append-time log the
    broker stamps the max timestamp itself). Raises ``UncompressedSizeError`` or
    ``CorruptBatchError`` (records that do not decompress), ``MalformedRecordError``,
    ``RecordCountMismatchError``, ``OffsetDeltaError`` or ``MaxTimestampError``.
    """
    where = {"position": position, "offset": header.base_offset}
    data, start, end = _records_span(buf, position, header, max_uncompressed_bytes)
    try:
        count, low, high, marked = SCAN(data, start, end, marker)
    except _RecordFaultError as fault:
        if fault.delta is not None:
            raise OffsetDeltaError(fault.index, fault.delta, fault.index, **where) from None
        reason = f"record {fault.index} has {fault.reason}"
        raise MalformedRecordError(reason, record_index=fault.index, **where) from None
    if count != header.record_count:
        raise RecordCountMismatchError(header.record_count, count, **where)
    if header.last_offset_delta != count - 1:
        raise OffsetDeltaError(None, header.last_offset_delta, count - 1, **where)
    _check_timestamps(header, low, high, check_max_timestamp, where)
    return marked


def _records_span(
    buf: ReadableBuffer, position: int, header: BatchHeader, limit: int
) -> tuple[bytes, int, int]:
    """The records as ``(data, start, end)``: in place when uncompressed and in bytes."""
    end = position + header.size
    if not header.attributes & COMPRESSION_MASK:
        source = buf.obj if isinstance(buf, memoryview) else buf
        if isinstance(source, bytes) and len(source) == len(buf):
            return source, position + RECORDS_OFFSET, end  # no copy
    data = records_bytes(buf, position, header, limit)
    return data, 0, len(data)


def _check_timestamps(
    header: BatchHeader, low: int, high: int, check_max: bool, where: dict[str, int]
) -> None:
    base = header.base_timestamp
    for timestamp in (base + low, base + high):
        if not _INT64_MIN <= timestamp <= _INT64_MAX:
            raise InvalidTimestampError(timestamp, **where)
    # A log-append-time batch: readers report its max timestamp for every record.
    create_time = not header.attributes & TIMESTAMP_TYPE_MASK
    if check_max and create_time and header.max_timestamp != base + high:
        raise MaxTimestampError(header.max_timestamp, base + high, **where)


def _scan(data: bytes, pos: int, end: int, marker: bytes = b"") -> tuple[int, int, int, int]:
    """Walk the records in ``data[pos:end]``: ``(count, lowest, highest timestamp delta,
    records carrying a header named marker)``.

    Raises ``_RecordFaultError`` at the first bad record. Written for the interpreter like
    ``decoder.decode_batch``: every varint inline in its one- and two-byte forms
    (three for the offset delta, which passes 8,191 in big batches), nothing allocated
    per record. Reads past ``end`` (into a following batch) are harmless: a record must
    end exactly at its own length, checked against ``end``.
    """
    zigzag, slow32, seen = ZIGZAG, read_uvarint32, dict[bytes, bool]()
    low, high = UINT64_LIMIT, -UINT64_LIMIT  # beyond any varlong delta
    marked = 0
    expected = 0  # the raw (zigzag) offset delta of the next record: twice its index
    try:
        while pos < end:
            u = data[pos]
            if u < 0x80:
                pos += 1
            elif (b := data[pos + 1]) < 0x80:
                u, pos = u - 0x80 + (b << 7), pos + 2
            else:
                u, pos = slow32(data, pos)
            stop = pos + (u >> 1)
            if u & 1 or stop > end:
                raise _RecordFaultError(
                    expected >> 1, f"length {(u >> 1) ^ -(u & 1)}, {end - pos} bytes left"
                )
            if data[pos]:  # record attributes: Kafka defines none (kafka-python reads a varint)
                raise _RecordFaultError(expected >> 1, f"attributes {data[pos]}, not 0")
            u = data[pos + 1]
            if u < 0x80:
                delta = zigzag[u]
                pos += 2
            elif (b := data[pos + 2]) < 0x80:
                delta = zigzag[u - 0x80 + (b << 7)]
                pos += 3
            else:
                u, pos = read_uvarint64(data, pos + 1)
                delta = (u >> 1) ^ -(u & 1)
            if delta > high:
                high = delta
            if delta < low:
                low = delta
            u = data[pos]
            if u < 0x80:
                pos += 1
            elif (b := data[pos + 1]) < 0x80:
                u, pos = u - 0x80 + (b << 7), pos + 2
            elif (c := data[pos + 2]) < 0x80:
                u, pos = u - 0x80 + ((b - 0x80) << 7) + (c << 14), pos + 3
            else:
                u, pos = slow32(data, pos)
            if u != expected:
                raise _RecordFaultError(expected >> 1, "offset delta", delta=(u >> 1) ^ -(u & 1))
            u = data[pos]  # key length
            if u < 0x80:
                pos += 1
            elif (b := data[pos + 1]) < 0x80:
                u, pos = u - 0x80 + (b << 7), pos + 2
            else:
                u, pos = slow32(data, pos)
            if not u & 1:
                pos += u >> 1
            elif u != 1:
                raise _RecordFaultError(expected >> 1, f"key length {(u >> 1) ^ -1}")
            u = data[pos]  # value length
            if u < 0x80:
                pos += 1
            elif (b := data[pos + 1]) < 0x80:
                u, pos = u - 0x80 + (b << 7), pos + 2
            else:
                u, pos = slow32(data, pos)
            if not u & 1:
                pos += u >> 1
            elif u != 1:
                raise _RecordFaultError(expected >> 1, f"value length {(u >> 1) ^ -1}")
            if data[pos] == 0:  # no headers
                pos += 1
            else:
                pos, has_marker = _scan_headers(data, pos, stop, expected >> 1, seen, marker)
                marked += has_marker
            if pos != stop:
                raise _RecordFaultError(expected >> 1, "fields that do not fill its length")
            expected += 2
    except IndexError:
        raise _RecordFaultError(expected >> 1, "fields past the end of the batch") from None
    except ValueError as err:  # a varint too long or out of range
        raise _RecordFaultError(expected >> 1, str(err)) from None
    return expected >> 1, low, high, marked


def _scan_compiled(
    data: bytes, pos: int, end: int, marker: bytes = b""
) -> tuple[int, int, int, int]:
    """``_scan`` through the compiled ``meridian_codec.scan_records``: the same checks
    and fault reasons, tens of nanoseconds per record instead of about a microsecond."""
    assert _compiled_scan is not None
    outcome = _compiled_scan(data, pos, end, marker or None)
    if outcome[0]:
        return outcome[1], outcome[2], outcome[3], outcome[4]
    raise _RecordFaultError(outcome[1], outcome[2], delta=outcome[3])


SCAN: Final[Callable[[bytes, int, int, bytes], tuple[int, int, int, int]]] = (
    _scan if _compiled_scan is None else _scan_compiled
)
"""The record scan ``validate_records`` runs: compiled when built, else ``_scan``."""


def _scan_headers(
    data: bytes, pos: int, stop: int, index: int, seen: dict[bytes, bool], marker: bytes
) -> tuple[int, bool]:
    """The position after the headers at ``pos`` (their count first) and whether one
    is named ``marker``, or raise.

    Records often carry the same headers (a lane, a content type): header bytes found
    valid once (in ``seen``, with whether they hold ``marker``) are not scanned again;
    their validity depends on nothing else, as they run to the end of the record.
    """
    raw = data[pos:stop]
    known = seen.get(raw)
    if known is not None:
        return stop, known
    marked = False
    u = data[pos]
    if u < 0x80:
        pos += 1
    else:
        u, pos = read_uvarint32(data, pos)
    count = (u >> 1) ^ -(u & 1)
    if not 0 <= count <= (stop - pos) // 2:  # each header takes two bytes at least
        raise _RecordFaultError(index, f"header count {count}, {stop - pos} bytes left")
    for _ in range(count):
        u = data[pos]
        if u < 0x80:
            pos += 1
        else:
            u, pos = read_uvarint32(data, pos)
        if u & 1:
            raise _RecordFaultError(index, f"header key length {(u >> 1) ^ -1}")
        key = data[pos : pos + (u >> 1)]
        pos += u >> 1
        if key not in _VALID_KEYS:
            _check_key(key, index)
        if key == marker and marker:
            marked = True
        u = data[pos]
        if u < 0x80:
            pos += 1
        else:
            u, pos = read_uvarint32(data, pos)
        if not u & 1:
            pos += u >> 1
        elif u != 1:
            raise _RecordFaultError(index, f"header value length {(u >> 1) ^ -1}")
    if pos == stop and len(seen) < _HEADER_SETS_KEPT:
        seen[raw] = marked
    return pos, marked


def _check_key(raw: bytes, index: int) -> None:
    try:
        raw.decode()
    except UnicodeDecodeError:
        raise _RecordFaultError(index, "a header key that is not UTF-8") from None
    if len(raw) <= _KEY_BYTES_KEPT and len(_VALID_KEYS) < _KEYS_KEPT:
        _VALID_KEYS.add(raw)

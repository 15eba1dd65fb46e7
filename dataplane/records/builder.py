"""Encoding RecordBatch v2 batches (the layout is ``layout``'s), as Kafka's producer does.

One encoder for everyone: ``encode_record`` and ``encode_headers`` write records
(zigzag varints through ``varint.VARINTS``, offset deltas 0, 1, 2, ...), ``encode_batch``
compresses them as one block with the chosen codec and writes the header with one
CRC-32C over attributes to the end. ``BatchBuilder`` puts these together for storage,
the broker, tests and benchmarks; the SDK's producer batches encode records as they
are sent and seal them with ``encode_batch``. The broker never re-encodes what it stores.

Thread safety: the functions are pure; a ``BatchBuilder`` belongs to one thread.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, TypeAlias

from crc32c import crc32c

from dataplane.records.compression import Compression, compress
from dataplane.records.layout import (
    CRC_COVERED_STRUCT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    PREFIX_STRUCT,
    Bytes,
    Header,
    Record,
    TimestampType,
)
from dataplane.records.varint import NULL_VARINT, varint

_NO_LIMIT: Final = 1 << 62  # room for any number of records

HeadersLike: TypeAlias = Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None]


def as_bytes(data: object, what: str) -> bytes:
    """``data`` as bytes (bytes-like objects are copied); a clear TypeError otherwise."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"{what} must be bytes (or None), not {type(data).__name__}")


def encode_headers(headers: HeadersLike) -> bytes:
    """The header count and headers of one record (keys UTF-8, values nullable)."""
    items = list(headers.items() if isinstance(headers, Mapping) else headers)
    parts = [varint(len(items))]
    for item in items:
        pair = tuple(item)
        if len(pair) != 2:
            raise ValueError(f"a header is a (key, value) pair, not {len(pair)} items")
        key, value = pair
        if not isinstance(key, str):
            raise TypeError(f"a header key must be a str, not {type(key).__name__}")
        encoded = key.encode()
        parts += (varint(len(encoded)), encoded)
        if value is None:
            parts.append(NULL_VARINT)
        else:
            value = as_bytes(value, "a header value")
            parts += (varint(len(value)), value)
    return b"".join(parts)


def encode_record(
    timestamp_delta: int,
    offset_delta: int,
    key: Bytes | None,
    value: Bytes | None,
    headers: bytes,
) -> bytes:
    """One record (``headers``: the encoded header block, ``b"\\x00"`` for none); the
    SDK's accumulator writes the same bytes inline, its per-record hot path."""
    body = b"".join(
        (
            b"\x00",  # record attributes: none defined
            varint(timestamp_delta),
            varint(offset_delta),
            NULL_VARINT if key is None else varint(len(key)),
            key or b"",
            NULL_VARINT if value is None else varint(len(value)),
            value or b"",
            headers,
        )
    )
    return varint(len(body)) + body


def encode_batch(
    records: bytes | bytearray,
    count: int,
    base_timestamp: int,
    max_timestamp: int,
    *,
    compression: Compression = Compression.NONE,
    flags: int = 0,
    base_offset: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """One RecordBatch v2 around ``count`` already encoded records (offset deltas
    0..count-1): the records compressed as one block with ``compression``, always (as
    Kafka's producer does, even when that does not shrink them), the header written,
    one CRC-32C over attributes to the end. ``flags``: the attribute bits above the
    codec (timestamp type, transactional, control)."""
    payload: bytes | bytearray = records
    if compression is not Compression.NONE:
        payload = compress(compression, bytes(records))
    covered = CRC_COVERED_STRUCT.pack(
        int(compression) | flags,
        count - 1,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    crc = crc32c(payload, crc32c(covered))
    length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    prefix = PREFIX_STRUCT.pack(base_offset, length, partition_leader_epoch, MAGIC, crc)
    return b"".join((prefix, covered, payload))


def _nullable(data: object, what: str) -> bytes | None:
    return None if data is None else as_bytes(data, what)


def _parse(item: object) -> tuple[bytes | None, bytes | None, bytes | None, int | None]:
    """A record of a call: ``(key, value, encoded headers or None, timestamp or None)``."""
    if not isinstance(item, tuple):
        try:
            return None, _nullable(item, "value"), None, None
        except TypeError:
            raise TypeError(
                "a record must be a value (bytes or None) or a (key, value[, headers[, "
                f"timestamp_ms]]) tuple, not {type(item).__name__}"
            ) from None
    if not 2 <= len(item) <= 4:
        raise TypeError(
            f"a record tuple is (key, value[, headers[, timestamp_ms]]), not {len(item)} items"
        )
    key, value = _nullable(item[0], "key"), _nullable(item[1], "value")
    headers = item[2] if len(item) > 2 else None
    if headers and not isinstance(headers, Mapping | list | tuple):
        # A call's records are read twice (sized, then encoded): a one-shot iterator of
        # headers would be empty the second time.
        raise TypeError(
            f"a record's headers are a mapping, list or tuple, not {type(headers).__name__}"
        )
    timestamp = item[3] if len(item) > 3 else None
    if timestamp is not None and (isinstance(timestamp, bool) or not isinstance(timestamp, int)):
        raise TypeError(f"timestamp_ms must be an int, not {type(timestamp).__name__}")
    if timestamp is not None and not -(2**63) <= timestamp < 2**63:
        raise ValueError(f"timestamp_ms {timestamp} does not fit int64")
    return key, value, encode_headers(headers) if headers else None, timestamp


def _fixed(key: bytes | None, value: bytes | None, headers: bytes | None) -> int:
    """A record's bytes but its length prefix and two deltas."""
    size = 1 + (len(headers) if headers is not None else 1)
    for part in (key, value):
        size += 1 if part is None else len(varint(len(part))) + len(part)
    return size


def _indexed(index: int, error: TypeError | ValueError) -> TypeError | ValueError:
    """``error`` naming the record (a ``UnicodeError`` becomes a plain ``ValueError``)."""
    kind = TypeError if isinstance(error, TypeError) else ValueError
    return kind(f"record {index}: {error}")


def _records_size(
    records: Sequence[object], shared_headers: bytes | None = None
) -> tuple[int, int, int | None, int]:
    """``(total, largest, earliest, keyed)`` of ``records``: the bytes they take but length
    prefixes and deltas, the largest such record, the smallest explicit timestamp (None
    if none has one), how many have a key. ``shared_headers`` (an encoded header block,
    as ``encode_headers`` makes) stands for the headers of every record without its own.
    Raises ``TypeError`` or ``ValueError`` naming the first bad record. The reference of
    ``meridian_codec.records_size``."""
    total = largest = keyed = 0
    earliest: int | None = None
    for index, item in enumerate(records):
        try:
            key, value, headers, timestamp = _parse(item)
        except (TypeError, ValueError) as error:
            raise _indexed(index, error) from None
        fixed = _fixed(key, value, headers or shared_headers)
        total += fixed
        largest = max(largest, fixed)
        if timestamp is not None:
            earliest = timestamp if earliest is None else min(earliest, timestamp)
        keyed += key is not None
    return total, largest, earliest, keyed


def _encode_records(
    out: bytearray,
    records: Sequence[object],
    start: int,
    offset_delta: int,
    base_timestamp: int | None,
    now: int,
    room: int,
    shared_headers: bytes | None = None,
) -> tuple[int, int | None, int | None, int]:
    """Append ``records[start:]`` to ``out`` as records of a batch holding
    ``offset_delta`` records so far, based at ``base_timestamp`` (None while empty: the
    first record's), a record without a timestamp taking ``now`` and one without headers
    ``shared_headers`` (an encoded header block; None: no headers); stop before a record
    that would take ``out`` past ``room`` more bytes (the first record of an empty batch
    always goes in). Returns ``(next index, base timestamp, max timestamp of those
    written or None, bytes written)``. The reference of ``meridian_codec.encode_records``:
    each item is a value (bytes or None) or ``(key, value[, headers[, timestamp_ms]])``."""
    written, block = 0, bytearray()  # out grows only on success, as the compiled one's
    base, highest, delta, index = base_timestamp, None, offset_delta, start
    for index in range(start, len(records)):
        try:
            key, value, headers, timestamp = _parse(records[index])
        except (TypeError, ValueError) as error:
            raise _indexed(index, error) from None
        timestamp = now if timestamp is None else timestamp
        first = timestamp if base is None else base
        if not -(2**63) <= timestamp - first < 2**63:
            raise ValueError(f"record {index}: timestamp delta past int64")
        block_of_headers = headers or shared_headers or b"\x00"
        record = encode_record(timestamp - first, delta, key, value, block_of_headers)
        if delta > 0 and written + len(record) > room:
            out += block
            return index, base, highest, written
        block += record
        written += len(record)
        base, delta = first, delta + 1
        highest = timestamp if highest is None else max(highest, timestamp)
    else:
        index = len(records)
    out += block
    return index, base, highest, written


try:  # the compiled encoder (native/, built by ./dev); the functions above are its reference
    from meridian_codec import encode_records as _compiled_encode
    from meridian_codec import records_size as _compiled_size
except ImportError:  # an install without it (no Rust toolchain): the Python functions run
    _compiled_encode = _compiled_size = None

COMPILED_ENCODE = _compiled_encode is not None
encode_records = _compiled_encode or _encode_records
records_size = _compiled_size or _records_size


class BatchBuilder:
    """Accumulates records, then builds one RecordBatch v2 (see the module docstring).

    Offset deltas are 0, 1, 2, ... in append order. The base timestamp is
    ``base_timestamp`` or else the first record's; the max timestamp is the largest record
    timestamp. The records are compressed as one block with ``compression``, always (as
    Kafka's producer does, even when that does not shrink them).
    """

    __slots__ = (
        "_base_offset",
        "_base_sequence",
        "_base_timestamp",
        "_compression",
        "_count",
        "_flags",
        "_max_timestamp",
        "_partition_leader_epoch",
        "_producer_epoch",
        "_producer_id",
        "_records",
    )

    def __init__(
        self,
        *,
        compression: Compression = Compression.NONE,
        base_offset: int = 0,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        is_transactional: bool = False,
        is_control: bool = False,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        base_timestamp: int | None = None,
    ) -> None:
        if is_transactional and producer_id == NO_PRODUCER_ID:
            raise ValueError("a transactional batch needs a producer id")
        self._compression = Compression(compression)
        self._flags = TimestampType(timestamp_type) << 3 | is_transactional << 4 | is_control << 5
        self._base_offset = base_offset
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._partition_leader_epoch = partition_leader_epoch
        self._base_timestamp = base_timestamp
        self._max_timestamp: int | None = None
        self._records = bytearray()
        self._count = 0

    def append(
        self,
        value: Bytes | None,
        *,
        key: Bytes | None = None,
        timestamp: int | None = None,
        headers: HeadersLike | Sequence[Header] = (),
    ) -> None:
        """Add a record; ``timestamp`` (epoch ms) defaults to now."""
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        base = timestamp if self._base_timestamp is None else self._base_timestamp
        headers_block = encode_headers(headers) if headers else b"\x00"
        self._records += encode_record(timestamp - base, self._count, key, value, headers_block)
        self._count += 1
        self._base_timestamp = base
        if self._max_timestamp is None or timestamp > self._max_timestamp:
            self._max_timestamp = timestamp

    def extend(self, records: Sequence[object], *, now: int | None = None) -> None:
        """Add many records in one call (compiled where built: the fast way to fill a
        batch). Each is a value (bytes or None) or a ``(key, value[, headers[,
        timestamp_ms]])`` tuple; one without a timestamp gets ``now`` (epoch ms, default
        the current time). A bad record raises ``TypeError`` or ``ValueError`` naming its
        index, and none of the call's records is added."""
        if not isinstance(records, list | tuple):
            records = list(records)
        if now is None:
            now = time.time_ns() // 1_000_000
        mark = len(self._records)
        try:
            end, base, highest, _ = encode_records(
                self._records, records, 0, self._count, self._base_timestamp, now, _NO_LIMIT
            )
        except (TypeError, ValueError):
            del self._records[mark:]
            raise
        self._count += end
        self._base_timestamp = base
        if highest is not None and (self._max_timestamp is None or highest > self._max_timestamp):
            self._max_timestamp = highest

    def estimated_size(self) -> int:
        """Header plus the records so far, uncompressed: what a producer caps a batch by."""
        return HEADER_SIZE + len(self._records)

    def __len__(self) -> int:
        return self._count

    def build(self) -> bytes:
        """The batch; raises ``ValueError`` when no record was appended."""
        if not self._count or self._base_timestamp is None or self._max_timestamp is None:
            raise ValueError("cannot build a batch without records")
        return encode_batch(
            self._records,
            self._count,
            self._base_timestamp,
            self._max_timestamp,
            compression=self._compression,
            flags=self._flags,
            base_offset=self._base_offset,
            producer_id=self._producer_id,
            producer_epoch=self._producer_epoch,
            base_sequence=self._base_sequence,
            partition_leader_epoch=self._partition_leader_epoch,
        )


RecordLike: TypeAlias = bytes | tuple[bytes | None, bytes | None] | Record | None


def build_batch(records: Iterable[RecordLike], **kwargs: Any) -> bytes:
    """One batch of ``records``; ``kwargs`` go to ``BatchBuilder``.

    Each item is a value (bytes or None), a ``(key, value)`` pair, or a ``Record``, whose
    key, value, timestamp and headers are kept (its offset is not: offsets follow
    ``base_offset`` in order). Raises ``ValueError`` when ``records`` is empty.
    """
    builder = BatchBuilder(**kwargs)
    for item in records:
        if isinstance(item, Record):
            builder.append(item.value, key=item.key, timestamp=item.timestamp, headers=item.headers)
        elif isinstance(item, tuple):
            builder.append(item[1], key=item[0])
        else:
            builder.append(item)
    return builder.build()

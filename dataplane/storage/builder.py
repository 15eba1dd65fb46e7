"""Building RecordBatch v2 batches (the layout is specified in ``records.py``).

``BatchBuilder`` accumulates records and encodes them exactly as Apache Kafka's producer
does: zigzag varints, offset deltas 0, 1, 2, ..., the records compressed as one block
with the chosen codec, CRC-32C over attributes to the end. Producers, tests and
benchmarks build batches here; the broker never re-encodes what it stores.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any, Final, TypeAlias

from crc32c import crc32c

from dataplane.storage.compression import Compression, compress
from dataplane.storage.records import (
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


def _encode_uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_CACHED_VARINTS: Final = 1 << 14
_VARINTS: Final = tuple(_encode_uvarint(zigzag) for zigzag in range(_CACHED_VARINTS))
_NULL: Final = b"\x01"  # zigzag(-1)


def _varint(value: int) -> bytes:
    """Zigzag LEB128 of a signed 64-bit ``value``."""
    zigzag = (value << 1) ^ (value >> 63)
    if zigzag < _CACHED_VARINTS:
        return _VARINTS[zigzag]
    if zigzag >> 64:
        raise ValueError(f"{value} does not fit a signed 64-bit varlong")
    return _encode_uvarint(zigzag)


def _encode_headers(headers: Sequence[tuple[str, bytes | None]] | Sequence[Header]) -> bytes:
    parts = [_varint(len(headers))]
    for header in headers:
        key, value = (header.key, header.value) if isinstance(header, Header) else header
        encoded_key = key.encode()
        parts += (_varint(len(encoded_key)), encoded_key)
        parts += (_NULL,) if value is None else (_varint(len(value)), value)
    return b"".join(parts)


class BatchBuilder:
    """Accumulates records, then builds one RecordBatch v2 (see the module docstring).

    Offset deltas are 0, 1, 2, ... in append order. The base timestamp is
    ``base_timestamp`` or else the first record's; the max timestamp is the largest record
    timestamp. The records are compressed as one block with ``compression``, always (as
    Kafka's producer does, even when that does not shrink them).
    """

    __slots__ = (
        "_attributes",
        "_base_offset",
        "_base_sequence",
        "_base_timestamp",
        "_compression",
        "_count",
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
        self._attributes = (
            self._compression
            | TimestampType(timestamp_type) << 3
            | is_transactional << 4
            | is_control << 5
        )
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
        headers: Sequence[tuple[str, bytes | None]] | Sequence[Header] = (),
    ) -> None:
        """Add a record; ``timestamp`` (epoch ms) defaults to now."""
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        base = timestamp if self._base_timestamp is None else self._base_timestamp
        body = b"".join(
            (
                b"\x00",  # record attributes: none defined
                _varint(timestamp - base),
                _varint(self._count),
                _NULL if key is None else _varint(len(key)),
                key or b"",
                _NULL if value is None else _varint(len(value)),
                value or b"",
                _encode_headers(headers) if headers else b"\x00",
            )
        )
        self._records += _varint(len(body))
        self._records += body
        self._count += 1
        self._base_timestamp = base
        if self._max_timestamp is None or timestamp > self._max_timestamp:
            self._max_timestamp = timestamp

    def estimated_size(self) -> int:
        """Header plus the records so far, uncompressed: what a producer caps a batch by."""
        return HEADER_SIZE + len(self._records)

    def __len__(self) -> int:
        return self._count

    def build(self) -> bytes:
        """The batch; raises ``ValueError`` when no record was appended."""
        if not self._count or self._base_timestamp is None or self._max_timestamp is None:
            raise ValueError("cannot build a batch without records")
        payload: bytes | bytearray = self._records
        if self._compression is not Compression.NONE:
            payload = compress(self._compression, bytes(payload))
        covered = CRC_COVERED_STRUCT.pack(
            self._attributes,
            self._count - 1,
            self._base_timestamp,
            self._max_timestamp,
            self._producer_id,
            self._producer_epoch,
            self._base_sequence,
            self._count,
        )
        crc = crc32c(payload, crc32c(covered))
        length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
        prefix = PREFIX_STRUCT.pack(
            self._base_offset, length, self._partition_leader_epoch, MAGIC, crc
        )
        return b"".join((prefix, covered, payload))


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

"""Producer batches: records encoded straight into RecordBatch v2 bytes as they are sent.

A ``ProducerBatch`` holds the records of one partition, already encoded exactly as
``dataplane.storage.builder.BatchBuilder`` encodes them, in one ``bytearray``: each
record is ``length | attributes 0 | timestamp delta from the first record | offset delta
(0, 1, 2, ...) | key length | key | value length | value | header count | headers``, every
number a zigzag varint (``VARINTS`` holds them for small non-negative numbers). The
accumulator appends records (``accumulator.py``, the per-record hot path). Sealing a
batch (``seal``) compresses that block once and writes the 61-byte header with the
producer id, epoch and base sequence and one CRC-32C. The uncompressed records are kept
until the batch completes, so a retry after a sequence change can seal it again.

Thread safety: records are appended under the accumulator's lock; sealing and
completion belong to the sender thread.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Final, TypeAlias

from crc32c import crc32c

from dataplane.client.decoder import FetchedBatch, LazyHeaders, decode_records
from dataplane.client.future import ProduceResult
from dataplane.client.types import RecordSource, TopicPartition
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
)

HeadersLike: TypeAlias = Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None]


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


VARINT_TABLE_SIZE: Final = 1 << 16
# VARINTS[n]: the zigzag varint of a non-negative n (lengths, deltas, counts).
VARINTS: Final = tuple(_uvarint(n << 1) for n in range(VARINT_TABLE_SIZE))
NULL_VARINT: Final = b"\x01"  # zigzag(-1): a null key or value


def varint(value: int) -> bytes:
    """Zigzag LEB128 of a signed 64-bit ``value``."""
    if 0 <= value < VARINT_TABLE_SIZE:
        return VARINTS[value]
    zigzag = (value << 1) ^ (value >> 63)
    if zigzag >> 64:
        raise ValueError(f"{value} does not fit a signed 64-bit varlong")
    return _uvarint(zigzag)


def encode_headers(headers: HeadersLike) -> bytes:
    """The header count and headers of one record (keys UTF-8, values nullable)."""
    items = list(headers.items() if isinstance(headers, Mapping) else headers)
    parts = [varint(len(items))]
    for key, value in items:
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


def as_bytes(data: object, what: str) -> bytes:
    """``data`` as bytes (bytes-like objects are copied); a clear TypeError otherwise."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"{what} must be bytes (or None), not {type(data).__name__}")


class ProducerBatch:
    """The records of one partition on their way to the broker (see the module docstring).

    ``limit`` bounds the encoded records (header excluded); a first record always fits.
    ``count``, ``base_timestamp`` and ``max_timestamp`` describe ``records``.
    """

    __slots__ = (
        "attempts",
        "base_sequence",
        "base_timestamp",
        "count",
        "created",
        "in_flight",
        "limit",
        "max_timestamp",
        "records",
        "resequenced",
        "result",
        "retry_at",
        "sealed",
        "tp",
    )

    def __init__(self, tp: TopicPartition, limit: int, created: float) -> None:
        self.tp = tp
        self.limit = limit
        self.created = created
        self.records = bytearray()
        self.count = 0
        self.base_timestamp = 0
        self.max_timestamp = 0
        self.result = ProduceResult(tp)
        self.sealed: bytes | None = None
        self.base_sequence = NO_SEQUENCE
        self.attempts = 0  # sends so far
        self.retry_at = 0.0
        self.in_flight = False
        self.resequenced = False  # its sequence moved down after it was sent

    @property
    def size(self) -> int:
        """Bytes of the batch uncompressed, header included."""
        return HEADER_SIZE + len(self.records)

    def seal(
        self,
        compression: Compression,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
    ) -> bytes:
        """The batch as sent: ``records`` compressed once, header and CRC written."""
        self.base_sequence = base_sequence
        self.sealed = encode_batch(
            self.records,
            self.count,
            self.base_timestamp,
            self.max_timestamp,
            compression=compression,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
        )
        return self.sealed

    def split(self) -> list[ProducerBatch]:
        """Two batches holding this one's records, first half and second, re-encoded
        (offset and timestamp deltas restart); this result completes through theirs."""
        data = bytes(self.records)
        view = FetchedBatch(
            0, self.count - 1, self.base_timestamp, self.max_timestamp, 0, -1, self.count,
            data, 0, len(data),
        )  # fmt: skip
        records = decode_records(view, RecordSource(self.tp.topic, self.tp.partition, 0))
        half = len(records) // 2
        halves = [records[:half], records[half:]]
        results = self.result.split([len(h) for h in halves])
        parts = []
        for result, chosen in zip(results, halves, strict=True):
            part = ProducerBatch(self.tp, self.limit, self.created)
            part.result, part.attempts = result, self.attempts
            part.base_timestamp = chosen[0].timestamp
            part.max_timestamp = max(r.timestamp for r in chosen)
            part.count = len(chosen)
            for delta, r in enumerate(chosen):
                raw = r._headers
                headers = data[raw.start : raw.stop] if isinstance(raw, LazyHeaders) else b"\x00"
                part.records += encode_record(
                    r.timestamp - part.base_timestamp, delta, r.key, r.value, headers
                )
            parts.append(part)
        return parts

    def release(self) -> None:
        """Drop the record bytes once the batch is complete (futures may live on)."""
        self.records = bytearray()
        self.sealed = None

    def __repr__(self) -> str:
        return (
            f"ProducerBatch({self.tp.topic}/{self.tp.partition}, {self.count} records, "
            f"seq {self.base_sequence}, attempts {self.attempts})"
        )


def encode_record(
    timestamp_delta: int, offset_delta: int, key: bytes | None, value: bytes | None, headers: bytes
) -> bytes:
    """One record (``headers``: the encoded header block); the accumulator's hot path
    writes the same bytes inline."""
    body = b"".join(
        (
            b"\x00",
            varint(timestamp_delta),
            varint(offset_delta),
            NULL_VARINT if key is None else varint(len(key)) + key,
            NULL_VARINT if value is None else varint(len(value)) + value,
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
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
) -> bytes:
    """One RecordBatch v2 around ``count`` already encoded records (base offset 0)."""
    payload: bytes | bytearray = records
    if compression is not Compression.NONE:
        payload = compress(compression, bytes(records))
    covered = CRC_COVERED_STRUCT.pack(
        int(compression),
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
    prefix = PREFIX_STRUCT.pack(0, length, NO_PARTITION_LEADER_EPOCH, MAGIC, crc)
    return b"".join((prefix, covered, payload))


def now_ms() -> int:
    return time.time_ns() // 1_000_000

"""Producer batches: records encoded straight into RecordBatch v2 bytes as they are sent.

A ``ProducerBatch`` holds the records of one partition, already encoded exactly as
``dataplane.records.builder.encode_record`` encodes them, in one ``bytearray``: each
record is ``length | attributes 0 | timestamp delta from the first record | offset delta
(0, 1, 2, ...) | key length | key | value length | value | header count | headers``, every
number a zigzag varint (``dataplane.records.varint.VARINTS`` holds them for small
non-negative numbers). The accumulator appends records (``accumulator.py``, the
per-record hot path). Sealing a batch (``seal``, through the codec's ``encode_batch``)
compresses that block once and writes the 61-byte header with the producer id, epoch
and base sequence and one CRC-32C. The uncompressed records are kept until the batch
completes, so a retry after a sequence change can seal it again.

Thread safety: records are appended under the accumulator's lock; sealing and
completion belong to the sender thread.
"""

from __future__ import annotations

import time

from dataplane.client.decoder import decode_records
from dataplane.client.future import ProduceResult
from dataplane.client.types import RecordSource, TopicPartition
from dataplane.records.builder import encode_batch, encode_record
from dataplane.records.compression import Compression
from dataplane.records.decoder import FetchedBatch, LazyHeaders
from dataplane.records.layout import (
    HEADER_SIZE,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TRANSACTIONAL_MASK,
)


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
        *,
        transactional: bool = False,
    ) -> bytes:
        """The batch as sent: ``records`` compressed once, header and CRC written (the
        transactional attribute bit set for a transactional producer's)."""
        self.base_sequence = base_sequence
        self.sealed = encode_batch(
            self.records,
            self.count,
            self.base_timestamp,
            self.max_timestamp,
            compression=compression,
            flags=TRANSACTIONAL_MASK if transactional else 0,
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


def now_ms() -> int:
    return time.time_ns() // 1_000_000

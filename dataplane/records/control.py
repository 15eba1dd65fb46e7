"""Control batches: the commit and abort markers that end transactions, as Kafka writes them.

A marker is a batch of its own with the *control* and *transactional* attribute bits
set, the producer id and epoch of the transaction it ends, base sequence -1, and one
record whose key and value are Kafka's ``ControlRecordType`` and
``EndTransactionMarker``, big-endian::

    key    int16 version (0) | int16 type (0 = ABORT, 1 = COMMIT)
    value  int16 version (0) | int32 coordinator_epoch

The record has offset delta 0, the batch's timestamp and no headers. Kafka reads other
control types (2 and up: its own KRaft records); ``marker_of`` answers None for them, so
they end no transaction. Readers that are not transactional skip every control batch.

Thread safety: pure functions.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from dataplane.records.builder import BatchBuilder
from dataplane.records.decoder import decode_batch
from dataplane.records.header import BatchHeader, iter_batches
from dataplane.records.layout import ReadableBuffer

ABORT: Final = 0
COMMIT: Final = 1
CONTROL_VERSION: Final = 0
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class Marker:
    """What a marker says: how the transaction of ``producer_id`` ended."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


def marker_key(commit: bool) -> bytes:
    return _KEY.pack(CONTROL_VERSION, COMMIT if commit else ABORT)


def marker_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(CONTROL_VERSION, coordinator_epoch)


def build_marker(
    producer_id: int,
    producer_epoch: int,
    *,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int | None = None,
) -> bytes:
    """One control batch ending the transaction of ``producer_id`` (base offset 0: the
    leader assigns it on append)."""
    builder = BatchBuilder(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )
    now = time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
    builder.append(marker_value(coordinator_epoch), key=marker_key(commit), timestamp=now)
    return builder.build()


def parse_marker(header: BatchHeader, key: bytes | None, value: bytes | None) -> Marker | None:
    """The marker a control batch's record holds; None for another control type or a
    record too short to be one (a marker's value may carry more after its fields, as a
    newer version would; only the fields of version 0 are read)."""
    if key is None or len(key) < _KEY.size:
        return None
    _, kind = _KEY.unpack_from(key)
    if kind not in (ABORT, COMMIT):
        return None
    epoch = _VALUE.unpack_from(value)[1] if value is not None and len(value) >= _VALUE.size else -1
    return Marker(header.producer_id, header.producer_epoch, kind == COMMIT, epoch)


def marker_of(buf: ReadableBuffer, position: int = 0) -> Marker | None:
    """The marker of the control batch at ``position`` (checked and decoded whole); None
    when it is not a transaction marker. Raises what ``decode_batch`` raises."""
    header, records = decode_batch(buf, position)
    if not header.is_control or not records:
        return None
    return parse_marker(header, records[0].key, records[0].value)


def markers_in(buf: ReadableBuffer) -> Iterator[tuple[int, Marker]]:
    """(base offset, marker) of every transaction marker among the batches of ``buf``."""
    for position, header in iter_batches(buf, validate=False):
        if header.is_control:
            marker = marker_of(buf, position)
            if marker is not None:
                yield header.base_offset, marker

"""Preparing an append to a partition log: validating its batches and placing them.

``PartitionLog.append`` (``log.py``) validates every incoming batch before it takes the
append lock (``validate_batches``), so a bad request leaves the log untouched. Under the
lock, once the base offset is known, it checks a follower's offsets
(``check_follower_offsets``) and builds what to write (``prepare_write``). These
functions touch no log state: they work on the request's bytes and on the configuration
and offsets they are given.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable

from dataplane import records
from dataplane.records import BatchHeader, TimestampType, validate_records
from dataplane.records.errors import CorruptBatchError, OffsetDeltaError
from dataplane.storage.errors import InvalidOffsetError, MarkedRecordsError
from dataplane.storage.segment_files import PlacedBatch

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_EPOCH_AT = records.PARTITION_LEADER_EPOCH_OFFSET


def validate_batches(
    view: memoryview,
    *,
    max_batch_bytes: int,
    client: bool,
    check_max_timestamp: bool,
    marker: bytes = b"",
) -> list[tuple[int, BatchHeader]]:
    """The position and header of every batch in ``view``, each one validated.

    Every batch goes through ``records.validate_batch`` (length, magic, size, CRC,
    codec). ``client`` (a leader appending a client's batches, offsets assigned here)
    also checks every record (``validation.validate_records``: count, lengths and
    varints, dense offset deltas, timestamps, ``check_max_timestamp`` for a create-time
    log); a follower's copies of its leader's batches skip that. Raises on the first
    invalid batch, or when there is none. With ``marker`` (client batches only), once
    every batch has passed, raises ``MarkedRecordsError`` when some record carries a
    header of that name.
    """
    headers: list[tuple[int, BatchHeader]] = []
    position = 0
    marked = 0
    while position < len(view):
        header = records.validate_batch(view, position, max_batch_bytes=max_batch_bytes)
        if client:
            marked += _check_client_batch(view, position, header, check_max_timestamp, marker)
        headers.append((position, header))
        position += header.size
    if not headers:
        raise CorruptBatchError("no batch to append", position=0)
    if marked:
        raise MarkedRecordsError(marker, marked)
    return headers


def _check_client_batch(
    view: memoryview, position: int, header: BatchHeader, check_max_timestamp: bool, marker: bytes
) -> int:
    # The header alone already refuses a batch claiming more offsets than records
    # (the cheap test first: it needs no scan of the records).
    if header.last_offset_delta != header.record_count - 1:
        raise OffsetDeltaError(
            None,
            header.last_offset_delta,
            header.record_count - 1,
            position=position,
            offset=header.base_offset,
        )
    return validate_records(
        view, position, header, check_max_timestamp=check_max_timestamp, marker=marker
    )


def check_follower_offsets(headers: list[tuple[int, BatchHeader]], log_end_offset: int) -> None:
    """A follower's batches must continue the log: the first at its LEO, then densely."""
    expected = log_end_offset
    for position, header in headers:
        if header.base_offset != expected:
            raise InvalidOffsetError(
                f"batch at position {position} starts at offset {header.base_offset}, "
                f"expected {expected} (the log end offset)"
            )
        expected = header.next_offset


def prepare_write(
    view: memoryview,
    headers: list[tuple[int, BatchHeader]],
    base: int,
    *,
    leader_epoch: int | None,
    timestamp_type: TimestampType,
    clock_ms: Callable[[], int],
) -> tuple[list[bytes | memoryview], list[PlacedBatch], int]:
    """The buffers to write and where each batch lands, offsets assigned from ``base``.

    Also returns the LogAppendTime stamped into the batches (-1 unless
    ``timestamp_type`` asks for it; ``clock_ms`` is read only then). The base offset is
    written as its own 8-byte buffer in front of the rest of the batch (``pwritev``), and
    so is a ``leader_epoch`` (4 bytes, outside the CRC), so the caller's bytes are never
    copied — unless LogAppendTime must be stamped (inside the CRC), which takes one copy
    of the whole request.
    """
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        return _prepare_rewritten(view, headers, base, leader_epoch, timestamp_type, clock_ms)
    buffers: list[bytes | memoryview] = []
    placed: list[PlacedBatch] = []
    next_base = base
    for position, header in headers:
        buffers.append(_INT64.pack(next_base))
        if leader_epoch is None:
            buffers.append(view[position + 8 : position + header.size])
        else:  # the epoch is its own buffer too: still no copy of the records
            buffers.append(view[position + 8 : position + _EPOCH_AT])
            buffers.append(_INT32.pack(leader_epoch))
            buffers.append(view[position + _EPOCH_AT + 4 : position + header.size])
            header = dataclasses.replace(header, partition_leader_epoch=leader_epoch)
        placed.append((position, next_base, header))
        next_base += header.last_offset_delta + 1
    return buffers, placed, -1


def _prepare_rewritten(
    view: memoryview,
    headers: list[tuple[int, BatchHeader]],
    base: int,
    leader_epoch: int | None,
    timestamp_type: TimestampType,
    clock_ms: Callable[[], int],
) -> tuple[list[bytes | memoryview], list[PlacedBatch], int]:
    buffer = bytearray(view)
    append_time = -1
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        append_time = clock_ms()
    placed: list[PlacedBatch] = []
    next_base = base
    for position, header in headers:
        records.set_base_offset(buffer, position, next_base)
        if leader_epoch is not None:
            records.set_partition_leader_epoch(buffer, position, leader_epoch)
        if append_time >= 0:
            records.set_log_append_time(buffer, position, append_time)
        placed.append((position, next_base, records.read_header(buffer, position)))
        next_base += header.last_offset_delta + 1
    return [memoryview(buffer)], placed, append_time

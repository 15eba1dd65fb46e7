"""Scanning a segment file batch by batch: what recovery and verification build on.

``scan_segment`` walks a ``.log`` file from its start and yields every valid batch (its
position and header) and every corrupt region, in file order. A batch is valid when it
passes ``validate_batch`` (structure, magic, CRC, codec, counts) *and* continues the
offsets densely: the base offset lies outside the CRC, so a batch whose base offset is
not the one expected is as corrupt as one whose CRC fails. After a corrupt region the
scan resynchronises on the next valid batch (searching for a magic byte whose batch
validates), so damage in the middle of a segment costs only the damaged batch.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from dataplane import records
from dataplane.records import HEADER_SIZE, BatchHeader
from dataplane.records.errors import CorruptBatchError

_SCAN_CHUNK_BYTES = 8 * 1024 * 1024


@dataclass(slots=True)
class CorruptRegion:
    """Bytes of a segment that hold no valid batch, found by a scan."""

    segment_base_offset: int
    position: int
    length: int
    reason: str
    first_offset: int  # the offset the corrupt bytes should have started with

    def __str__(self) -> str:
        return (
            f"segment {self.segment_base_offset}: {self.length} corrupt bytes at position "
            f"{self.position} (from offset {self.first_offset}): {self.reason}"
        )


@dataclass(slots=True)
class ScanResult:
    """What a full scan of a segment found (``LogSegment.recover``)."""

    batches: int = 0
    valid_bytes: int = 0
    truncated_bytes: int = 0
    truncated_reason: str | None = None
    corrupt: list[CorruptRegion] = field(default_factory=list)


def scan_segment(
    fd: int, size: int, base_offset: int, expected: int
) -> Iterator[tuple[int, BatchHeader] | CorruptRegion]:
    """Valid batches and corrupt regions in file order.

    A region with no valid batch after it has ``length`` -1 and ends the scan.
    """
    reader = _ChunkReader(fd, size)
    position, resumed = 0, False
    while position < size:
        header, error = _try_batch(position, size, reader)
        if header is not None and (
            header.base_offset == expected or (resumed and header.base_offset > expected)
        ):
            yield position, header
            expected = header.next_offset
            position += header.size
            resumed = False
            continue
        # The base offset lies outside the CRC: a batch that does not continue the
        # offsets densely is as corrupt as one whose CRC fails.
        reason = (
            str(error)
            if error
            else f"base offset {header and header.base_offset}, expected {expected}"
        )
        resume = _resync(position + 1, expected, size, reader)
        length = -1 if resume is None else resume - position
        yield CorruptRegion(base_offset, position, length, reason, expected)
        if resume is None:
            return
        position, resumed = resume, True


def _try_batch(
    position: int, size: int, reader: _ChunkReader
) -> tuple[BatchHeader | None, CorruptBatchError | None]:
    try:
        header = records.read_header(reader.get(position, HEADER_SIZE), 0)
        if header.size < HEADER_SIZE or header.size > size - position:
            raise CorruptBatchError(
                f"batch length {header.size} is impossible with "
                f"{size - position} bytes left in the segment",
                position=position,
                offset=header.base_offset,
            )
        return records.validate_batch(reader.get(position, header.size), 0), None
    except CorruptBatchError as exc:
        return None, CorruptBatchError(exc.reason, position=position, offset=exc.offset)


def _resync(start: int, expected: int, size: int, reader: _ChunkReader) -> int | None:
    """The position of the next valid batch at or after ``start`` with offset >= expected."""
    position = start
    while position + HEADER_SIZE <= size:
        chunk = reader.read(position, min(_SCAN_CHUNK_BYTES, size - position))
        magic_at = 16
        while True:
            found = chunk.find(b"\x02", magic_at)
            if found < 0:
                break
            candidate = position + found - 16
            magic_at = found + 1
            if candidate < start:
                continue
            header, _ = _try_batch(candidate, size, reader)
            if header is not None and header.base_offset >= expected:
                return candidate
        position += max(1, len(chunk) - HEADER_SIZE)
    return None


class _ChunkReader:
    """Reads a file through an 8 MiB window, so scans cost few system calls."""

    def __init__(self, fd: int, size: int) -> None:
        self._fd, self._size = fd, size
        self._start, self._buf = 0, b""

    def get(self, position: int, length: int) -> memoryview:
        """Up to ``length`` bytes at ``position`` (fewer only at the end of the file)."""
        offset = position - self._start
        if offset < 0 or offset + length > len(self._buf):
            want = max(length, min(_SCAN_CHUNK_BYTES, self._size - position))
            self._start, self._buf = position, os.pread(self._fd, want, position)
            offset = 0
        return memoryview(self._buf)[offset : offset + length]

    def read(self, position: int, length: int) -> bytes:
        """``length`` bytes at ``position``, read directly (the window is left alone)."""
        return os.pread(self._fd, length, position)

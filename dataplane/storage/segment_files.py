"""The files of a segment: their names, their sizes as a listing finds them, and the
byte-level helpers a segment reads and writes them with.

A segment whose first offset is ``B`` is three files in its partition directory, named
by ``B`` zero-padded to 20 digits: ``.log``, ``.index`` and ``.timeindex`` (see
``segment.py`` and ``index.py`` for their formats).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c

from dataplane import records
from dataplane.records import HEADER_SIZE, BatchHeader
from dataplane.records.errors import CorruptBatchError, CrcMismatchError

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
CRC_START = 21  # the CRC covers attributes (byte 21) to the end of the batch
_READ_FIELDS = struct.Struct(">qi4xbI2xi")  # base offset, length, magic, crc, last delta
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024

PlacedBatch = tuple[int, int, BatchHeader]
"""(position relative to the start of a write, final base offset, parsed header)."""


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


@dataclass(frozen=True, slots=True)
class SegmentFiles:
    """Sizes of a segment's three files; None for a missing index."""

    log_bytes: int
    index_bytes: int | None
    time_index_bytes: int | None

    @classmethod
    def stat(cls, directory: Path, base_offset: int) -> SegmentFiles:
        """Sizes read from the file system (a missing ``.log`` counts as empty)."""
        sizes: list[int | None] = []
        for suffix in SUFFIXES:
            try:
                sizes.append(os.stat(directory / segment_file_name(base_offset, suffix)).st_size)
            except FileNotFoundError:
                sizes.append(None)
        return cls(sizes[0] or 0, sizes[1], sizes[2])

    @classmethod
    def listed(cls, sizes: dict[str, int], base_offset: int) -> SegmentFiles:
        """Sizes from a directory listing (file name -> size)."""
        log_bytes, index_bytes, time_bytes = (
            sizes.get(segment_file_name(base_offset, suffix)) for suffix in SUFFIXES
        )
        return cls(log_bytes or 0, index_bytes, time_bytes)


def whole_batches(data: bytes, position: int, max_offset: int, offset: int) -> tuple[bytes, int]:
    """The whole, CRC-valid, densely numbered batches at the start of ``data``.

    ``data`` was read at ``position`` of a segment; the result stops before the first
    batch whose last offset is >= ``max_offset``, and comes with the offset after it.
    A damaged first batch raises; a later one ends the result. This is the read hot
    path, so it unpacks only the five fields it checks instead of a full ``BatchHeader``.
    """
    at, size, next_offset = 0, len(data), offset
    view = memoryview(data)
    expected = -1  # the first batch may start below ``offset``
    unpack, crc = _READ_FIELDS.unpack_from, crc32c.crc32c
    while at + HEADER_SIZE <= size:
        base, length, magic, stored_crc, last_delta = unpack(data, at)
        end = at + length + 12
        if end > size or base + last_delta >= max_offset:
            break
        if magic != 2 or length < HEADER_SIZE - 12 or (expected >= 0 and base != expected):
            if at == 0:
                check_header(records.read_header(data, at), position, None)
            break  # a later damaged batch ends the read; reading from it raises
        if crc(view[at + CRC_START : end]) != stored_crc:
            if at == 0:
                check_crc(view, 0, records.read_header(data, 0), position)
            break
        at = end
        next_offset = expected = base + last_delta + 1
    return (data if at == size else data[:at]), next_offset


def check_header(header: BatchHeader, position: int, expected_offset: int | None) -> None:
    if header.size < HEADER_SIZE or header.magic != 2:
        raise CorruptBatchError(
            f"invalid batch header (length {header.size}, magic {header.magic})",
            position=position,
            offset=header.base_offset,
        )
    if expected_offset is not None and header.base_offset != expected_offset:
        raise CorruptBatchError(
            f"base offset {header.base_offset} does not follow {expected_offset - 1}",
            position=position,
            offset=expected_offset,
        )


def check_crc(buf: bytes | memoryview, at: int, header: BatchHeader, position: int) -> None:
    view = memoryview(buf)[at + CRC_START : at + header.size]
    computed = crc32c.crc32c(view)
    if computed != header.crc:
        raise CrcMismatchError(header.crc, computed, position=position, offset=header.base_offset)


def pwritev_all(fd: int, buffers: list[bytes | memoryview], position: int) -> int:
    """Write every buffer at ``position``, at most ``IOV_MAX`` per call; returns the total."""
    total = 0
    for start in range(0, len(buffers), _IOV_MAX):
        chunk = buffers[start : start + _IOV_MAX]
        size = sum(len(b) for b in chunk)
        written = os.pwritev(fd, chunk, position + total)
        if written < size:  # short writes are legal; finish the rest byte-exactly
            rest = b"".join(bytes(b) for b in chunk)[written:]
            while rest:
                done = os.pwrite(fd, rest, position + total + written)
                written += done
                rest = rest[done:]
        total += size
    return total


def create_empty(path: Path) -> None:
    """Create ``path`` empty (truncating what a failed earlier attempt left)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))

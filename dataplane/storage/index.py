"""Sparse, memory-mapped segment indexes.

Both indexes are files of fixed-width big-endian entries, sorted, with offsets stored
relative to the segment's base offset (so they fit in 32 bits):

``.index`` (``OffsetIndex``), 8 bytes per entry::

    relative_offset: uint32   base offset of a batch, minus the segment's base offset
    position:        uint32   byte position of that batch in the segment's ``.log``

``.timeindex`` (``TimeIndex``), 12 bytes per entry::

    timestamp:       int64    the largest batch max-timestamp seen so far in the segment
    relative_offset: uint32   base offset of the batch that first reached that timestamp

An entry is added at most every ``index_interval_bytes`` of log. Offset-index entries
name batch *base* offsets, so an entry can be checked against the log: the batch at
``position`` must have exactly that base offset (see ``LogSegment``).

Lifecycle: the index of the active segment is preallocated to ``max_index_bytes`` once an
entry is written to it; when the segment is sealed (rolled) or closed the file is trimmed
to its entries. After an unclean stop a preallocated file holds zeros past its last entry,
which is why recovery rebuilds the indexes of every segment it re-validates.

Mapping: an index is mapped only while its segment is open (see ``filecache.py``), and
lazily: an index built with ``file_bytes`` (what a directory listing said) starts unmapped
and maps itself on first use. Python's ``mmap`` keeps a descriptor of its own for each
mapping, so a mapped index costs one file descriptor; ``on_map`` is told of every change
(+1, -1) made while the owner uses the index, ``map`` and ``unmap`` (called by the owner
when it opens and closes the segment) report theirs as return values instead. An unmapped
index keeps its entry count, so appends continue where they stopped.

Thread safety: appends and truncations must be serialised by the owner (the log's append
lock); lookups may run concurrently with appends because an entry becomes visible only
after it is fully written (the entry count is bumped last). Mapping and unmapping happen
only while the owner guarantees no lookup runs (the segment is pinned, or unpinned and
being closed).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from dataplane.records import ReadableBuffer
from dataplane.storage.errors import IndexCorruptError


class _MappedIndex:
    """Shared base: a file of fixed-width entries mapped into memory."""

    entry: ClassVar[struct.Struct]

    def __init__(
        self,
        path: Path,
        base_offset: int,
        *,
        max_index_bytes: int,
        file_bytes: int | None = None,
        on_map: Callable[[int], None] | None = None,
    ) -> None:
        """Open the index at ``path`` (created when missing) and map it.

        With ``file_bytes`` (the file's size, known from a listing) nothing is opened: the
        index starts unmapped and maps itself when first used.
        """
        self.path = path
        self.base_offset = base_offset
        self._entry_size = self.entry.size
        self._max_entries = max(2, max_index_bytes // self._entry_size)
        self._on_map = on_map
        self._mmap: mmap.mmap | None = None
        self._closed = False
        eager = file_bytes is None
        if file_bytes is None:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                file_bytes = os.fstat(fd).st_size
            finally:
                os.close(fd)
        if file_bytes % self._entry_size:
            raise IndexCorruptError(
                path, f"size {file_bytes} is not a multiple of {self._entry_size}"
            )
        self._entries = file_bytes // self._entry_size
        self._file_bytes = file_bytes  # the file's length as this object last left it
        if eager:
            self._remap(file_bytes)  # sealed indexes stay exact; appends grow the file

    # -- mapping -----------------------------------------------------------------------
    @property
    def is_mapped(self) -> bool:
        return self._mmap is not None

    def map(self) -> int:
        """Map the file if it has entries and is not mapped yet; returns the mappings added.

        Raises ``IndexCorruptError`` when the file is shorter than its entries (it was cut
        behind the owner's back) and ``FileNotFoundError`` when it is gone.
        """
        if self._mmap is not None or not self._entries:
            return 0
        fd = os.open(self.path, os.O_RDWR)
        try:
            length = os.fstat(fd).st_size
            if length < self._entries * self._entry_size:
                raise IndexCorruptError(
                    self.path, f"{length} bytes cannot hold its {self._entries} entries"
                )
            self._mmap = _map_file(fd, length)
            self._file_bytes = length
        finally:
            os.close(fd)
        return 1

    def unmap(self, *, trim: bool = True) -> int:
        """Unmap (trimming the file to its entries first); returns the mappings removed.

        ``trim=False`` leaves the file alone (it may already be unlinked).
        """
        exact = self._entries * self._entry_size
        if trim and self._file_bytes != exact:
            self._truncate_file(exact)
        if self._mmap is None:
            return 0
        self._mmap.close()
        self._mmap = None
        return -1

    def _ensure_mapped(self) -> None:
        if self._mmap is None and self._entries:
            added = self.map()
            if added and self._on_map is not None:
                self._on_map(added)

    def _remap(self, length: int) -> None:
        """Resize the file and map it; the map's own descriptor is the only one kept."""
        was_mapped = self._mmap is not None
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, length)
            self._file_bytes = length
            self._mmap = _map_file(fd, length) if length else None
        finally:
            os.close(fd)
        change = (self._mmap is not None) - was_mapped
        if change and self._on_map is not None:
            self._on_map(change)

    def _truncate_file(self, length: int) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, length)
            self._file_bytes = length
        finally:
            os.close(fd)

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def free_entries(self) -> int:
        """Entries that may still be appended; one slot stays free for sealing."""
        return max(0, self._max_entries - 1 - self._entries)

    @property
    def is_full(self) -> bool:
        return self.free_entries == 0

    @property
    def size_bytes(self) -> int:
        return self._entries * self._entry_size

    def _read(self, n: int) -> tuple[int, ...]:
        if self._mmap is None:
            self._ensure_mapped()
            assert self._mmap is not None
        return self.entry.unpack_from(self._mmap, n * self._entry_size)

    def _write(self, values: tuple[int, ...]) -> None:
        needed = (self._entries + 1) * self._entry_size
        if self._mmap is None or len(self._mmap) < needed:
            # ``max_index_bytes`` makes the log roll; it is not a hard cap (the entry made
            # when sealing may need the reserved slot, or more after the limit was lowered).
            self._remap(max(self._max_entries * self._entry_size, needed, self._file_bytes))
        assert self._mmap is not None
        self.entry.pack_into(self._mmap, self._entries * self._entry_size, *values)
        self._entries += 1

    def truncate_entries(self, count: int) -> None:
        """Keep only the first ``count`` entries."""
        self._entries = min(self._entries, max(0, count))

    def reset(self) -> None:
        self._entries = 0

    def make_writable(self) -> None:
        """Extend the file to ``max_index_bytes`` so appends can continue (reopened tail).

        An index holding more entries than ``max_index_bytes`` allows (the limit was
        lowered) keeps them all; it reports itself full, so the log rolls.
        """
        self._remap(max(self._max_entries, self._entries) * self._entry_size)

    def trim(self) -> None:
        """Shrink the file to exactly its entries (sealing or clean close)."""
        exact = self._entries * self._entry_size
        if self._mmap is not None:
            self._remap(exact)
        elif self._file_bytes != exact:
            self._truncate_file(exact)

    def flush(self) -> None:
        """Write the mapped entries and the file size to stable storage."""
        if self._closed:
            return
        if self._mmap is not None:
            self._mmap.flush()
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Trim the file to its entries and unmap it."""
        if self._closed:
            return
        self.unmap(trim=True)
        self._closed = True

    def discard(self) -> None:
        """Unmap without touching the file (it may already be unlinked)."""
        self.unmap(trim=False)
        self._closed = True

    def delete(self) -> None:
        self.discard()
        self.path.unlink(missing_ok=True)

    # -- search ------------------------------------------------------------------------
    def _last_at_most(self, key: int, field: int) -> int:
        """Index of the last entry whose ``field`` is <= ``key``, or -1."""
        if self._mmap is None:
            self._ensure_mapped()
        return last_entry_at_most(self._mmap, self._entries, self.entry, key, field)  # type: ignore[arg-type]


def last_entry_at_most(
    buf: ReadableBuffer, entries: int, entry: struct.Struct, key: int, field: int
) -> int:
    """Index of the last of the first ``entries`` entries of ``buf`` whose ``field`` is
    <= ``key``, or -1: a binary search over entries sorted by that field (an index file,
    mapped here or fetched whole from tiered storage)."""
    lo, hi = 0, entries
    size, unpack = entry.size, entry.unpack_from
    while lo < hi:
        mid = (lo + hi) // 2
        if unpack(buf, mid * size)[field] <= key:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


def _map_file(fd: int, length: int) -> mmap.mmap:
    """Map ``length`` bytes of ``fd`` for random access.

    Lookups bisect and appends touch one page at a time, so the kernel's read-around
    (which allocates and fills the pages around a faulting one) only costs: a first
    write into a preallocated, sparse index took milliseconds with it, microseconds
    without.
    """
    mapped = mmap.mmap(fd, length)
    mapped.madvise(mmap.MADV_RANDOM)
    return mapped


class OffsetIndex(_MappedIndex):
    """Relative batch base offset → file position. See the module docstring."""

    entry: ClassVar[struct.Struct] = struct.Struct(">II")

    def append(self, offset: int, position: int) -> None:
        """Add an entry for the batch at ``position`` whose base offset is ``offset``."""
        relative = offset - self.base_offset
        if self._entries:
            last_rel, last_pos = self._read(self._entries - 1)
            if relative <= last_rel or position <= last_pos:
                raise IndexCorruptError(
                    self.path, f"entry ({offset}, {position}) is not after the last entry"
                )
        self._write((relative, position))

    def lookup(self, offset: int) -> tuple[int, int]:
        """The (absolute offset, position) of the last entry at or below ``offset``.

        Returns ``(base_offset, 0)`` when no entry is that low: scanning then starts at
        the beginning of the segment.
        """
        n = self._last_at_most(offset - self.base_offset, 0)
        if n < 0:
            return self.base_offset, 0
        relative, position = self._read(n)
        return self.base_offset + relative, position

    def last_position_at_most(self, position: int) -> int:
        """The largest indexed batch position <= ``position`` (0 when there is none)."""
        n = self._last_at_most(position, 1)
        return self._read(n)[1] if n >= 0 else 0

    def entry_at(self, n: int) -> tuple[int, int]:
        relative, position = self._read(n)
        return self.base_offset + relative, position

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        self.truncate_entries(self._last_at_most(offset - self.base_offset - 1, 0) + 1)

    def check(self, log_size: int) -> None:
        """Raise ``IndexCorruptError`` unless entries strictly increase and fit the log."""
        last_rel, last_pos = -1, -1
        for n in range(self._entries):
            rel, pos = self._read(n)
            if rel <= last_rel or pos <= last_pos or pos >= log_size:
                raise IndexCorruptError(self.path, f"entry {n} ({rel}, {pos}) out of order")
            last_rel, last_pos = rel, pos


class TimeIndex(_MappedIndex):
    """Running max timestamp → relative offset of the batch that reached it."""

    entry: ClassVar[struct.Struct] = struct.Struct(">qI")

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the last entry, if any."""
        if not self._entries:
            return None
        ts, relative = self._read(self._entries - 1)
        return ts, self.base_offset + relative

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) if ``timestamp`` is larger than the last entry's."""
        last = self.last_entry
        if last is not None and timestamp <= last[0]:
            return
        if last is not None and offset < last[1]:
            raise IndexCorruptError(self.path, f"offset {offset} goes backwards")
        self._write((timestamp, offset - self.base_offset))

    def lookup_before(self, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the last entry strictly before ``timestamp``.

        Every batch up to and including that offset has a max timestamp below
        ``timestamp``, so a search for the first batch at or after ``timestamp`` may
        start there. ``None`` means: start at the beginning of the segment.
        """
        n = self._last_at_most(timestamp - 1, 0)
        if n < 0:
            return None
        ts, relative = self._read(n)
        return ts, self.base_offset + relative

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        self.truncate_entries(self._last_at_most(offset - self.base_offset - 1, 1) + 1)

    def check(self) -> None:
        """Raise ``IndexCorruptError`` unless timestamps and offsets strictly increase."""
        last_ts, last_rel = None, -1
        for n in range(self._entries):
            ts, rel = self._read(n)
            if (last_ts is not None and ts <= last_ts) or rel < last_rel:
                raise IndexCorruptError(self.path, f"entry {n} ({ts}, {rel}) out of order")
            last_ts, last_rel = ts, rel

"""One segment of a partition log: ``.log`` + ``.index`` + ``.timeindex``.

On disk, in the partition directory, a segment whose first offset is ``B`` is three
files named by ``B`` zero-padded to 20 digits::

    00000000000000000000.log        RecordBatch v2 batches back to back, as appended
    00000000000000000000.index      OffsetIndex (see ``index.py``)
    00000000000000000000.timeindex  TimeIndex

The ``.log`` holds the offsets ``[base_offset, next_offset)`` densely. Every batch
written to it has passed ``validate_batch`` and carries its final base offset.

Lifecycle: a segment is *active* (the log's last one; appends go here, indexes grow
preallocated) until the log rolls, when it is *sealed* (indexes trimmed, never written
again except by truncation). Sealed segments are deleted whole by retention.

Open and closed: a segment holds file descriptors only while it is *open*, which the
process-wide ``SegmentFileCache`` (``filecache.py``) decides. ``pin`` opens it when
needed (the ``.log`` and, if it has entries, the offset index; the time index is mapped
when first used) and keeps it open until the matching unpin; an unpinned segment may be
closed at any moment to make room. Every method that touches the files pins the segment
itself, except the read path (``read``, ``find_batch``, ``find_offset_by_timestamp``),
whose caller holds the pin across the whole read.

Loading: a segment trusted at open (clean shutdown, or below the recovery point) is
*deferred* (``defer_loading``): its end and sealed state come from the directory
listing and the checkpoint, and nothing is read until it is first pinned. Then its
indexes are checked against the log at their last entries, as a clean load always did,
and rebuilt if that check fails.

Thread safety: ``append``, ``truncate_to``, ``seal`` and index rebuilds take the
segment's lock; the log serialises its appends anyway. Reads hold it only around index
lookups (a roll or a rebuild may remap an index) and otherwise work against a snapshot
of the segment's size: bytes past the size at the moment a read starts are never
returned. A segment deleted while a read holds it pinned keeps its descriptors until the
read ends (the files are already unlinked). Pin counts and the open state are guarded
by the cache's lock, which is taken after the segment's lock, never before.

Layout: ``LogSegment`` builds on ``SegmentState`` (``segment_state.py``: in-memory state,
the file cache's hooks, walking batches, index bookkeeping), ``SegmentRecovery``
(``segment_recovery.py``: deferred and clean loading, recovery, index rebuilds) and
``SegmentReads`` (``segment_read.py``: the read path); creating, appending, truncating,
sealing, flushing, closing and deleting are here. ``segment_files.py`` names the files
and holds the byte-level helpers.
"""

from __future__ import annotations

import os
from pathlib import Path

from dataplane.files import fsync_directory
from dataplane.storage.config import LogConfig
from dataplane.storage.segment_files import INDEX_SUFFIX as INDEX_SUFFIX
from dataplane.storage.segment_files import LOG_SUFFIX as LOG_SUFFIX
from dataplane.storage.segment_files import TIME_INDEX_SUFFIX as TIME_INDEX_SUFFIX
from dataplane.storage.segment_files import PlacedBatch as PlacedBatch
from dataplane.storage.segment_files import (
    SegmentFiles,
    create_empty,
    pwritev_all,
    segment_file_name,
)
from dataplane.storage.segment_read import SegmentReads


class LogSegment(SegmentReads):
    """A ``.log`` file of whole batches and its two indexes. See the module docstring."""

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, config: LogConfig, *, sync_directory: bool = True
    ) -> LogSegment:
        """A new, empty, active segment; its files exist (and, with ``sync_directory``,
        their directory entries are durable) when this returns."""
        path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        if path.exists() and path.stat().st_size:
            raise FileExistsError(f"segment {path} already exists")
        create_empty(path)
        create_empty(directory / segment_file_name(base_offset, INDEX_SUFFIX))
        create_empty(directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX))
        if sync_directory:
            fsync_directory(directory)
        segment = cls(directory, base_offset, config, SegmentFiles(0, 0, 0))
        segment._modified = True
        return segment

    # -- appending ----------------------------------------------------------------------
    def append(self, buffers: list[bytes | memoryview], batches: list[PlacedBatch]) -> int:
        """Write ``buffers`` (whole batches, offsets final) at the end; returns the position.

        ``batches`` describes each batch written: its position relative to the start of
        the write, its final base offset and its header (whose own base offset may be
        stale: offsets are assigned in the bytes, not in the parsed header). If anything
        fails, the file and the indexes are cut back to where they were.
        """
        with self._pin, self._lock:
            self._modified = True
            position = self._size
            try:
                total = pwritev_all(self._fd, buffers, position)
                for relative, base_offset, header in batches:
                    self._index_batch(position + relative, base_offset, header.size)
                    self._note_timestamp(base_offset, header.max_timestamp)
            except BaseException:
                self._cut_back(position, batches[0][1])
                raise
            self._size = position + total
            _, last_base, last = batches[-1]
            self.next_offset = last_base + last.last_offset_delta + 1
            return position

    def _cut_back(self, position: int, offset: int) -> None:
        """Undo a failed append: nothing of it may survive in the file or the indexes."""
        os.ftruncate(self._fd, position)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)

    # -- truncation ---------------------------------------------------------------------
    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; returns bytes removed.

        A batch that holds ``offset`` is removed whole, so the new end may be below
        ``offset``; ``next_offset`` tells where the segment now ends.
        """
        with self._pin, self._lock:
            found = self.find_batch(offset, self._size)
            if found is None:
                return 0
            self._modified = True
            position, header = found
            removed = self._size - position
            self._truncate_file(position)
            self.offset_index.truncate_to(header.base_offset)
            self.time_index.truncate_to(header.base_offset)
            self.next_offset = header.base_offset
            self._recompute_after_truncation()
            return removed

    def _recompute_after_truncation(self) -> None:
        self.sealed = False
        self.offset_index.make_writable()
        self.time_index.make_writable()
        self._max_timestamp, self._offset_of_max_timestamp = -1, self.base_offset
        self._bytes_since_index = 0
        last = self.time_index.last_entry
        start = 0
        if last is not None:
            self._max_timestamp, self._offset_of_max_timestamp = last
        if self.offset_index.entries:
            _, start = self.offset_index.entry_at(self.offset_index.entries - 1)
        for _, header in self._walk(start, self._size, verify_crc=False):
            self._note_timestamp(header.base_offset, header.max_timestamp)
            self._bytes_since_index += header.size

    def reopen_for_append(self) -> None:
        """Make a sealed segment the active one again (after the log truncated into it)."""
        with self._pin, self._lock:
            if self.sealed:
                self._modified = True
                self._recompute_after_truncation()

    # -- flushing and lifecycle ---------------------------------------------------------
    def flush(self) -> None:
        """fdatasync the log and flush both indexes (nothing once closed or deleted)."""
        try:
            with self._pin, self._lock:
                os.fdatasync(self._fd)
                self.offset_index.flush()
                self.time_index.flush()
        except FileNotFoundError:
            if not self._gone:
                raise

    def flush_log_only(self) -> None:
        """fdatasync only the ``.log`` (indexes are rebuilt by recovery anyway)."""
        try:
            with self._pin:
                os.fdatasync(self._fd)
        except FileNotFoundError:
            if not self._gone:
                raise

    def seal(self) -> None:
        """Mark the segment sealed: record its max timestamp and trim the indexes."""
        with self._pin, self._lock:
            self._modified = True
            if self._size:
                self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self.offset_index.trim()
            self.time_index.trim()
            self.sealed = True

    def close(self, *, sync_indexes: bool = False) -> None:
        """Record the max timestamp, trim the indexes and close (once no read is pinned).

        ``sync_indexes`` fsyncs the trimmed indexes first: the log does so for its active
        segment before recording a clean shutdown, which makes recovery trust them. A
        segment whose files did not change since they were loaded is left as it is.
        """
        with self._lock:
            record = bool(self._size) and not self.sealed
            if self._modified and (record or sync_indexes) and not self._gone:
                with self._pin:
                    if record:
                        self.time_index.maybe_append(
                            self._max_timestamp, self._offset_of_max_timestamp
                        )
                    if sync_indexes:
                        for index in (self.offset_index, self.time_index):
                            index.trim()
                            index.flush()
                self._modified = False
            self._cache.retire(self, deleted=False)

    def delete(self) -> None:
        """Unlink the files now; the descriptors close when the last read unpins."""
        with self._lock:
            self._cache.retire(self, deleted=True)  # first: nothing reopens it any more
            for path in (self.log_path, self.offset_index.path, self.time_index.path):
                path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return (
            f"LogSegment(base={self.base_offset}, next={self.next_offset}, "
            f"bytes={self._size}, sealed={self.sealed})"
        )

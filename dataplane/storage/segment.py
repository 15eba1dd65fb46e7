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

Layout: ``LogSegment`` is the whole segment, in this one class: creating, the file
cache's hooks, loading (deferred or clean), recovery and index rebuilds, the read path,
appending, truncating, sealing, flushing, closing and deleting. Its collaborators have
state and interfaces of their own: the two indexes (``index.py``), the process-wide file
cache and the segment's ``Pin`` record in it (``filecache.py``), and the batch scan of
recovery (``scan.py``). ``segment_files.py`` names the files and holds the byte-level
helpers (CRC checks, whole-batch trimming, vectored writes).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

from dataplane import records
from dataplane.files import fsync_directory
from dataplane.records import HEADER_SIZE, BatchHeader
from dataplane.records.errors import CorruptBatchError
from dataplane.storage.config import LogConfig
from dataplane.storage.errors import IndexCorruptError
from dataplane.storage.filecache import SEGMENT_FILES, Pin, SegmentFileCache
from dataplane.storage.index import OffsetIndex, TimeIndex
from dataplane.storage.scan import CorruptRegion, ScanResult, scan_segment
from dataplane.storage.segment_files import INDEX_SUFFIX as INDEX_SUFFIX
from dataplane.storage.segment_files import LOG_SUFFIX as LOG_SUFFIX
from dataplane.storage.segment_files import TIME_INDEX_SUFFIX as TIME_INDEX_SUFFIX
from dataplane.storage.segment_files import PlacedBatch as PlacedBatch
from dataplane.storage.segment_files import (
    SegmentFiles,
    check_crc,
    create_empty,
    pwritev_all,
    segment_file_name,
    whole_batches,
)

log = logging.getLogger(__name__)

_IndexT = TypeVar("_IndexT", OffsetIndex, TimeIndex)


class LogSegment:
    """A ``.log`` file of whole batches and its two indexes. See the module docstring."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        files: SegmentFiles | None = None,
        *,
        cache: SegmentFileCache | None = None,
    ) -> None:
        """The segment at ``base_offset``; opens nothing (``files``: sizes, if known)."""
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        self._cache = cache or SEGMENT_FILES
        self._lock = threading.RLock()
        if files is None:
            files = SegmentFiles.stat(directory, base_offset)
        self._size = files.log_bytes
        self._fd = -1  # opened and closed by the cache, under its lock
        self._pin = self._cache.pin(self)
        self._deferred = False  # loaded from the listing; check indexes on first pin
        self._needs_rebuild = False  # an index was found unusable when opening
        self._timestamps_known = True
        self._modified = False  # files changed since loaded (close must record and sync)
        self._reported: set[int] = set()  # positions of corrupt batches already logged
        self.next_offset = base_offset
        self._max_timestamp = -1
        self._offset_of_max_timestamp = base_offset
        self.created_ms = 0  # wall-clock time the log created or opened it (age-based roll)
        self._bytes_since_index = 0
        self._force_index_entry = False
        self.sealed = False
        self.index_rebuilds = 0
        self.offset_index, fresh_offsets = self._make_index(
            OffsetIndex, INDEX_SUFFIX, files.index_bytes
        )
        self.time_index, fresh_times = self._make_index(
            TimeIndex, TIME_INDEX_SUFFIX, files.time_index_bytes
        )
        self.indexes_missing = self._size > 0 and (fresh_offsets or fresh_times)

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

    def _make_index(
        self, kind: type[_IndexT], suffix: str, file_bytes: int | None
    ) -> tuple[_IndexT, bool]:
        """The index, unmapped, and whether it starts afresh (its file missing or broken)."""
        path = self.directory / segment_file_name(self.base_offset, suffix)
        limit = self.config.max_index_bytes

        def build(size: int) -> _IndexT:
            return kind(
                path, self.base_offset, max_index_bytes=limit, file_bytes=size, on_map=self._mapped
            )

        if file_bytes is None:
            return build(0), True
        try:
            return build(file_bytes), False
        except IndexCorruptError:
            path.unlink(missing_ok=True)
            return build(0), True

    # -- open and closed: the file cache's hooks (``CachedSegment``) --------------------
    def open_files(self) -> int:
        """Open the ``.log`` and map the offset index; returns the descriptors held.

        Called by the cache, under its lock, on the pin that finds the segment closed.
        """
        fd = os.open(self.log_path, os.O_RDWR)
        try:
            mapped = self.offset_index.map()
        except (IndexCorruptError, FileNotFoundError) as exc:
            # Cut or removed behind our back: start it afresh; the first pin rebuilds it.
            log.warning("offset index of %s is unusable: %s", self.log_path, exc)
            self.offset_index.reset()
            self._deferred = self._needs_rebuild = True
            mapped = 0
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return 1 + mapped

    def close_files(self, *, trim: bool) -> None:
        """Unmap the indexes (trimmed, if ``trim``: not once the files are gone) and close
        the ``.log``. Called by the cache, under its lock, once the segment is unpinned."""
        fd, self._fd = self._fd, -1
        if fd < 0:
            return
        failure: OSError | None = None
        for index in (self.offset_index, self.time_index):
            try:
                index.unmap(trim=trim)
            except OSError as exc:  # a trim refused: unmap anyway, and say so
                failure = failure or exc
                index.unmap(trim=False)
        os.close(fd)
        if failure is not None:
            raise failure

    @property
    def loading_deferred(self) -> bool:
        """Whether the next pin must check the indexes first (``finish_loading``)."""
        return self._deferred

    def _mapped(self, change: int) -> None:
        """An index was mapped or unmapped while the segment is pinned."""
        self._cache.adjust(self._pin, change)

    @property
    def is_open(self) -> bool:
        return self._fd >= 0

    # -- pinning ------------------------------------------------------------------------
    def pin(self) -> Pin:
        """Keep the segment open (opening it if needed) until the block ends.

        Use as ``with segment.pin():``; raises ``FileNotFoundError`` once the segment is
        closed for good or deleted (a read that pinned it before keeps reading).
        """
        return self._pin

    # -- properties ---------------------------------------------------------------------
    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def is_empty(self) -> bool:
        return self._size == 0

    @property
    def max_timestamp(self) -> int:
        """The largest batch max timestamp in the segment (-1 when none is known)."""
        if not self._timestamps_known:
            self._load_deferred()
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        if not self._timestamps_known:
            self._load_deferred()
        return self._offset_of_max_timestamp

    def _load_deferred(self) -> None:
        try:
            with self._pin:
                pass
        except FileNotFoundError:
            pass  # deleted or closed meanwhile: nothing is known, nothing is asked of it

    def is_full(self, incoming_bytes: int, incoming_batches: int = 1) -> bool:
        """Whether an append of ``incoming_bytes`` in ``incoming_batches`` needs a new segment.

        Each batch may need an entry in each index, so both must have room for all of them.
        """
        return (
            self._size + incoming_bytes > self.config.max_segment_bytes
            or self.offset_index.free_entries < incoming_batches
            or self.time_index.free_entries < incoming_batches
        )

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

    # -- reading (the caller holds the pin) ---------------------------------------------
    def find_batch(
        self, offset: int, end: int, *, rebuilt: bool = False
    ) -> tuple[int, BatchHeader] | None:
        """Position and header of the batch holding ``offset``, or None if beyond ``end``.

        The index entry it starts from is checked against the log (the batch there must
        have exactly the entry's base offset); a wrong entry makes the segment rebuild its
        indexes and look again. Call it under a pin.
        """
        with self._lock:  # a roll or rebuild may remap the index under a lock-free reader
            start_offset, position = self.offset_index.lookup(offset)
        check_entry = bool(position) or start_offset != self.base_offset
        try:
            for pos, header in self._walk(position, end, verify_crc=False):
                if check_entry and (header.base_offset != start_offset or header.magic != 2):
                    break
                check_entry = False
                if header.last_offset >= offset:
                    return pos, header
        except CorruptBatchError:
            if not check_entry:
                raise
        if not check_entry:
            return None
        self._rebuild_indexes(f"offset index entry ({start_offset}, {position}) is wrong", rebuilt)
        return self.find_batch(offset, end, rebuilt=True)

    def read(
        self, offset: int, max_bytes: int, max_offset: int, *, min_one_batch: bool = True
    ) -> tuple[bytes, int]:
        """Whole batches starting at the batch holding ``offset``, up to ``max_bytes``.

        Returns the bytes and the offset after the last returned batch. Stops before the
        first batch whose last offset is >= ``max_offset`` (exclusive upper bound). The
        first batch is returned even when larger than ``max_bytes`` (unless
        ``min_one_batch`` is False), so a consumer always progresses. Every returned batch
        passed its CRC check: a corrupt first batch raises ``CorruptBatchError``, a later
        one ends the read before it. A corrupt batch is logged once per position. Call it
        under a pin.
        """
        try:
            return self._read(offset, max_bytes, max_offset, min_one_batch)
        except CorruptBatchError as exc:
            self._report_corruption(exc)
            raise

    def _report_corruption(self, exc: CorruptBatchError) -> None:
        key = exc.position if exc.position is not None else -1
        if key not in self._reported and len(self._reported) < 1024:
            self._reported.add(key)
            log.error("corrupt data in %s: %s", self.log_path, exc)

    def batch_headers(self, offset: int, end: int) -> Iterator[BatchHeader]:
        """The header of each batch from the one holding ``offset`` up to byte ``end``,
        read without the records and without CRC checks. Call it under a pin."""
        found = self.find_batch(offset, end)
        if found is not None:
            for _, header in self._walk(found[0], end, verify_crc=False):
                yield header

    def _read(
        self, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool
    ) -> tuple[bytes, int]:
        end = self._size
        found = self.find_batch(offset, end)
        if found is None:
            return b"", offset
        position, first = found
        if first.base_offset > offset:  # offsets are dense: a gap means damage
            raise CorruptBatchError(
                f"offset {offset} is missing: the next batch starts at {first.base_offset}",
                position=position,
                offset=offset,
            )
        if first.last_offset >= max_offset or (first.size > max_bytes and not min_one_batch):
            return b"", offset
        limit = position + max(max_bytes, first.size)
        stop = position + first.size
        if limit > stop:
            stop = self._batch_boundary(limit, end)
            if stop <= position + first.size:  # no known boundary further: read all, trim
                stop = min(limit, end)
        data = os.pread(self._fd, max(stop, position + first.size) - position, position)
        return whole_batches(data, position, max_offset, offset)

    def _batch_boundary(self, limit: int, end: int) -> int:
        """The last batch boundary at or below ``limit`` that the offset index knows.

        Reading up to a known boundary returns whole batches without trimming a copy;
        the index is sparse, so a read may stop up to ``index_interval_bytes`` short of
        its budget.
        """
        if limit >= end:
            return end
        with self._lock:
            return self.offset_index.last_position_at_most(limit)

    def find_offset_by_timestamp(
        self, timestamp: int, end: int, *, min_offset: int = 0, rebuilt: bool = False
    ) -> int | None:
        """The first offset >= ``min_offset`` whose record timestamp is >= ``timestamp``.

        Call it under a pin.
        """
        if self.max_timestamp < timestamp:
            return None
        with self._lock:
            entry = self.time_index.lookup_before(timestamp)
        start_offset = self.base_offset if entry is None else entry[1]
        found = self.find_batch(start_offset, end)
        if entry is not None and (
            found is None or found[1].base_offset != entry[1] or found[1].max_timestamp != entry[0]
        ):
            self._rebuild_indexes(f"time index entry {entry} disagrees with the log", rebuilt)
            return self.find_offset_by_timestamp(
                timestamp, end, min_offset=min_offset, rebuilt=True
            )
        if min_offset > start_offset:
            found = self.find_batch(min_offset, end)
        if found is None:
            return None
        for position, header in self._walk(found[0], end, verify_crc=False):
            if header.max_timestamp >= timestamp:
                hit = self._first_record_at_or_after(position, header, timestamp, min_offset)
                if hit is not None:
                    return hit
        return None

    def _first_record_at_or_after(
        self, position: int, header: BatchHeader, timestamp: int, min_offset: int
    ) -> int | None:
        data = os.pread(self._fd, header.size, position)
        check_crc(data, 0, header, position)
        return records.first_offset_at_or_after(data, 0, timestamp, min_offset)

    # -- deferred loading ---------------------------------------------------------------
    def defer_loading(
        self,
        next_offset: int,
        *,
        sealed: bool,
        max_timestamp: int | None = None,
        offset_of_max_timestamp: int | None = None,
    ) -> None:
        """Trust what the listing and checkpoint say; check the indexes on first pin.

        The max timestamp, when not given, is read from the time index when first asked.
        """
        self.next_offset = next_offset
        self.sealed = sealed
        self._deferred = True
        if max_timestamp is None:
            self._timestamps_known = False
        else:
            self._max_timestamp = max_timestamp
            self._offset_of_max_timestamp = offset_of_max_timestamp or self.base_offset

    def finish_loading(self) -> None:
        """First pin of a deferred segment: check the indexes against the log.

        The file cache calls it (``CachedSegment``) outside its lock, under the pin.
        """
        with self._lock:
            if not self._deferred:
                return
            self._deferred = False  # the checks below pin the segment again
            try:
                if self._needs_rebuild:
                    self._rebuild_indexes("its offset index file was unusable")
                elif self._indexes_look_sane():
                    self._load_timestamps_and_tail()
                else:
                    self._rebuild_indexes("an index disagrees with the log at its last entry")
            except BaseException:
                self._deferred = True
                raise
            self._timestamps_known = True

    def _load_timestamps_and_tail(self) -> None:
        last = self.time_index.last_entry
        if last is not None:
            self._max_timestamp, self._offset_of_max_timestamp = last
        if not self.sealed:
            position = 0
            if self.offset_index.entries:
                _, position = self.offset_index.entry_at(self.offset_index.entries - 1)
            self._bytes_since_index = self._size - position

    # -- clean loading ------------------------------------------------------------------
    def load_clean(self, next_offset: int | None) -> bool:
        """Load a segment that was closed cleanly, trusting its indexes after a sanity check.

        ``next_offset`` is the next segment's base offset for a sealed segment, or None for
        the last one, whose end is found by walking from its last index entry. Returns
        False when the indexes fail the check (the caller then calls ``recover``).
        """
        with self._pin:
            if self.indexes_missing or not self._indexes_look_sane():
                return False
            last = self.time_index.last_entry
            if last is not None:
                self._max_timestamp, self._offset_of_max_timestamp = last
            if next_offset is not None:
                self.next_offset = next_offset
                self.sealed = True
                return self._size == 0 or last is not None
            return self._load_tail()

    def _indexes_look_sane(self) -> bool:
        """Check the last entry of each index against the log itself."""
        try:
            if self.offset_index.entries:
                offset, position = self.offset_index.entry_at(self.offset_index.entries - 1)
                if position >= self._size or self._read_header(position).base_offset != offset:
                    return False
            last = self.time_index.last_entry
            if last is None:
                return not (self.sealed and self._size)  # sealing records the max timestamp
            return self._batch_max_timestamp(last[1]) == last[0]
        except (CorruptBatchError, IndexCorruptError):
            return False

    def _batch_max_timestamp(self, base_offset: int) -> int | None:
        """Max timestamp of the batch starting at ``base_offset``, None if there is none."""
        with self._lock:
            _, position = self.offset_index.lookup(base_offset)
        for _, header in self._walk(position, self._size, verify_crc=False):
            if header.base_offset >= base_offset:
                return header.max_timestamp if header.base_offset == base_offset else None
        return None

    def _load_tail(self) -> bool:
        """Walk the batches after the last index entry to find the end of the segment."""
        position = 0
        if self.offset_index.entries:
            _, position = self.offset_index.entry_at(self.offset_index.entries - 1)
        expected = None
        try:
            for pos, header in self._walk(position, self._size, verify_crc=False):
                if expected is not None and header.base_offset != expected:
                    return False
                expected = header.next_offset
                self._bytes_since_index = 0 if pos == position else self._bytes_since_index
                self._bytes_since_index += header.size
                self._note_timestamp(header.base_offset, header.max_timestamp)
                position = pos + header.size
        except CorruptBatchError:
            return False
        if position != self._size:
            return False
        if expected is not None:
            self.next_offset = expected
        return True

    # -- recovery -----------------------------------------------------------------------
    def recover(self, *, expected_base: int | None = None, is_last: bool) -> ScanResult:
        """Re-validate every batch (CRC included) and rebuild both indexes.

        A run of invalid bytes followed by a valid batch is kept and reported as a
        ``CorruptRegion`` (reads that reach it fail; later offsets stay readable). Invalid
        bytes with nothing valid after them are a torn tail: truncated when this is the
        last segment, reported when it is a sealed one (truncating would leave a gap).
        """
        with self._pin, self._lock:
            self._modified = True
            self._deferred = self._needs_rebuild = False
            self._timestamps_known = True
            self._reset_indexes()
            result = ScanResult()
            expected = self.base_offset if expected_base is None else expected_base
            for item in scan_segment(self._fd, self._size, self.base_offset, expected):
                if isinstance(item, CorruptRegion):
                    if item.length < 0 and is_last:
                        result.truncated_bytes = self._size - item.position
                        result.truncated_reason = item.reason
                        self._truncate_file(item.position)
                        break
                    if item.length < 0:
                        item.length = self._size - item.position
                    result.corrupt.append(item)
                    self._force_index_entry = True
                    continue
                position, header = item
                self._index_batch(position, header.base_offset, header.size)
                self._note_timestamp(header.base_offset, header.max_timestamp)
                expected = header.next_offset
                result.batches += 1
            result.valid_bytes = self._size
            self.next_offset = expected
            return result

    def verify(self) -> list[CorruptRegion]:
        """Every corrupt region of the segment, found by a read-only CRC scan."""
        found = []
        with self._pin:
            for item in scan_segment(self._fd, self._size, self.base_offset, self.base_offset):
                if isinstance(item, CorruptRegion):
                    if item.length < 0:
                        item.length = self._size - item.position
                    found.append(item)
        return found

    def _rebuild_indexes(self, reason: str, already_rebuilt: bool = False) -> None:
        """Rebuild both indexes from the log; where the segment ends does not change."""
        if already_rebuilt:  # a fresh index cannot disagree with the log it was built from
            raise CorruptBatchError(f"segment {self.log_path} is inconsistent: {reason}")
        log.warning("rebuilding indexes of %s: %s", self.log_path, reason)
        with self._pin, self._lock:
            self.index_rebuilds += 1
            was_sealed, next_offset = self.sealed, self.next_offset
            self.recover(expected_base=self.base_offset, is_last=False)
            self.next_offset = next_offset
            if was_sealed:
                self.offset_index.trim()
                self.time_index.trim()

    # -- walking the log ----------------------------------------------------------------
    def _read_header(self, position: int) -> BatchHeader:
        return records.read_header(os.pread(self._fd, HEADER_SIZE, position), 0)

    def _walk(
        self, position: int, end: int, *, verify_crc: bool
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Batches from ``position`` up to ``end``, reading ahead in chunks."""
        window = max(HEADER_SIZE * 16, self.config.index_interval_bytes * 2 + HEADER_SIZE)
        while position + HEADER_SIZE <= end:
            chunk = os.pread(self._fd, min(window, end - position), position)
            at = 0
            while at + HEADER_SIZE <= len(chunk):
                header = records.read_header(chunk, at)
                if header.size < HEADER_SIZE or header.size > end - position - at:
                    raise CorruptBatchError(
                        f"batch length {header.size} is impossible here",
                        position=position + at,
                        offset=header.base_offset,
                    )
                if at + header.size > len(chunk):
                    if at == 0:  # one batch larger than the window
                        if verify_crc:
                            check_crc(
                                os.pread(self._fd, header.size, position), 0, header, position
                            )
                        yield position, header
                        at = header.size
                    break
                if verify_crc:
                    check_crc(chunk, at, header, position + at)
                yield position + at, header
                at += header.size
            position += at

    # -- index bookkeeping --------------------------------------------------------------
    def _index_batch(self, position: int, base_offset: int, size: int) -> None:
        due = self._force_index_entry or (
            self._bytes_since_index >= self.config.index_interval_bytes and position > 0
        )
        # A full index (its limit was lowered, or a recovery rebuilds a long segment)
        # only makes lookups scan further; it never refuses the batch.
        if due and not self.offset_index.is_full and not self.time_index.is_full:
            self.offset_index.append(base_offset, position)
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_index = 0
            self._force_index_entry = False
        self._bytes_since_index += size

    def _note_timestamp(self, base_offset: int, max_timestamp: int) -> None:
        if max_timestamp > self._max_timestamp:
            self._max_timestamp = max_timestamp
            self._offset_of_max_timestamp = base_offset

    def _reset_indexes(self) -> None:
        self.offset_index.reset()
        self.time_index.reset()
        self.offset_index.make_writable()
        self.time_index.make_writable()
        self._max_timestamp, self._offset_of_max_timestamp = -1, self.base_offset
        self._bytes_since_index = 0
        self._force_index_entry = False

    def _truncate_file(self, position: int) -> None:
        os.ftruncate(self._fd, position)
        self._size = position

    # -- flushing and lifecycle ---------------------------------------------------------
    def flush(self) -> None:
        """fdatasync the log and flush both indexes (nothing once closed or deleted)."""
        try:
            with self._pin, self._lock:
                os.fdatasync(self._fd)
                self.offset_index.flush()
                self.time_index.flush()
        except FileNotFoundError:
            if not self._pin.closed_for_good:
                raise

    def flush_log_only(self) -> None:
        """fdatasync only the ``.log`` (indexes are rebuilt by recovery anyway)."""
        try:
            with self._pin:
                os.fdatasync(self._fd)
        except FileNotFoundError:
            if not self._pin.closed_for_good:
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
            if self._modified and (record or sync_indexes) and not self._pin.closed_for_good:
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
            self._cache.retire(self._pin, deleted=False)

    def delete(self) -> None:
        """Unlink the files now; the descriptors close when the last read unpins."""
        with self._lock:
            self._cache.retire(self._pin, deleted=True)  # first: nothing reopens it any more
            for path in (self.log_path, self.offset_index.path, self.time_index.path):
                path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return (
            f"LogSegment(base={self.base_offset}, next={self.next_offset}, "
            f"bytes={self._size}, sealed={self.sealed})"
        )

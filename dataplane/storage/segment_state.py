"""The state of a log segment and the primitives every part of it shares.

``SegmentState`` is the base of ``LogSegment`` (``segment.py``, whose docstring is the
contract of a segment: files, lifecycle, open and closed, loading, thread safety). It
holds what a segment keeps in memory (its size, end, max timestamp, sealed state and
its two indexes) and provides:

- the hooks the file cache (``filecache.py``) opens and closes the segment's files with
  (``_open_files``, ``_close_files``, ``_mapped``), and ``pin``;
- walking the batches of the ``.log`` (``_walk``, ``_read_header``), under a pin;
- the bookkeeping of each batch appended or re-scanned (``_index_batch``,
  ``_note_timestamp``): an entry in both indexes once ``index_interval_bytes`` were
  written since the last one, and the largest timestamp so far.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

from dataplane import records
from dataplane.records import HEADER_SIZE, BatchHeader
from dataplane.records.errors import CorruptBatchError
from dataplane.storage.config import LogConfig
from dataplane.storage.errors import IndexCorruptError
from dataplane.storage.filecache import SEGMENT_FILES, Pin, SegmentFileCache
from dataplane.storage.index import OffsetIndex, TimeIndex
from dataplane.storage.segment_files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    SegmentFiles,
    check_crc,
    segment_file_name,
)

log = logging.getLogger(__name__)

_IndexT = TypeVar("_IndexT", OffsetIndex, TimeIndex)


class SegmentState:
    """A segment's in-memory state, files and batch walking. See the module docstring."""

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
        # Guarded by the cache's lock:
        self._fd = -1
        self._open_fds = 0
        self._pins = 0
        self._deleted = False
        self._retired = False
        self._last_used = 0  # the cache's tick when last unpinned
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

    # -- construction -------------------------------------------------------------------
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

    # -- open and closed (the cache calls these under its lock) -------------------------
    def _open_files(self) -> int:
        """Open the ``.log`` and map the offset index; returns the descriptors held."""
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

    def _close_files(self) -> None:
        """Unmap the indexes (trimmed, unless the files are gone) and close the ``.log``."""
        fd, self._fd = self._fd, -1
        if fd < 0:
            return
        failure: OSError | None = None
        for index in (self.offset_index, self.time_index):
            try:
                index.unmap(trim=not self._deleted)
            except OSError as exc:  # a trim refused: unmap anyway, and say so
                failure = failure or exc
                index.unmap(trim=False)
        os.close(fd)
        if failure is not None:
            raise failure

    def _mapped(self, change: int) -> None:
        """An index was mapped or unmapped while the segment is pinned."""
        self._cache.adjust(self, change)

    @property
    def is_open(self) -> bool:
        return self._fd >= 0

    @property
    def _gone(self) -> bool:
        """Closed for good or deleted: nothing reopens it."""
        return self._retired or self._deleted

    # -- pinning ------------------------------------------------------------------------
    def pin(self) -> Pin:
        """Keep the segment open (opening it if needed) until the block ends.

        Use as ``with segment.pin():``; raises ``FileNotFoundError`` once the segment is
        closed for good or deleted (a read that pinned it before keeps reading).
        """
        return self._pin

    def _finish_loading(self) -> None:
        """First pin of a deferred segment: check the indexes (``SegmentRecovery``)."""
        raise NotImplementedError

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

"""The read path of a log segment: finding a batch by offset or by timestamp, reading
whole batches.

``SegmentReads`` builds on ``SegmentRecovery`` (``segment_recovery.py``) because a read
that finds an index entry disagreeing with the log rebuilds the indexes and looks again
(once: if the rebuilt index still disagrees, ``CorruptBatchError`` is raised).

The caller holds the segment pinned across the whole read (``LogSegments`` does, see
``log_segments.py``). The segment's lock is taken only around index lookups, since a
roll or a rebuild may remap an index under a lock-free reader. A read never returns
bytes past the segment's size when it started, and every batch ``read`` returns passed
its CRC check.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

from dataplane import records
from dataplane.records import BatchHeader
from dataplane.records.errors import CorruptBatchError
from dataplane.storage.segment_files import check_crc, whole_batches
from dataplane.storage.segment_recovery import SegmentRecovery

log = logging.getLogger(__name__)


class SegmentReads(SegmentRecovery):
    """Lookups and reads of whole batches. See the module docstring."""

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

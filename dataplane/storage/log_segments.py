"""The segment set of a partition log (Kafka's ``LogSegments``): an immutable snapshot.

A ``PartitionLog`` (``log.py``) replaces its ``LogSegments`` whole on every structural
change (a roll, retention, a truncation), so whoever holds one sees a consistent list
of segments, ordered by base offset, without taking a lock. The queries over the whole
set live here: reading across segments, the timestamp lookup, the scrub, and which
leading segments retention may delete.

Thread safety: a snapshot never changes, but its segments may be deleted while a query
runs. ``read`` pins each segment it reads, and a deleted one raises
``FileNotFoundError`` (the log then looks again at a newer snapshot);
``offset_for_timestamp`` and ``verify`` skip it. The retention queries look only at
sizes, ends and max timestamps; the log calls them under its append lock.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterator
from dataclasses import dataclass

from dataplane.records import BatchHeader
from dataplane.records.errors import CorruptBatchError
from dataplane.storage.scan import CorruptRegion
from dataplane.storage.segment import LogSegment

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LogSegments:
    """An immutable snapshot of the segment list, replaced whole on every change."""

    segments: tuple[LogSegment, ...]
    bases: tuple[int, ...]

    @classmethod
    def of(cls, segments: list[LogSegment] | tuple[LogSegment, ...]) -> LogSegments:
        ordered = tuple(sorted(segments, key=lambda s: s.base_offset))
        return cls(ordered, tuple(s.base_offset for s in ordered))

    def floor_index(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self.bases, offset) - 1)

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)

    # -- reading ------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, upper: int) -> tuple[list[bytes], int]:
        """Read segment after segment while bytes remain and each one was read to its end.

        Returns the chunks read (whole batches, the first one possibly larger than
        ``max_bytes``) and the offset after the last of them; ``upper`` (exclusive)
        bounds the read.
        """
        chunks: list[bytes] = []
        next_offset, remaining = offset, max_bytes
        i = self.floor_index(offset)
        while next_offset < upper and i < len(self.segments):
            segment = self.segments[i]
            with segment.pin():
                data, read_to = segment.read(
                    next_offset, remaining, upper, min_one_batch=not chunks
                )
            if not data:
                break  # the byte budget or the upper bound stops the read here
            chunks.append(data)
            remaining -= len(data)
            next_offset = read_to
            if remaining <= 0 or read_to < segment.next_offset:
                break
            i += 1
        return chunks, next_offset

    def batch_headers(self, start: int, upper: int) -> Iterator[BatchHeader]:
        """Headers of the batches holding offsets in [``start``, ``upper``), segment after
        segment, each read under a pin (so within the descriptor budget). A segment
        deleted meanwhile is skipped: its batches left the log. A corrupt one (recovery
        does not rescan sealed segments) ends its own scan, with a warning."""
        for segment in self.segments[self.floor_index(start) :]:
            if segment.base_offset >= upper:
                return
            try:
                with segment.pin():
                    first = max(start, segment.base_offset)
                    for header in segment.batch_headers(first, segment.size_bytes):
                        if header.base_offset >= upper:
                            return
                        yield header
            except FileNotFoundError:
                continue
            except CorruptBatchError as exc:
                log.warning("batch headers of %s end early: %s", segment.log_path, exc)

    def offset_for_timestamp(self, timestamp: int, start: int, end: int) -> int | None:
        """The first offset in [``start``, ``end``) whose timestamp is >= ``timestamp``."""
        for segment in self.segments:
            if segment.max_timestamp < timestamp or segment.next_offset <= start:
                continue
            try:
                with segment.pin():
                    found = segment.find_offset_by_timestamp(
                        timestamp, segment.size_bytes, min_offset=start
                    )
            except FileNotFoundError:
                continue
            if found is not None:
                return found if found < end else None
        return None

    def verify(self) -> list[CorruptRegion]:
        """Every corrupt region of every segment, found by read-only CRC scans."""
        found: list[CorruptRegion] = []
        for segment in self.segments:
            try:
                with segment.pin():
                    found.extend(segment.verify())
            except FileNotFoundError:
                continue
        return found

    # -- retention ----------------------------------------------------------------------
    def expired_by_time(
        self, now_ms: int, retention_ms: int, high_watermark: int
    ) -> list[LogSegment]:
        """The leading segments whose records are all older than ``retention_ms``.

        None with a negative ``retention_ms``; an empty segment, or one holding offsets at
        or above the high watermark, ends the run.
        """
        if retention_ms < 0:
            return []
        doomed: list[LogSegment] = []
        for segment in self.segments:
            expired = 0 <= segment.max_timestamp < now_ms - retention_ms
            if segment.is_empty or not expired or segment.next_offset > high_watermark:
                break
            doomed.append(segment)
        return doomed

    def over_size(self, retention_bytes: int, high_watermark: int) -> list[LogSegment]:
        """The leading sealed segments wholly beyond ``retention_bytes``: deleting them
        leaves at least that much.

        None with a negative ``retention_bytes``; a segment holding offsets at or above
        the high watermark ends the run.
        """
        if retention_bytes < 0:
            return []
        excess = self.size_bytes - retention_bytes
        doomed: list[LogSegment] = []
        for segment in self.segments[:-1]:
            if excess < segment.size_bytes or segment.next_offset > high_watermark:
                break
            doomed.append(segment)
            excess -= segment.size_bytes
        return doomed

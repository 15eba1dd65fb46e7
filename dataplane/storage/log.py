"""The partition log: an append-only sequence of RecordBatch v2 batches with dense offsets.

A ``PartitionLog`` owns one directory (``<topic>-<partition>/``) holding its segments
(see ``segment.py``) and its checkpoint (see ``checkpoint.py``). It tracks three offsets:

- ``log_start_offset``: the first offset that may be read; advanced by retention and
  ``advance_log_start_offset``.
- ``log_end_offset`` (LEO): the offset the next appended record gets.
- ``high_watermark``: the end of what readers should see. A log opened with
  ``replicated=False`` (the default) keeps it equal to the LEO; a replicated log lets
  its owner move it with ``update_high_watermark``.

Offsets are dense: every append gets ``[LEO, LEO + n)``. Offsets live outside the CRC
(the base offset is bytes 0..7 of a batch), so assigning them leaves the CRC valid.

Thread safety: any number of threads may append, read and look up concurrently.
Appends are serialised by one lock while they write; with ``durability=always`` they
then wait for a group commit outside that lock, so one ``fdatasync`` covers every batch
written while the previous one ran. Reads take no lock: they work on a snapshot of the
segment list and of the LEO and never return bytes appended after they started.
Structural changes (roll, retention, truncation) take the append lock.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dataplane.storage import records
from dataplane.storage.checkpoint import PartitionCheckpoint, read_checkpoint, write_checkpoint
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.errors import (
    CorruptBatchError,
    InvalidOffsetError,
    LogClosedError,
    LogDirOfflineError,
    OffsetOutOfRangeError,
)
from dataplane.storage.records import BatchHeader, TimestampType
from dataplane.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    CorruptRegion,
    LogSegment,
    PlacedBatch,
    fsync_directory,
)

log = logging.getLogger(__name__)

_INT64 = struct.Struct(">q")
_MAX_RELATIVE_OFFSET = 2**32 - 1


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """Where an append landed."""

    base_offset: int
    last_offset: int
    record_count: int
    batch_count: int
    size_bytes: int
    max_timestamp: int
    log_append_time: int  # -1 unless the log stamps LogAppendTime


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Whole batches read from a log; ``next_offset`` is where the next read starts."""

    data: bytes
    next_offset: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int


@dataclass(slots=True)
class RecoveryReport:
    """What opening a log found and did."""

    path: Path
    clean_shutdown: bool
    segments: int = 0
    segments_recovered: int = 0
    batches_scanned: int = 0
    truncated_bytes: int = 0
    truncated_reason: str | None = None
    indexes_rebuilt: list[int] = field(default_factory=list)
    corrupt: list[CorruptRegion] = field(default_factory=list)
    segments_deleted: list[int] = field(default_factory=list)
    log_start_offset: int = 0
    log_end_offset: int = 0
    duration_s: float = 0.0

    @property
    def repaired(self) -> bool:
        return bool(self.truncated_bytes or self.indexes_rebuilt or self.segments_deleted)

    def __str__(self) -> str:
        lines = [
            f"{self.path.name}: {'clean' if self.clean_shutdown else 'unclean'} shutdown, "
            f"{self.segments} segments, offsets [{self.log_start_offset}, "
            f"{self.log_end_offset}), opened in {self.duration_s * 1000:.1f} ms"
        ]
        if self.segments_recovered:
            lines.append(
                f"  re-validated {self.segments_recovered} segments, {self.batches_scanned} batches"
            )
        if self.truncated_bytes:
            lines.append(
                f"  truncated a torn tail of {self.truncated_bytes} bytes: {self.truncated_reason}"
            )
        if self.indexes_rebuilt:
            lines.append(f"  rebuilt indexes of segments {self.indexes_rebuilt}")
        if self.segments_deleted:
            lines.append(f"  deleted segments below the log start: {self.segments_deleted}")
        lines.extend(f"  CORRUPT: {region}" for region in self.corrupt)
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class _SegmentView:
    """An immutable snapshot of the segment list, replaced whole on every change."""

    segments: tuple[LogSegment, ...]
    bases: tuple[int, ...]

    @classmethod
    def of(cls, segments: list[LogSegment] | tuple[LogSegment, ...]) -> _SegmentView:
        ordered = tuple(sorted(segments, key=lambda s: s.base_offset))
        return cls(ordered, tuple(s.base_offset for s in ordered))

    def floor_index(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self.bases, offset) - 1)


class PartitionLog:
    """An append-only, segmented, indexed log. See the module docstring."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        replicated: bool = False,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.directory = directory
        self.config = config
        self.replicated = replicated
        self._clock_ms = clock_ms
        self._lock = threading.RLock()
        self._flush_cond = threading.Condition()
        self._flushing = False
        self._unflushed: list[LogSegment] = []
        self._view = _SegmentView((), ())
        self._log_start_offset = 0
        self._log_end_offset = 0
        self._high_watermark = 0
        self._recovery_point = 0
        self._last_flush_ms = clock_ms()
        self._segment_created_ms: dict[int, int] = {}
        self._offline: LogDirOfflineError | None = None
        self._closed = False
        self.recovery: RecoveryReport = RecoveryReport(directory, clean_shutdown=True)

    # -- opening ------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        directory: Path | str,
        config: LogConfig | None = None,
        *,
        replicated: bool = False,
        initial_offset: int = 0,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> PartitionLog:
        """Open (or create) the log in ``directory``, recovering it if it was not closed.

        ``config`` overrides the stored one and is persisted; without it the stored one is
        used (defaults for a new log). ``recovery`` on the result says what was done.
        """
        started = time.perf_counter()
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        checkpoint = read_checkpoint(directory)
        effective = config or (checkpoint.config if checkpoint else LogConfig())
        self = cls(directory, effective, replicated=replicated, clock_ms=clock_ms)
        self._load(checkpoint, initial_offset)
        self.recovery.duration_s = time.perf_counter() - started
        if not self.recovery.clean_shutdown or self.recovery.repaired or self.recovery.corrupt:
            log.warning("recovered log %s", self.recovery)
        return self

    def _load(self, checkpoint: PartitionCheckpoint | None, initial_offset: int) -> None:
        self._remove_leftovers()
        bases = sorted(
            int(p.name[: -len(LOG_SUFFIX)]) for p in self.directory.glob("*" + LOG_SUFFIX)
        )
        is_new = checkpoint is None and not bases
        clean = is_new or (checkpoint is not None and checkpoint.clean_shutdown)
        report = self.recovery = RecoveryReport(self.directory, clean_shutdown=clean)
        start = (
            checkpoint.log_start_offset if checkpoint else (bases[0] if bases else initial_offset)
        )
        recovery_point: int | None = None  # None: trust every segment (clean shutdown)
        if not clean:
            recovery_point = checkpoint.recovery_point if checkpoint else -1
        segments, recovered = self._load_segments(bases, recovery_point, report)
        if not segments:
            segments = [self._new_segment(start)]
        self._set_view(segments)
        self._log_end_offset = segments[-1].next_offset
        self._log_start_offset = min(max(start, segments[0].base_offset), self._log_end_offset)
        self._drop_segments_below_start(report)
        hw = checkpoint.high_watermark if checkpoint else self._log_end_offset
        self._high_watermark = self._clamp(hw if self.replicated else self._log_end_offset)
        report.segments = len(self._view.segments)
        report.log_start_offset, report.log_end_offset = (
            self._log_start_offset,
            self._log_end_offset,
        )
        self._flush_segments([s for s in recovered if s in self._view.segments])
        self._recovery_point = self._log_end_offset
        self._write_checkpoint(clean_shutdown=False)

    def _remove_leftovers(self) -> None:
        for path in self.directory.iterdir():
            orphan_index = path.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and not (
                path.with_suffix(LOG_SUFFIX).exists()
            )
            if orphan_index or path.name.endswith((".tmp", ".deleted")):
                path.unlink()

    def _load_segments(
        self, bases: list[int], recovery_point: int | None, report: RecoveryReport
    ) -> tuple[list[LogSegment], list[LogSegment]]:
        """Every segment, loaded; and those that recovery rewrote (to be synced)."""
        segments: list[LogSegment] = []
        recovered: list[LogSegment] = []
        expected: int | None = None
        for i, base in enumerate(bases):
            segment = LogSegment(self.directory, base, self.config)
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            is_last = next_base is None
            trusted = recovery_point is None or (
                next_base is not None and next_base <= recovery_point
            )
            if not (trusted and segment.load_clean(next_base)):
                if trusted or segment.indexes_missing:
                    report.indexes_rebuilt.append(base)
                self._recover_segment(segment, expected, is_last, report)
                recovered.append(segment)
                if next_base is not None:
                    segment.seal()
                    segment.next_offset = next_base
            expected = segment.next_offset
            self._segment_created_ms[base] = self._clock_ms()
            segments.append(segment)
        return segments, recovered

    @staticmethod
    def _recover_segment(
        segment: LogSegment, expected: int | None, is_last: bool, report: RecoveryReport
    ) -> None:
        result = segment.recover(expected_base=expected, is_last=is_last)
        report.segments_recovered += 1
        report.batches_scanned += result.batches
        report.truncated_bytes += result.truncated_bytes
        report.truncated_reason = result.truncated_reason or report.truncated_reason
        report.corrupt.extend(result.corrupt)

    def _drop_segments_below_start(self, report: RecoveryReport) -> None:
        segments = list(self._view.segments)
        while len(segments) > 1 and segments[0].next_offset <= self._log_start_offset:
            report.segments_deleted.append(segments[0].base_offset)
            segments.pop(0).delete()
        self._set_view(segments)

    # -- offsets ------------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        """Every offset below this one is on stable storage."""
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._view.segments)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._view.segments

    @property
    def is_offline(self) -> bool:
        return self._offline is not None

    def update_high_watermark(self, offset: int) -> int:
        """Move the high watermark of a replicated log; clamped to [log start, LEO]."""
        with self._lock:
            self._high_watermark = self._clamp(offset)
            return self._high_watermark

    def _clamp(self, offset: int) -> int:
        return max(self._log_start_offset, min(offset, self._log_end_offset))

    # -- appending ----------------------------------------------------------------------
    def append(
        self,
        data: bytes | bytearray | memoryview,
        *,
        assign_offsets: bool = True,
        leader_epoch: int | None = None,
    ) -> AppendInfo:
        """Validate and append one or more concatenated batches.

        Every batch is validated (structure, magic, codec, CRC, ``max_batch_bytes``)
        before any byte is written, so a bad request leaves the log untouched. With
        ``assign_offsets`` (a leader) the batches get ``[LEO, LEO + n)``; without it (a
        follower copying a leader) their offsets must start at the LEO and be dense.
        ``leader_epoch`` stamps the partition leader epoch into each batch header.
        Returns after the bytes are written and, with ``durability=always``, synced.
        """
        view = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
        headers = self._validate(view)
        with self._lock:
            self._check_writable()
            base = self._log_end_offset if assign_offsets else headers[0][1].base_offset
            if not assign_offsets:
                self._check_follower_offsets(headers)
            buffers, placed, append_time = self._prepare(view, headers, base, leader_epoch)
            info = self._write(buffers, placed, append_time)
        self._after_append(info.last_offset + 1)
        return info

    def _validate(self, view: memoryview) -> list[tuple[int, BatchHeader]]:
        headers: list[tuple[int, BatchHeader]] = []
        position, limit = 0, self.config.max_batch_bytes
        while position < len(view):
            header = records.validate_batch(view, position, max_batch_bytes=limit)
            headers.append((position, header))
            position += header.size
        if not headers:
            raise CorruptBatchError("no batch to append", position=0)
        return headers

    def _check_writable(self) -> None:
        if self._offline is not None:
            raise self._offline
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    def _check_follower_offsets(self, headers: list[tuple[int, BatchHeader]]) -> None:
        expected = self._log_end_offset
        for position, header in headers:
            if header.base_offset != expected:
                raise InvalidOffsetError(
                    f"batch at position {position} starts at offset {header.base_offset}, "
                    f"expected {expected} (the log end offset)"
                )
            expected = header.next_offset

    def _prepare(
        self,
        view: memoryview,
        headers: list[tuple[int, BatchHeader]],
        base: int,
        leader_epoch: int | None,
    ) -> tuple[list[bytes | memoryview], list[PlacedBatch], int]:
        """The buffers to write and where each batch lands, offsets assigned.

        The base offset is written as its own 8-byte buffer in front of the rest of the
        batch (``pwritev``), so the caller's bytes are never copied.
        """
        if self.config.timestamp_type == TimestampType.LOG_APPEND_TIME or leader_epoch is not None:
            return self._prepare_rewritten(view, headers, base, leader_epoch)
        buffers: list[bytes | memoryview] = []
        placed: list[PlacedBatch] = []
        next_base = base
        for position, header in headers:
            buffers.append(_INT64.pack(next_base))
            buffers.append(view[position + 8 : position + header.size])
            placed.append((position, next_base, header))
            next_base += header.last_offset_delta + 1
        return buffers, placed, -1

    def _prepare_rewritten(
        self,
        view: memoryview,
        headers: list[tuple[int, BatchHeader]],
        base: int,
        leader_epoch: int | None,
    ) -> tuple[list[bytes | memoryview], list[PlacedBatch], int]:
        buffer = bytearray(view)
        append_time = -1
        if self.config.timestamp_type == TimestampType.LOG_APPEND_TIME:
            append_time = self._clock_ms()
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

    def _write(
        self, buffers: list[bytes | memoryview], placed: list[PlacedBatch], append_time: int
    ) -> AppendInfo:
        size = 0
        for buffer in buffers:
            size += len(buffer)
        record_count, max_timestamp = 0, -1
        for _, _, header in placed:
            record_count += header.record_count
            max_timestamp = max(max_timestamp, header.max_timestamp)
        base_offset = placed[0][1]
        _, last_base, last = placed[-1]
        last_offset = last_base + last.last_offset_delta
        segment = self._segment_for_append(base_offset, last_offset, size)
        try:
            segment.append(buffers, placed)
        except OSError as exc:
            raise self._go_offline(exc) from exc
        self._log_end_offset = last_offset + 1
        if not self.replicated:
            self._high_watermark = self._log_end_offset
        return AppendInfo(
            base_offset, last_offset, record_count, len(placed), size, max_timestamp, append_time
        )

    def _segment_for_append(self, base_offset: int, last_offset: int, size: int) -> LogSegment:
        active = self._view.segments[-1]
        if active.is_empty:
            return active
        aged = self._clock_ms() - self._segment_created_ms.get(active.base_offset, 0)
        if (
            active.is_full(size)
            or aged >= self.config.segment_ms
            or last_offset - active.base_offset > _MAX_RELATIVE_OFFSET
        ):
            return self._roll(base_offset)
        return active

    def _roll(self, base_offset: int) -> LogSegment:
        """Seal the active segment and start a new one at ``base_offset``."""
        active = self._view.segments[-1]
        try:
            active.seal()
            segment = self._new_segment(base_offset)
        except OSError as exc:
            raise self._go_offline(exc) from exc
        self._unflushed.append(active)
        self._set_view([*self._view.segments, segment])
        return segment

    def _new_segment(self, base_offset: int) -> LogSegment:
        segment = LogSegment.create(self.directory, base_offset, self.config)
        self._segment_created_ms[base_offset] = self._clock_ms()
        return segment

    def roll(self) -> None:
        """Start a new segment now (no-op when the active one is empty)."""
        with self._lock:
            self._check_writable()
            if not self._view.segments[-1].is_empty:
                self._roll(self._log_end_offset)

    def _after_append(self, end_offset: int) -> None:
        durability = self.config.durability
        if durability is Durability.ALWAYS or (
            durability is Durability.INTERVAL and self._flush_due()
        ):
            self._sync_through(end_offset)

    def _flush_due(self) -> bool:
        return self._clock_ms() - self._last_flush_ms >= self.config.flush_interval_ms

    # -- flushing (group commit) --------------------------------------------------------
    def flush(self) -> None:
        """fsync everything appended so far (log and sealed segments' indexes)."""
        self._sync_through(self._log_end_offset)

    def maybe_flush(self) -> bool:
        """Flush when the log's durability mode says it is due; True if it flushed.

        ``interval`` logs flush when ``flush_interval_ms`` has passed with unflushed data;
        every mode flushes segments sealed since the last flush.
        """
        due = self._recovery_point < self._log_end_offset and (
            self.config.durability is not Durability.NEVER and self._flush_due()
        )
        if due or self._unflushed:
            self._sync_through(self._log_end_offset)
            return True
        return False

    def _sync_through(self, target: int) -> None:
        """Return once every offset below ``target`` is synced; one caller syncs for all."""
        with self._flush_cond:
            while self._recovery_point < target or self._unflushed_sealed_below(target):
                if self._offline is not None:
                    raise self._offline
                if self._flushing:
                    self._flush_cond.wait()
                    continue
                self._flushing = True
                self._flush_cond.release()
                error: OSError | None = None
                synced = 0
                try:
                    synced = self._flush_once()
                except OSError as exc:
                    error = exc
                finally:
                    self._flush_cond.acquire()
                    self._flushing = False
                    self._flush_cond.notify_all()
                if error is not None:
                    raise self._go_offline(error) from error
                self._recovery_point = max(self._recovery_point, synced)

    def _unflushed_sealed_below(self, target: int) -> bool:
        unflushed = self._unflushed
        return bool(unflushed) and unflushed[0].base_offset < target

    def _flush_once(self) -> int:
        with self._lock:
            end = self._log_end_offset
            sealed, self._unflushed = self._unflushed, []
            active = self._view.segments[-1]
        self._last_flush_ms = self._clock_ms()
        self._flush_segments([*sealed, active], sealed_count=len(sealed))
        return end

    @staticmethod
    def _flush_segments(segments: list[LogSegment], sealed_count: int | None = None) -> None:
        """fsync each segment still open; the last one's indexes only when it is sealed."""
        count = len(segments) if sealed_count is None else sealed_count
        for i, segment in enumerate(segments):
            with contextlib.suppress(FileNotFoundError), segment.pin():
                if i < count:
                    segment.flush()
                else:
                    segment.flush_log_only()

    # -- reading ------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None) -> ReadResult:
        """Whole batches from the batch holding ``offset``, at most ``max_bytes`` of them.

        ``max_offset`` (exclusive; default the LEO) bounds the read, e.g. at the high
        watermark. The first batch is returned whole even when larger than ``max_bytes``.
        ``offset`` must be in [log start, LEO] or ``OffsetOutOfRangeError`` is raised;
        ``offset == LEO`` gives an empty result. The batch holding ``offset`` may start
        before it (batches are never split); consumers skip the records below it.
        """
        start, end = self._log_start_offset, self._log_end_offset
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(offset, start, end)
        upper = end if max_offset is None else min(max_offset, end)
        try:
            chunks, next_offset = self._read_segments(offset, max_bytes, upper)
        except FileNotFoundError:  # retention deleted a segment under us: start again
            return self.read(offset, max_bytes, max_offset=max_offset)
        if not chunks:
            return ReadResult(b"", offset, start, end, self._high_watermark)
        payload = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return ReadResult(payload, next_offset, start, end, self._high_watermark)

    def _read_segments(self, offset: int, max_bytes: int, upper: int) -> tuple[list[bytes], int]:
        """Read segment after segment while bytes remain and each one was read to its end."""
        chunks: list[bytes] = []
        next_offset, remaining = offset, max_bytes
        view = self._view
        i = view.floor_index(offset)
        while next_offset < upper and i < len(view.segments):
            segment = view.segments[i]
            if not chunks and next_offset >= segment.next_offset:
                i += 1  # past the valid end of a segment whose tail was found corrupt
                next_offset = view.bases[i] if i < len(view.bases) else next_offset
                continue
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

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The first readable offset whose record timestamp is >= ``timestamp``, or None."""
        start, end = self._log_start_offset, self._log_end_offset
        for segment in self._view.segments:
            if segment.max_timestamp < timestamp or segment.next_offset <= start:
                continue
            try:
                with segment.pin():
                    found = segment.find_offset_by_timestamp(
                        timestamp, segment.size_bytes, min_offset=start
                    )
            except FileNotFoundError:
                continue
            if found is not None and found < end:
                return found
        return None

    # -- retention and truncation -------------------------------------------------------
    def delete_retained_segments(self, now_ms: int | None = None) -> list[int]:
        """Delete leading segments past ``retention_ms`` or beyond ``retention_bytes``.

        Only whole segments go, never data at or above the high watermark. When every
        segment has expired the active one is rolled first, so the log ends up empty with
        its LEO kept. Returns the base offsets deleted.
        """
        now = self._clock_ms() if now_ms is None else now_ms
        with self._lock:
            self._check_writable()
            doomed = self._expired_by_time(now) or self._over_size()
            if not doomed:
                return []
            if doomed[-1] is self._view.segments[-1]:
                self._roll(self._log_end_offset)
            return self._delete_leading(doomed)

    def _expired_by_time(self, now: int) -> list[LogSegment]:
        if self.config.retention_ms < 0:
            return []
        doomed: list[LogSegment] = []
        for segment in self._view.segments:
            expired = 0 <= segment.max_timestamp < now - self.config.retention_ms
            if segment.is_empty or not expired or segment.next_offset > self._high_watermark:
                break
            doomed.append(segment)
        return doomed

    def _over_size(self) -> list[LogSegment]:
        limit = self.config.retention_bytes
        if limit < 0:
            return []
        excess = self.size_bytes - limit
        doomed: list[LogSegment] = []
        for segment in self._view.segments[:-1]:
            if excess < segment.size_bytes or segment.next_offset > self._high_watermark:
                break
            doomed.append(segment)
            excess -= segment.size_bytes
        return doomed

    def _delete_leading(self, doomed: list[LogSegment]) -> list[int]:
        remaining = list(self._view.segments[len(doomed) :])
        self._log_start_offset = max(self._log_start_offset, remaining[0].base_offset)
        self._set_view(remaining)
        for segment in doomed:
            self._unflushed = [s for s in self._unflushed if s is not segment]
            self._segment_created_ms.pop(segment.base_offset, None)
            segment.delete()
        self._write_checkpoint(clean_shutdown=False)
        return [s.base_offset for s in doomed]

    def advance_log_start_offset(self, offset: int) -> int:
        """Make offsets below ``offset`` unreadable (bounded by the high watermark)."""
        with self._lock:
            self._check_writable()
            target = min(offset, self._high_watermark)
            if target <= self._log_start_offset:
                return self._log_start_offset
            self._log_start_offset = target
            doomed = [
                s for s in self._view.segments[:-1] if s.next_offset <= self._log_start_offset
            ]
            if doomed:
                self._delete_leading(doomed)
            else:
                self._write_checkpoint(clean_shutdown=False)
            return self._log_start_offset

    def truncate_to(self, offset: int) -> int:
        """Remove every record at or above ``offset``; returns the new LEO.

        A batch holding ``offset`` is removed whole (batches are never split), so the
        new LEO may be below ``offset`` — but never below the log start: when the batch
        holding ``offset`` began there, the log is emptied and restarts at the log start.
        Truncating to or below the log start empties the log and restarts it at
        ``offset``. The truncation is synced before returning.
        """
        with self._lock:
            self._check_writable()
            if offset >= self._log_end_offset:
                return self._log_end_offset
            if offset <= self._log_start_offset:
                return self.truncate_fully_and_start_at(offset)
            view = self._view
            keep = list(view.segments[: view.floor_index(offset) + 1])
            for segment in view.segments[len(keep) :]:
                segment.delete()
            tail = keep[-1]
            try:
                tail.truncate_to(offset)
                tail.reopen_for_append()
                tail.flush()
            except OSError as exc:
                raise self._go_offline(exc) from exc
            self._unflushed = [s for s in self._unflushed if s in keep and s is not tail]
            self._set_view(keep)
            if tail.next_offset < self._log_start_offset:
                # The batch holding ``offset`` began below the log start: nothing readable
                # is left, and offsets below the log start are never handed out again.
                return self.truncate_fully_and_start_at(self._log_start_offset)
            self._after_truncation(tail.next_offset)
            return self._log_end_offset

    def truncate_fully_and_start_at(self, offset: int) -> int:
        """Delete every segment and restart the empty log at ``offset``."""
        with self._lock:
            self._check_writable()
            for segment in self._view.segments:
                segment.delete()
            self._unflushed = []
            self._segment_created_ms = {}
            segment = self._new_segment(offset)
            self._set_view([segment])
            self._log_start_offset = offset
            self._after_truncation(offset)
            return offset

    def _after_truncation(self, end: int) -> None:
        self._log_end_offset = end
        self._log_start_offset = min(self._log_start_offset, end)
        self._high_watermark = self._clamp(self._high_watermark)
        if not self.replicated:
            self._high_watermark = end
        self._recovery_point = min(self._recovery_point, end)
        self._write_checkpoint(clean_shutdown=False)

    # -- verification -------------------------------------------------------------------
    def verify(self) -> list[CorruptRegion]:
        """Re-read every batch of every segment with CRC checks; report what is corrupt.

        Read-only: nothing is truncated or rebuilt. Use it to scrub sealed segments, which
        recovery trusts.
        """
        found: list[CorruptRegion] = []
        for segment in self._view.segments:
            with contextlib.suppress(FileNotFoundError), segment.pin():
                found.extend(segment.verify())
        return found

    # -- lifecycle ----------------------------------------------------------------------
    def update_config(self, config: LogConfig) -> None:
        """Apply a new configuration; segment sizes apply from the next roll."""
        with self._lock:
            self.config = config
            for segment in self._view.segments:
                segment.config = config
            self._write_checkpoint(clean_shutdown=False)

    def checkpoint(self) -> None:
        """Persist the log start offset, recovery point and high watermark."""
        with self._lock:
            if not self._closed and self._offline is None:
                self._write_checkpoint(clean_shutdown=False)

    def close(self) -> None:
        """Flush, close every segment and record a clean shutdown."""
        with self._lock:
            if self._closed:
                return
            if self._offline is None:
                self.flush()
            self._closed = True
            for segment in self._view.segments:
                segment.close()
            if self._offline is None:
                self._write_checkpoint(clean_shutdown=True)

    def delete(self) -> None:
        """Close the log and remove its directory."""
        import shutil

        with self._lock:
            self._closed = True
            for segment in self._view.segments:
                segment.delete()
            shutil.rmtree(self.directory, ignore_errors=True)

    def _write_checkpoint(self, *, clean_shutdown: bool) -> None:
        try:
            write_checkpoint(
                self.directory,
                PartitionCheckpoint(
                    clean_shutdown=clean_shutdown,
                    log_start_offset=self._log_start_offset,
                    recovery_point=self._recovery_point,
                    high_watermark=self._high_watermark,
                    config=self.config,
                ),
            )
        except OSError as exc:
            raise self._go_offline(exc) from exc

    def _go_offline(self, cause: OSError) -> LogDirOfflineError:
        if self._offline is None:
            self._offline = LogDirOfflineError(str(self.directory), cause)
            log.error("log %s is offline: %s", self.directory, cause)
        return self._offline

    def _set_view(self, segments: list[LogSegment] | tuple[LogSegment, ...]) -> None:
        self._view = _SegmentView.of(segments)

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.directory.name}, start={self._log_start_offset}, "
            f"end={self._log_end_offset}, segments={len(self._view.segments)})"
        )


__all__ = [
    "AppendInfo",
    "PartitionLog",
    "ReadResult",
    "RecoveryReport",
    "fsync_directory",
]

"""The partition log: an append-only sequence of RecordBatch v2 batches with dense offsets.

A ``PartitionLog`` owns one directory (``<topic>-<partition>/``) holding its segments
(see ``segment.py``) and its checkpoint (see ``checkpoint.py``). It tracks:

- ``log_start_offset``: the first offset that may be read; advanced by retention and
  ``advance_log_start_offset``.
- ``log_end_offset`` (LEO): the offset the next appended record gets.
- ``recovery_point``: every offset below it is on stable storage.
- ``high_watermark``: the end of what readers should see. A log opened with
  ``replicated=True`` lets its owner move it (``update_high_watermark``); otherwise it
  follows the LEO — or, with ``durability=always``, the recovery point, so no reader
  ever sees a record that a power loss could take back.

Offsets are dense: every append gets ``[LEO, LEO + n)``. Offsets live outside the CRC
(the base offset is bytes 0..7 of a batch), so assigning them leaves the CRC valid.

Files stay closed until used: opening reads the checkpoint and lists the directory (see
``recovery.py``), and segments open and close through the process-wide budget of open
files (``filecache.py``). A log opened after a clean shutdown and never changed keeps
its clean checkpoint; the first change (an append, a roll, a truncation, a deletion)
first records that the log is no longer clean.

Thread safety: any number of threads may append, read and look up concurrently.
Appends are serialised by one lock while they write; with ``durability=always`` they
then wait for a group commit (``flush.py``) outside that lock. Reads take no lock: they
work on a snapshot of the segment list and never return bytes appended after they
started. Structural changes (roll, retention, truncation) take the append lock.

Locks: ``_lock`` (the append lock) serialises appends, structural changes and checkpoint
writes; ``_hw_lock`` guards the high watermark alone, so a flush can raise it without
the append lock; ``_unflushed_lock`` guards the sealed segments not yet synced.

Removing records: retention (``delete_retained_segments``) deletes whole leading
segments, never data at or above the high watermark (a tiered log, ``remote_storage``,
keeps its local retention and never deletes a segment its owner has not confirmed
uploaded: ``remote_end_offset``); ``advance_log_start_offset`` makes
the offsets below a point unreadable, deleting the segments wholly below it; truncation
removes every record at or above an offset, a whole batch at a time, and is synced
before it returns. Each takes the append lock for its whole run; one that changes the
log marks it unclean before touching a file and ends by writing the checkpoint with the
new log start offset or LEO. A read working on an older segment snapshot keeps the files
of a deleted segment it has pinned until it unpins it (see ``segment.py``); one that
finds a segment gone retries on the current snapshot.

Layout: ``PartitionLog`` is the whole log, in this one class. It composes collaborators
that have state and interfaces of their own: ``LogSegments`` (``log_segments.py``: the
immutable, ordered segment set, reads across it and which leading segments retention
may delete), the append path's pure functions (``log_append.py``: validating and placing
the batches of an append), the group committer and writer (``flush.py``), the
checkpoint (``checkpoint.py``) and the loading of a log directory (``recovery.py``).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from dataplane.files import fsync_directory
from dataplane.records import BatchHeader, TimestampType
from dataplane.storage.checkpoint import LastSegment, PartitionCheckpoint, write_checkpoint
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.errors import (
    LogClosedError,
    LogDirOfflineError,
    OffsetOutOfRangeError,
    StorageError,
)
from dataplane.storage.flush import BACKGROUND_FLUSHER, FlushWork, GroupCommitter, GroupWriter
from dataplane.storage.log_append import check_follower_offsets, prepare_write, validate_batches
from dataplane.storage.log_segments import LogSegments
from dataplane.storage.recovery import RecoveryReport, load_log
from dataplane.storage.scan import CorruptRegion
from dataplane.storage.segment import LogSegment, PlacedBatch

log = logging.getLogger(__name__)

_MAX_RELATIVE_OFFSET = 2**32 - 1
_READ_RETRIES = 8


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class _CheckpointState:
    """What a checkpoint records of a log, to tell whether it must be rewritten."""

    log_start_offset: int
    recovery_point: int
    high_watermark: int
    config: LogConfig
    clean_shutdown: bool


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
    # The partition leader epoch stamped into the batches (None: unreplicated); set by
    # the broker's ``Partition``, which captured it under the append lock.
    leader_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Whole batches read from a log; ``next_offset`` is where the next read starts."""

    data: bytes
    next_offset: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int


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
        self._committer = GroupCommitter(self._flush_work, self._go_offline, 0, self._synced)
        self._group_writer = GroupWriter(
            self._lock, lambda end, epoch: self._committer.sync_through(end, epoch=epoch)
        )
        self._unflushed: list[LogSegment] = []  # sealed, not yet synced; see _flush_work
        self._unflushed_lock = threading.Lock()
        self._hw_lock = threading.Lock()
        self._view = LogSegments((), ())
        self._log_start_offset = 0
        self._log_end_offset = 0
        self._high_watermark = 0
        self._last_flush_ms = clock_ms()
        self._offline: LogDirOfflineError | None = None
        self._closing = False
        self._closed = False
        self._clean_on_disk = False  # the checkpoint on disk says clean_shutdown
        self._checkpointed: _CheckpointState | None = None  # what the checkpoint on disk holds
        self._activity_listener: Callable[[Self], None] | None = None
        self._active = False  # changed since the last ``settle``
        self.recovery = RecoveryReport(directory, clean_shutdown=True)
        # Tiered logs: one past the last offset the owner confirmed uploaded (None: none
        # confirmed since open); local retention deletes nothing at or above it.
        self.remote_end_offset: int | None = None

    def append_lock(self) -> threading.RLock:
        """The lock every append holds while it checks (``before_write``) and writes:
        holding it, no append interleaves (reentrant)."""
        return self._lock

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
        try:
            directory.mkdir(parents=True)
            new_directory = True
        except FileExistsError:
            new_directory = False
        loaded = load_log(directory, config, initial_offset)
        self = cls(directory, loaded.config, replicated=replicated, clock_ms=clock_ms)
        now = clock_ms()
        for segment in loaded.segments:
            segment.created_ms = now
        self._set_view(loaded.segments)
        self._log_end_offset = loaded.segments[-1].next_offset
        self._log_start_offset = loaded.log_start_offset
        self._sync_recovered(loaded.recovered, loaded.segments)
        self._committer.reset(self._log_end_offset)
        stored_hw = loaded.high_watermark
        if stored_hw is None:  # no checkpoint: a replicated log knows nothing is committed
            stored_hw = self._log_start_offset if replicated else self._log_end_offset
        self._high_watermark = self._clamp(stored_hw)
        self._publish()
        self._record_open_state(loaded.checkpoint, loaded.config, changed=loaded.changed)
        if new_directory:
            fsync_directory(directory.parent)
        report = self.recovery = loaded.report
        report.segments = len(loaded.segments)
        report.log_start_offset, report.log_end_offset = (
            self._log_start_offset,
            self._log_end_offset,
        )
        report.duration_s = time.perf_counter() - started
        if not report.clean_shutdown or report.repaired or report.corrupt:
            log.warning("recovered log %s", report)
        return self

    @staticmethod
    def _sync_recovered(recovered: list[LogSegment], segments: list[LogSegment]) -> None:
        """Make what recovery accepted durable: the recovery point moves to the LEO.

        The last segment's indexes are left to the next recovery, as always for the
        active segment; a sealed one's are synced, since recovery will trust them.
        """
        for segment in recovered:
            if segment is segments[-1]:
                segment.flush_log_only()
            elif segment in segments:
                segment.flush()

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
        return self._committer.recovery_point

    @property
    def size_bytes(self) -> int:
        return self._view.size_bytes

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._view.segments

    @property
    def is_offline(self) -> bool:
        return self._offline is not None

    def update_high_watermark(self, offset: int) -> int:
        """Advance the high watermark of a replicated log, within [log start, LEO].

        It never moves back here; only truncation lowers it. Takes only the high
        watermark's lock, never the append lock, so a replica's event loop may call it
        while an append is being written.
        """
        self._raise_high_watermark(offset)
        self._note_activity()
        return self._high_watermark

    def _clamp(self, offset: int) -> int:
        return max(self._log_start_offset, min(offset, self._log_end_offset))

    def _publish(self) -> None:
        """Move an unreplicated log's high watermark to what readers may now see."""
        if self.replicated:
            return
        visible = self._log_end_offset
        if self.config.durability is Durability.ALWAYS:
            visible = min(visible, self._committer.recovery_point)
        self._raise_high_watermark(visible)

    def _synced(self, recovery_point: int) -> None:
        """Called by the committer as soon as a flush made ``recovery_point`` durable."""
        if not self.replicated and self.config.durability is Durability.ALWAYS:
            self._raise_high_watermark(min(recovery_point, self._log_end_offset))

    def _raise_high_watermark(self, offset: int) -> None:
        with self._hw_lock:
            self._high_watermark = max(self._high_watermark, self._clamp(offset))

    # -- appending ----------------------------------------------------------------------
    def append(
        self,
        data: bytes | bytearray | memoryview,
        *,
        assign_offsets: bool = True,
        leader_epoch: int | None = None,
        before_write: Callable[[int, list[BatchHeader]], None] | None = None,
        marker: bytes = b"",
    ) -> AppendInfo:
        """Validate and append one or more concatenated batches.

        Every batch is validated (structure, magic, codec, CRC, ``max_batch_bytes``; and,
        when offsets are assigned here, every record as Kafka's log validator does, see
        ``dataplane.records.validation``) before any byte is written, so a bad request
        leaves the log untouched. With ``assign_offsets`` (a leader) the batches get
        ``[LEO, LEO + n)``; without it (a follower copying a leader's validated bytes)
        their offsets must start at the LEO. ``leader_epoch`` stamps the partition
        leader epoch into each batch header. Returns after the bytes are written and, with
        ``durability=always``, synced.

        ``before_write(base_offset, headers)`` runs under the append lock once offsets are
        known and before any byte is written; whatever it raises aborts this append alone.
        The broker checks producer sequences there, so concurrent appends to one partition
        still share a group commit.

        ``marker`` (with ``assign_offsets``): a record carrying a header of that name
        makes the append raise ``MarkedRecordsError`` once every batch is validated, with
        nothing written (the broker diverts records due later this way).
        """
        view = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
        limit = self.config.max_batch_bytes
        headers = validate_batches(
            view,
            max_batch_bytes=limit,
            client=assign_offsets,
            check_max_timestamp=self.config.timestamp_type == TimestampType.CREATE_TIME,
            marker=marker if assign_offsets else b"",
        )

        def write() -> tuple[AppendInfo, int]:  # under the append lock
            self._check_writable()
            base = self._log_end_offset if assign_offsets else headers[0][1].base_offset
            if not assign_offsets:
                check_follower_offsets(headers, self._log_end_offset)
            if before_write is not None:
                before_write(base, [header for _, header in headers])
            if self._clean_on_disk:
                self._mark_unclean()
            buffers, placed, append_time = prepare_write(
                view,
                headers,
                base,
                leader_epoch=leader_epoch,
                timestamp_type=self.config.timestamp_type,
                clock_ms=self._clock_ms,
            )
            info = self._write(buffers, placed, append_time)
            if not self._active:
                self._note_activity()
            return info, self._committer.epoch

        if self.config.durability is Durability.ALWAYS:
            return self._group_writer.append(write)  # written and synced with its group
        with self._lock:
            info, _ = write()
        if self.config.durability is Durability.INTERVAL and self._flush_due():
            BACKGROUND_FLUSHER.submit(id(self), self._background_flush)
        return info

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
        segment = self._segment_for_append(last_offset, size, len(placed), base_offset)
        try:
            segment.append(buffers, placed)
        except OSError as exc:
            raise self._go_offline(exc) from exc
        self._log_end_offset = last_offset + 1
        self._publish()
        return AppendInfo(
            base_offset, last_offset, record_count, len(placed), size, max_timestamp, append_time
        )

    def _segment_for_append(
        self, last_offset: int, size: int, batches: int, base_offset: int
    ) -> LogSegment:
        active = self._view.segments[-1]
        if active.is_empty:
            return active
        if (
            active.is_full(size, batches)
            or self._clock_ms() - active.created_ms >= self.config.segment_ms
            or last_offset - active.base_offset > _MAX_RELATIVE_OFFSET
        ):
            return self._roll(base_offset)
        return active

    def roll(self) -> None:
        """Start a new segment now (no-op when the active one is empty)."""
        with self._lock:
            self._check_writable()
            if not self._view.segments[-1].is_empty:
                self._mark_unclean()
                self._roll(self._log_end_offset)
                self._note_activity()

    # -- reading ------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None) -> ReadResult:
        """Whole batches from the batch holding ``offset``, at most ``max_bytes`` of them.

        ``max_offset`` (exclusive) bounds the read; it defaults to the high watermark, the
        end of what consumers may see, and replication passes the LEO. The first batch is
        returned whole even when larger than ``max_bytes``.
        ``offset`` must be in [log start, LEO] or ``OffsetOutOfRangeError`` is raised;
        ``offset == LEO`` gives an empty result. The batch holding ``offset`` may start
        before it (batches are never split); consumers skip the records below it.
        """
        for _ in range(_READ_RETRIES):
            if self._closed:
                raise LogClosedError(f"log {self.directory} is closed")
            start, end, view = self._log_start_offset, self._log_end_offset, self._view
            if offset < start or offset > end or offset < view.bases[0]:
                raise OffsetOutOfRangeError(offset, self._log_start_offset, end)
            upper = min(self._high_watermark if max_offset is None else max_offset, end)
            try:
                chunks, next_offset = view.read(offset, max_bytes, upper)
            except FileNotFoundError:
                continue  # retention or truncation replaced the segments: look again
            if offset < self._log_start_offset:  # the log start passed us while reading
                raise OffsetOutOfRangeError(offset, self._log_start_offset, end)
            if not chunks:
                return ReadResult(b"", offset, start, end, self._high_watermark)
            payload = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            return ReadResult(payload, next_offset, start, end, self._high_watermark)
        raise StorageError(f"log {self.directory} kept changing under {_READ_RETRIES} reads")

    def batch_headers(self, start_offset: int) -> Iterator[tuple[int, BatchHeader]]:
        """(base offset, header) of every batch holding offsets from ``start_offset`` up
        to the log end offset at the call, read without the records (rebuilding producer
        state or a leader-epoch cache needs no more). Segments are read one at a time
        under a pin, within the descriptor budget; batches that retention or a truncation
        removes meanwhile may be left out."""
        headers = self._view.batch_headers(start_offset, self._log_end_offset)
        return ((header.base_offset, header) for header in headers)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The first offset below the high watermark whose timestamp is >= ``timestamp``.

        None when no such record exists (yet).
        """
        return self._view.offset_for_timestamp(
            timestamp, self._log_start_offset, self._high_watermark
        )

    def verify(self) -> list[CorruptRegion]:
        """Re-read every batch of every segment with CRC checks; report what is corrupt.

        Read-only: nothing is truncated or rebuilt. Use it to scrub sealed segments, which
        recovery trusts.
        """
        return self._view.verify()

    # -- flushing -----------------------------------------------------------------------
    def flush(self) -> None:
        """fsync everything appended so far (and the indexes of sealed segments)."""
        self._committer.flush_now()

    def _background_flush(self) -> None:
        if not (self._closing or self._closed or self._offline):
            self.flush()

    def maybe_flush(self) -> bool:
        """Flush when the log's durability mode says it is due; True if it flushed.

        ``interval`` logs flush when ``flush_interval_ms`` has passed with unflushed data;
        every mode flushes segments sealed since the last flush.
        """
        behind = self._committer.recovery_point < self._log_end_offset
        due = behind and self.config.durability is not Durability.NEVER and self._flush_due()
        if due or self._unflushed:
            self.flush()
            return True
        return False

    def _flush_due(self) -> bool:
        return self._clock_ms() - self._last_flush_ms >= self.config.flush_interval_ms

    def _flush_work(self) -> FlushWork:
        """What a flush must cover (see ``GroupCommitter``), taken under the append lock.

        Taking the lock also makes the flusher queue behind appenders already waiting to
        write, so their batches join this flush instead of the next: the wait is what
        makes groups large (as a database's commit delay does).
        """
        with self._lock:
            epoch = self._committer.epoch
            end = self._log_end_offset
            active = self._view.segments[-1]
            with self._unflushed_lock:
                sealed, self._unflushed = self._unflushed, []
        self._last_flush_ms = self._clock_ms()
        return FlushWork(end, epoch, sealed, active)

    def _flush_pending(self) -> bool:
        if self._closing or self._closed or self._offline is not None:
            return False
        if self._unflushed:
            return True
        behind = self._committer.recovery_point < self._log_end_offset
        return behind and self.config.durability is not Durability.NEVER

    # -- removing records: retention, log start, truncation ----------------------------
    def delete_retained_segments(self, now_ms: int | None = None) -> list[int]:
        """Delete leading segments past ``retention_ms`` or beyond ``retention_bytes``.

        Only whole segments go, never data at or above the high watermark. When every
        segment has expired the active one is rolled first, so the log ends up empty with
        its LEO kept. Returns the base offsets deleted.
        """
        now = self._clock_ms() if now_ms is None else now_ms
        config = self.config
        with self._lock:
            self._check_writable()
            view, high_watermark = self._view, self._high_watermark
            if config.remote_storage:
                return self._delete_uploaded(now)
            doomed = view.expired_by_time(now, config.retention_ms, high_watermark)
            if not doomed:
                doomed = view.over_size(config.retention_bytes, high_watermark)
            if not doomed:
                return []
            self._mark_unclean()
            self._note_activity()
            if doomed[-1] is self._view.segments[-1]:
                self._roll(self._log_end_offset)
            return self._delete_leading(doomed)

    def _delete_uploaded(self, now_ms: int) -> list[int]:
        """Local retention of a tiered log (under the append lock): the leading sealed
        segments past ``local_retention_ms`` or beyond ``local_retention_bytes``, of those
        wholly below ``remote_end_offset`` (uploaded, as the owner confirmed); nothing
        while no upload is confirmed."""
        uploaded = self.remote_end_offset
        if uploaded is None:
            return []
        view, config, bound = self._view, self.config, min(self._high_watermark, uploaded)
        doomed = view.expired_by_time(now_ms, config.effective_local_retention_ms, bound)
        if not doomed:
            doomed = view.over_size(config.effective_local_retention_bytes, bound)
        doomed = [s for s in doomed if s is not view.segments[-1] and s.next_offset <= uploaded]
        if not doomed:
            return []
        self._mark_unclean()
        self._note_activity()
        return self._delete_leading(doomed)

    def _delete_leading(self, doomed: list[LogSegment]) -> list[int]:
        remaining = list(self._view.segments[len(doomed) :])
        self._log_start_offset = max(self._log_start_offset, remaining[0].base_offset)
        self._set_view(remaining)
        with self._unflushed_lock:
            self._unflushed = [s for s in self._unflushed if s not in doomed]
        self._delete_segments(doomed)
        self._write_checkpoint(clean_shutdown=False)
        return [s.base_offset for s in doomed]

    def _delete_segments(self, doomed: list[LogSegment] | tuple[LogSegment, ...]) -> None:
        try:
            for segment in doomed:
                segment.delete()
        except OSError as exc:
            raise self._go_offline(exc) from exc

    def advance_log_start_offset(self, offset: int) -> int:
        """Make offsets below ``offset`` unreadable (bounded by the high watermark)."""
        with self._lock:
            self._check_writable()
            target = min(offset, self._high_watermark)
            if target <= self._log_start_offset:
                return self._log_start_offset
            doomed = [s for s in self._view.segments[:-1] if s.next_offset <= target]
            if doomed:
                self._mark_unclean()
            self._log_start_offset = target
            self._note_activity()
            if doomed:
                self._delete_leading(doomed)
            else:
                self._write_checkpoint()
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
            self._mark_unclean()
            self._note_activity()
            # Before any file changes: a flush round already running must not count what
            # is about to be cut, nor acknowledge an append in it.
            self._committer.truncated(offset)
            view = self._view
            keep = list(view.segments[: view.floor_index(offset) + 1])
            self._delete_segments(view.segments[len(keep) :])
            tail = keep[-1]
            try:
                tail.truncate_to(offset)
                tail.reopen_for_append()
                tail.flush()
            except OSError as exc:
                raise self._go_offline(exc) from exc
            with self._unflushed_lock:
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
            self._mark_unclean()
            self._note_activity()
            self._committer.truncated(min(offset, self._log_end_offset))
            self._delete_segments(self._view.segments)
            with self._unflushed_lock:
                self._unflushed = []
            try:
                self._set_view([self._new_segment(offset)])
            except OSError as exc:
                raise self._go_offline(exc) from exc
            self._log_start_offset = offset
            self._after_truncation(offset, restarted=True)
            return offset

    def _after_truncation(self, end: int, *, restarted: bool = False) -> None:
        self._log_end_offset = end
        self._log_start_offset = min(self._log_start_offset, end)
        if restarted:
            self._committer.reset(end)  # an empty log: nothing below ``end`` to sync
        else:
            self._committer.truncated(end)
        with self._hw_lock:
            self._high_watermark = self._clamp(self._high_watermark)
        self._publish()
        self._write_checkpoint()

    # -- checkpoint and activity --------------------------------------------------------
    def _record_open_state(
        self, checkpoint: PartitionCheckpoint | None, config: LogConfig, *, changed: bool
    ) -> None:
        """Write the checkpoint at open only when the one on disk no longer describes the
        log: new, repaired, or with another configuration."""
        if checkpoint is None:
            self._write_checkpoint(clean_shutdown=False)
            return
        self._clean_on_disk = checkpoint.clean_shutdown
        self._checkpointed = _CheckpointState(
            checkpoint.log_start_offset,
            checkpoint.recovery_point,
            checkpoint.high_watermark,
            checkpoint.config,
            checkpoint.clean_shutdown,
        )
        if changed and checkpoint.clean_shutdown:
            self._write_checkpoint(clean_shutdown=False)
        elif checkpoint.config != config:
            self._write_checkpoint()

    def checkpoint(self) -> None:
        """Persist the log start offset, recovery point and high watermark (if changed)."""
        with self._lock:
            live = not (self._closing or self._closed) and self._offline is None
            if live and self._checkpoint_state() != self._checkpointed:
                self._write_checkpoint()

    def set_activity_listener(self, listener: Callable[[Self], None] | None) -> None:
        """Call ``listener(log)`` when the log changes after ``settle`` found it idle.

        The log manager uses it to look only at logs that changed. The listener runs in the
        changing thread, possibly under the log's append lock: it must only take note. It
        is called at once when the checkpoint on disk is already out of date.
        """
        self._activity_listener = listener
        self._active = False
        if listener is not None and self._checkpoint_state() != self._checkpointed:
            self._note_activity()

    def settle(self) -> bool:
        """Checkpoint if needed; True when nothing is left for housekeeping to do.

        A settled log calls its activity listener again on its next change; one with
        flushes still due (an ``interval`` log behind, or sealed segments not yet synced)
        stays active and returns False.
        """
        self._active = False  # a change from now on notifies again
        self.checkpoint()
        if self._flush_pending():
            self._active = True
            return False
        return True

    def _note_activity(self: Self) -> None:
        if not self._active:
            self._active = True
            listener = self._activity_listener
            if listener is not None:
                listener(self)

    def _mark_unclean(self) -> None:
        """Before the first change to the files: the checkpoint on disk stops saying clean."""
        if self._clean_on_disk:
            self._write_checkpoint(clean_shutdown=False)

    def _checkpoint_state(self) -> _CheckpointState:
        return _CheckpointState(
            self._log_start_offset,
            min(self._committer.recovery_point, self._log_end_offset),
            self._high_watermark,
            self.config,
            self._clean_on_disk,
        )

    def _write_checkpoint(self, *, clean_shutdown: bool | None = None) -> None:
        """Write the checkpoint; ``clean_shutdown`` None keeps what the disk says."""
        clean = self._clean_on_disk if clean_shutdown is None else clean_shutdown
        self._clean_on_disk = clean
        state = self._checkpoint_state()
        try:
            write_checkpoint(
                self.directory,
                PartitionCheckpoint(
                    clean_shutdown=clean,
                    log_start_offset=state.log_start_offset,
                    recovery_point=state.recovery_point,
                    high_watermark=state.high_watermark,
                    config=state.config,
                    last_segment=self._last_segment() if clean else None,
                ),
            )
        except OSError as exc:
            self._clean_on_disk = False  # unknown now: never trust it to be clean
            raise self._go_offline(exc) from exc
        self._checkpointed = state

    def _last_segment(self) -> LastSegment:
        active = self._view.segments[-1]
        return LastSegment(
            active.base_offset,
            active.size_bytes,
            self._log_end_offset,
            active.max_timestamp,
            active.offset_of_max_timestamp,
        )

    # -- segments and failure -----------------------------------------------------------
    def _check_writable(self) -> None:
        if self._offline is not None:
            raise self._offline
        if self._closing or self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    def _go_offline(self, cause: OSError) -> LogDirOfflineError:
        if self._offline is None:
            self._offline = LogDirOfflineError(str(self.directory), cause)
            log.error("log %s is offline: %s", self.directory, cause)
        return self._offline

    def _set_view(self, segments: list[LogSegment] | tuple[LogSegment, ...]) -> None:
        self._view = LogSegments.of(segments)

    def _roll(self, base_offset: int) -> LogSegment:
        """Seal the active segment and start a new one at ``base_offset``."""
        active = self._view.segments[-1]
        try:
            active.seal()
            segment = self._new_segment(base_offset)
        except OSError as exc:
            raise self._go_offline(exc) from exc
        with self._unflushed_lock:  # before the view changes: see _flush_work
            self._unflushed.append(active)
        self._set_view([*self._view.segments, segment])
        return segment

    def _new_segment(self, base_offset: int) -> LogSegment:
        segment = LogSegment.create(self.directory, base_offset, self.config)
        segment.created_ms = self._clock_ms()
        return segment

    # -- lifecycle ----------------------------------------------------------------------
    def update_config(self, config: LogConfig) -> None:
        """Apply a new configuration; segment sizes apply from the next roll."""
        with self._lock:
            self._check_writable()
            self.config = config
            for segment in self._view.segments:
                segment.config = config
            self._publish()
            self._write_checkpoint()
            self._note_activity()

    def close(self) -> None:
        """Refuse new appends, flush, close every segment and record a clean shutdown.

        A log whose files did not change since its clean open only closes its segments
        (and rewrites its clean checkpoint if its offsets moved).
        """
        with self._lock:
            if self._closing or self._closed:
                return
            self._closing = True  # no write starts after this; none is running now
            changed = not self._clean_on_disk
        try:
            if self._offline is None and changed:
                self.flush()  # outside the append lock: the flusher needs it
        finally:
            with self._lock:
                self._closed = True
                *sealed, active = self._view.segments
                for segment in sealed:
                    segment.close()
                if self._offline is None:
                    active.close(sync_indexes=True)
                    if not self._clean_on_disk or self._checkpoint_state() != self._checkpointed:
                        self._write_checkpoint(clean_shutdown=True)
                else:
                    active.close()

    def delete(self) -> None:
        """Close the log and remove its directory."""
        with self._lock:
            self._closing = self._closed = True
            for segment in self._view.segments:
                segment.delete()
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.directory.name}, start={self._log_start_offset}, "
            f"end={self._log_end_offset}, segments={len(self._view.segments)})"
        )


__all__ = ["AppendInfo", "PartitionLog", "ReadResult", "RecoveryReport", "wall_clock_ms"]

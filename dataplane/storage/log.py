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

Layout: ``PartitionLog`` builds on ``LogState`` (``log_state.py``: offsets, high
watermark, flushing, checkpoint, activity) and ``LogRetention`` (``log_retention.py``:
retention, log start advancement, truncation); opening, appending, reading and closing
are here. ``log_append.py`` validates and places the batches of an append, and
``log_segments.py`` holds the segment set and the reads across it.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from dataplane.files import fsync_directory
from dataplane.records import BatchHeader, TimestampType
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.errors import LogClosedError, OffsetOutOfRangeError, StorageError
from dataplane.storage.flush import BACKGROUND_FLUSHER
from dataplane.storage.log_append import check_follower_offsets, prepare_write, validate_batches
from dataplane.storage.log_retention import LogRetention
from dataplane.storage.log_state import wall_clock_ms as wall_clock_ms
from dataplane.storage.recovery import RecoveryReport, load_log
from dataplane.storage.scan import CorruptRegion
from dataplane.storage.segment import LogSegment, PlacedBatch

log = logging.getLogger(__name__)

_MAX_RELATIVE_OFFSET = 2**32 - 1
_READ_RETRIES = 8


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


class PartitionLog(LogRetention):
    """An append-only, segmented, indexed log. See the module docstring."""

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

    # -- appending ----------------------------------------------------------------------
    def append(
        self,
        data: bytes | bytearray | memoryview,
        *,
        assign_offsets: bool = True,
        leader_epoch: int | None = None,
        before_write: Callable[[int, list[BatchHeader]], None] | None = None,
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
        """
        view = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
        limit = self.config.max_batch_bytes
        headers = validate_batches(
            view,
            max_batch_bytes=limit,
            client=assign_offsets,
            check_max_timestamp=self.config.timestamp_type == TimestampType.CREATE_TIME,
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


__all__ = ["AppendInfo", "PartitionLog", "ReadResult", "RecoveryReport"]

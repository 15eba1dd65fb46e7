"""The state of a partition log and the bookkeeping every change to it shares.

``LogState`` is the base of ``PartitionLog`` (``log.py``, whose docstring is the
contract of the whole log). It holds the offsets, the segment set (``log_segments.py``)
and the locks, and keeps what every operation relies on:

- the high watermark: within [log start, LEO], never moved back except by truncation,
  and for an unreplicated log following what readers may see;
- durability: the group committer's callbacks (``_flush_work``, ``_synced``), ``flush``
  and ``maybe_flush``;
- the checkpoint: what the one on disk holds, rewriting it only when that changed, and
  recording that the log is unclean before its first change;
- activity: telling the log manager when a settled log changes;
- rolling, creating segments, replacing the segment set, and going offline on an I/O
  error.

Locks: ``_lock`` (the append lock) serialises appends, structural changes and checkpoint
writes; ``_hw_lock`` guards the high watermark alone, so a flush can raise it without
the append lock; ``_unflushed_lock`` guards the sealed segments not yet synced.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from dataplane.storage.checkpoint import LastSegment, PartitionCheckpoint, write_checkpoint
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.errors import LogClosedError, LogDirOfflineError
from dataplane.storage.flush import FlushWork, GroupCommitter, GroupWriter
from dataplane.storage.log_segments import LogSegments
from dataplane.storage.recovery import RecoveryReport
from dataplane.storage.segment import LogSegment

log = logging.getLogger(__name__)


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


class LogState:
    """The offsets, segments, flushing and checkpoint of a log. See the module docstring."""

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

    def append_lock(self) -> threading.RLock:
        """The lock every append holds while it checks (``before_write``) and writes:
        holding it, no append interleaves (reentrant)."""
        return self._lock

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

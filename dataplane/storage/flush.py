"""Group commit: one fsync covers every append that arrived while the previous one ran.

A ``GroupCommitter`` belongs to one partition log. Appenders that need durability call
``sync_through(end_offset)``; the first to arrive becomes the flusher, takes a snapshot
of what is written (``FlushWork``, made by the log under its append lock), fsyncs it
outside every lock, and advances the *recovery point* — the offset below which every
byte is on stable storage. Appenders that arrive meanwhile wait, and the next flush
covers all of them at once, so N concurrent appenders cost far fewer than N fsyncs.

Truncation (replication rewriting a divergent tail) bumps an *epoch*: a flush whose
snapshot predates the truncation must not raise the recovery point, and an append that
was truncated before it was synced gets ``AppendTruncatedError`` instead of a false ack.

An fsync failure is final: the log goes offline (``LogDirOfflineError``), every waiter
gets the error, and nothing is acknowledged after it.

Thread safety: every method may be called from any thread. The committer's condition
is never held while calling the snapshot function (which takes the log's lock), and the
log never waits for the committer while holding its lock, so the two cannot deadlock.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass

from dataplane.storage.errors import AppendTruncatedError, LogDirOfflineError
from dataplane.storage.segment import LogSegment


@dataclass(frozen=True, slots=True)
class FlushWork:
    """What one flush must make durable, snapshotted under the log's append lock."""

    end_offset: int  # every offset below it is written
    epoch: int  # the truncation epoch when the snapshot was taken
    sealed: list[LogSegment]  # sealed since the last flush: log and indexes
    active: LogSegment  # the active segment: its log only (recovery rebuilds its indexes)


class GroupCommitter:
    """Serialises one log's fsyncs and shares each among all waiting appenders."""

    def __init__(
        self,
        snapshot: Callable[[], FlushWork],
        go_offline: Callable[[OSError], LogDirOfflineError],
        recovery_point: int,
    ) -> None:
        self._snapshot = snapshot
        self._go_offline = go_offline
        self._cond = threading.Condition()
        self._flushing = False
        self._started = 0
        self._completed = 0
        self._error: LogDirOfflineError | None = None
        self.recovery_point = recovery_point
        self.epoch = 0

    def sync_through(self, target: int, *, epoch: int | None = None) -> int:
        """Return once every offset below ``target`` is synced; returns the recovery point.

        ``epoch`` is the truncation epoch the caller's append was written in; if a
        truncation happened since, the append may be gone and ``AppendTruncatedError`` is
        raised rather than acknowledging it.
        """
        with self._cond:
            while self.recovery_point < target:
                if epoch is not None and epoch != self.epoch:
                    raise AppendTruncatedError(target, self.recovery_point)
                self._flush_or_wait()
            return self.recovery_point

    def flush_now(self) -> int:
        """Run (or wait for) a flush that starts after this call; returns the recovery point.

        Used for work that is not tied to an offset, such as segments sealed since the
        last flush.
        """
        with self._cond:
            ticket = self._started + 1
            while self._completed < ticket:
                self._flush_or_wait()
            return self.recovery_point

    def truncated(self, end_offset: int) -> None:
        """The log was cut back to ``end_offset``; called under the log's append lock."""
        with self._cond:
            self.epoch += 1
            self.recovery_point = min(self.recovery_point, end_offset)
            self._cond.notify_all()

    def reset(self, recovery_point: int) -> None:
        """The log restarted (emptied) at ``recovery_point``, already synced."""
        with self._cond:
            self.epoch += 1
            self.recovery_point = recovery_point
            self._cond.notify_all()

    def _flush_or_wait(self) -> None:
        """With the condition held: flush if nobody is flushing, else wait for them."""
        if self._error is not None:
            raise self._error
        if self._flushing:
            self._cond.wait()
            return
        self._flushing = True
        self._started += 1
        self._cond.release()
        work: FlushWork | None = None
        failure: OSError | None = None
        try:
            work = self._snapshot()
            _sync(work)
        except OSError as exc:
            failure = exc
        finally:
            self._cond.acquire()
            self._flushing = False
            self._completed += 1
            self._cond.notify_all()
        if failure is not None:
            self._error = self._go_offline(failure)
            raise self._error from failure
        if work is not None and work.epoch == self.epoch:
            self.recovery_point = max(self.recovery_point, work.end_offset)


def _sync(work: FlushWork) -> None:
    for segment in work.sealed:
        with contextlib.suppress(FileNotFoundError), segment.pin():
            segment.flush()
    with contextlib.suppress(FileNotFoundError), work.active.pin():
        work.active.flush_log_only()

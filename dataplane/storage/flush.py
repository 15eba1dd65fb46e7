"""Durability machinery of a partition log: group commit and background flushes.

``GroupWriter`` batches durable appends: one leader thread writes every queued append
under a single hold of the log's lock and asks for one sync for all of them; the other
appenders only queue and sleep until the leader hands them their results.

``GroupCommitter`` serialises a log's fsyncs. ``sync_through(end_offset)`` returns
once every offset below ``end_offset`` is durable: the caller either runs a flush round
(snapshots what is written as ``FlushWork``, fsyncs it outside every lock, advances the
*recovery point* — the offset below which every byte is on stable storage) or parks
until a round covers it. A round covers every append written before its snapshot, so N
concurrent appenders cost far fewer than N fsyncs.

Truncation (replication rewriting a divergent tail) bumps an *epoch*: a flush whose
snapshot predates the truncation must not raise the recovery point, and an append that
was truncated before it was synced gets ``AppendTruncatedError`` instead of a false ack.
An fsync failure is final: the log goes offline (``LogDirOfflineError``), every waiter
gets the error, and nothing is acknowledged after it.

``BackgroundFlusher`` is one daemon thread running the due flushes of ``interval`` logs.

Thread safety: every method may be called from any thread. The committer's mutex is
never held while calling the snapshot function (which takes the log's append lock),
and no one waits for the committer while holding the append lock, so they cannot
deadlock.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dataplane.storage.errors import AppendTruncatedError, LogDirOfflineError
from dataplane.storage.segment import LogSegment

if TYPE_CHECKING:
    from dataplane.storage.log import AppendInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FlushWork:
    """What one flush must make durable, taken under the log's append lock."""

    end_offset: int  # every offset below it is written
    epoch: int  # the truncation epoch when the snapshot was taken
    sealed: list[LogSegment]  # sealed since the last flush: log and indexes
    active: LogSegment  # the active segment: its log only (recovery rebuilds its indexes)


class GroupCommitter:
    """Serialises one log's fsyncs and shares each among all waiting appenders.

    One appender at a time runs a flush round; the others park, each on a lock of its
    own, in a heap ordered by the offset they wait for. When a round ends, exactly the
    waiters it covered are woken, and one uncovered waiter (if any) is handed the next
    round, so no thread wakes only to find it must sleep again.
    """

    def __init__(
        self,
        snapshot: Callable[[], FlushWork],
        go_offline: Callable[[OSError], LogDirOfflineError],
        recovery_point: int,
        on_synced: Callable[[int], None] = lambda recovery_point: None,
    ) -> None:
        self._snapshot = snapshot
        self._go_offline = go_offline
        self._on_synced = on_synced
        self._mutex = threading.Lock()  # guards everything below
        self._waiters: list[tuple[int, int, threading.Lock]] = []  # (target, seq, gate)
        self._seq = itertools.count()
        self._flushing = False
        self._error: LogDirOfflineError | None = None
        self.recovery_point = recovery_point
        self.epoch = 0

    def sync_through(self, target: int, *, epoch: int | None = None) -> int:
        """Return once every offset below ``target`` is synced; returns the recovery point.

        ``epoch`` is the truncation epoch the caller's append was written in; if a
        truncation happened since, the append may be gone and ``AppendTruncatedError`` is
        raised rather than acknowledging it.
        """
        while True:
            with self._mutex:
                self._check(target, epoch)
                if self.recovery_point >= target:
                    return self.recovery_point
                gate = self._claim_round_or_park(target)
            if gate is None:
                self._run_round()
            else:
                gate.acquire()

    def flush_now(self) -> int:
        """Run a flush round that starts after this call; returns the recovery point.

        Used for work that is not tied to an offset, such as segments sealed since the
        last flush.
        """
        while True:
            with self._mutex:
                self._check(0, None)
                gate = self._claim_round_or_park(-1)  # -1: woken when the current round ends
            if gate is None:
                self._run_round()
                return self.recovery_point
            gate.acquire()

    def truncated(self, end_offset: int) -> None:
        """The log was cut back to ``end_offset``; called under the log's append lock."""
        with self._mutex:
            self.epoch += 1
            self.recovery_point = min(self.recovery_point, end_offset)
            self._wake_all()  # waiters re-check their epoch

    def reset(self, recovery_point: int) -> None:
        """The log restarted (emptied) at ``recovery_point``, already synced."""
        with self._mutex:
            self.epoch += 1
            self.recovery_point = recovery_point
            self._wake_all()

    def _check(self, target: int, epoch: int | None) -> None:
        if self._error is not None:
            raise self._error
        if epoch is not None and epoch != self.epoch:
            raise AppendTruncatedError(target, self.recovery_point)

    def _claim_round_or_park(self, target: int) -> threading.Lock | None:
        """With the mutex held: None if the caller now runs the round, else its gate."""
        if not self._flushing:
            self._flushing = True
            return None
        gate = threading.Lock()
        gate.acquire()
        heapq.heappush(self._waiters, (target, next(self._seq), gate))
        return gate

    def _run_round(self) -> None:
        """Snapshot, fsync, advance the recovery point, then wake whom it concerns."""
        failure: OSError | None = None
        work: FlushWork | None = None
        try:
            work = self._snapshot()
            _sync(work)
        except OSError as exc:
            failure = exc
        finally:
            with self._mutex:
                self._flushing = False
                if failure is not None:
                    self._error = self._go_offline(failure)
                    self._wake_all()
                elif work is not None and work.epoch == self.epoch:
                    self.recovery_point = max(self.recovery_point, work.end_offset)
                    self._on_synced(self.recovery_point)  # before any waiter returns
                self._wake_covered_and_next()
        if failure is not None:
            raise self._go_offline(failure) from failure

    def _wake_covered_and_next(self) -> None:
        waiters = self._waiters
        while waiters and waiters[0][0] <= self.recovery_point:
            heapq.heappop(waiters)[2].release()
        if waiters:  # hand the next round to the first waiter still uncovered
            heapq.heappop(waiters)[2].release()

    def _wake_all(self) -> None:
        while self._waiters:
            heapq.heappop(self._waiters)[2].release()


def _sync(work: FlushWork) -> None:
    for segment in work.sealed:
        segment.flush()  # nothing to do for one deleted meanwhile
    work.active.flush_log_only()


class _Entry:
    """One append waiting in a ``GroupWriter``."""

    __slots__ = ("error", "gate", "info", "lead", "write")

    def __init__(self, write: Callable[[], tuple[AppendInfo, int]]) -> None:
        self.write = write
        self.gate: threading.Lock | None = None
        self.info: AppendInfo | None = None
        self.error: BaseException | None = None
        self.lead = False


class GroupWriter:
    """Leader/follower batching of durable appends: one thread writes and syncs for all.

    An appender that finds no leader becomes one: it takes every queued append, writes
    them all under one hold of the log's lock, syncs once, and wakes their threads; if
    more arrived meanwhile, it hands the lead to the first of them and returns. Others
    only queue and sleep. With many appenders this replaces most lock hand-offs between
    runnable threads (which, under the GIL, cost far more than the writes) by one.
    ``write`` runs under ``lock`` and returns the append's result and the truncation
    epoch it was written in; ``sync(end_offset, epoch)`` makes the group durable.
    """

    def __init__(self, lock: threading.RLock, sync: Callable[[int, int], object]) -> None:
        self._lock = lock
        self._sync = sync
        self._queue_lock = threading.Lock()
        self._queue: list[_Entry] = []
        self._leading = False

    def append(self, write: Callable[[], tuple[AppendInfo, int]]) -> AppendInfo:
        entry = _Entry(write)
        with self._queue_lock:
            self._queue.append(entry)
            lead = not self._leading
            if lead:
                self._leading = True
            else:
                entry.gate = threading.Lock()
                entry.gate.acquire()
        if not lead:
            assert entry.gate is not None
            entry.gate.acquire()  # released by a leader: with our result, or the lead
            lead = entry.lead
        if lead:
            self._lead(entry)
        if entry.error is not None:
            raise entry.error
        assert entry.info is not None
        return entry.info

    def _lead(self, own: _Entry) -> None:
        with self._queue_lock:
            group, self._queue = self._queue, []
        self._write_and_sync(group)
        with self._queue_lock:
            successor = self._queue[0] if self._queue else None
            if successor is None:
                self._leading = False
            else:
                successor.lead = True
        for entry in group:
            if entry is not own and entry.gate is not None:
                entry.gate.release()
        if successor is not None and successor.gate is not None:
            successor.gate.release()

    def _write_and_sync(self, group: list[_Entry]) -> None:
        written: list[_Entry] = []
        epoch = 0
        with self._lock:
            for entry in group:
                try:
                    entry.info, epoch = entry.write()
                    written.append(entry)
                except BaseException as exc:  # handed to the appender's own thread
                    entry.error = exc
        if not written:
            return
        end = max(e.info.last_offset + 1 for e in written if e.info is not None)
        try:
            self._sync(end, epoch)
        except BaseException as exc:  # every appender of the group gets the failure
            for entry in written:
                entry.info, entry.error = None, exc


class BackgroundFlusher:
    """One daemon thread running flushes handed to it, for every log of the process.

    ``interval`` logs hand their due flush here instead of running it in the appending
    thread, so no append waits for an fsync it did not ask for. A log is queued at most
    once at a time; a failing flush is logged (the log itself goes offline).
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[int, Callable[[], object]]] = queue.SimpleQueue()
        self._pending: set[int] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, key: int, flush: Callable[[], object]) -> None:
        with self._lock:
            if key in self._pending:
                return
            self._pending.add(key)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="log-background-flush", daemon=True
                )
                self._thread.start()
        self._queue.put((key, flush))

    def _run(self) -> None:
        while True:
            key, flush = self._queue.get()
            try:
                flush()
            except Exception:  # each log reports its own failure; keep serving the rest
                log.exception("background flush failed")
            finally:
                with self._lock:
                    self._pending.discard(key)


BACKGROUND_FLUSHER = BackgroundFlusher()

"""The log manager: every partition log of one data directory, and their housekeeping.

Layout of a data directory::

    <data dir>/
        .lock                     held (flock) while a manager has the directory open
        <topic>-<partition>/      one PartitionLog each (see ``log.py``)

A partition directory being deleted is first renamed to
``<topic>-<partition>.<token>.deleted`` and then removed, so a crash in between never
leaves a half-deleted log that looks live.

Many partitions: opening reads each log's checkpoint and lists its directory, and opens
no segment file (see ``recovery.py``); logs left unclean are recovered in parallel.
Segment files are opened when used and closed when idle, within one process-wide budget
of descriptors (``filecache.py``) that ``max_open_files`` sets. A log that is never
changed keeps its clean checkpoint, so an idle partition costs no write at open, at
close, or in between.

One background thread (``start``) runs the housekeeping on fixed periods, over the
*active* logs only (those that changed since housekeeping last found them idle; each
log tells the manager through ``PartitionLog.set_activity_listener``):

- flush: ``PartitionLog.maybe_flush`` on every active log (``interval`` logs whose
  period has passed; segments sealed since the last flush in every mode);
- checkpoint: ``PartitionLog.settle`` on every active log (its checkpoint — log start
  offset, recovery point, high watermark — if it changed, bounding how much recovery
  re-validates after a crash); a log with nothing left to flush leaves the active set.
  Segment files unused for ``idle_file_close_ms`` are closed at the same time;
- retention: ``delete_retained_segments`` on every log, at its own slower period; it
  looks at segments' sizes and max timestamps, which are kept in memory.

Thread safety: every public method may be called from any thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import re
import resource
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from dataplane.files import fsync_directory
from dataplane.storage.config import LogConfig
from dataplane.storage.errors import LogClosedError, StorageError
from dataplane.storage.filecache import SEGMENT_FILES, default_max_open_files
from dataplane.storage.log import PartitionLog, wall_clock_ms
from dataplane.storage.recovery import RecoveryReport
from dataplane.storage.scan import CorruptRegion

log = logging.getLogger(__name__)

T = TypeVar("T")

_CLOSE_THREADS = 8  # closing is mostly fsyncs, which overlap (one journal commit for many)
_PARTITION_DIR = re.compile(r"^(?P<topic>[^/]+)-(?P<partition>\d+)$")
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._~\-]{1,249}$")


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __post_init__(self) -> None:
        if not _TOPIC_NAME.match(self.topic) or self.topic in (".", ".."):
            raise StorageError(f"invalid topic name {self.topic!r}")
        if self.partition < 0:
            raise StorageError(f"invalid partition {self.partition}")

    @property
    def dir_name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def __str__(self) -> str:
        return self.dir_name


@dataclass(frozen=True, slots=True)
class ManagerSchedule:
    """Periods of the housekeeping thread, in milliseconds."""

    flush_check_ms: int = 100
    retention_check_ms: int = 5 * 60 * 1000
    checkpoint_ms: int = 60 * 1000
    idle_file_close_ms: int = 10 * 60 * 1000


class LogManager:
    """Owns the partition logs of one data directory. See the module docstring."""

    def __init__(
        self,
        data_dir: Path | str,
        *,
        default_config: LogConfig | None = None,
        schedule: ManagerSchedule | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
        recovery_threads: int = 2,
        max_open_files: int | None = None,
    ) -> None:
        """``max_open_files`` sets the process-wide budget of descriptors held by open
        segment files when ``open`` runs (default: what the limit on open files allows,
        see ``filecache.default_max_open_files``)."""
        self.data_dir = Path(data_dir)
        self.default_config = default_config or LogConfig()
        self.schedule = schedule or ManagerSchedule()
        self.max_open_files = max_open_files
        self._clock_ms = clock_ms
        self._recovery_threads = recovery_threads
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._creating: dict[TopicPartition, threading.Event] = {}
        self._active: set[PartitionLog] = set()
        self._active_lock = threading.Lock()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock_fd = -1
        self._closed = False
        self.recovery_reports: list[RecoveryReport] = []

    # -- lifecycle ----------------------------------------------------------------------
    def open(
        self, replicated: Callable[[TopicPartition], bool] | None = None
    ) -> list[RecoveryReport]:
        """Lock the data directory and open (recovering as needed) every log in it.

        ``replicated(tp)`` names the logs whose high watermark their owner moves (see
        ``PartitionLog``): they reopen at their checkpointed high watermark rather than at
        their log end, so a recovered tail no follower acknowledged stays invisible.
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        _raise_open_file_limit()
        SEGMENT_FILES.set_max_open_files(self.max_open_files or default_max_open_files())
        self._lock_directory()
        self._remove_deleted_dirs()
        found = sorted(self._partition_dirs())
        with ThreadPoolExecutor(max_workers=max(1, self._recovery_threads)) as pool:
            opened = list(
                pool.map(
                    lambda tp: self._open_existing(tp, bool(replicated and replicated(tp))), found
                )
            )
        for tp, partition_log in opened:
            self._logs[tp] = partition_log
            partition_log.set_activity_listener(self._note_active)
        self.recovery_reports = [pl.recovery for _, pl in opened]
        return self.recovery_reports

    def _lock_directory(self) -> None:
        self._lock_fd = os.open(self.data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise StorageError(
                f"data directory {self.data_dir} is in use by another process"
            ) from exc

    def _remove_deleted_dirs(self) -> None:
        for path in self.data_dir.glob("*.deleted"):
            shutil.rmtree(path, ignore_errors=True)

    def _partition_dirs(self) -> Iterator[TopicPartition]:
        with os.scandir(self.data_dir) as entries:
            for entry in entries:
                match = _PARTITION_DIR.match(entry.name)
                if match and entry.is_dir():
                    yield TopicPartition(match["topic"], int(match["partition"]))

    def _open_existing(
        self, tp: TopicPartition, replicated: bool
    ) -> tuple[TopicPartition, PartitionLog]:
        partition_log = PartitionLog.open(
            self.data_dir / tp.dir_name, replicated=replicated, clock_ms=self._clock_ms
        )
        return tp, partition_log

    def start(self) -> None:
        """Start the housekeeping thread."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._housekeeping, name="log-manager", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        """Stop housekeeping, then flush and cleanly close every log."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with ThreadPoolExecutor(max_workers=max(_CLOSE_THREADS, self._recovery_threads)) as pool:
            list(pool.map(self._close_log, list(self._logs.values())))
        self._logs.clear()
        with self._active_lock:
            self._active.clear()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    @staticmethod
    def _close_log(partition_log: PartitionLog) -> None:
        try:
            partition_log.close()
        except StorageError:
            log.exception("closing %s failed", partition_log.directory)

    def __enter__(self) -> LogManager:
        self.open()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- logs ---------------------------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get(TopicPartition(topic, partition))

    def get_or_create_log(
        self, topic: str, partition: int, config: LogConfig | None = None
    ) -> PartitionLog:
        """The log of ``topic``/``partition``, created with ``config`` if it is new.

        An existing log keeps its configuration unless ``config`` is given and differs,
        in which case the new one is applied.
        """
        tp = TopicPartition(topic, partition)
        while True:
            with self._lock:
                self._check_open()
                existing = self._logs.get(tp)
                if existing is not None:
                    if config is not None and config != existing.config:
                        existing.update_config(config)
                    return existing
                creating = self._creating.get(tp)
                if creating is None:
                    creating = self._creating[tp] = threading.Event()
                    break
            creating.wait()  # another thread creates this one: then look again
        try:
            return self._create(tp, config or self.default_config)
        finally:
            with self._lock:
                del self._creating[tp]
            creating.set()

    def _create(self, tp: TopicPartition, config: LogConfig) -> PartitionLog:
        """Create a log outside the manager's lock (creating one costs a few fsyncs, and
        partitions are created many at a time), then register it."""
        created = PartitionLog.open(self.data_dir / tp.dir_name, config, clock_ms=self._clock_ms)
        with self._lock:
            if not self._closed:
                self._logs[tp] = created
                created.set_activity_listener(self._note_active)
                return created
        created.close()
        raise LogClosedError(f"log manager of {self.data_dir} is closed")

    def delete_log(self, topic: str, partition: int) -> bool:
        """Close and remove a log; returns False if there was none.

        The directory is renamed to ``*.deleted`` (durably) before it is removed, so a
        crash in between never brings the log back.
        """
        tp = TopicPartition(topic, partition)
        while (creating := self._creating.get(tp)) is not None:
            creating.wait()  # being created: delete what the creation makes
        with self._lock:
            partition_log = self._logs.pop(tp, None)
            if partition_log is None:
                return False
            partition_log.set_activity_listener(None)
            with self._active_lock:
                self._active.discard(partition_log)
            partition_log.close()
            doomed = self.data_dir / f"{tp.dir_name}.{uuid.uuid4().hex[:8]}.deleted"
            os.replace(partition_log.directory, doomed)
            fsync_directory(self.data_dir)
        shutil.rmtree(doomed, ignore_errors=True)
        return True

    def logs(self) -> dict[TopicPartition, PartitionLog]:
        with self._lock:
            return dict(self._logs)

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log manager of {self.data_dir} is closed")

    # -- housekeeping -------------------------------------------------------------------
    def _note_active(self, partition_log: PartitionLog) -> None:
        with self._active_lock:
            self._active.add(partition_log)

    def active_logs(self) -> list[PartitionLog]:
        """The logs that changed since housekeeping last found them idle."""
        with self._active_lock:
            return list(self._active)

    def flush_due_logs(self) -> int:
        """Flush every log whose durability mode says it is due; returns how many.

        Only active logs can be due: an idle one has nothing unflushed.
        """
        return sum(1 for pl in self.active_logs() if self._safely(pl, pl.maybe_flush))

    def enforce_retention(self, now_ms: int | None = None) -> int:
        """Apply retention to every log; returns the number of segments deleted."""
        deleted = 0
        for partition_log in self.logs().values():
            result = self._safely(
                partition_log, functools.partial(partition_log.delete_retained_segments, now_ms)
            )
            deleted += len(result or [])
        return deleted

    def verify_all(self) -> dict[TopicPartition, list[CorruptRegion]]:
        """CRC-scrub every log (read-only); the partitions with corrupt regions, and where.

        Recovery trusts sealed segments below a log's recovery point, so this is how damage
        that happened at rest (bit rot, a bad disk) is found before a reader meets it.
        """
        damaged: dict[TopicPartition, list[CorruptRegion]] = {}
        for tp, partition_log in sorted(self.logs().items()):
            regions = self._safely(partition_log, partition_log.verify)
            if regions:
                for region in regions:
                    log.error("corrupt data in %s: %s", tp, region)
                damaged[tp] = regions
        return damaged

    def checkpoint_all(self) -> None:
        """Checkpoint every log that changed; logs with nothing left to do become idle.

        An idle log's checkpoint already holds its state.
        """
        with self._active_lock:
            logs, self._active = self._active, set()
        for partition_log in logs:
            if self._safely(partition_log, partition_log.settle) is False:
                self._note_active(partition_log)

    @staticmethod
    def _safely(partition_log: PartitionLog, action: Callable[[], T]) -> T | None:
        """Run one log's housekeeping; a failing or closed log must not stop the others."""
        try:
            return action()
        except LogClosedError:
            return None
        except Exception:
            log.exception("housekeeping of %s failed", partition_log.directory)
            return None

    def _housekeeping(self) -> None:
        schedule = self.schedule
        next_retention = time.monotonic() + schedule.retention_check_ms / 1000
        next_checkpoint = time.monotonic() + schedule.checkpoint_ms / 1000
        while not self._stop.wait(schedule.flush_check_ms / 1000):
            self.flush_due_logs()
            now = time.monotonic()
            if now >= next_retention:
                self.enforce_retention()
                next_retention = now + schedule.retention_check_ms / 1000
            if now >= next_checkpoint:
                self.checkpoint_all()
                SEGMENT_FILES.close_idle(schedule.idle_file_close_ms / 1000)
                next_checkpoint = now + schedule.checkpoint_ms / 1000


def _raise_open_file_limit() -> None:
    """Lift the soft limit on open files to the hard one: the budget of open segment files
    is derived from it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


__all__ = ["LogManager", "ManagerSchedule", "TopicPartition"]

"""The aborted transactions of a partition log: what ``read_committed`` readers skip.

An entry says: the transaction of ``producer_id`` whose first batch is at
``first_offset`` was aborted by the marker at ``last_offset``; ``last_stable_offset`` is
the partition's last stable offset once that marker was appended (the first offset of
the oldest transaction still open then, or ``last_offset + 1``). It is Kafka's
``AbortedTxn``, and ``collect`` is Kafka's ``collectAbortedTxns``.

On disk: ``aborted-transactions`` in the partition directory, a sequence of 34-byte
entries in increasing ``last_offset`` (Kafka's ``.txnindex`` entry, big-endian)::

    int16 version (0) | int64 producer_id | int64 first_offset | int64 last_offset
    | int64 last_stable_offset

Entries are appended as abort markers are appended (``append``, under the log's append
lock, before the marker's bytes are written), so the file may hold an entry past the
log's end after a crash in between: the owner cuts such entries with ``truncate_from``
(as for a log truncation), and re-derives missing ones while it rebuilds the producer
state from the log. ``flush`` syncs the file; the owner calls it before it writes a
producer-state snapshot, so every marker below a snapshot has its entry on stable
storage. A partial entry at the end (a torn write) is dropped when the file is loaded.

One file per partition rather than Kafka's one per segment: an entry leaves with
retention once its ``last_offset`` is below the log start offset (``trim_before``,
which rewrites the file whole, at most once per ``TRIM_AFTER`` entries dropped), since
no readable record belongs to it any more. The entries are also kept in memory (about
100 bytes each), for lookups by bisection.

Thread safety: every method takes the index's lock.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import threading
from dataclasses import dataclass
from pathlib import Path

from dataplane.files import replace_file

log = logging.getLogger(__name__)

INDEX_FILE = "aborted-transactions"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_BYTES = _ENTRY.size  # 34
_VERSION = 0
TRIM_AFTER = 1024  # entries below the log start dropped before the file is rewritten


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class AbortedTxnIndex:
    """The aborted transactions of one partition; see the module docstring."""

    def __init__(self, directory: Path, entries: list[AbortedTxn] | None = None) -> None:
        self.directory = Path(directory)
        self._entries: list[AbortedTxn] = list(entries or [])
        self._last_offsets = [e.last_offset for e in self._entries]
        self._lock = threading.Lock()
        self._fd = -1
        self._unsynced = False
        self._below_start = 0  # entries known to be below the log start (trim_before)

    @property
    def path(self) -> Path:
        return self.directory / INDEX_FILE

    # -- loading -----------------------------------------------------------------------
    @classmethod
    def load(cls, directory: Path) -> AbortedTxnIndex:
        """The index stored in ``directory`` (empty when there is none); a torn last
        entry or one of an unknown version ends what is read."""
        index = cls(directory)
        try:
            data = index.path.read_bytes()
        except FileNotFoundError:
            return index
        entries: list[AbortedTxn] = []
        usable = len(data) - len(data) % ENTRY_BYTES
        for position in range(0, usable, ENTRY_BYTES):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, position)
            if version != _VERSION or (entries and last <= entries[-1].last_offset):
                log.warning(
                    "%s: unreadable entry at byte %d: the rest is dropped", index.path, position
                )
                usable = position
                break
            entries.append(AbortedTxn(pid, first, last, lso))
        index._entries = entries
        index._last_offsets = [e.last_offset for e in entries]
        if usable != len(data):
            index._rewrite()
        return index

    # -- queries -----------------------------------------------------------------------
    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def entries(self) -> list[AbortedTxn]:
        with self._lock:
            return list(self._entries)

    @property
    def last_offset(self) -> int:
        """The last entry's marker offset; -1 when empty."""
        with self._lock:
            return self._entries[-1].last_offset if self._entries else -1

    def collect(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a reader of ``[fetch_offset, upper_offset)`` must
        know: those ending at or after ``fetch_offset`` and beginning before
        ``upper_offset``. Scans from the first entry ending at ``fetch_offset`` and stops
        at the first whose last stable offset reaches ``upper_offset``: every entry after
        it began at or after that offset."""
        found: list[AbortedTxn] = []
        with self._lock:
            start = bisect.bisect_left(self._last_offsets, fetch_offset)
            for entry in self._entries[start:]:
                if entry.first_offset < upper_offset:
                    found.append(entry)
                if entry.last_stable_offset >= upper_offset:
                    break
        return found

    # -- changes -----------------------------------------------------------------------
    def append(self, entry: AbortedTxn) -> None:
        """Record an abort marker (its ``last_offset`` above every entry's)."""
        with self._lock:
            if self._entries and entry.last_offset <= self._entries[-1].last_offset:
                raise ValueError(
                    f"aborted transaction at {entry.last_offset} is not after the last entry "
                    f"at {self._entries[-1].last_offset}"
                )
            if self._fd < 0:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            data = _ENTRY.pack(
                _VERSION, entry.producer_id, entry.first_offset, entry.last_offset,
                entry.last_stable_offset,
            )  # fmt: skip
            written = os.write(self._fd, data)
            if written != len(data):  # a full disk: the log goes offline with the marker
                raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")
            self._entries.append(entry)
            self._last_offsets.append(entry.last_offset)
            self._unsynced = True

    def truncate_from(self, offset: int) -> int:
        """Drop the entries whose marker is at or after ``offset`` (the log was truncated
        there); returns how many were dropped."""
        with self._lock:
            keep = bisect.bisect_left(self._last_offsets, offset)
            dropped = len(self._entries) - keep
            if dropped:
                del self._entries[keep:]
                del self._last_offsets[keep:]
                self._below_start = min(self._below_start, keep)
                self._rewrite()
            return dropped

    def trim_before(self, log_start_offset: int) -> int:
        """Forget the entries whose marker is below ``log_start_offset`` (retention
        removed all their records); the file is rewritten once ``TRIM_AFTER`` of them
        have accumulated. Returns how many are below the log start now."""
        with self._lock:
            below = bisect.bisect_left(self._last_offsets, log_start_offset)
            self._below_start = below
            if below >= TRIM_AFTER or (below and below == len(self._entries)):
                del self._entries[:below]
                del self._last_offsets[:below]
                self._below_start = 0
                self._rewrite()
            return below

    def clear(self) -> None:
        """The log restarted empty."""
        with self._lock:
            if self._entries or self.path.exists():
                self._entries, self._last_offsets, self._below_start = [], [], 0
                self._rewrite()

    def flush(self) -> None:
        """Sync what was appended since the last flush."""
        with self._lock:
            if self._unsynced and self._fd >= 0:
                os.fsync(self._fd)
            self._unsynced = False

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                if self._unsynced:
                    os.fsync(self._fd)
                os.close(self._fd)
            self._fd = -1
            self._unsynced = False

    def _rewrite(self) -> None:
        """Replace the file by the entries in memory (under the lock)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        data = b"".join(
            _ENTRY.pack(
                _VERSION, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset
            )
            for e in self._entries
        )
        replace_file(self.path, data)
        self._unsynced = False

"""The leader-epoch cache of a replicated partition: where each leader epoch began.

Entries are (epoch, start_offset), both strictly increasing: the records from
``start_offset`` up to the next entry's start were written by the leader of ``epoch``.
A new leader at epoch E records (E, its LEO) before it appends; a follower records an
entry when a batch it copies carries an epoch newer than the last one. Replicas compare
their caches to find where their logs diverge (``end_offset_for``), as Kafka does.

On disk: ``leader-epoch-checkpoint`` in the partition directory, text (a version line,
the entry count, then one ``epoch start_offset`` line per entry), replaced whole and
durably (``dataplane.files.replace_file``). A missing or unreadable file is
rebuilt from the ``partition_leader_epoch`` of the log's batch headers
(``rebuild_from``).

Thread safety: every method takes the cache's lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from pathlib import Path

from dataplane.files import replace_file
from dataplane.records import BatchHeader

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "leader-epoch-checkpoint"
_VERSION = 0
UNKNOWN = -1


class LeaderEpochCache:
    """(epoch, start_offset) entries of one partition; see the module docstring."""

    def __init__(self, directory: Path, entries: list[tuple[int, int]] | None = None) -> None:
        self.directory = Path(directory)
        self._entries: list[tuple[int, int]] = list(entries or [])
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self.directory / CHECKPOINT_FILE

    @property
    def entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(self._entries)

    # -- loading ------------------------------------------------------------------------
    @classmethod
    def load(
        cls, directory: Path, headers: Iterable[tuple[int, BatchHeader]] | None = None
    ) -> LeaderEpochCache:
        """The cache stored in ``directory``; without a usable file, one rebuilt from
        ``headers`` ((base offset, header) of every batch, in order) and written."""
        cache = cls(directory)
        try:
            cache._entries = _parse(cache.path.read_text())
            return cache
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            log.warning("rebuilding unreadable leader-epoch cache %s: %s", cache.path, exc)
        if headers is not None:
            cache.rebuild_from(headers)
        return cache

    def rebuild_from(self, headers: Iterable[tuple[int, BatchHeader]]) -> None:
        """Replace the entries by those the batch headers imply, and persist them."""
        entries: list[tuple[int, int]] = []
        for base_offset, header in headers:
            epoch = header.partition_leader_epoch
            if epoch >= 0 and (not entries or epoch > entries[-1][0]):
                entries.append((epoch, base_offset))
        with self._lock:
            self._entries = entries
            self._persist()

    # -- queries ------------------------------------------------------------------------
    def latest_epoch(self) -> int:
        with self._lock:
            return self._entries[-1][0] if self._entries else UNKNOWN

    def start_offset_of(self, epoch: int) -> int | None:
        with self._lock:
            return next((start for e, start in self._entries if e == epoch), None)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(the largest known epoch <= ``epoch``, the offset where it ended): the next
        epoch's start, or ``log_end_offset`` for the latest. (-1, -1) when ``epoch`` is
        older than every entry."""
        with self._lock:
            found = UNKNOWN
            for index, (known, _) in enumerate(self._entries):
                if known > epoch:
                    break
                found = index
            if found == UNKNOWN:
                return UNKNOWN, UNKNOWN
            if found + 1 < len(self._entries):
                return self._entries[found][0], self._entries[found + 1][1]
            return self._entries[found][0], log_end_offset

    # -- changes ------------------------------------------------------------------------
    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (persisted); True if new.

        An epoch not newer than the latest is ignored; entries starting at or after
        ``start_offset`` are dropped first (a leader re-elected with a shorter log)."""
        with self._lock:
            if self._entries and epoch <= self._entries[-1][0]:
                return False
            self._entries = [(e, s) for e, s in self._entries if s < start_offset]
            self._entries.append((epoch, start_offset))
            self._persist()
            return True

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to ``end_offset``: forget epochs starting at or past it."""
        with self._lock:
            kept = [(e, s) for e, s in self._entries if s < end_offset]
            if kept != self._entries:
                self._entries = kept
                self._persist()

    def clear(self) -> None:
        """The log restarted empty: no epoch is known any more."""
        with self._lock:
            if self._entries:
                self._entries = []
                self._persist()

    def _persist(self) -> None:
        lines = [str(_VERSION), str(len(self._entries))]
        lines += [f"{epoch} {start}" for epoch, start in self._entries]
        replace_file(self.path, ("\n".join(lines) + "\n").encode())


def _parse(text: str) -> list[tuple[int, int]]:
    lines = text.split("\n")
    if int(lines[0]) != _VERSION:
        raise ValueError(f"unknown version {lines[0]!r}")
    count = int(lines[1])
    entries = []
    for line in lines[2 : 2 + count]:
        epoch, start = line.split()
        entries.append((int(epoch), int(start)))
    if len(entries) != count:
        raise ValueError(f"{len(entries)} entries, {count} announced")
    return entries

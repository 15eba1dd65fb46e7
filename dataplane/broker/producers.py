"""Idempotent producers: the per-partition table of producer sequences.

For each producer id a partition remembers its epoch and its last ``CACHED_BATCHES``
batches as (first sequence, last sequence, base offset, last offset). An append is
checked against it under the log's append lock (``PartitionLog.append``'s
``before_write``), so the check and the write are atomic and group commit still works:

- producer id < 0: not idempotent, no check;
- an epoch older than the known one: ``INVALID_PRODUCER_EPOCH`` (a newer producer fenced
  it); a newer epoch must start at sequence 0;
- a batch whose sequences equal a cached batch's is a duplicate (``DuplicateBatch`` names
  the original offsets; nothing is written);
- otherwise its first sequence must follow the last one (int32 wraparound), else
  ``OUT_OF_ORDER_SEQUENCE_NUMBER``; an unknown producer must start at 0, else
  ``UNKNOWN_PRODUCER_ID`` (its state was lost, e.g. to retention: it must re-initialise).

Persistence: ``snapshot`` writes ``producer-state.json`` into the partition directory
(whole and durably, ``dataplane.files.replace_file``), recording the offset it covers;
``rebuild`` loads it and reads the batch headers (never the records) from that offset to
the log end through ``PartitionLog.batch_headers`` — the whole log without a usable
snapshot. So the table survives clean and unclean restarts.

Thread safety: every method takes the table's lock; ``check_and_record`` is meant to run
under the log's append lock, which orders it with the write.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from dataplane.errors import ErrorCode, MeridianError
from dataplane.files import replace_file
from dataplane.records import BatchHeader
from dataplane.storage.log import PartitionLog

CACHED_BATCHES = 5
SNAPSHOT_FILE = "producer-state.json"
_SNAPSHOT_VERSION = 1
_INT32_MAX = 2**31 - 1


class DuplicateBatch(Exception):  # noqa: N818 - an outcome, not a failure
    """Every batch of an append was already written: the original offsets."""

    def __init__(self, base_offset: int, last_offset: int) -> None:
        super().__init__(f"duplicate of the batch at offset {base_offset}")
        self.base_offset = base_offset
        self.last_offset = last_offset


@dataclass(slots=True)
class CachedBatch:
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[CachedBatch] = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def next_sequence(seq: int) -> int:
    return 0 if seq == _INT32_MAX else seq + 1


class ProducerStateTable:
    """The producer sequences of one partition; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._producers: dict[int, ProducerEntry] = {}
        self.covered_offset = 0  # the table reflects every batch below this offset
        self.dirty = False

    def __len__(self) -> int:
        return len(self._producers)

    def get(self, producer_id: int) -> ProducerEntry | None:
        with self._lock:
            return self._producers.get(producer_id)

    def check_and_record(self, base_offset: int, headers: list[BatchHeader]) -> None:
        """Check an append's batches (which will land at ``base_offset``) and record them.

        Raises ``MeridianError`` for a sequence or epoch violation and ``DuplicateBatch``
        when every idempotent batch is a retry of one already written; either way the
        table is unchanged. Batches without a producer id pass.
        """
        staged: dict[int, ProducerEntry] = {}
        self.commit(staged, self.stage(base_offset, headers, staged))

    def stage(
        self, base_offset: int, headers: list[BatchHeader], staged: dict[int, ProducerEntry]
    ) -> int:
        """Check one append's batches against the table as updated by ``staged`` (the
        earlier appends of the same write) and add them to ``staged``; returns the offset
        after them. Raises as ``check_and_record``; nothing is recorded until ``commit``."""
        with self._lock:
            duplicate: CachedBatch | None = None
            fresh = 0
            offset = base_offset
            for header in headers:
                last_offset = offset + header.last_offset_delta
                if header.producer_id >= 0:
                    found = self._check(header, offset, last_offset, staged)
                    if found is None:
                        fresh += 1
                    elif duplicate is None:
                        duplicate = found
                offset = last_offset + 1
        if duplicate is not None:
            if fresh:
                raise MeridianError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    "an append mixes retried and new batches of one producer",
                )
            raise DuplicateBatch(duplicate.base_offset, duplicate.last_offset)
        return offset

    def commit(self, staged: dict[int, ProducerEntry], end_offset: int) -> None:
        """Record what ``stage`` checked; the table then covers offsets below ``end_offset``."""
        with self._lock:
            self._producers.update(staged)
            self.covered_offset = max(self.covered_offset, end_offset)
            self.dirty = self.dirty or bool(staged)

    def _check(
        self, header: BatchHeader, base: int, last: int, staged: dict[int, ProducerEntry]
    ) -> CachedBatch | None:
        pid, epoch, seq = header.producer_id, header.producer_epoch, header.base_sequence
        entry = staged.get(pid) or self._producers.get(pid)
        if entry is not None and epoch < entry.epoch:
            raise MeridianError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer {pid} epoch {epoch} is fenced by epoch {entry.epoch}",
            )
        if entry is not None and epoch == entry.epoch:
            for cached in entry.batches:
                if cached.first_seq == seq and cached.last_seq == header.last_sequence:
                    return cached
            expected = next_sequence(entry.last_seq)
            if seq != expected:
                raise MeridianError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {pid} sent sequence {seq}, expected {expected}",
                )
        elif seq != 0:
            code = (
                ErrorCode.UNKNOWN_PRODUCER_ID
                if entry is None
                else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            )
            raise MeridianError(
                code, f"producer {pid} epoch {epoch} must start at sequence 0, sent {seq}"
            )
        updated = ProducerEntry(
            epoch,
            deque(entry.batches if entry and entry.epoch == epoch else (), maxlen=CACHED_BATCHES),
        )
        updated.batches.append(CachedBatch(seq, header.last_sequence, base, last))
        staged[pid] = updated
        return None

    def record_replicated(self, headers: list[BatchHeader]) -> None:
        """Record a follower's copied batches (their offsets are the leader's), without
        checks: the leader checked them. A follower that becomes leader then knows every
        producer's last sequences and answers a retry as a duplicate."""
        for header in headers:
            self.replay(header.base_offset, header)
        self.dirty = self.dirty or any(h.producer_id >= 0 for h in headers)

    def replay(self, base_offset: int, header: BatchHeader) -> None:
        """Apply a batch already in the log (rebuilding), without checks."""
        with self._lock:
            last = base_offset + header.last_offset_delta
            if header.producer_id >= 0 and header.base_sequence >= 0:
                entry = self._producers.get(header.producer_id)
                if entry is None or header.producer_epoch > entry.epoch:
                    entry = self._producers[header.producer_id] = ProducerEntry(
                        header.producer_epoch
                    )
                if header.producer_epoch == entry.epoch:
                    entry.batches.append(
                        CachedBatch(header.base_sequence, header.last_sequence, base_offset, last)
                    )
            self.covered_offset = max(self.covered_offset, last + 1)

    # -- persistence --------------------------------------------------------------------
    def snapshot(self, directory: Path, covered_offset: int | None = None) -> None:
        """Write the table, and the offset it covers, to ``directory`` atomically."""
        data = self.to_json(covered_offset)
        self.dirty = False
        replace_file(directory / SNAPSHOT_FILE, data)

    def to_json(self, covered_offset: int | None = None) -> bytes:
        """The snapshot's bytes: ``{"version", "offset" (covered), "producers": {id:
        {"epoch", "batches": [[first_seq, last_seq, base_offset, last_offset], ...]}}}``."""
        with self._lock:
            covered = self.covered_offset if covered_offset is None else covered_offset
            data = {
                "version": _SNAPSHOT_VERSION,
                "offset": covered,
                "producers": {
                    str(pid): {"epoch": e.epoch, "batches": [_batch_list(b) for b in e.batches]}
                    for pid, e in self._producers.items()
                },
            }
        return json.dumps(data).encode()

    @classmethod
    def rebuild(cls, log: PartitionLog) -> ProducerStateTable:
        """The table of ``log``: its snapshot (if usable) plus a header scan to the end."""
        table = cls()
        start = table._load(log.directory / SNAPSHOT_FILE, log.log_end_offset)
        start = max(start, log.log_start_offset)
        for base_offset, header in log.batch_headers(start):
            table.replay(base_offset, header)
        table.covered_offset = max(table.covered_offset, log.log_end_offset)
        return table

    def _load(self, path: Path, log_end_offset: int) -> int:
        """Load a snapshot; the offset to scan from (0 when there is none usable)."""
        try:
            data = json.loads(path.read_bytes())
            if data["version"] != _SNAPSHOT_VERSION:
                return 0  # from another version: rescan
            if int(data["offset"]) > log_end_offset:
                # The log was truncated below it: it describes batches that are gone, and
                # once the log grows past its offset again it would look valid.
                path.unlink(missing_ok=True)
                return 0
            producers = {
                int(pid): ProducerEntry(
                    int(e["epoch"]),
                    deque((CachedBatch(*map(int, b)) for b in e["batches"]), maxlen=CACHED_BATCHES),
                )
                for pid, e in data["producers"].items()
            }
        except FileNotFoundError:
            return 0
        except (ValueError, KeyError, TypeError):
            return 0  # a damaged snapshot is only a slower start
        self._producers = producers
        self.covered_offset = int(data["offset"])
        return self.covered_offset


def _batch_list(batch: CachedBatch) -> list[int]:
    return [batch.first_seq, batch.last_seq, batch.base_offset, batch.last_offset]

"""Idempotent and transactional producers: the per-partition table of producer state.

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

Transactions (Kafka's ``ProducerStateManager``; ``docs/transactions.md``). An entry
also holds the first offset of the producer's open transaction on this partition
(``txn_first_offset``, -1: none) and the last coordinator epoch of its markers:

- a transactional batch of a producer with an open transaction (same epoch) joins it;
  one that would open a transaction needs a *verification guard* for its producer id
  and epoch (``verified``, set once the transaction coordinator confirmed the partition
  is in that producer's open transaction, dropped by the next marker; as in Kafka a
  sentinel is installed before the coordinator is asked, ``verifying``, and the answer
  sets the guard only if no marker dropped the sentinel meanwhile), else
  ``INVALID_TXN_STATE``, so nothing opens a transaction no marker will ever close; a
  batch of a newer epoch while an older epoch's transaction is open waits for its marker
  (``CONCURRENT_TRANSACTIONS``); a non-transactional batch of a producer with an open
  transaction is ``INVALID_TXN_STATE``;
- a marker (``apply_marker``: a control batch written by this partition's leader for
  the coordinator) of an older epoch is ``INVALID_PRODUCER_EPOCH``, of an older
  coordinator epoch ``TRANSACTION_COORDINATOR_FENCED``; it closes the open transaction,
  and a newer epoch in it restarts the producer's sequences at 0. An abort that closes
  an open transaction is recorded in the partition's ``AbortedTxnIndex``
  (``dataplane.storage.txn_index``) with the last stable offset after it, under the
  table's lock *before* the transaction leaves the open ones: a reader never sees the
  last stable offset past an aborted transaction without its entry. A marker is applied
  under the append lock before its bytes are written; an append failing after that
  takes the log offline (every I/O failure does, ``PartitionLog``), so a table and index
  ahead of the log serve no further append, and the restart rebuilds both from the log.
- the open transactions give the *first unstable offset* (the oldest one's first
  offset): the last stable offset is ``min(it, high watermark)``. Producer ids with
  ``HALF_PRODUCER_BIT`` set belong to half messages (one transaction each, never
  reused): their entry is dropped once their marker closes it, and their open
  transactions also bound what ``read_uncommitted`` readers see
  (``first_unstable_half_offset``).

Persistence: ``snapshot`` writes ``producer-state.json`` into the partition directory
(whole and durably, ``dataplane.files.replace_file``), recording the offset it covers;
``rebuild`` loads it and reads the batch headers (never the records) from that offset to
the log end through ``PartitionLog.batch_headers`` — the whole log without a usable
snapshot — reading the record of each marker that closes a transaction whose abort the
index may lack. So the table and the index survive clean and unclean restarts;
``rebuild`` first cuts index entries past the log end (a marker torn off by a crash, or
a truncation). Before a snapshot is written the index is synced.

Thread safety: every method takes the table's lock; ``check_and_record`` is meant to run
under the log's append lock, which orders it with the write.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from dataplane.errors import ErrorCode, MeridianError
from dataplane.files import replace_file
from dataplane.records import BatchHeader
from dataplane.records.control import Marker, marker_of
from dataplane.storage.log import PartitionLog
from dataplane.storage.txn_index import AbortedTxn, AbortedTxnIndex

CACHED_BATCHES = 5
SNAPSHOT_FILE = "producer-state.json"
_SNAPSHOT_VERSION = 2
_READABLE_VERSIONS = (1, 2)
_INT32_MAX = 2**31 - 1
HALF_PRODUCER_BIT = 1 << 62  # producer ids of half messages (never given to producers)
_MARKER_READ_BYTES = 4096


def is_half_producer(producer_id: int) -> bool:
    return producer_id >= 0 and bool(producer_id & HALF_PRODUCER_BIT)


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
    txn_first_offset: int = -1  # the open transaction's first offset here; -1: none
    coordinator_epoch: int = -1  # of the last marker

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def next_sequence(seq: int) -> int:
    return 0 if seq == _INT32_MAX else seq + 1


class ProducerStateTable:
    """The producer state of one partition; see the module docstring. ``aborted`` is
    the partition's aborted-transaction index (None: aborts are not indexed, as for a
    table describing one segment)."""

    def __init__(self, aborted: AbortedTxnIndex | None = None) -> None:
        self._lock = threading.Lock()
        self._producers: dict[int, ProducerEntry] = {}
        self._open: dict[int, int] = {}  # producer id -> first offset of its open txn
        self._verified: dict[int, int] = {}  # producer id -> epoch verified to open one
        # producer id -> (epoch, token) of a verification asked of the coordinator
        self._verifying: dict[int, tuple[int, int]] = {}
        self._tokens = itertools.count(1)
        self.aborted = aborted
        self.covered_offset = 0  # the table reflects every batch below this offset
        self.dirty = False

    def __len__(self) -> int:
        return len(self._producers)

    def get(self, producer_id: int) -> ProducerEntry | None:
        with self._lock:
            return self._producers.get(producer_id)

    def entries(self) -> dict[int, ProducerEntry]:
        """Every producer id's entry (a copy of the table, not of the entries)."""
        with self._lock:
            return dict(self._producers)

    # -- transactions: queries ------------------------------------------------------
    def open_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of each transaction open on this partition."""
        with self._lock:
            return dict(self._open)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction (None: none is open)."""
        with self._lock:
            return min(self._open.values(), default=None)

    def first_unstable_half_offset(self) -> int | None:
        """The first offset of the oldest open half message (None: none is open)."""
        with self._lock:
            return min(
                (first for pid, first in self._open.items() if is_half_producer(pid)),
                default=None,
            )

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(first, high_watermark)

    def in_transaction(self, producer_id: int, epoch: int) -> bool:
        """Whether a transactional batch of (``producer_id``, ``epoch``) may be appended
        without asking the coordinator: its transaction is open here, or verified."""
        with self._lock:
            entry = self._producers.get(producer_id)
            if entry is not None and entry.epoch == epoch and entry.txn_first_offset >= 0:
                return True
            return self._verified.get(producer_id) == epoch

    def verifying(self, producer_id: int, epoch: int) -> int:
        """Install the sentinel of a verification about to be asked of the coordinator
        (KIP-890): a token for ``verified``. A marker of the producer arriving before
        the answer drops it, so an answer given before that marker cannot let a batch
        open a transaction the marker already closed."""
        with self._lock:
            token = next(self._tokens)
            current = self._verifying.get(producer_id)
            if current is None or current[0] <= epoch:
                # An older epoch (a fenced producer retrying) never displaces a newer
                # one's sentinel: its own verification then fails, as it should.
                self._verifying[producer_id] = (epoch, token)
            return token

    def verified(self, producer_id: int, epoch: int, token: int | None = None) -> bool:
        """The coordinator confirmed this partition is in the open transaction of
        (``producer_id``, ``epoch``): its first batch here may open it. With the
        ``token`` of ``verifying``, only while that sentinel is still in place (no
        marker came since, nor a newer verification); False when it is not."""
        with self._lock:
            if token is not None:
                if self._verifying.get(producer_id) != (epoch, token):
                    return False
                del self._verifying[producer_id]
            self._verified[producer_id] = epoch
            return True

    # -- appends --------------------------------------------------------------------
    def check_and_record(self, base_offset: int, headers: list[BatchHeader]) -> None:
        """Check an append's batches (which will land at ``base_offset``) and record them.

        Raises ``MeridianError`` for a sequence, epoch or transaction violation and
        ``DuplicateBatch`` when every idempotent batch is a retry of one already written;
        either way the table is unchanged. Batches without a producer id pass.
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
            for pid, entry in staged.items():
                self._producers[pid] = entry
                if entry.txn_first_offset >= 0:
                    self._open.setdefault(pid, entry.txn_first_offset)
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
        txn_first = self._transaction_of(header, entry, base)
        updated = ProducerEntry(
            epoch,
            deque(entry.batches if entry and entry.epoch == epoch else (), maxlen=CACHED_BATCHES),
            txn_first,
            entry.coordinator_epoch if entry is not None else -1,
        )
        updated.batches.append(CachedBatch(seq, header.last_sequence, base, last))
        staged[pid] = updated
        return None

    def _transaction_of(self, header: BatchHeader, entry: ProducerEntry | None, base: int) -> int:
        """The first offset of the transaction ``header``'s batch belongs to (-1: none);
        raises when it may not be appended (module docstring)."""
        pid, epoch = header.producer_id, header.producer_epoch
        open_first = entry.txn_first_offset if entry is not None else -1
        if open_first >= 0 and entry is not None and epoch != entry.epoch:
            raise MeridianError(
                ErrorCode.CONCURRENT_TRANSACTIONS,
                f"producer {pid}: the transaction of epoch {entry.epoch} awaits its marker",
            )
        if not header.is_transactional:
            if open_first >= 0:
                raise MeridianError(
                    ErrorCode.INVALID_TXN_STATE,
                    f"producer {pid} has a transaction open here: its batches must be "
                    "transactional until it ends",
                )
            return -1
        if open_first >= 0:
            return open_first
        if self._verified.get(pid) != epoch:
            raise MeridianError(
                ErrorCode.INVALID_TXN_STATE,
                f"producer {pid} epoch {epoch} has no open transaction holding this "
                "partition: add the partition to the transaction first",
            )
        return base

    def apply_marker(self, offset: int, marker: Marker, *, check: bool = True) -> AbortedTxn | None:
        """Apply the marker written at ``offset`` (under the log's append lock, before
        its bytes are written): close the producer's open transaction, and index it when
        aborted. ``check`` (a leader): refuse a fenced marker, leaving the table as it
        was. Returns the aborted transaction indexed, if any."""
        with self._lock:
            pid = marker.producer_id
            entry = self._producers.get(pid)
            if check and entry is not None:
                if marker.producer_epoch < entry.epoch:
                    raise MeridianError(
                        ErrorCode.INVALID_PRODUCER_EPOCH,
                        f"a marker of producer {pid} epoch {marker.producer_epoch} is fenced "
                        f"by epoch {entry.epoch}",
                    )
                if marker.coordinator_epoch < entry.coordinator_epoch:
                    raise MeridianError(
                        ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                        f"a marker of coordinator epoch {marker.coordinator_epoch} for "
                        f"producer {pid}: epoch {entry.coordinator_epoch} was seen",
                    )
            first = self._open.get(pid, -1)
            aborted = None
            if first >= 0 and not marker.commit:
                stable = min((f for p, f in self._open.items() if p != pid), default=offset + 1)
                aborted = AbortedTxn(pid, first, offset, stable)
                # Indexed before the transaction leaves ``_open`` (both under the lock):
                # a read_committed reader never finds the last stable offset past its
                # records without the entry that tells it to skip them. An index that
                # cannot be written fails the marker with the table unchanged.
                if self.aborted is not None and self.aborted.last_offset < offset:
                    self.aborted.append(aborted)
            self._verified.pop(pid, None)
            self._verifying.pop(pid, None)
            self._open.pop(pid, None)
            self._close(pid, entry, marker)
            self.covered_offset = max(self.covered_offset, offset + 1)
            self.dirty = True
        return aborted

    def _close(self, pid: int, entry: ProducerEntry | None, marker: Marker) -> None:
        """The entry after its marker (under the lock)."""
        if is_half_producer(pid):
            self._producers.pop(pid, None)  # a half message's id writes nothing more
            return
        if entry is None or marker.producer_epoch > entry.epoch:
            entry = ProducerEntry(marker.producer_epoch)  # a new epoch restarts at 0
        entry.txn_first_offset = -1
        entry.coordinator_epoch = max(entry.coordinator_epoch, marker.coordinator_epoch)
        self._producers[pid] = entry

    def record_replicated(
        self, headers: list[BatchHeader], markers: dict[int, Marker] | None = None
    ) -> None:
        """Record a follower's copied batches (their offsets are the leader's), without
        checks: the leader checked them. ``markers``: the transaction markers among them,
        by base offset. A follower that becomes leader then knows every producer's last
        sequences and open transactions, and has indexed every abort."""
        for header in headers:
            marker = (markers or {}).get(header.base_offset) if header.is_control else None
            self.replay(header.base_offset, header, marker)
        self.dirty = self.dirty or any(h.producer_id >= 0 for h in headers)

    def replay(self, base_offset: int, header: BatchHeader, marker: Marker | None = None) -> None:
        """Apply a batch already in the log (rebuilding), without checks. A control batch
        closes its producer's transaction; with its ``marker`` an abort is indexed too."""
        if header.is_control and header.producer_id >= 0:
            if marker is None:
                marker = Marker(header.producer_id, header.producer_epoch, True, -1)
            self.apply_marker(base_offset, marker, check=False)
            return
        with self._lock:
            last = base_offset + header.last_offset_delta
            if header.producer_id >= 0 and header.base_sequence >= 0:
                entry = self._producers.get(header.producer_id)
                if entry is None or header.producer_epoch > entry.epoch:
                    entry = self._producers[header.producer_id] = ProducerEntry(
                        header.producer_epoch,
                        coordinator_epoch=entry.coordinator_epoch if entry else -1,
                    )
                if header.producer_epoch == entry.epoch:
                    entry.batches.append(
                        CachedBatch(header.base_sequence, header.last_sequence, base_offset, last)
                    )
                    if header.is_transactional and entry.txn_first_offset < 0:
                        entry.txn_first_offset = base_offset
                        self._open[header.producer_id] = base_offset
            self.covered_offset = max(self.covered_offset, last + 1)

    # -- persistence --------------------------------------------------------------------
    def snapshot(self, directory: Path, covered_offset: int | None = None) -> None:
        """Write the table, and the offset it covers, to ``directory`` atomically (the
        aborted index synced first: every abort below the snapshot is then durable).
        The table is read before the index is synced, so an abort indexed in between
        lies above the offset the snapshot covers, or is synced with the rest."""
        data = self.to_json(covered_offset)
        self.dirty = False
        if self.aborted is not None:
            self.aborted.flush()
        replace_file(directory / SNAPSHOT_FILE, data)

    def to_json(self, covered_offset: int | None = None) -> bytes:
        """The snapshot's bytes: ``{"version", "offset" (covered), "producers": {id:
        {"epoch", "batches": [[first_seq, last_seq, base_offset, last_offset], ...],
        "txn_first_offset", "coordinator_epoch"}}}``."""
        with self._lock:
            covered = self.covered_offset if covered_offset is None else covered_offset
            data = {
                "version": _SNAPSHOT_VERSION,
                "offset": covered,
                "producers": {
                    str(pid): {
                        "epoch": e.epoch,
                        "batches": [_batch_list(b) for b in e.batches],
                        "txn_first_offset": e.txn_first_offset,
                        "coordinator_epoch": e.coordinator_epoch,
                    }
                    for pid, e in self._producers.items()
                },
            }
        return json.dumps(data).encode()

    @classmethod
    def rebuild(cls, log: PartitionLog) -> ProducerStateTable:
        """The table of ``log``: its snapshot (if usable) plus a header scan to the end,
        with the partition's aborted-transaction index."""
        aborted = AbortedTxnIndex.load(log.directory)
        aborted.truncate_from(log.log_end_offset)
        table = cls(aborted)
        start = table._load(log.directory / SNAPSHOT_FILE, log.log_end_offset)
        start = max(start, log.log_start_offset)
        for base_offset, header in log.batch_headers(start):
            table.replay(base_offset, header, table._missing_abort(log, base_offset, header))
        table.covered_offset = max(table.covered_offset, log.log_end_offset)
        aborted.trim_before(log.log_start_offset)
        return table

    def _missing_abort(self, log: PartitionLog, offset: int, header: BatchHeader) -> Marker | None:
        """The marker at ``offset`` when it may be an abort the index lacks (it closes an
        open transaction past the index's last entry): read from the log."""
        if not header.is_control or self.aborted is None or self.aborted.last_offset >= offset:
            return None
        if header.producer_id not in self._open:
            return None
        data = log.read(offset, _MARKER_READ_BYTES, max_offset=offset + 1).data
        return marker_of(data) if data else None

    def _load(self, path: Path, log_end_offset: int) -> int:
        """Load a snapshot; the offset to scan from (0 when there is none usable)."""
        try:
            data = json.loads(path.read_bytes())
            if data["version"] not in _READABLE_VERSIONS:
                return 0  # from another version: rescan
            if int(data["offset"]) > log_end_offset:
                # The log was truncated below it: it describes batches that are gone, and
                # once the log grows past its offset again it would look valid.
                path.unlink(missing_ok=True)
                return 0
            producers = {int(pid): _entry(e) for pid, e in data["producers"].items()}
        except FileNotFoundError:
            return 0
        except (ValueError, KeyError, TypeError):
            return 0  # a damaged snapshot is only a slower start
        self._producers = producers
        self._open = {
            pid: e.txn_first_offset for pid, e in producers.items() if e.txn_first_offset >= 0
        }
        self.covered_offset = int(data["offset"])
        return self.covered_offset


def _entry(data: dict[str, object]) -> ProducerEntry:
    batches = data["batches"]
    assert isinstance(batches, list)
    return ProducerEntry(
        int(data["epoch"]),  # type: ignore[call-overload]
        deque((CachedBatch(*map(int, b)) for b in batches), maxlen=CACHED_BATCHES),
        int(data.get("txn_first_offset", -1)),  # type: ignore[call-overload]
        int(data.get("coordinator_epoch", -1)),  # type: ignore[call-overload]
    )


def _batch_list(batch: CachedBatch) -> list[int]:
    return [batch.first_seq, batch.last_seq, batch.base_offset, batch.last_offset]

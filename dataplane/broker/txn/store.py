"""One partition of ``__transaction_state``: its log and the transactions replayed from it.

The state of a partition is, for every transactional id (and half message) placed on it
(``codec.coordinator_key``), its ``TxnMetadata``, and the partition's coordinator epoch.
It is rebuilt at load by replaying the log from its start (``codec.py``: the latest
record of a key wins, a tombstone removes it); ``load`` then bumps the coordinator
epoch, durably, before the coordinator serves anything.

Writes and compaction are ``dataplane.broker.statelog``'s: ``write(changes)`` appends
one request's new metadata (or tombstones) durably, in arrival order, and only then
makes them current, so the state always equals what a replay of the log would build;
the snapshot of a compaction holds the epoch and every live transaction.

Thread safety: coroutines run on the coordinator's event loop; ``transactions`` may be
called from any thread (a copy).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from dataplane.broker.statelog import StateLog, encode_records, read_records
from dataplane.broker.txn.codec import (
    EPOCH_RECORD_KEY,
    CodecError,
    decode_epoch,
    decode_key,
    decode_txn,
    encode_epoch,
    encode_txn,
    encode_txn_key,
)
from dataplane.broker.txn.state import TxnMetadata
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import Record
from dataplane.storage.log import PartitionLog

log = logging.getLogger(__name__)

BATCH_BYTES = 256 * 1024
EPOCH_CLOCK_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z
_MAX_INT32 = 2**31 - 1
Change = tuple[str, TxnMetadata | None]  # transactional id, new metadata or None (delete)


class TxnStatePartition:
    """The log and live state of one ``__transaction_state`` partition (module docstring)."""

    def __init__(
        self,
        partition: int,
        partition_log: PartitionLog,
        *,
        clock_ms: Callable[[], int],
        compact_min_records: int = 10_000,
    ) -> None:
        self.partition = partition
        self.log = partition_log
        self._clock_ms = clock_ms
        self._txns: dict[str, TxnMetadata] = {}
        self._lock = threading.Lock()
        self.coordinator_epoch = 0
        self._state_log = StateLog(
            partition_log,
            f"transaction state partition {partition}",
            compact_min_records=compact_min_records,
            live_count=lambda: len(self._txns) + 1,
            snapshot=self._snapshot,
        )

    # -- reading the state -----------------------------------------------------------
    def get(self, transactional_id: str) -> TxnMetadata | None:
        return self._txns.get(transactional_id)

    def transactions(self) -> list[TxnMetadata]:
        with self._lock:
            return list(self._txns.values())

    # -- replay ----------------------------------------------------------------------
    def replay(self) -> int:
        """Rebuild the state from the log (blocking); returns the records read."""
        count = 0
        for record in read_records(self.log):
            self._replay_record(record)
            count += 1
        self._state_log.records_in_log = count
        return count

    def _replay_record(self, record: Record) -> None:
        try:
            transactional_id = decode_key(record.key or b"")
            if transactional_id is None:
                if record.value is not None:
                    self.coordinator_epoch = max(self.coordinator_epoch, decode_epoch(record.value))
                return
            meta = decode_txn(transactional_id, record.value) if record.value is not None else None
        except CodecError as exc:
            log.warning(
                "transaction state %d: record %d skipped: %s", self.partition, record.offset, exc
            )
            return
        self._apply([(transactional_id, meta)])

    def _apply(self, changes: Sequence[Change]) -> None:
        with self._lock:
            for transactional_id, meta in changes:
                if meta is None:
                    self._txns.pop(transactional_id, None)
                else:
                    self._txns[transactional_id] = meta

    # -- writing ---------------------------------------------------------------------
    async def bump_epoch(self) -> int:
        """The coordinator epoch of this load: one past the last, written durably, and
        never below the seconds since ``EPOCH_CLOCK_MS`` (2025-01-01): a partition whose
        log was lost with its broker's volume starts past the epochs its earlier life
        stamped on markers (unless it was loaded more than once a second on average),
        so the partitions take its markers instead of refusing them as fenced."""
        since = (self._clock_ms() - EPOCH_CLOCK_MS) // 1000
        epoch = max(self.coordinator_epoch + 1, min(since, _MAX_INT32))
        data = self._state_log.check_size(
            encode_records([(EPOCH_RECORD_KEY, encode_epoch(epoch))], self._clock_ms(), BATCH_BYTES)
        )

        def apply() -> None:
            self.coordinator_epoch = epoch

        await self._state_log.write(data, 1, apply)
        return epoch

    async def write(self, changes: Sequence[Change]) -> None:
        """Append ``changes`` durably, then make them current; ``STORAGE_ERROR`` if the log
        fails."""
        if not changes:
            return
        kept = list(changes)
        records = ((encode_txn_key(t), encode_txn(m) if m else None) for t, m in kept)
        batches = encode_records(records, self._clock_ms(), BATCH_BYTES)
        try:
            data = self._state_log.check_size(batches)
        except MeridianError as exc:
            raise MeridianError(
                ErrorCode.INVALID_REQUEST, f"transaction too large: {exc.message}"
            ) from exc
        await self._state_log.write(data, len(kept), lambda: self._apply(kept))

    def _snapshot(self) -> tuple[list[bytes], int]:
        with self._lock:
            records = [(EPOCH_RECORD_KEY, encode_epoch(self.coordinator_epoch))]
            records += [(encode_txn_key(t), encode_txn(m)) for t, m in self._txns.items()]
        return encode_records(records, self._clock_ms(), BATCH_BYTES), len(records)

    async def compact(self) -> int:
        return await self._state_log.compact()

    async def close(self) -> None:
        await self._state_log.close()

"""One partition of ``__consumer_offsets``: its log and the state replayed from it.

The state of a partition is, for every group whose id hashes to it, the committed
offsets (``(topic, partition) -> OffsetAndMetadata``), the last group metadata record
(``codec.GroupRecord``), and the offsets committed inside transactions that have not
ended (``TxnOffsetCommit``: pending per producer id until a txn end record, the marker
of the transaction, applies or drops them). It is rebuilt at load by replaying the log
from its start; the latest record of a key wins and a tombstone removes the key
(``codec.py``).

Writes and compaction are ``dataplane.broker.statelog``'s: ``write(entries)`` encodes
one request's entries as record batches and appends them durably, in arrival order,
before applying them, so the state always equals what a replay of the log would build;
the snapshot of a compaction holds the live offsets, group records and pending
transactional offsets (a txn end record is an event, not state: nothing of it is left
to snapshot once applied). So the log holds at most about twice the live keys plus
``compact_min_records`` records.

Thread safety: coroutines run on the coordinator's event loop; ``committed_offsets``
may be called from any thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from dataplane.broker.groups.codec import (
    CodecError,
    GroupKey,
    GroupRecord,
    Key,
    OffsetAndMetadata,
    OffsetKey,
    TxnEnd,
    TxnEndKey,
    TxnOffsetKey,
    decode_group,
    decode_key,
    decode_offset,
    decode_txn_end,
    encode_group,
    encode_key,
    encode_offset,
    encode_txn_end,
)
from dataplane.broker.statelog import StateLog, encode_records, read_records
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import Record
from dataplane.storage.log import PartitionLog

log = logging.getLogger(__name__)

Value: TypeAlias = OffsetAndMetadata | GroupRecord | TxnEnd | None
Entry: TypeAlias = tuple[Key, Value]
TopicPartitionKey: TypeAlias = tuple[str, int]
GroupPartitionKey: TypeAlias = tuple[str, str, int]  # group, topic, partition

BATCH_BYTES = 512 * 1024  # a batch is closed once its records pass this size


@dataclass
class PendingTxn:
    """The offsets a producer's open transaction committed, by (group, topic, partition)."""

    producer_epoch: int
    offsets: dict[GroupPartitionKey, OffsetAndMetadata] = field(default_factory=dict)


class OffsetsPartition:
    """The log and live state of one ``__consumer_offsets`` partition (module docstring)."""

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
        self._offsets: dict[str, dict[TopicPartitionKey, OffsetAndMetadata]] = {}
        self._groups: dict[str, GroupRecord] = {}
        self._pending: dict[int, PendingTxn] = {}
        self._state_lock = threading.Lock()
        self._state_log = StateLog(
            partition_log,
            f"offsets partition {partition}",
            compact_min_records=compact_min_records,
            live_count=lambda: self.live_keys,
            snapshot=self._snapshot,
        )

    # -- reading the state -----------------------------------------------------------
    def offsets_of(self, group_id: str) -> dict[TopicPartitionKey, OffsetAndMetadata]:
        with self._state_lock:
            return dict(self._offsets.get(group_id, {}))

    def group_record(self, group_id: str) -> GroupRecord | None:
        return self._groups.get(group_id)

    def group_ids(self) -> set[str]:
        with self._state_lock:
            return set(self._offsets) | set(self._groups)

    def committed_offsets(self) -> dict[str, dict[TopicPartitionKey, int]]:
        with self._state_lock:
            return {
                group: {tp: value.offset for tp, value in offsets.items()}
                for group, offsets in self._offsets.items()
            }

    def offset_keys(self, topic_filter: Callable[[str], bool]) -> list[OffsetKey]:
        """The keys of the committed offsets whose topic passes ``topic_filter``."""
        with self._state_lock:
            return [
                OffsetKey(group, topic, partition)
                for group, offsets in self._offsets.items()
                for topic, partition in offsets
                if topic_filter(topic)
            ]

    def pending_partitions(self, group_id: str) -> set[TopicPartitionKey]:
        """The partitions of ``group_id`` with an offset committed by a transaction that
        has not ended (UNSTABLE_OFFSET_COMMIT for readers asking for stable offsets)."""
        with self._state_lock:
            return {
                (topic, partition)
                for txn in self._pending.values()
                for group, topic, partition in txn.offsets
                if group == group_id
            }

    def pending_epoch(self, producer_id: int) -> int | None:
        """The epoch of ``producer_id``'s pending offset commits (None: it has none)."""
        with self._state_lock:
            txn = self._pending.get(producer_id)
            return txn.producer_epoch if txn is not None else None

    @property
    def live_keys(self) -> int:
        with self._state_lock:
            pending = sum(len(t.offsets) for t in self._pending.values())
            return len(self._groups) + sum(len(o) for o in self._offsets.values()) + pending

    # -- replay ----------------------------------------------------------------------
    def replay(self) -> int:
        """Rebuild the state from the log (blocking: run it off the event loop).

        Returns the number of records read.
        """
        count = 0
        for record in read_records(self.log):
            self._replay_record(record)
            count += 1
        self._state_log.records_in_log = count
        return count

    def _replay_record(self, record: Record) -> None:
        if record.key is None:
            log.warning("offsets partition %d: record %d has no key", self.partition, record.offset)
            return
        try:
            key = decode_key(record.key)
            value: Value = None
            if record.value is not None:
                value = _decode_value(key, record.value)
        except CodecError as exc:
            log.warning(
                "offsets partition %d: record %d skipped: %s", self.partition, record.offset, exc
            )
            return
        self._apply(key, value)

    def _apply(self, key: Key, value: Value) -> None:
        with self._state_lock:
            if isinstance(key, OffsetKey):
                self._apply_offset(key.group_id, (key.topic, key.partition), value)
            elif isinstance(key, TxnOffsetKey):
                self._apply_txn_offset(key, value)
            elif isinstance(key, TxnEndKey):
                self._apply_txn_end(key.producer_id, value)
            elif isinstance(value, GroupRecord):
                self._groups[key.group_id] = value
            else:
                self._groups.pop(key.group_id, None)

    def _apply_offset(self, group_id: str, tp: TopicPartitionKey, value: Value) -> None:
        if isinstance(value, OffsetAndMetadata):
            self._offsets.setdefault(group_id, {})[tp] = value
            return
        offsets = self._offsets.get(group_id)
        if offsets is not None:
            offsets.pop(tp, None)
            if not offsets:
                del self._offsets[group_id]

    def _apply_txn_offset(self, key: TxnOffsetKey, value: Value) -> None:
        if not isinstance(value, OffsetAndMetadata):
            return
        txn = self._pending.get(key.producer_id)
        if txn is None or key.producer_epoch > txn.producer_epoch:
            txn = self._pending[key.producer_id] = PendingTxn(key.producer_epoch)
        txn.offsets[(key.group_id, key.topic, key.partition)] = value

    def _apply_txn_end(self, producer_id: int, value: Value) -> None:
        txn = self._pending.get(producer_id)
        if txn is None or not isinstance(value, TxnEnd):
            return
        if value.producer_epoch < txn.producer_epoch:
            return  # an older epoch's marker: a newer transaction's commits stay pending
        del self._pending[producer_id]
        if not value.commit:
            return
        for (group, topic, partition), offset in txn.offsets.items():
            self._apply_offset(group, (topic, partition), offset)

    # -- writing ---------------------------------------------------------------------
    async def write(self, entries: Sequence[Entry]) -> None:
        """Append ``entries`` durably, then apply them; ``STORAGE_ERROR`` if the log fails,
        ``INVALID_REQUEST`` if they cannot be encoded or make a batch the log refuses."""
        if not entries:
            return
        kept = list(entries)
        data = self._encode_checked(kept)

        def apply() -> None:
            for key, value in kept:
                self._apply(key, value)

        await self._state_log.write(data, len(kept), apply)

    def _encode_checked(self, entries: Iterable[Entry]) -> bytes:
        try:
            batches = self._encode(entries)
        except CodecError as exc:
            raise MeridianError(ErrorCode.INVALID_REQUEST, str(exc)) from exc
        return self._state_log.check_size(batches)

    def _encode(self, entries: Iterable[Entry]) -> list[bytes]:
        """Record batches holding ``entries`` in order, each closed past ``BATCH_BYTES``."""
        records = ((encode_key(key), _encode_value(value)) for key, value in entries)
        return encode_records(records, self._clock_ms(), BATCH_BYTES)

    # -- compaction ------------------------------------------------------------------
    async def compact(self) -> int:
        """Write a snapshot of the live state and drop the log before it; returns its start."""
        return await self._state_log.compact()

    def _snapshot(self) -> tuple[list[bytes], int]:
        entries = self._live_entries()
        return self._encode(entries), len(entries)

    def _live_entries(self) -> list[Entry]:
        with self._state_lock:
            entries: list[Entry] = [(GroupKey(g), rec) for g, rec in self._groups.items()]
            for group, offsets in self._offsets.items():
                entries += ((OffsetKey(group, t, p), v) for (t, p), v in offsets.items())
            for pid, txn in self._pending.items():
                entries += (
                    (TxnOffsetKey(pid, txn.producer_epoch, g, t, p), v)
                    for (g, t, p), v in txn.offsets.items()
                )
        return entries

    async def close(self) -> None:
        """Wait for the writes and the compaction in flight (a snapshot is never cut short)."""
        await self._state_log.close()


def _decode_value(key: Key, data: bytes) -> Value:
    if isinstance(key, OffsetKey | TxnOffsetKey):
        return decode_offset(data)
    if isinstance(key, TxnEndKey):
        return decode_txn_end(data)
    return decode_group(data)


def _encode_value(value: Value) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, OffsetAndMetadata):
        return encode_offset(value)
    if isinstance(value, TxnEnd):
        return encode_txn_end(value)
    return encode_group(value)

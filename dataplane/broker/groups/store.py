"""One partition of ``__consumer_offsets``: its log and the state replayed from it.

The state of a partition is, for every group whose id hashes to it, the committed
offsets (``(topic, partition) -> OffsetAndMetadata``) and the last group metadata record
(``codec.GroupRecord``). It is rebuilt at load by replaying the log from its start; the
latest record of a key wins and a tombstone removes the key (``codec.py``).

Writes: ``write(entries)`` encodes one request's entries as record batches and queues
them; one writer task appends everything queued meanwhile in a single call (the log is
``durability=always``, so one sync covers them all), in arrival order, and only then
applies them to the state. So the state always equals what a replay of the log would
build. A write that the caller stops waiting for (a cancelled RPC) still completes and
is applied. A failed append fails every write it held.

Compaction keeps the log bounded: once the records in the log reach
``max(compact_min_records, 2 x live keys)``, a snapshot of the live state is appended at
the start of a fresh segment and the log start offset is advanced to it, which deletes
every older segment. A crash in the middle leaves the old start in place, and replaying
the old records followed by a partial snapshot (which repeats values already current)
gives the same state. So the log holds at most about twice the live keys plus
``compact_min_records`` records.

Thread safety: coroutines run on the coordinator's event loop; ``committed_offsets``
may be called from any thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TypeAlias

from dataplane.broker.groups.codec import (
    CodecError,
    GroupKey,
    GroupRecord,
    Key,
    OffsetAndMetadata,
    OffsetKey,
    decode_group,
    decode_key,
    decode_offset,
    encode_group,
    encode_key,
    encode_offset,
)
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import BatchBuilder, Record, decode_batch, iter_batches
from dataplane.records.errors import CorruptBatchError
from dataplane.storage.errors import StorageError
from dataplane.storage.log import PartitionLog

log = logging.getLogger(__name__)

Value: TypeAlias = OffsetAndMetadata | GroupRecord | None
Entry: TypeAlias = tuple[Key, Value]
TopicPartitionKey: TypeAlias = tuple[str, int]

READ_BYTES = 4 * 1024 * 1024
BATCH_BYTES = 512 * 1024  # a batch is closed once its records pass this size
APPEND_BYTES = 8 * 1024 * 1024  # a snapshot is appended in calls of about this size


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
        self.compact_min_records = compact_min_records
        self._offsets: dict[str, dict[TopicPartitionKey, OffsetAndMetadata]] = {}
        self._groups: dict[str, GroupRecord] = {}
        self._state_lock = threading.Lock()
        self._write_lock = asyncio.Lock()
        self._queue: list[_Pending] = []
        self._writer: asyncio.Task[None] | None = None
        self._records_in_log = 0
        self._compaction: asyncio.Task[int] | None = None

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

    @property
    def live_keys(self) -> int:
        with self._state_lock:
            return len(self._groups) + sum(len(o) for o in self._offsets.values())

    # -- replay ----------------------------------------------------------------------
    def replay(self) -> int:
        """Rebuild the state from the log (blocking: run it off the event loop).

        Returns the number of records read.
        """
        offset, end = self.log.log_start_offset, self.log.log_end_offset
        count = 0
        while offset < end:
            result = self.log.read(offset, READ_BYTES, max_offset=end)
            if not result.data:
                break
            for position, _ in iter_batches(result.data, validate=False):
                for record in decode_batch(result.data, position)[1]:
                    if record.offset >= offset:
                        self._replay_record(record)
                        count += 1
            offset = result.next_offset
        self._records_in_log = count
        return count

    def _replay_record(self, record: Record) -> None:
        if record.key is None:
            log.warning("offsets partition %d: record %d has no key", self.partition, record.offset)
            return
        try:
            key = decode_key(record.key)
            value: Value = None
            if record.value is not None:
                decode = decode_offset if isinstance(key, OffsetKey) else decode_group
                value = decode(record.value)
        except CodecError as exc:
            log.warning(
                "offsets partition %d: record %d skipped: %s", self.partition, record.offset, exc
            )
            return
        self._apply(key, value)

    def _apply(self, key: Key, value: Value) -> None:
        with self._state_lock:
            if isinstance(key, OffsetKey):
                self._apply_offset(key, value)
            elif isinstance(value, GroupRecord):
                self._groups[key.group_id] = value
            else:
                self._groups.pop(key.group_id, None)

    def _apply_offset(self, key: OffsetKey, value: Value) -> None:
        tp = (key.topic, key.partition)
        if isinstance(value, OffsetAndMetadata):
            self._offsets.setdefault(key.group_id, {})[tp] = value
            return
        offsets = self._offsets.get(key.group_id)
        if offsets is not None:
            offsets.pop(tp, None)
            if not offsets:
                del self._offsets[key.group_id]

    # -- writing ---------------------------------------------------------------------
    async def write(self, entries: Sequence[Entry]) -> None:
        """Append ``entries`` durably, then apply them; ``STORAGE_ERROR`` if the log fails,
        ``INVALID_REQUEST`` if they cannot be encoded or make a batch the log refuses."""
        if not entries:
            return
        pending = _Pending(list(entries), self._encode_checked(entries))
        self._queue.append(pending)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._drain())
        outcome = await asyncio.shield(pending.done)
        if outcome is not None:
            raise outcome
        self._maybe_compact()

    def _encode_checked(self, entries: Iterable[Entry]) -> bytes:
        try:
            batches = self._encode(entries)
        except CodecError as exc:
            raise MeridianError(ErrorCode.INVALID_REQUEST, str(exc)) from exc
        limit = self.log.config.max_batch_bytes
        if any(len(batch) > limit for batch in batches):
            raise MeridianError(ErrorCode.INVALID_REQUEST, f"a record exceeds {limit} bytes")
        return b"".join(batches)

    async def _drain(self) -> None:
        """Append everything queued meanwhile as one write (one sync), in arrival order."""
        while self._queue:
            group, self._queue = self._queue, []
            async with self._write_lock:
                outcome = await self._append(b"".join(p.data for p in group))
                if outcome is None:
                    for pending in group:
                        for key, value in pending.entries:
                            self._apply(key, value)
                        self._records_in_log += len(pending.entries)
            for pending in group:
                pending.done.set_result(outcome)

    async def _append(self, data: bytes) -> MeridianError | None:
        try:
            await asyncio.to_thread(self.log.append, data)
        except CorruptBatchError as exc:  # refused before any byte was written
            return MeridianError(ErrorCode.INVALID_REQUEST, str(exc))
        except StorageError as exc:
            return MeridianError(
                ErrorCode.STORAGE_ERROR, f"offsets partition {self.partition}: {exc}"
            )
        return None

    def _encode(self, entries: Iterable[Entry]) -> list[bytes]:
        """Record batches holding ``entries`` in order, each closed past ``BATCH_BYTES``."""
        now = self._clock_ms()
        batches: list[bytes] = []
        builder = BatchBuilder()
        for key, value in entries:
            builder.append(_encode_value(value), key=encode_key(key), timestamp=now)
            if builder.estimated_size() >= BATCH_BYTES:
                batches.append(builder.build())
                builder = BatchBuilder()
        if len(builder):
            batches.append(builder.build())
        return batches

    # -- compaction ------------------------------------------------------------------
    def _maybe_compact(self) -> None:
        due = self._records_in_log >= max(self.compact_min_records, 2 * self.live_keys)
        if due and (self._compaction is None or self._compaction.done()):
            self._compaction = asyncio.ensure_future(self.compact())
            self._compaction.add_done_callback(self._compaction_done)

    def _compaction_done(self, task: asyncio.Task[int]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "offsets partition %d: compaction failed", self.partition, exc_info=task.exception()
            )

    async def compact(self) -> int:
        """Write a snapshot of the live state and drop the log before it; returns its start."""
        async with self._write_lock:
            entries = self._live_entries()
            batches = self._encode(entries)
            start = await asyncio.to_thread(self._write_snapshot, batches)
            self._records_in_log = len(entries)
            return start

    def _live_entries(self) -> list[Entry]:
        with self._state_lock:
            entries: list[Entry] = [(GroupKey(g), rec) for g, rec in self._groups.items()]
            for group, offsets in self._offsets.items():
                entries += ((OffsetKey(group, t, p), v) for (t, p), v in offsets.items())
        return entries

    def _write_snapshot(self, batches: list[bytes]) -> int:
        self.log.roll()
        start = self.log.log_end_offset  # only this object appends to the log
        chunk: list[bytes] = []
        size = 0
        for batch in batches:
            chunk.append(batch)
            size += len(batch)
            if size >= APPEND_BYTES:
                self.log.append(b"".join(chunk))
                chunk, size = [], 0
        if chunk:
            self.log.append(b"".join(chunk))
        return self.log.advance_log_start_offset(start)

    async def close(self) -> None:
        """Wait for the writes and the compaction in flight (a snapshot is never cut short)."""
        for task in (self._writer, self._compaction):
            if task is not None:
                await asyncio.wait([task])
        async with self._write_lock:
            pass


class _Pending:
    """A write waiting for the writer task: its entries, their batches, its outcome."""

    def __init__(self, entries: list[Entry], data: bytes) -> None:
        self.entries = entries
        self.data = data
        self.done: asyncio.Future[MeridianError | None] = asyncio.get_running_loop().create_future()


def _encode_value(value: Value) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, OffsetAndMetadata):
        return encode_offset(value)
    return encode_group(value)

"""The write path of a coordinator's state log: durable appends in order, compaction by
snapshot. ``__consumer_offsets`` (``groups/store.py``) and ``__transaction_state``
(``txn/store.py``) partitions are such logs: keyed records whose latest value per key is
the state, replayed at load.

Writes: ``write(data, count, apply)`` queues one request's encoded batches; one writer
task appends everything queued meanwhile in a single call (the log is
``durability=always``, so one sync covers them all), in arrival order, and only then runs
each request's ``apply``, so the state always equals what a replay of the log would
build. A write whose caller stops waiting (a cancelled RPC) still completes and is
applied. A failed append fails every write it held: ``STORAGE_ERROR`` (or
``INVALID_REQUEST`` for a batch the log refuses before writing anything).

Compaction keeps the log bounded: once the records in the log reach
``max(compact_min_records, 2 x live keys)``, the snapshot of the live state
(``snapshot()``: its batches and record count, taken under the write lock, so no write
interleaves) is appended at the start of a fresh segment and the log start offset is
advanced to it, which deletes every older segment. A crash in the middle leaves the old
start in place, and replaying the old records followed by a partial snapshot (which
repeats values already current) gives the same state.

``encode_records`` builds the batches of keyed records, each closed past ``batch_bytes``.

Thread safety: coroutines run on the owner's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator

from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import BatchBuilder, Record, decode_batch, iter_batches
from dataplane.records.errors import CorruptBatchError
from dataplane.storage.errors import StorageError
from dataplane.storage.log import PartitionLog

log = logging.getLogger(__name__)

READ_BYTES = 4 * 1024 * 1024
APPEND_BYTES = 8 * 1024 * 1024  # a snapshot is appended in calls of about this size


def encode_records(
    records: Iterable[tuple[bytes, bytes | None]], timestamp_ms: int, batch_bytes: int
) -> list[bytes]:
    """Record batches holding ``(key, value)`` records in order, each closed once its
    records pass ``batch_bytes``."""
    batches: list[bytes] = []
    builder = BatchBuilder()
    for key, value in records:
        builder.append(value, key=key, timestamp=timestamp_ms)
        if builder.estimated_size() >= batch_bytes:
            batches.append(builder.build())
            builder = BatchBuilder()
    if len(builder):
        batches.append(builder.build())
    return batches


def read_records(partition_log: PartitionLog) -> Iterator[Record]:
    """Every record of the log from its start to its end at the call (blocking)."""
    offset, end = partition_log.log_start_offset, partition_log.log_end_offset
    while offset < end:
        result = partition_log.read(offset, READ_BYTES, max_offset=end)
        if not result.data:
            break
        for position, _ in iter_batches(result.data, validate=False):
            for record in decode_batch(result.data, position)[1]:
                if record.offset >= offset:
                    yield record
        offset = result.next_offset


class StateLog:
    """The write path of one state log; see the module docstring."""

    def __init__(
        self,
        partition_log: PartitionLog,
        name: str,
        *,
        compact_min_records: int,
        live_count: Callable[[], int],
        snapshot: Callable[[], tuple[list[bytes], int]],
    ) -> None:
        self.log = partition_log
        self.name = name
        self.compact_min_records = compact_min_records
        self._live_count = live_count
        self._snapshot = snapshot
        self.records_in_log = 0
        self._write_lock = asyncio.Lock()
        self._queue: list[_Pending] = []
        self._writer: asyncio.Task[None] | None = None
        self._compaction: asyncio.Task[int] | None = None

    def check_size(self, batches: list[bytes]) -> bytes:
        """The batches joined; ``INVALID_REQUEST`` if one exceeds the log's batch limit."""
        limit = self.log.config.max_batch_bytes
        if any(len(batch) > limit for batch in batches):
            raise MeridianError(ErrorCode.INVALID_REQUEST, f"a record exceeds {limit} bytes")
        return b"".join(batches)

    async def write(self, data: bytes, count: int, apply: Callable[[], None]) -> None:
        """Append ``data`` (``count`` records) durably, then ``apply`` it; raises the
        typed error of a failed append (module docstring)."""
        pending = _Pending(data, count, apply)
        self._queue.append(pending)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._drain())
        outcome = await asyncio.shield(pending.done)
        if outcome is not None:
            raise outcome
        self._maybe_compact()

    async def _drain(self) -> None:
        while self._queue:
            group, self._queue = self._queue, []
            async with self._write_lock:
                outcome = await self._append(b"".join(p.data for p in group))
                if outcome is None:
                    for pending in group:
                        pending.apply()
                        self.records_in_log += pending.count
            for pending in group:
                pending.done.set_result(outcome)

    async def _append(self, data: bytes) -> MeridianError | None:
        try:
            await asyncio.to_thread(self.log.append, data)
        except CorruptBatchError as exc:  # refused before any byte was written
            return MeridianError(ErrorCode.INVALID_REQUEST, str(exc))
        except StorageError as exc:
            return MeridianError(ErrorCode.STORAGE_ERROR, f"{self.name}: {exc}")
        return None

    # -- compaction ------------------------------------------------------------------
    def _maybe_compact(self) -> None:
        due = self.records_in_log >= max(self.compact_min_records, 2 * self._live_count())
        if due and (self._compaction is None or self._compaction.done()):
            self._compaction = asyncio.ensure_future(self.compact())
            self._compaction.add_done_callback(self._compaction_done)

    def _compaction_done(self, task: asyncio.Task[int]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: compaction failed", self.name, exc_info=task.exception())

    async def compact(self) -> int:
        """Write a snapshot of the live state and drop the log before it; returns its start."""
        async with self._write_lock:
            batches, count = self._snapshot()
            start = await asyncio.to_thread(self._write_snapshot, batches)
            self.records_in_log = count
            return start

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
    """A write waiting for the writer task: its batches, how to apply it, its outcome."""

    def __init__(self, data: bytes, count: int, apply: Callable[[], None]) -> None:
        self.data = data
        self.count = count
        self.apply = apply
        self.done: asyncio.Future[MeridianError | None] = asyncio.get_running_loop().create_future()

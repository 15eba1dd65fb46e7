"""The partitions a broker hosts: each log with its producer table and append signal.

``PartitionRegistry`` wraps the ``LogManager``: it loads every log's producer state at
start, creates and deletes partitions, and hands out ``Partition`` objects. A
``Partition`` appends (blocking: call it from the I/O pool) with the producer checks run
under the log's append lock, and lets fetches wait for its high watermark to move
(``changed``/``notify``, on the event loop; the storage log has no callback, so the
produce path notifies after each append).

Appends to one partition run one burst at a time on the I/O pool, in arrival order:
requests queue on the event loop while a burst is being written, and the next burst takes
all of them (up to ``MAX_BURST_BYTES``; a larger request goes alone) in one
``PartitionLog.append`` call — one lock hold, one thread hop and, with
``durability=always``, one group commit for many requests.
If anything in a combined burst is refused (a corrupt batch, a producer check, records
due later), nothing of it was written and its requests are appended one by one instead,
so each gets its own answer.

Records due later: a client partition (not internal) watches for ``marker``
(``PartitionRegistry.divert_marker``, the broker's ``x-deliver-at``) while the log
validates a request; a request holding such a record fails with ``MarkedRecordsError``,
nothing written, and the produce path schedules it instead (``dataplane.broker.delay``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from typing import Any, TypeVar

from dataplane.broker.producers import DuplicateBatch, ProducerStateTable
from dataplane.broker.replication.state import ReplicaState, Role
from dataplane.broker.topics import is_internal
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import BatchHeader
from dataplane.records.control import Marker, build_marker
from dataplane.records.errors import CorruptBatchError
from dataplane.storage.config import LogConfig
from dataplane.storage.errors import LogClosedError, MarkedRecordsError
from dataplane.storage.log import AppendInfo, PartitionLog
from dataplane.storage.manager import LogManager, TopicPartition

T = TypeVar("T")


# Combining pays for small requests (one call, one lock hold, one sync for many); large
# ones already amortise the call and would only be copied.
MAX_BURST_BYTES = 1024 * 1024
MAX_BURST_REQUESTS = 512


class _BurstRefused(Exception):  # noqa: N818 - internal control flow
    """Some request of a combined burst is refused: append them one by one."""


def check_client_batches(headers: list[BatchHeader]) -> None:
    """Refuse batches only the broker may write (control markers) and transactional
    batches without a producer id and sequence (the producer table checks the rest)."""
    for header in headers:
        if header.is_control:
            raise MeridianError(ErrorCode.INVALID_RECORD, "clients cannot write control batches")
        if header.is_transactional and (header.producer_id < 0 or header.base_sequence < 0):
            raise MeridianError(
                ErrorCode.INVALID_RECORD,
                "a transactional batch needs a producer id, epoch and sequence",
            )


class Partition:
    """One hosted partition. ``append``/``append_many`` block; the rest is loop-only."""

    def __init__(
        self,
        tp: TopicPartition,
        log: PartitionLog,
        producers: ProducerStateTable,
        executor: Executor,
    ) -> None:
        self.tp = tp
        self.log = log
        self.producers = producers
        self._executor = executor
        self._changed: asyncio.Future[None] | None = None
        self._pending: deque[tuple[bytes, asyncio.Future[AppendInfo]]] = deque()
        self._writing = False
        self.deleted = False
        # Replication (see ``replication.state``): None while no push names this
        # partition, which then behaves unreplicated (this broker leads, HW = log).
        self.replica: ReplicaState | None = None
        self.on_leader_append: Callable[[Partition], None] | None = None
        self._appended: asyncio.Future[None] | None = None
        self.marker = b""  # a client record with a header of this name is diverted

    @property
    def topic(self) -> str:
        return self.tp.topic

    @property
    def index(self) -> int:
        return self.tp.partition

    # -- appending (event loop) -----------------------------------------------------------
    def submit(self, data: bytes) -> asyncio.Future[AppendInfo]:
        """Queue a client's batches; the future gives their ``AppendInfo`` or raises
        (storage errors, ``MeridianError``, ``DuplicateBatch``: nothing written)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[AppendInfo] = loop.create_future()
        self._pending.append((data, future))
        if not self._writing:
            self._write_next_burst(loop)
        return future

    def _write_next_burst(self, loop: asyncio.AbstractEventLoop) -> None:
        burst: list[tuple[bytes, asyncio.Future[AppendInfo]]] = []
        size = 0
        while self._pending and len(burst) < MAX_BURST_REQUESTS:
            size += len(self._pending[0][0])
            if burst and size > MAX_BURST_BYTES:
                break
            burst.append(self._pending.popleft())
        self._writing = True
        try:
            self._executor.submit(self._write_burst, loop, burst)
        except RuntimeError as exc:  # the pool is shut down: the broker is stopping
            self._writing = False
            for _, future in burst:
                future.set_exception(LogClosedError(str(exc)))

    def _write_burst(
        self, loop: asyncio.AbstractEventLoop, burst: list[tuple[bytes, asyncio.Future[Any]]]
    ) -> None:
        outcomes = self.append_many([data for data, _ in burst])
        loop.call_soon_threadsafe(self._burst_written, loop, burst, outcomes)

    def _burst_written(
        self,
        loop: asyncio.AbstractEventLoop,
        burst: list[tuple[bytes, asyncio.Future[Any]]],
        outcomes: list[AppendInfo | BaseException],
    ) -> None:
        for (_, future), outcome in zip(burst, outcomes, strict=True):
            if future.done():
                continue
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
        self.after_append()
        if self._pending:
            self._write_next_burst(loop)
        else:
            self._writing = False

    def after_append(self) -> None:
        """Tell waiting readers and replicas that the log grew (on the event loop)."""
        self.notify_append()
        if self.replica is None:
            self.notify()
        elif self.on_leader_append is not None:
            self.on_leader_append(self)  # the HW moves with the ISR: it notifies then

    # -- appending (blocking) -------------------------------------------------------------
    def append(self, data: bytes) -> AppendInfo:
        """Append one request's batches after the client and producer checks (blocking)."""

        def before_write(base_offset: int, headers: list[BatchHeader]) -> None:
            self.check_leader(epoch)
            check_client_batches(headers)
            self.producers.check_and_record(base_offset, headers)

        epoch = self.leader_epoch_to_stamp()
        info = self.log.append(
            data, leader_epoch=epoch, before_write=before_write, marker=self.marker
        )
        # check_leader passed at ``epoch`` under the append lock: the epoch these
        # offsets hold, which an acks=all wait must still see (``produce``).
        return dataclasses.replace(info, leader_epoch=epoch)

    def append_marker(self, marker: Marker) -> AppendInfo:
        """Append a transaction marker as the leader (blocking): its control batch, after
        the producer table applied it under the append lock (``apply_marker``: a fenced
        marker raises and nothing is written)."""

        def before_write(base_offset: int, headers: list[BatchHeader]) -> None:
            self.check_leader(epoch)
            self.producers.apply_marker(base_offset, marker)

        data = build_marker(
            marker.producer_id,
            marker.producer_epoch,
            commit=marker.commit,
            coordinator_epoch=marker.coordinator_epoch,
        )
        epoch = self.leader_epoch_to_stamp()
        info = self.log.append(data, leader_epoch=epoch, before_write=before_write)
        return dataclasses.replace(info, leader_epoch=epoch)

    def last_stable_offset(self) -> int:
        """Where read_committed readers stop: the oldest open transaction's first offset,
        or the high watermark; never below the log start (an open transaction whose
        first records retention or DeleteRecords removed holds back nothing below it, as
        in Kafka: a reader listing the latest offset would loop on OFFSET_OUT_OF_RANGE)."""
        log = self.log
        return max(log.log_start_offset, self.producers.last_stable_offset(log.high_watermark))

    def visible_end(self, read_committed: bool) -> int:
        """The end of what a consumer may read: the last stable offset for
        read_committed; for read_uncommitted the high watermark, but never past the
        oldest open half message (half messages are invisible until committed); never
        below the log start."""
        if read_committed:
            return self.last_stable_offset()
        high_watermark = self.log.high_watermark
        half = self.producers.first_unstable_half_offset()
        end = high_watermark if half is None else min(half, high_watermark)
        return max(self.log.log_start_offset, end)

    def leader_epoch_to_stamp(self) -> int | None:
        """The epoch a leader stamps into the batches it appends (None: unreplicated)."""
        return self.replica.leader_epoch if self.replica is not None else None

    def check_leader(self, epoch: int | None) -> None:
        """Raise unless this broker still leads at ``epoch`` (under the append lock)."""
        state = self.replica
        if state is None:
            return
        if not state.is_leader or state.leader_epoch != epoch:
            code = (
                ErrorCode.LEADER_NOT_AVAILABLE
                if state.role is Role.OFFLINE
                else ErrorCode.NOT_LEADER_OR_FOLLOWER
            )
            raise MeridianError(code, f"{self.topic}-{self.index}: not the leader here")

    def append_many(self, requests: list[bytes]) -> list[AppendInfo | BaseException]:
        """Append several requests' batches in order, each with its own outcome."""
        if len(requests) > 1:
            try:
                return list(self._append_combined(requests))
            except (CorruptBatchError, _BurstRefused, MarkedRecordsError):
                pass  # nothing was written: find out which request is at fault
            except Exception as exc:  # the log itself failed: every request fails alike
                return [exc] * len(requests)
        outcomes: list[AppendInfo | BaseException] = []
        for data in requests:
            try:
                outcomes.append(self.append(data))
            except Exception as exc:  # each request gets its own typed answer
                outcomes.append(exc)
        return outcomes

    def _append_combined(self, requests: list[bytes]) -> list[AppendInfo]:
        """One ``PartitionLog.append`` of every request; raises ``_BurstRefused`` (before
        writing) unless every request passes its checks."""
        sizes = [len(data) for data in requests]
        infos: list[AppendInfo] = []

        def before_write(base_offset: int, headers: list[BatchHeader]) -> None:
            self.check_leader(epoch)
            staged: dict[int, Any] = {}
            offset, batches = base_offset, iter(headers)
            for size in sizes:
                own = _take_batches(batches, size)
                try:
                    check_client_batches(own)
                    end = self.producers.stage(offset, own, staged)
                except (MeridianError, DuplicateBatch) as exc:
                    raise _BurstRefused from exc
                infos.append(_info(offset, end, own))
                offset = end
            self.producers.commit(staged, offset)

        epoch = self.leader_epoch_to_stamp()
        combined = self.log.append(
            b"".join(requests), leader_epoch=epoch, before_write=before_write, marker=self.marker
        )
        append_time = combined.log_append_time
        return [
            dataclasses.replace(i, log_append_time=append_time, leader_epoch=epoch) for i in infos
        ]

    # -- waiting for appends (event loop) -------------------------------------------------
    def changed(self) -> asyncio.Future[None]:
        """A future resolved at the next ``notify`` (an append or a deletion)."""
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        return self._changed

    def notify(self) -> None:
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)
        self._changed = None

    def appended(self) -> asyncio.Future[None]:
        """A future resolved at the next ``notify_append`` (an append, a role change):
        what a waiting ``ReplicaFetch`` waits for (consumers wait for the HW instead)."""
        if self._appended is None or self._appended.done():
            self._appended = asyncio.get_running_loop().create_future()
        return self._appended

    def notify_append(self) -> None:
        if self._appended is not None and not self._appended.done():
            self._appended.set_result(None)
        self._appended = None


def _take_batches(batches: Iterator[BatchHeader], size: int) -> list[BatchHeader]:
    """The headers of the batches making up the next ``size`` bytes; ``_BurstRefused``
    when a batch crosses the end of a request (one request's bad length)."""
    taken, consumed = [], 0
    while consumed < size:
        header = next(batches, None)
        if header is None:
            raise _BurstRefused
        taken.append(header)
        consumed += header.size
    if consumed != size:
        raise _BurstRefused
    return taken


def _info(base_offset: int, end_offset: int, headers: list[BatchHeader]) -> AppendInfo:
    return AppendInfo(
        base_offset=base_offset,
        last_offset=end_offset - 1,
        record_count=sum(h.record_count for h in headers),
        batch_count=len(headers),
        size_bytes=sum(h.size for h in headers),
        max_timestamp=max(h.max_timestamp for h in headers),
        log_append_time=-1,
    )


class PartitionRegistry:
    """The hosted partitions over one ``LogManager``; all methods run on the event loop."""

    def __init__(self, manager: LogManager, executor: Executor) -> None:
        self.manager = manager
        self._executor = executor
        self._partitions: dict[tuple[str, int], Partition] = {}
        self.closing = False  # set at shutdown: long polls return at once
        self._lock = asyncio.Lock()
        self.on_leader_append: Callable[[Partition], None] | None = None  # see Partition
        self.divert_marker = b""  # Partition.marker of client (not internal) partitions

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def adopt(self) -> int:
        """Wrap every manager log not wrapped yet (rebuilding its producer state)."""
        logs = self.manager.logs()
        new = [(tp, log) for tp, log in logs.items() if _key(tp) not in self._partitions]
        tables = await asyncio.gather(
            *(self._run(functools.partial(ProducerStateTable.rebuild, log)) for _, log in new)
        )
        for (tp, log), table in zip(new, tables, strict=True):
            self._partitions.setdefault(_key(tp), self._wrap(tp, log, table))
        return len(new)

    def _wrap(self, tp: TopicPartition, log: PartitionLog, table: ProducerStateTable) -> Partition:
        part = Partition(tp, log, table, self._executor)
        part.on_leader_append = self.on_leader_append
        if not is_internal(tp.topic):
            part.marker = self.divert_marker
        return part

    def get(self, topic: str, partition: int) -> Partition | None:
        return self._partitions.get((topic, partition))

    def all(self) -> list[Partition]:
        return list(self._partitions.values())

    async def create(self, topic: str, partition: int, config: LogConfig) -> Partition:
        """The partition, created with ``config`` if new (an existing one is returned as is)."""
        async with self._lock:
            found = self.get(topic, partition)
            if found is not None:
                return found
            log = await self._run(lambda: self.manager.get_or_create_log(topic, partition, config))
            table = await self._run(lambda: ProducerStateTable.rebuild(log))
            created = self._wrap(TopicPartition(topic, partition), log, table)
            self._partitions[_key(created.tp)] = created
            return created

    async def alter(self, part: Partition, config: LogConfig) -> None:
        await self._run(lambda: part.log.update_config(config))

    async def delete(self, topic: str, partition: int) -> bool:
        async with self._lock:
            found = self.get(topic, partition)
            if found is None:
                return False
            del self._partitions[_key(found.tp)]
            found.deleted = True
            found.notify()
            found.notify_append()
            if found.producers.aborted is not None:
                found.producers.aborted.close()
            return await self._run(lambda: self.manager.delete_log(topic, partition))

    def snapshot_producers(self, *, only_dirty: bool, final: bool = False) -> None:
        """Write each partition's producer table (blocking). ``final``: no append is in
        flight, so the table covers the whole log."""
        for part in list(self._partitions.values()):
            if part.deleted or part.log.is_offline or (only_dirty and not part.producers.dirty):
                continue
            covered = part.log.log_end_offset if final else None
            try:
                part.producers.snapshot(part.log.directory, covered)
                if part.producers.aborted is not None:
                    part.producers.aborted.trim_before(part.log.log_start_offset)
                    if final:
                        part.producers.aborted.close()
            except OSError:
                continue  # the next snapshot, or a full scan at start, covers it

    def wake_all(self) -> None:
        """Shutting down: every waiting fetch returns what it has."""
        self.closing = True
        for part in self._partitions.values():
            part.notify()
            part.notify_append()


def _key(tp: TopicPartition) -> tuple[str, int]:
    return tp.topic, tp.partition

"""The partitions a broker hosts: each log with its producer table and append signal.

``PartitionRegistry`` wraps the ``LogManager``: it loads every log's producer state at
start, creates and deletes partitions, and hands out ``Partition`` objects. A
``Partition`` appends (blocking: call it from the I/O pool) with the producer checks run
under the log's append lock, and lets fetches wait for its high watermark to move
(``changed``/``notify``, on the event loop; the storage log has no callback, so the
produce path notifies after each append).

``AppendOrder`` keeps the appends of one produce stream to one partition in the order
they were sent although they run on several threads: an append that reaches the log
before its predecessor backs off (inside ``before_write``, so nothing is written) and
retries once the predecessor has gone through. Appends that arrive in order share a
group commit as usual.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

from dataplane.broker.producers import ProducerStateTable
from dataplane.errors import ErrorCode, MeridianError
from dataplane.storage.config import LogConfig
from dataplane.storage.log import AppendInfo, PartitionLog
from dataplane.storage.manager import LogManager, TopicPartition
from dataplane.storage.records import BatchHeader

T = TypeVar("T")


class _NotYourTurn(Exception):  # noqa: N818 - internal control flow
    pass


class AppendOrder:
    """Tickets that order the appends of one stream to one partition (thread-safe)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._issued = 0
        self._next = 0
        self._done: set[int] = set()

    def ticket(self) -> int:
        with self._cond:
            self._issued += 1
            return self._issued - 1

    def is_turn(self, ticket: int) -> bool:
        return self._next == ticket

    def wait_turn(self, ticket: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._next >= ticket)

    def finish(self, ticket: int) -> None:
        """``ticket`` went through or failed; its successor may go."""
        with self._cond:
            if ticket < self._next:
                return
            self._done.add(ticket)
            while self._next in self._done:
                self._done.remove(self._next)
                self._next += 1
            self._cond.notify_all()


def check_client_batches(headers: list[BatchHeader]) -> None:
    """Refuse batches only the broker may write (control markers, transactions)."""
    for header in headers:
        if header.is_control:
            raise MeridianError(ErrorCode.INVALID_RECORD, "clients cannot write control batches")
        if header.is_transactional:
            raise MeridianError(
                ErrorCode.INVALID_RECORD, "transactional batches are not supported yet"
            )


class Partition:
    """One hosted partition. ``append`` blocks; ``changed``/``notify`` are loop-only."""

    def __init__(self, tp: TopicPartition, log: PartitionLog, producers: ProducerStateTable):
        self.tp = tp
        self.log = log
        self.producers = producers
        self._changed: asyncio.Future[None] | None = None
        self.deleted = False

    @property
    def topic(self) -> str:
        return self.tp.topic

    @property
    def index(self) -> int:
        return self.tp.partition

    def append(self, data: bytes, order: AppendOrder | None = None, ticket: int = 0) -> AppendInfo:
        """Append a client's batches after the producer checks; see the module docstring.

        Raises storage errors, ``MeridianError`` and ``DuplicateBatch`` (nothing written).
        """

        def before_write(base_offset: int, headers: list[BatchHeader]) -> None:
            if order is not None and not order.is_turn(ticket):
                raise _NotYourTurn
            check_client_batches(headers)
            self.producers.check_and_record(base_offset, headers)
            if order is not None:
                order.finish(ticket)  # the log lock is held until these bytes are written

        while True:
            try:
                return self.log.append(data, before_write=before_write)
            except _NotYourTurn:
                assert order is not None
                order.wait_turn(ticket)
            except BaseException:
                if order is not None:
                    order.finish(ticket)
                raise

    def changed(self) -> asyncio.Future[None]:
        """A future resolved at the next ``notify`` (an append or a deletion)."""
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        return self._changed

    def notify(self) -> None:
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)
        self._changed = None


class PartitionRegistry:
    """The hosted partitions over one ``LogManager``; all methods run on the event loop."""

    def __init__(self, manager: LogManager, executor: Executor) -> None:
        self.manager = manager
        self._executor = executor
        self._partitions: dict[TopicPartition, Partition] = {}
        self._lock = asyncio.Lock()

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def adopt(self) -> int:
        """Wrap every manager log not wrapped yet (rebuilding its producer state)."""
        logs = self.manager.logs()
        new = [(tp, log) for tp, log in logs.items() if tp not in self._partitions]
        tables = await asyncio.gather(
            *(self._run(functools.partial(ProducerStateTable.rebuild, log)) for _, log in new)
        )
        for (tp, log), table in zip(new, tables, strict=True):
            self._partitions.setdefault(tp, Partition(tp, log, table))
        return len(new)

    def get(self, topic: str, partition: int) -> Partition | None:
        try:
            return self._partitions.get(TopicPartition(topic, partition))
        except Exception:  # an impossible name or index is simply not hosted
            return None

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
            created = Partition(TopicPartition(topic, partition), log, table)
            self._partitions[created.tp] = created
            return created

    async def alter(self, part: Partition, config: LogConfig) -> None:
        await self._run(lambda: part.log.update_config(config))

    async def delete(self, topic: str, partition: int) -> bool:
        async with self._lock:
            found = self.get(topic, partition)
            if found is None:
                return False
            del self._partitions[found.tp]
            found.deleted = True
            found.notify()
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
            except OSError:
                continue  # the next snapshot, or a full scan at start, covers it

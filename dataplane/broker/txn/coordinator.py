"""The transaction coordinator of one broker: Kafka's transactions on ``__transaction_state``.

Placement: a transactional id (a half message: its producer group,
``codec.coordinator_key``) belongs to partition ``murmur2(key) mod num_partitions`` of
``__transaction_state``; each partition is owned by one broker, chosen statically as
``__consumer_offsets`` partitions are (``ClusterView.offsets_owner``), and written
``durability=always``. The owner loads its partitions at start; a request for a key of
a partition not loaded here is ``NOT_COORDINATOR`` (``COORDINATOR_LOAD_IN_PROGRESS``
while loading). So a coordinator's broker killed mid-transaction resumes exactly where
its log says when it restarts: a transaction whose commit or abort was decided
(``PREPARE_*`` is durable before EndTxn is answered) has its markers written again to
every partition (a marker written twice is harmless: it closes nothing the second time),
an open one stays open until its producer ends it or its timeout aborts it. Clients
retry meanwhile (the coordinator's codes are retriable).

Requests (``state.py`` holds the rules of every change; each change is written to the
partition's log and becomes current only once durable; changes of one transactional id
are serialised by a lock of its own):

- ``init_producer_id``: a new id for a new transactional id (the broker's
  ``ProducerIdAllocator``), else the next epoch, after aborting an open transaction with
  a bumped epoch first (fencing every older producer) and waiting for a completing one
  (at most ``complete_wait_ms``, then ``CONCURRENT_TRANSACTIONS``). A timeout outside
  ``[1, max_timeout_ms]`` is ``INVALID_TRANSACTION_TIMEOUT``.
- ``add_partitions`` / ``add_offsets``: open a transaction or add to it; a partition the
  cluster does not know is ``UNKNOWN_TOPIC_OR_PARTITION`` alone (the rest are added).
- ``end_txn``: ``PREPARE_COMMIT`` / ``PREPARE_ABORT``, answered once durable; the
  markers are then written (``markers.MarkerSender``: every partition, to its current
  leader, retried until written) and the transaction completes. A request that meets a
  completing transaction waits for it first.
- ``verify``: asked by a partition's leader before the first transactional batch of a
  transaction (``producers.py``'s verification guard), and by the group coordinator
  before the first TxnOffsetCommit.
- A transaction open past its ``timeout_ms`` is aborted with a bumped epoch (its
  producer is fenced: ``PRODUCER_FENCED``); ``abort`` does the same for an operator
  (a hanging transaction). An idle transactional id is forgotten after
  ``id_expiration_ms``.

Half messages are transactions too (``halves.py``); they are never timed out, but
checked back and, failing that, given their default outcome.

Thread safety: coroutines run on the broker's event loop; ``describe``, ``transactions`` and
``open_counts`` may be called from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from dataplane.broker.groups.coordinator import OFFSETS_TOPIC
from dataplane.broker.txn import state as rules
from dataplane.broker.txn.codec import HALF_SEPARATOR, coordinator_key
from dataplane.broker.txn.metrics import TxnMetrics
from dataplane.broker.txn.state import TopicPartitionKey, TxnMetadata, TxnState
from dataplane.broker.txn.store import TxnStatePartition
from dataplane.errors import ErrorCode, MeridianError
from dataplane.hashing import partition_for_key
from dataplane.records.errors import CorruptBatchError
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.errors import StorageError
from dataplane.storage.log import wall_clock_ms
from dataplane.storage.manager import LogManager

log = logging.getLogger(__name__)

TXN_STATE_TOPIC = "__transaction_state"
MAX_TRANSACTIONAL_ID_CHARS = 255
EXPIRE_CHUNK = 1000  # expired ids' tombstones written together (one fsync)

TXN_STATE_LOG_CONFIG = LogConfig(
    durability=Durability.ALWAYS,
    retention_ms=-1,  # records leave by compaction only (statelog.py)
    retention_bytes=-1,
    max_segment_bytes=64 * 1024 * 1024,
    max_batch_bytes=16 * 1024 * 1024,
)

# Sends every marker of a decided transaction (retrying until written); the coordinator
# epoch is the partition's.
SendMarkers = Callable[[TxnMetadata, int], Awaitable[None]]
# Whether a topic-partition exists in the cluster (None) or why it may not be added.
CheckPartition = Callable[[str, int], Awaitable[MeridianError | None]]


@dataclass(frozen=True, slots=True)
class TxnConfig:
    """Limits and periods of the coordinator; every field names its unit."""

    max_timeout_ms: int = 900_000  # Kafka's transaction.max.timeout.ms
    tick_interval_ms: int = 100
    id_expiration_ms: int = 7 * 24 * 3600 * 1000  # Kafka's transactional.id.expiration.ms
    complete_wait_ms: int = 5_000
    compact_min_records: int = 10_000
    half_check_interval_ms: int = 60_000  # RocketMQ's transactionCheckInterval
    half_max_checks: int = 15  # RocketMQ's transactionCheckMax
    half_default_commit: bool = False  # RocketMQ discards what is never confirmed
    half_retention_ms: int = 3_600_000  # a decided half message is remembered this long
    half_max_lifetime_ms: int = 900_000  # undecided past this, the default outcome applies
    max_partitions: int = 10_000  # of one transaction
    half_max_open_per_tenant: int = 100_000  # undecided half messages here, per tenant
    state_log_config: LogConfig = TXN_STATE_LOG_CONFIG


@dataclass
class _Loaded:
    store: TxnStatePartition
    completions: dict[str, asyncio.Task[None]] = field(default_factory=dict)


class TransactionCoordinator:
    """Coordinates the transactions of the ``__transaction_state`` partitions owned here."""

    def __init__(
        self,
        *,
        broker_id: int,
        manager: LogManager,
        num_partitions: int,
        new_producer_id: Callable[[], int],
        send_markers: SendMarkers,
        check_partition: CheckPartition,
        metrics: TxnMetrics | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
        config: TxnConfig | None = None,
    ) -> None:
        """``new_producer_id()`` hands out a producer id no one had (blocking: it may
        write its reservation)."""
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be at least 1, got {num_partitions}")
        self.broker_id = broker_id
        self.manager = manager
        self.num_partitions = num_partitions
        self.config = config or TxnConfig()
        self.metrics = metrics or TxnMetrics()
        self._new_producer_id = new_producer_id
        self._send_markers = send_markers
        self._check_partition = check_partition
        self._clock_ms = clock_ms
        self._loaded: dict[int, _Loaded] = {}
        self._loading: set[int] = set()
        self._failed: dict[int, str] = {}
        self._locks: dict[str, _KeyLock] = {}
        self._ticker: asyncio.Task[None] | None = None
        self._started = False
        self.on_tick: Callable[[int], Awaitable[None]] | None = None  # halves' schedule

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self, owned_partitions: Iterable[int]) -> None:
        await self.load_partitions(owned_partitions)
        self._started = True
        if self._ticker is None:
            self._ticker = asyncio.ensure_future(self._tick_forever())

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        for p in list(self._loaded):
            loaded = self._loaded.pop(p)
            for task in loaded.completions.values():
                task.cancel()
            await asyncio.gather(*loaded.completions.values(), return_exceptions=True)
            await loaded.store.close()

    async def load_partitions(self, partitions: Iterable[int]) -> None:
        wanted = [p for p in partitions if p not in self._loaded and p not in self._loading]
        for p in wanted:
            if not 0 <= p < self.num_partitions:
                raise ValueError(
                    f"{TXN_STATE_TOPIC} partition {p} is outside [0, {self.num_partitions})"
                )
        self._loading.update(wanted)
        try:
            for p in wanted:
                await self._load_one(p)
        finally:
            self._loading.difference_update(wanted)

    async def _load_one(self, partition: int) -> None:
        try:
            store = await asyncio.to_thread(self._open, partition)
            await store.bump_epoch()
        except (StorageError, CorruptBatchError, MeridianError) as exc:
            log.exception("%s partition %d could not be loaded", TXN_STATE_TOPIC, partition)
            self._failed[partition] = str(exc)
            return
        loaded = self._loaded[partition] = _Loaded(store)
        self._failed.pop(partition, None)
        decided = [m for m in store.transactions() if m.state.preparing]
        for meta in decided:  # decided before a crash: finish writing the markers
            self._complete_later(loaded, meta)
        log.info(
            "%s partition %d: %d transactions, coordinator epoch %d, %d to complete",
            TXN_STATE_TOPIC,
            partition,
            len(store.transactions()),
            store.coordinator_epoch,
            len(decided),
        )

    def _open(self, partition: int) -> TxnStatePartition:
        partition_log = self.manager.get_or_create_log(
            TXN_STATE_TOPIC, partition, self.config.state_log_config
        )
        store = TxnStatePartition(
            partition,
            partition_log,
            clock_ms=self._clock_ms,
            compact_min_records=self.config.compact_min_records,
        )
        store.replay()
        return store

    def clock_ms(self) -> int:
        return self._clock_ms()

    # -- routing -----------------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        key = coordinator_key(transactional_id)
        return partition_for_key(key.encode(), self.num_partitions)

    def owned_partitions(self) -> set[int]:
        return set(self._loaded)

    def loaded(self, transactional_id: str) -> _Loaded:
        """The loaded partition of ``transactional_id`` (or a producer group), else the
        retriable reason it is not here."""
        p = self.partition_for(transactional_id)
        if p in self._loading or not self._started:
            raise MeridianError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"loading partition {p}")
        loaded = self._loaded.get(p)
        if loaded is None and p in self._failed:
            raise MeridianError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"{TXN_STATE_TOPIC} partition {p} failed to load: {self._failed[p]}",
            )
        if loaded is None:
            raise MeridianError(
                ErrorCode.NOT_COORDINATOR,
                f"broker {self.broker_id} does not coordinate {transactional_id!r} "
                f"({TXN_STATE_TOPIC} partition {p})",
            )
        return loaded

    @contextlib.asynccontextmanager
    async def locked(self, transactional_id: str) -> AsyncIterator[_Loaded]:
        """The transactional id's partition, its changes serialised with every other
        change of the same id."""
        lock = self._locks.get(transactional_id)
        if lock is None:
            lock = self._locks[transactional_id] = _KeyLock()
        lock.users += 1
        try:
            async with lock.lock:
                yield self.loaded(transactional_id)
        finally:
            lock.users -= 1
            if not lock.users:
                self._locks.pop(transactional_id, None)

    async def change(self, loaded: _Loaded, meta: TxnMetadata) -> TxnMetadata:
        """Write ``meta`` durably (it is current once this returns); a decided
        transaction then has its markers written."""
        await loaded.store.write([(meta.transactional_id, meta)])
        if meta.state.preparing:
            self._complete_later(loaded, meta)
        return meta

    # -- Kafka's transactions ----------------------------------------------------------
    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int = -1, epoch: int = -1
    ) -> tuple[int, int]:
        """InitProducerId with a transactional id (module docstring): (id, epoch)."""
        check_transactional_id(transactional_id)
        if not 1 <= timeout_ms <= self.config.max_timeout_ms:
            raise MeridianError(
                ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                f"transaction_timeout_ms {timeout_ms} is outside [1, {self.config.max_timeout_ms}]",
            )
        await self._await_completion(transactional_id)
        async with self.locked(transactional_id) as loaded:
            meta = loaded.store.get(transactional_id)
            now = self._clock_ms()
            if meta is None:
                new_id = await asyncio.to_thread(self._new_producer_id)
                meta = TxnMetadata(transactional_id, new_id, 0, timeout_ms, last_update_ms=now)
                await self.change(loaded, meta)
                return meta.producer_id, meta.producer_epoch
            rules.check_not_completing(meta)
            if rules.is_init_retry(meta, producer_id, epoch):
                return meta.producer_id, meta.producer_epoch
            if meta.open:
                await self.change(loaded, rules.fence(meta, now))
                self.metrics.fenced("init")
        await self._await_completion(transactional_id)
        async with self.locked(transactional_id) as loaded:
            meta = loaded.store.get(transactional_id)
            if meta is None:
                raise MeridianError(ErrorCode.CONCURRENT_TRANSACTIONS, "expired meanwhile: retry")
            rules.check_not_completing(meta)
            new_id = -1
            if rules.epoch_exhausted(meta.producer_epoch):
                new_id = await asyncio.to_thread(self._new_producer_id)
            bumped = rules.init_producer(meta, timeout_ms, new_id, self._clock_ms())
            await self.change(loaded, bumped)
            return bumped.producer_id, bumped.producer_epoch

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartitionKey],
    ) -> dict[TopicPartitionKey, MeridianError | None]:
        """AddPartitionsToTxn; per-partition outcomes (None: added)."""
        results: dict[TopicPartitionKey, MeridianError | None] = {}
        for topic, partition in dict.fromkeys(partitions):
            results[(topic, partition)] = await self._check_partition(topic, partition)
        wanted = frozenset(tp for tp, error in results.items() if error is None)
        if wanted:
            await self._add(transactional_id, producer_id, epoch, wanted)
        return results

    async def add_offsets(
        self, transactional_id: str, producer_id: int, epoch: int, offsets_partition: int
    ) -> None:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins."""
        await self._add(
            transactional_id, producer_id, epoch, frozenset({(OFFSETS_TOPIC, offsets_partition)})
        )

    async def _add(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        wanted: frozenset[TopicPartitionKey],
    ) -> None:
        await self._await_completion(transactional_id)
        async with self.locked(transactional_id) as loaded:
            meta = _existing(loaded, transactional_id)
            changed = rules.add_partitions(
                meta, producer_id, epoch, wanted, self._clock_ms(), self.config.max_partitions
            )
            if changed is not meta:
                await self.change(loaded, changed)

    async def end_txn(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> None:
        """EndTxn: answered once the decision is durable (module docstring)."""
        async with self.locked(transactional_id) as loaded:
            meta = _existing(loaded, transactional_id)
            decided = rules.end_txn(meta, producer_id, epoch, commit, self._clock_ms())
            if decided is not meta:
                await self.change(loaded, decided)

    def verify(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartitionKey],
    ) -> dict[TopicPartitionKey, MeridianError | None]:
        """Whether each partition is in the open transaction of (``producer_id``,
        ``epoch``): None, or why not."""
        loaded = self.loaded(transactional_id)
        meta = loaded.store.get(transactional_id)
        results: dict[TopicPartitionKey, MeridianError | None] = {}
        for tp in partitions:
            results[tp] = _not_in(meta, transactional_id, producer_id, epoch, tp)
        return results

    # -- administration ----------------------------------------------------------------
    def describe(self, transactional_id: str) -> TxnMetadata:
        meta = self.loaded(transactional_id).store.get(transactional_id)
        if meta is None or meta.half is not None:
            raise MeridianError(
                ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, f"no transactional id {transactional_id!r}"
            )
        return meta

    def transactions(
        self, states: Iterable[TxnState] = (), *, halves: bool = False
    ) -> list[TxnMetadata]:
        """The transactions coordinated here (half messages with ``halves``), in the
        given states (every state when none)."""
        wanted = set(states)
        return [
            meta
            for loaded in list(self._loaded.values())
            for meta in loaded.store.transactions()
            if (meta.half is not None) == halves and (not wanted or meta.state in wanted)
        ]

    async def abort(self, transactional_id: str) -> TxnMetadata:
        """An operator's abort of a transactional id's open (hanging) transaction: its
        producer is fenced. INVALID_TXN_STATE when none is open."""
        self.describe(transactional_id)
        async with self.locked(transactional_id) as loaded:
            meta = _existing(loaded, transactional_id)
            if meta.state is TxnState.PREPARE_ABORT:
                pass  # being aborted (this call retried, or its producer's): wait for it
            elif not meta.open:
                raise MeridianError(
                    ErrorCode.INVALID_TXN_STATE,
                    f"transactional id {transactional_id!r} has no open transaction "
                    f"({meta.state.label})",
                )
            else:
                await self.change(loaded, rules.fence(meta, self._clock_ms()))
                self.metrics.fenced("operator")
        return await self.settled(transactional_id)

    async def settled(self, transactional_id: str) -> TxnMetadata:
        """The metadata once the decided transaction's markers are written: what it
        decided is visible then. ``CONCURRENT_TRANSACTIONS`` (retriable) while they are
        still being written after ``complete_wait_ms``: the same call again waits again
        (an operator's abort, a half message's end: both join a decision already made)."""
        await self._await_completion(transactional_id)
        meta = self.loaded(transactional_id).store.get(transactional_id)
        assert meta is not None
        if meta.state.preparing:
            raise MeridianError(
                ErrorCode.CONCURRENT_TRANSACTIONS,
                f"transactional id {transactional_id!r}: decided ({meta.state.label}), its "
                "markers are still being written",
            )
        return meta

    def open_counts(self) -> dict[tuple[str, str], int]:
        """(kind, state) -> how many, for the metrics (kind: transaction or half)."""
        counts: dict[tuple[str, str], int] = {}
        for loaded in list(self._loaded.values()):
            for meta in loaded.store.transactions():
                kind = "half" if meta.half is not None else "transaction"
                key = (kind, meta.state.name.lower())
                counts[key] = counts.get(key, 0) + 1
        return counts

    # -- completion --------------------------------------------------------------------
    def _complete_later(self, loaded: _Loaded, meta: TxnMetadata) -> None:
        running = loaded.completions.get(meta.transactional_id)
        if running is not None and not running.done():
            return
        task = asyncio.ensure_future(self._complete(loaded, meta))
        loaded.completions[meta.transactional_id] = task
        task.add_done_callback(lambda t: _forget(loaded, meta.transactional_id, t))

    async def _complete(self, loaded: _Loaded, meta: TxnMetadata) -> None:
        """Write every marker of ``meta`` (a decided transaction), then complete it."""
        await self._send_markers(meta, loaded.store.coordinator_epoch)
        async with self.locked(meta.transactional_id) as current_loaded:
            current = current_loaded.store.get(meta.transactional_id)
            if (
                current is None
                or current.state is not meta.state
                or current.producer_epoch != meta.producer_epoch
            ):
                return
            done = rules.complete(current, self._clock_ms())
            await current_loaded.store.write([(done.transactional_id, done)])
        commit = meta.state is TxnState.PREPARE_COMMIT
        self.metrics.completed(meta, commit)

    async def _await_completion(self, transactional_id: str) -> None:
        """Wait (at most ``complete_wait_ms``) for a decided transaction's markers;
        ``CONCURRENT_TRANSACTIONS`` if they are still being written then."""
        loaded = self.loaded(transactional_id)
        task = loaded.completions.get(transactional_id)
        if task is None or task.done():
            return
        done, _ = await asyncio.wait([task], timeout=self.config.complete_wait_ms / 1000)
        if not done:
            raise MeridianError(
                ErrorCode.CONCURRENT_TRANSACTIONS,
                f"transactional id {transactional_id!r}: the last transaction's markers are "
                "still being written",
            )

    async def wait_completed(self, transactional_id: str) -> None:
        """Wait for the markers of a decided transaction, however long (tests, tools)."""
        task = self.loaded(transactional_id).completions.get(transactional_id)
        if task is not None:
            await asyncio.wait([task])

    # -- the timer ---------------------------------------------------------------------
    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.tick_interval_ms / 1000)
            now = self._clock_ms()
            try:
                await self._abort_timed_out(now)
                await self._expire(now)
                if self.on_tick is not None:
                    await self.on_tick(now)
            except asyncio.CancelledError:
                raise
            except Exception:  # the timer must outlive one failed write
                log.exception("the transaction coordinator's timer failed")

    async def _abort_timed_out(self, now: int) -> None:
        for meta in self.transactions([TxnState.ONGOING]):
            if not rules.timed_out(meta, now):
                continue
            async with self.locked(meta.transactional_id) as loaded:
                current = loaded.store.get(meta.transactional_id)
                if current is None or not rules.timed_out(current, self._clock_ms()):
                    continue
                log.info(
                    "transactional id %r: aborting a transaction open for %d ms (timeout %d ms)",
                    current.transactional_id,
                    now - current.start_ms,
                    current.timeout_ms,
                )
                await self.change(loaded, rules.fence(current, now))
                self.metrics.fenced("timeout")

    async def _expire(self, now: int) -> None:
        """Tombstones for the expired ids, ``EXPIRE_CHUNK`` to a write. Each chunk is
        checked again right before its write is queued, with no await in between, and
        leaves out ids a request holds: a request using an id after that is written after
        its tombstone, so it is never undone by it."""
        for loaded in list(self._loaded.values()):
            ids = [m.transactional_id for m in loaded.store.transactions() if self._expired(m, now)]
            for start in range(0, len(ids), EXPIRE_CHUNK):
                chunk = [
                    (transactional_id, None)
                    for transactional_id in ids[start : start + EXPIRE_CHUNK]
                    if transactional_id not in self._locks
                    and (current := loaded.store.get(transactional_id)) is not None
                    and self._expired(current, now)
                ]
                if chunk:
                    await loaded.store.write(chunk)

    def _expired(self, meta: TxnMetadata, now: int) -> bool:
        if meta.half is not None:
            return meta.state.complete and now - meta.last_update_ms > self.config.half_retention_ms
        idle = meta.state is TxnState.EMPTY or meta.state.complete
        return idle and now - meta.last_update_ms > self.config.id_expiration_ms


class _KeyLock:
    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


def _forget(loaded: _Loaded, transactional_id: str, task: asyncio.Task[None]) -> None:
    if loaded.completions.get(transactional_id) is task:
        del loaded.completions[transactional_id]
    if not task.cancelled() and task.exception() is not None:
        log.error("completing %r failed", transactional_id, exc_info=task.exception())


def _existing(loaded: _Loaded, transactional_id: str) -> TxnMetadata:
    meta = loaded.store.get(transactional_id)
    if meta is None:
        raise MeridianError(
            ErrorCode.INVALID_PRODUCER_ID_MAPPING,
            f"transactional id {transactional_id!r} has no producer: call InitProducerId first",
        )
    return meta


def _not_in(
    meta: TxnMetadata | None,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    tp: TopicPartitionKey,
) -> MeridianError | None:
    if meta is None:
        return MeridianError(
            ErrorCode.INVALID_PRODUCER_ID_MAPPING, f"no transactional id {transactional_id!r}"
        )
    try:
        rules.check_producer(meta, producer_id, epoch)
    except MeridianError as error:
        return error
    if not meta.open or tp not in meta.partitions:
        return MeridianError(
            ErrorCode.INVALID_TXN_STATE,
            f"{tp[0]}-{tp[1]} is not in an open transaction of {transactional_id!r} "
            f"({meta.state.label}): add the partition to the transaction first",
        )
    return None


def check_transactional_id(transactional_id: str) -> None:
    """``INVALID_TRANSACTIONAL_ID`` unless 1 to 255 characters, none of them control
    characters (a half message's id uses one to keep apart from every client's)."""
    if (
        not transactional_id
        or len(transactional_id) > MAX_TRANSACTIONAL_ID_CHARS
        or any(ord(c) < 32 for c in transactional_id)
    ):
        raise MeridianError(
            ErrorCode.INVALID_TRANSACTIONAL_ID,
            f"a transactional id has 1 to {MAX_TRANSACTIONAL_ID_CHARS} printable characters, "
            f"not {transactional_id!r}",
        )
    assert HALF_SEPARATOR not in transactional_id

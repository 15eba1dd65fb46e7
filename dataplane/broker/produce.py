"""Produce: request checks, appends on the I/O pool, and results per partition.

``ProduceHandler.submit`` checks a request as a whole (``acks``, size, repeated
partitions: a ``MeridianError`` fails the request), starts every partition's append at
once, and returns a future of the response. With ``acks=0`` the response is ready as soon
as the request is accepted; the appends go on. With ``acks=1`` a partition's result is
ready once the leader appended; with ``acks=-1`` (all) once the high watermark passed the
append *and* the committed ISR still holds at least ``min_insync_replicas``, i.e. at least
that many replicas have it (``NOT_ENOUGH_REPLICAS`` before appending when the committed
ISR is below the topic's minimum; while waiting, ``REQUEST_TIMED_OUT`` at ``timeout_ms``,
``NOT_LEADER_OR_FOLLOWER`` if the leadership moved, ``NOT_ENOUGH_REPLICAS_AFTER_APPEND``
if the ISR shrank below the minimum -- even when that shrink is what moved the HW past
the append, as Kafka answers). A
follower refuses appends (``NOT_LEADER_OR_FOLLOWER``; ``LEADER_NOT_AVAILABLE`` when the
partition has no leader). Every batch is validated by the log before
any byte is written (``PartitionLog.append``), and producer checks run under its append
lock, so a refused request leaves the log unchanged.

A lane topic (``<trunk>~<lane>``) is checked first by ``lanes`` (``BrokerLanes``): one
the cluster does not know is LANE_TOPIC_PENDING (a declared lane covering an existing
trunk: the topic is being created) or LANE_NOT_FOUND; one whose lane is no longer
declared is LANE_NOT_FOUND; one hosted here that the controller's push no longer names
(being deleted) is LANE_TOPIC_PENDING. Nothing is appended to any log for a refused
partition.

Delays (``delay``, a ``DelayManager``): a client's records for a timer log
(``__delay.<tenant>``) are checked record by record before they are appended
(``timer_produce_refusal``); a request to a topic whose log finds records with
``x-deliver-at`` in it (``MarkedRecordsError``, nothing written) is diverted: those
records are scheduled and the others appended (``divert``), its answer that append's.
Such records in a transactional batch are refused (``INVALID_RECORD``, nothing written):
the timer log is outside the transaction.

Transactions: a request naming a ``transactional_id`` whose partition's first batch is
transactional and would open a transaction there (its producer has no open transaction
on the partition) is held until the transaction coordinator confirms the partition is
in that producer's open transaction (``verify``); the answer is recorded as the
partition's verification guard (``producers.py``) and the appends start then, in the
order the requests came (a later request for a partition being verified waits behind
it). A partition the coordinator does not confirm gets its answer
(``INVALID_TXN_STATE``, ``PRODUCER_FENCED``, a retriable coordinator error) and nothing
is appended; without a ``transactional_id`` the producer table refuses the batch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.broker.errors import to_error
from dataplane.broker.lanes import BrokerLanes
from dataplane.broker.partitions import Partition, PartitionRegistry
from dataplane.broker.producers import DuplicateBatch
from dataplane.broker.replication.state import ReplicaState
from dataplane.broker.topics import is_internal
from dataplane.delays import DELIVER_AT, is_timer_topic
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import read_header
from dataplane.records.errors import CorruptBatchError
from dataplane.storage.config import Durability
from dataplane.storage.errors import MarkedRecordsError
from dataplane.storage.log import AppendInfo
from lanes.names import SEPARATOR

if TYPE_CHECKING:
    from dataplane.broker.delay.manager import DelayManager

DEFAULT_TIMEOUT_MS = 30_000
ACKS_ALL = -1

TopicPartitionKey = tuple[str, int]
# (transactional id, producer id, epoch, partitions) -> per partition: None or why not
Verify = Callable[
    [str, int, int, list[TopicPartitionKey]],
    Awaitable[dict[TopicPartitionKey, MeridianError | None]],
]
_VerifyKey = tuple[str, int, int, int]  # topic, partition, producer id, epoch


class ProduceHandler:
    def __init__(
        self,
        registry: PartitionRegistry,
        *,
        max_request_bytes: int,
        on_bytes_in: Any = None,
        refuse: Callable[[str], MeridianError | None] | None = None,
        lanes: BrokerLanes | None = None,
        delay: DelayManager | None = None,
        on_records_in: Callable[[str, int], None] | None = None,
        verify: Verify | None = None,
    ) -> None:
        """``refuse(topic)``: an error refusing appends to ``topic`` (the tenant's storage
        quota, see ``quotas.QuotaManager.storage_refusal``), or None; ``lanes`` answers
        for lane topics and records their appends (None: lane topics are plain topics);
        ``delay`` takes records due later (None: timer logs are internal topics, and
        ``x-deliver-at`` a header like any); ``on_records_in(topic, count)`` counts the
        records appended; ``verify`` asks the transaction coordinator (module docstring)."""
        self.registry = registry
        self._max_request_bytes = max_request_bytes
        self._on_bytes_in = on_bytes_in  # Callable[[str, int], None] | None
        self._on_records_in = on_records_in
        self._refuse = refuse
        self._lanes = lanes
        self._delay = delay
        self.verify = verify
        self._verifying: dict[_VerifyKey, _Verification] = {}
        self._background: set[asyncio.Future[Any]] = set()

    def check_request(self, request: broker_pb2.ProduceRequest) -> None:
        """Request-level checks; raises ``MeridianError``."""
        if request.acks not in (ACKS_ALL, 0, 1):
            raise MeridianError(
                ErrorCode.INVALID_REQUIRED_ACKS,
                f"acks={request.acks}: use -1 (all in-sync replicas), 0 or 1 (the leader)",
            )
        total, seen = 0, set()
        for item in request.partitions:
            total += len(item.records)
            key = (item.topic, item.partition)
            if key in seen:
                raise MeridianError(
                    ErrorCode.INVALID_REQUEST, f"{item.topic}-{item.partition} is listed twice"
                )
            seen.add(key)
        if total > self._max_request_bytes:
            raise MeridianError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"request of {total} record bytes exceeds the maximum of {self._max_request_bytes}",
            )

    def submit(self, request: broker_pb2.ProduceRequest) -> Awaitable[broker_pb2.ProduceResponse]:
        """Check ``request`` (raising ``MeridianError``) and start its appends now (a
        transaction's first batch of a partition: once verified)."""
        self.check_request(request)
        if request.transactional_id and self.verify is not None:
            unverified = self._unverified(request)
            if unverified:
                return asyncio.ensure_future(self._verified(request, unverified))
        return self._submit_checked(request)

    def _submit_checked(
        self,
        request: broker_pb2.ProduceRequest,
        refused: dict[TopicPartitionKey, MeridianError] | None = None,
    ) -> Awaitable[broker_pb2.ProduceResponse]:
        jobs = [self._start(item, request.acks, refused) for item in request.partitions]
        if request.acks == 0:
            for job in jobs:
                if isinstance(job, asyncio.Future):
                    self._keep(job)
            results = [
                r if isinstance(r, broker_pb2.PartitionProduceResult) else _accepted(i)
                for r, i in zip(jobs, request.partitions, strict=True)
            ]
            done: asyncio.Future[broker_pb2.ProduceResponse] = (
                asyncio.get_running_loop().create_future()
            )
            done.set_result(_response(request, results))
            return done
        return asyncio.ensure_future(self._finish(request, jobs))

    async def produce(self, request: broker_pb2.ProduceRequest) -> broker_pb2.ProduceResponse:
        return await self.submit(request)

    def _unverified(self, request: broker_pb2.ProduceRequest) -> list[_VerifyKey]:
        """The (topic, partition, producer id, epoch) of the request's partitions whose
        first batch would open a transaction not verified yet (or being verified)."""
        found = []
        for item in request.partitions:
            part = self.registry.get(item.topic, item.partition)
            if part is None:
                continue
            try:
                header = read_header(item.records)
            except CorruptBatchError:
                continue  # the log's validation answers it
            if not header.is_transactional or header.producer_id < 0:
                continue
            key = (item.topic, item.partition, header.producer_id, header.producer_epoch)
            if key in self._verifying or not part.producers.in_transaction(*key[2:]):
                found.append(key)
        return found

    async def _verified(
        self, request: broker_pb2.ProduceRequest, keys: list[_VerifyKey]
    ) -> broker_pb2.ProduceResponse:
        """Ask the coordinator about ``keys`` (joining verifications in progress), then
        start the appends: requests waiting on one verification start in arrival order."""
        loop = asyncio.get_running_loop()
        waits = []
        for key in keys:
            verification = self._verifying.get(key)
            if verification is None:
                verification = self._verifying[key] = _Verification()
                self._keep(asyncio.ensure_future(self._ask(request.transactional_id, key)))
            verification.waiters += 1
            before, verification.last = verification.last, loop.create_future()
            waits.append((key, verification, before, verification.last))
        refused: dict[TopicPartitionKey, MeridianError] = {}
        try:
            for key, verification, _, _ in waits:
                error = await asyncio.shield(verification.answer)
                if error is not None:
                    refused[(key[0], key[1])] = error
            # Awaiting an answer already given does not yield: without this a request
            # that joined late could start before earlier ones still waking up.
            for _, _, before, _ in waits:
                if before is not None:
                    await asyncio.shield(before)
            started = self._submit_checked(request, refused)
        finally:
            for key, verification, _, mine in waits:
                if not mine.done():
                    mine.set_result(None)
                verification.waiters -= 1
                if not verification.waiters and self._verifying.get(key) is verification:
                    del self._verifying[key]
        return await started

    async def _ask(self, transactional_id: str, key: _VerifyKey) -> None:
        topic, partition, producer_id, epoch = key
        verification = self._verifying[key]
        assert self.verify is not None
        part = self.registry.get(topic, partition)
        # Before asking: a marker landing before the answer drops it (``producers.py``).
        token = part.producers.verifying(producer_id, epoch) if part is not None else None
        try:
            answers = await self.verify(transactional_id, producer_id, epoch, [(topic, partition)])
            error = answers.get((topic, partition))
        except Exception as exc:  # the coordinator's failure is the partition's answer
            error = to_error(exc)
        if (
            error is None
            and part is not None
            and not part.producers.verified(producer_id, epoch, token)
        ):
            error = MeridianError(
                ErrorCode.INVALID_TXN_STATE,
                f"{topic}-{partition}: the transaction of producer {producer_id} epoch "
                f"{epoch} ended while it was being verified",
            )
        verification.answer.set_result(error)

    def _start(
        self,
        item: broker_pb2.PartitionRecords,
        acks: int,
        unverified: dict[TopicPartitionKey, MeridianError] | None = None,
    ) -> asyncio.Future[AppendInfo] | broker_pb2.PartitionProduceResult:
        if unverified and (item.topic, item.partition) in unverified:
            return _failed(item, unverified[(item.topic, item.partition)])
        part = self.registry.get(item.topic, item.partition)
        lanes = self._lanes if SEPARATOR in item.topic else None
        lane_refusal = lanes.produce_refusal(item.topic, hosted=part is not None) if lanes else None
        if lane_refusal is not None:
            return _failed(item, lane_refusal)
        if part is None:
            return _failed(
                item,
                MeridianError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"{item.topic}-{item.partition} is not hosted by this broker",
                ),
            )
        if self._delay is not None and is_timer_topic(item.topic):
            timer_refusal = self._delay.timer_produce_refusal(item)
            if timer_refusal is not None:
                return _failed(item, timer_refusal)
        elif is_internal(item.topic):
            return _failed(
                item,
                MeridianError(
                    ErrorCode.INVALID_TOPIC, f"{item.topic} is internal: clients cannot write to it"
                ),
            )
        refused = _check_replica(part, acks)
        if refused is not None:
            return _failed(item, refused)
        refusal = self._refuse(item.topic) if self._refuse is not None else None
        if refusal is not None:
            return _failed(item, refusal)
        future = part.submit(item.records)
        if lanes is not None:
            lanes.appended(item.topic)
        size = len(item.records)
        future.add_done_callback(lambda f: self._appended(part, f, size))
        if acks == 0 and self._delay is not None:
            future.add_done_callback(lambda f: self._divert_unanswered(part, item, f))
        return future

    def _appended(self, part: Partition, future: asyncio.Future[AppendInfo], size: int) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        if self._on_bytes_in:
            self._on_bytes_in(part.topic, size)
        if self._on_records_in:
            self._on_records_in(part.topic, future.result().record_count)

    def _divert_unanswered(
        self, part: Partition, item: broker_pb2.PartitionRecords, future: asyncio.Future[Any]
    ) -> None:
        """An acks=0 request with records due later: divert it all the same."""
        if not future.cancelled() and isinstance(future.exception(), MarkedRecordsError):
            self._keep(asyncio.ensure_future(self._diverted(part, item)))

    def _keep(self, future: asyncio.Future[Any]) -> None:
        self._background.add(future)
        future.add_done_callback(self._background.discard)

    async def drain(self) -> None:
        """Wait for the appends of acks=0 requests still running."""
        if self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def _finish(
        self, request: broker_pb2.ProduceRequest, jobs: list[Any]
    ) -> broker_pb2.ProduceResponse:
        deadline = time.monotonic() + (request.timeout_ms or DEFAULT_TIMEOUT_MS) / 1000
        results = []
        for item, job in zip(request.partitions, jobs, strict=True):
            if isinstance(job, broker_pb2.PartitionProduceResult):
                results.append(job)
                continue
            part = self.registry.get(item.topic, item.partition)
            try:
                info = await job
            except DuplicateBatch as dup:
                results.append(await self._duplicate(item, dup, deadline, request.acks))
                continue
            except MarkedRecordsError:
                outcome = await self._diverted(part, item)
                if isinstance(outcome, broker_pb2.PartitionProduceResult):
                    results.append(outcome)
                    continue
                info = outcome
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a typed result, never a lost request
                results.append(_failed(item, to_error(exc)))
                continue
            if part is not None and request.acks == ACKS_ALL:
                # The epoch the append was stamped with, not the current one: the
                # offsets may have been truncated and reused under a later epoch.
                error = await wait_for_isr(part, info.last_offset, info.leader_epoch, deadline)
                if error is not None:
                    results.append(_failed(item, error))
                    continue
            start = part.log.log_start_offset if part is not None else -1
            results.append(_result(item, info.base_offset, info.log_append_time, start))
        return _response(request, results)

    async def _diverted(
        self, part: Partition | None, item: broker_pb2.PartitionRecords
    ) -> AppendInfo | broker_pb2.PartitionProduceResult:
        """A request holding records due later, scheduled and appended (``delay``); in
        a transactional batch refused (``_in_transaction``)."""
        refusal = _in_transaction(item)
        if refusal is not None:
            return _failed(item, refusal)
        if self._delay is None or part is None:
            return _failed(item, MeridianError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "deleted"))
        try:
            return await self._delay.divert(part, item)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a typed result, never a lost request
            return _failed(item, to_error(exc))

    async def _duplicate(
        self, item: broker_pb2.PartitionRecords, dup: DuplicateBatch, deadline: float, acks: int
    ) -> broker_pb2.PartitionProduceResult:
        """The original's offset, once readers can see it (``always`` logs sync first;
        with acks=all, once it is below the high watermark)."""
        part = self.registry.get(item.topic, item.partition)
        if part is None:
            return _failed(item, MeridianError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "deleted"))
        if acks == ACKS_ALL or part.log.config.durability is Durability.ALWAYS:
            epoch = part.leader_epoch_to_stamp()
            error = await wait_for_isr(
                part, dup.last_offset, epoch, deadline, enforce_min_isr=acks == ACKS_ALL
            )
            if error is not None:
                return _failed(item, error)
        result = _result(item, dup.base_offset, -1, part.log.log_start_offset)
        result.duplicate = True
        return result


def _in_transaction(item: broker_pb2.PartitionRecords) -> MeridianError | None:
    """Records due later in a transactional batch: refused whole, nothing written. The
    timer log that would keep them is outside the transaction, so they would be
    delivered whether it commits or aborts."""
    try:
        transactional = read_header(item.records).is_transactional
    except CorruptBatchError:
        return None  # the log validated it: not reached
    if not transactional:
        return None
    return MeridianError(
        ErrorCode.INVALID_RECORD,
        f"{item.topic}-{item.partition}: records with {DELIVER_AT} cannot be sent in a "
        "transaction (their delivery would not follow its commit or abort): send them "
        "outside it",
    )


class _Verification:
    """A partition's verification in progress and the requests waiting for it."""

    def __init__(self) -> None:
        self.answer: asyncio.Future[MeridianError | None] = (
            asyncio.get_running_loop().create_future()
        )
        self.waiters = 0
        # Set once the request that joined last has started its appends (or given up).
        self.last: asyncio.Future[None] | None = None


def _check_replica(part: Partition, acks: int) -> MeridianError | None:
    """Why ``part`` refuses a client's append now (None: it may append)."""
    state = part.replica
    if state is None:
        return None
    if not state.is_leader:
        code = (
            ErrorCode.LEADER_NOT_AVAILABLE
            if state.leader_id < 0
            else ErrorCode.NOT_LEADER_OR_FOLLOWER
        )
        return MeridianError(code, f"{part.topic}-{part.index} is led by broker {state.leader_id}")
    if acks == ACKS_ALL and state.committed_isr_size() < state.min_insync_replicas:
        return MeridianError(
            ErrorCode.NOT_ENOUGH_REPLICAS,
            f"{part.topic}-{part.index}: {state.committed_isr_size()} in-sync replicas "
            f"{sorted(set(state.isr))}, {state.min_insync_replicas} required",
        )
    return None


async def wait_for_isr(
    part: Partition,
    last_offset: int,
    epoch: int | None,
    deadline: float,
    *,
    enforce_min_isr: bool = True,
) -> MeridianError | None:
    """Wait until ``last_offset`` is below the high watermark while the committed ISR
    holds at least ``min_insync_replicas`` (None), or say why not: REQUEST_TIMED_OUT at
    ``deadline`` (monotonic), NOT_LEADER_OR_FOLLOWER when the leadership changed
    (``epoch``, the one the append was stamped with, is not the current leader epoch:
    the offset may since hold another leader's record, even below the HW),
    NOT_ENOUGH_REPLICAS_AFTER_APPEND when the committed ISR is below the minimum --
    whether or not the HW passed the offset (the shrink itself moves the HW). Without
    ``enforce_min_isr`` (an acks=1 duplicate waiting for its original to be durable)
    only the HW and the leadership count."""
    while True:
        state = part.replica
        moved = state is not None and state.leader_epoch != epoch
        # Kafka's checkEnoughReplicasReachOffset: the ISR size is checked even once the
        # HW passed the offset, since a committed shrink moves the HW at once -- "HW
        # passed" alone may mean "only the leader has it".
        short = enforce_min_isr and _below_min_isr(state)
        if not moved and not short and part.log.high_watermark > last_offset:
            return None
        if moved or part.deleted or (state is not None and not state.is_leader):
            return MeridianError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"{part.topic}-{part.index}: leadership changed before the ISR had the append",
            )
        if short and state is not None:
            return MeridianError(
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                f"{part.topic}-{part.index}: the ISR shrank to {sorted(set(state.isr))} "
                f"(min {state.min_insync_replicas}) before enough replicas had offset "
                f"{last_offset}",
            )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return MeridianError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{part.topic}-{part.index}: offset {last_offset} is not replicated yet",
            )
        await asyncio.wait([part.changed()], timeout=remaining)


def _below_min_isr(state: ReplicaState | None) -> bool:
    return state is not None and state.committed_isr_size() < state.min_insync_replicas


def _result(
    item: broker_pb2.PartitionRecords, base_offset: int, append_time: int, log_start: int
) -> broker_pb2.PartitionProduceResult:
    return broker_pb2.PartitionProduceResult(
        topic=item.topic,
        partition=item.partition,
        base_offset=base_offset,
        log_append_time_ms=append_time,
        log_start_offset=log_start,
    )


def _accepted(item: broker_pb2.PartitionRecords) -> broker_pb2.PartitionProduceResult:
    return _result(item, -1, -1, -1)


def _failed(
    item: broker_pb2.PartitionRecords, error: MeridianError
) -> broker_pb2.PartitionProduceResult:
    return broker_pb2.PartitionProduceResult(
        topic=item.topic,
        partition=item.partition,
        error=error.code,  # type: ignore[arg-type]
        error_message=error.message,
        base_offset=-1,
        log_append_time_ms=-1,
        log_start_offset=-1,
    )


def _response(
    request: broker_pb2.ProduceRequest, results: list[broker_pb2.PartitionProduceResult]
) -> broker_pb2.ProduceResponse:
    return broker_pb2.ProduceResponse(correlation_id=request.correlation_id, results=results)

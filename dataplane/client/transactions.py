"""A transactional producer's transactions (Kafka's ``TransactionManager``).

```python
producer = Producer(bootstrap, transactional_id="acme.orders-enricher")
producer.init_transactions()             # fences every older producer of the id
consumer = Consumer(bootstrap, group_id="acme.enrich", isolation_level="read_committed",
                    enable_auto_commit=False)
consumer.subscribe(["acme.orders"])
while True:
    records = consumer.poll(timeout_ms=1000)
    if not records:
        continue
    producer.begin_transaction()
    for record in records:
        producer.send("acme.enriched", enrich(record.value), key=record.key)
    producer.send_offsets_to_transaction(next_offsets(records), consumer.group_metadata())
    producer.commit_transaction()        # every record and the offsets, or none
```

States: ``init_transactions`` (once) makes the producer READY: the coordinator of the
transactional id (``Transactions.FindCoordinator``) gives it its producer id and a new
epoch, aborting whatever transaction an older producer of the id left open and fencing
that producer. ``begin_transaction`` opens a transaction locally; the first batch of
each partition makes the sender add it (``AddPartitions``, for every new partition of a
pass at once) before it is sent. ``send_offsets_to_transaction`` adds the group's
offsets partition (``AddOffsets``) and commits the offsets to the group's coordinator
inside the transaction (``TxnOffsetCommit``, fenced by the consumer's generation).
``commit_transaction`` flushes, then ends the transaction (``EndTxn``): every record and
offset of it becomes visible to read_committed consumers at once, or — after a failure —
raises, and the transaction must be aborted. ``abort_transaction`` fails what was not
sent, waits for what was, and ends it aborted; when some batch's outcome was unknown or
its sequence was given out and dropped, the producer then takes a new epoch (its
sequences restart).

Errors: a retriable one (the coordinator moving or loading, ``CONCURRENT_TRANSACTIONS``)
is retried until ``max_block_ms``; ``PRODUCER_FENCED`` (a newer producer of the id, the
transaction's timeout, an operator's abort), ``INVALID_PRODUCER_ID_MAPPING``,
``TRANSACTIONAL_ID_AUTHORIZATION_FAILED`` and ``INVALID_PRODUCER_EPOCH`` are fatal: every
later call raises them; close the producer and make a new one. A call the state does not
allow (``send`` outside a transaction, ``commit_transaction`` after a failure) raises
``INVALID_TXN_STATE``.

Thread safety: the application calls the transaction methods from one thread; the
sender thread calls ``addable``, ``add`` and ``failed``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dataplane._gen.meridian.v1 import common_pb2, txn_pb2, txn_pb2_grpc
from dataplane.client.connection import Connection
from dataplane.client.coordinator import REQUEST_TIMEOUT_S, CoordinatorLink
from dataplane.client.metadata import ClusterMetadata
from dataplane.client.types import ConsumerGroupMetadata, TopicPartition
from dataplane.errors import ErrorCode, MeridianError

if TYPE_CHECKING:
    from dataplane.client.accumulator import RecordAccumulator
    from dataplane.client.sender import Sender

log = logging.getLogger(__name__)

FATAL = frozenset(
    {
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_TRANSACTIONAL_ID,
        ErrorCode.INVALID_TRANSACTION_TIMEOUT,
    }
)
_RETRIED = frozenset({ErrorCode.CONCURRENT_TRANSACTIONS})
_QUIET_POLL_S = 0.01
RETRY_BACKOFF_S = 0.1


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


def _transactions(conn: Connection) -> txn_pb2_grpc.TransactionsStub:
    return txn_pb2_grpc.TransactionsStub(conn.channel)


def _find_txn_coordinator(conn: Connection, transactional_id: str) -> str:
    request = txn_pb2.FindTxnCoordinatorRequest(transactional_id=transactional_id)
    response = _transactions(conn).FindCoordinator(request, timeout=REQUEST_TIMEOUT_S)
    return f"{response.coordinator.host}:{response.coordinator.port}"


def coordinator_link(
    metadata: ClusterMetadata, key: str, *, retry: frozenset[int] = _RETRIED
) -> CoordinatorLink:
    """A link to the transaction coordinator of ``key`` (a transactional id or a
    producer group), retrying what is retriable (and ``retry``: by default
    ``CONCURRENT_TRANSACTIONS``)."""
    return CoordinatorLink(
        metadata, key, service=_transactions, find=_find_txn_coordinator, retry=retry
    )


def group_link(metadata: ClusterMetadata, group_id: str) -> CoordinatorLink:
    """A link to a group's coordinator for its ``Transactions`` calls (TxnOffsetCommit)."""
    return CoordinatorLink(metadata, group_id, service=_transactions, retry=_RETRIED)


class TransactionManager:
    """The transactions of one producer (module docstring)."""

    def __init__(
        self,
        transactional_id: str,
        timeout_ms: int,
        metadata: ClusterMetadata,
        sender: Sender,
        accumulator: RecordAccumulator,
        *,
        max_block_s: float,
    ) -> None:
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self._metadata = metadata
        self._sender = sender
        self._acc = accumulator
        self._max_block_s = max_block_s
        self._link = coordinator_link(metadata, transactional_id)
        self._lock = threading.Lock()
        self._adds_done = threading.Condition(self._lock)
        self._adding = False  # an AddPartitions call is in flight
        self.state = TxnState.UNINITIALIZED
        self.producer_id = -1
        self.epoch = -1
        self._added: set[TopicPartition] = set()
        self._to_add: set[TopicPartition] = set()
        self._offsets_added = False
        # an AddPartitions or AddOffsets was sent: it may have landed though its answer
        # did not, so the coordinator may hold the transaction open
        self._add_sent = False
        self._error: MeridianError | None = None  # why the transaction is abortable / fatal
        self._bump = False
        sender.txn = self
        accumulator.on_open = self._opened

    # -- the application's calls -------------------------------------------------------
    def init_transactions(self, timeout_s: float | None = None) -> None:
        self._expect(TxnState.UNINITIALIZED)
        self._init(timeout_s, bump=False)
        self._set(TxnState.READY)

    def begin_transaction(self) -> None:
        self._expect(TxnState.READY)
        with self._lock:
            self._added.clear()
            self._to_add.clear()
            self._offsets_added = False
            self._add_sent = False
            self._error = None
            self.state = TxnState.IN_TRANSACTION

    def check_sending(self) -> None:
        """``send`` is allowed only inside a transaction (raises otherwise)."""
        state = self.state
        if state is not TxnState.IN_TRANSACTION:
            if state is TxnState.FATAL_ERROR and self._error is not None:
                raise self._error
            raise MeridianError(
                ErrorCode.INVALID_TXN_STATE,
                f"{self.transactional_id!r}: send needs an open transaction "
                f"(begin_transaction); the producer is {state.value}",
            )

    def send_offsets(
        self,
        offsets: Mapping[TopicPartition, int],
        group: ConsumerGroupMetadata,
        timeout_s: float | None = None,
    ) -> None:
        """The group's offsets committed inside the transaction (module docstring)."""
        self._expect(TxnState.IN_TRANSACTION)
        if not offsets:
            return
        if not self._offsets_added:
            request = txn_pb2.AddOffsetsToTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=self.producer_id,
                producer_epoch=self.epoch,
                group_id=group.group_id,
            )
            self._add_sent = True
            self._coordinator_call("AddOffsets", request, timeout_s)
            self._offsets_added = True
        commit = txn_pb2.TxnOffsetCommitRequest(
            transactional_id=self.transactional_id,
            group_id=group.group_id,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            generation_id=group.generation_id,
            member_id=group.member_id,
            group_instance_id=group.group_instance_id,
            offsets=[
                txn_pb2.TxnOffset(
                    topic=tp.topic, partition=tp.partition, offset=offset, leader_epoch=-1
                )
                for tp, offset in offsets.items()
            ],
        )
        response = self._call(
            group_link(self._metadata, group.group_id), "TxnOffsetCommit", commit, timeout_s
        )
        failed = [r for r in response.results if r.error]
        if failed:
            first = failed[0]
            error = MeridianError(
                first.error, f"{first.topic}-{first.partition}: {first.error_message}"
            )
            self._abortable(error)
            raise error

    def commit_transaction(self, flush: Any, timeout_s: float | None = None) -> None:
        """``flush`` (the producer's) then EndTxn(commit); raises the transaction's
        failure, after which only ``abort_transaction`` is allowed."""
        self._expect(TxnState.IN_TRANSACTION)
        self._set(TxnState.COMMITTING)
        try:
            flush(timeout_s)
        except MeridianError as error:
            self._abortable(error)
            raise
        failure = self._error
        if failure is not None:
            self._set(TxnState.ABORTABLE_ERROR)
            raise MeridianError(
                failure.code, f"the transaction cannot commit: {failure.message} (abort it)"
            )
        try:
            self._end(commit=True, timeout_s=timeout_s)
        except MeridianError as error:
            if error.code not in FATAL:
                self._abortable(error)
            raise
        self._set(TxnState.READY)

    def abort_transaction(self, timeout_s: float | None = None) -> None:
        """Drop what was not sent, wait for what was, then EndTxn(abort) (module
        docstring)."""
        self._expect(TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.COMMITTING)
        self._set(TxnState.ABORTING)
        aborted = MeridianError(ErrorCode.INVALID_TXN_STATE, "the transaction was aborted")
        if self._sender.call_on_loop(lambda: self._sender.drop_unsent(aborted)):
            self._bump = True
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else self._max_block_s)
        while self._sender.call_on_loop(self._sender.in_flight):
            if time.monotonic() > deadline:
                raise MeridianError(ErrorCode.REQUEST_TIMED_OUT, "batches still in flight")
            time.sleep(_QUIET_POLL_S)
        self._end(commit=False, timeout_s=timeout_s)
        if self._bump:
            self._init(timeout_s, bump=True)
            self._bump = False
        self._set(TxnState.READY)

    # -- the sender's calls ------------------------------------------------------------
    def _opened(self, tp: TopicPartition) -> None:
        """A batch was opened for ``tp`` (by ``send``, under the accumulator's lock): a
        partition new to the transaction is added at once, while its batch fills, not
        once the batch is ready to go."""
        with self._lock:
            if self.state is not TxnState.IN_TRANSACTION or tp in self._added or tp in self._to_add:
                return
            self._to_add.add(tp)
        self._acc.wakeup()

    def addable(self, tp: TopicPartition) -> bool:
        with self._lock:
            if tp in self._added:
                return True
            if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
                self._to_add.add(tp)
            return False

    async def add(self) -> None:
        with self._lock:
            wanted, self._to_add = sorted(self._to_add - self._added), set()
            if not wanted or self.state not in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
                return
            self._adding = True
            self._add_sent = True
        try:
            await self._add(wanted)
        finally:
            with self._adds_done:
                self._adding = False
                self._adds_done.notify_all()

    async def _add(self, wanted: list[TopicPartition]) -> None:
        request = txn_pb2.AddPartitionsToTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            partitions=[common_pb2.TopicPartition(topic=t, partition=p) for t, p in wanted],
        )
        try:
            response = await asyncio.to_thread(
                self._coordinator_call, "AddPartitions", request, None
            )
        except MeridianError as error:
            self._refuse(wanted, error)
            return
        if any(r.error and MeridianError(r.error).retriable for r in response.results):
            await asyncio.sleep(RETRY_BACKOFF_S)  # before the sender asks again
        refused: list[tuple[TopicPartition, MeridianError]] = []
        with self._lock:
            for result in response.results:
                tp = TopicPartition(result.topic, result.partition)
                if result.error:
                    refused.append((tp, MeridianError(result.error, result.error_message)))
                else:
                    self._added.add(tp)
        for tp, refusal in refused:
            self._refuse([tp], refusal)

    def _refuse(self, partitions: list[TopicPartition], error: MeridianError) -> None:
        """Partitions that could not join the transaction: asked again at a later pass
        when retriable (a topic created a moment ago); else the transaction can only be
        aborted, and its batches not sent fail (``refusal``); a fatal error ends the
        producer."""
        if error.retriable:
            with self._lock:
                self._to_add.update(partitions)
            return
        if error.code in FATAL:
            self._fatal(error)
            self._sender.fail_all(error)
            return
        where = ", ".join(f"{tp.topic}/{tp.partition}" for tp in partitions)
        self.failed(
            MeridianError(error.code, f"{where} could not join the transaction: {error.message}")
        )

    def refusal(self) -> MeridianError | None:
        with self._lock:
            if self.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR):
                return self._error
            return None

    def failed(self, error: MeridianError) -> None:
        if error.code in FATAL:
            self._fatal(error)
            return
        self._abortable(error)
        self._bump = True

    # -- internals ---------------------------------------------------------------------
    def _init(self, timeout_s: float | None, *, bump: bool) -> None:
        request = txn_pb2.TxnInitProducerIdRequest(
            transactional_id=self.transactional_id,
            transaction_timeout_ms=self.timeout_ms,
            producer_id=self.producer_id if bump else -1,
            producer_epoch=self.epoch if bump else -1,
        )
        response = self._coordinator_call("InitProducerId", request, timeout_s)
        self.producer_id, self.epoch = response.producer_id, response.producer_epoch
        self._sender.set_identity(self.producer_id, self.epoch)

    def _end(self, *, commit: bool, timeout_s: float | None) -> None:
        # An AddPartitions still in flight must land before EndTxn: landing after it, it
        # would open the next transaction at the coordinator behind the producer's back.
        with self._adds_done:
            if not self._adds_done.wait_for(
                lambda: not self._adding, timeout_s if timeout_s is not None else self._max_block_s
            ):
                raise MeridianError(
                    ErrorCode.REQUEST_TIMED_OUT, "partitions still being added to the transaction"
                )
            confirmed = bool(self._added) or self._offsets_added
            sent = self._add_sent
        if not sent:
            return  # nothing was asked of the coordinator: nothing to end there
        request = txn_pb2.EndTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            commit=commit,
        )
        try:
            self._coordinator_call("EndTxn", request, timeout_s)
        except MeridianError as error:
            # An add whose answer was lost may have opened the transaction there (so
            # EndTxn goes out), or not: then the coordinator has nothing to end.
            if error.code != ErrorCode.INVALID_TXN_STATE or confirmed:
                raise

    def _coordinator_call(self, rpc: str, request: Any, timeout_s: float | None) -> Any:
        return self._call(self._link, rpc, request, timeout_s)

    def _call(self, link: CoordinatorLink, rpc: str, request: Any, timeout_s: float | None) -> Any:
        try:
            return link.call(rpc, request, api_timeout_s=timeout_s or self._max_block_s)
        except MeridianError as error:
            if error.code in FATAL:
                self._fatal(error)
            raise

    def _expect(self, *states: TxnState) -> None:
        state = self.state
        if state in states:
            return
        if state is TxnState.FATAL_ERROR and self._error is not None:
            raise self._error
        wanted = " or ".join(s.value for s in states)
        raise MeridianError(
            ErrorCode.INVALID_TXN_STATE,
            f"{self.transactional_id!r} is {state.value}, not {wanted}"
            + (f" ({self._error.message})" if self._error is not None else ""),
        )

    def _set(self, state: TxnState) -> None:
        with self._lock:
            if self.state is not TxnState.FATAL_ERROR:
                self.state = state

    def _abortable(self, error: MeridianError) -> None:
        with self._lock:
            if self.state is TxnState.FATAL_ERROR:
                return
            self._error = self._error or error
            if self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
                self.state = TxnState.ABORTABLE_ERROR

    def _fatal(self, error: MeridianError) -> None:
        with self._lock:
            if self.state is not TxnState.FATAL_ERROR:
                log.warning("transactional producer %r: %s", self.transactional_id, error)
            self.state = TxnState.FATAL_ERROR
            self._error = error

# ruff: noqa: N802 - method names are the RPC names of the protos
"""The ``Transactions`` and ``TxnMarkers`` gRPC services: thin adapters over the
transaction coordinator, its half messages, the group coordinator's transactional
commits and the marker writer.

Every call records its latency and outcome in the broker's metrics (as the other
servicers do) and turns a request-level ``MeridianError`` into an aborted call; errors
of one partition travel in its result. Authorization (``Authorizer``): transactional ids
and producer groups are ``<tenant>.<id>`` names decided as groups are, by name alone
(``transactional_id_error``): PRODUCE to use one, DESCRIBE to see it, ADMIN to abort
another producer's transaction; the topics of AddPartitions and BeginHalf need PRODUCE,
those of TxnOffsetCommit CONSUME, refused per partition with
``TOPIC_AUTHORIZATION_FAILED``; DescribeProducers needs DESCRIBE on its topic and
AbortProducer ADMIN (a tenant admin), decided as for any topic. A list shows only what
the caller may describe. ``TxnMarkers`` is internal to the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from dataplane._gen.meridian.v1 import common_pb2, txn_pb2, txn_pb2_grpc
from dataplane.broker.auth import ALLOW_ALL, Authorizer
from dataplane.broker.auth.authorizer import ADMIN, CONSUME, DESCRIBE, PRODUCE
from dataplane.broker.errors import abort, to_error
from dataplane.broker.groups.coordinator import GroupCoordinator, OffsetCommit, check_group_id
from dataplane.broker.metrics import BrokerMetrics
from dataplane.broker.services import Readiness, _Instrumented
from dataplane.broker.txn.coordinator import TransactionCoordinator, check_transactional_id
from dataplane.broker.txn.halves import HalfMessages, half_message
from dataplane.broker.txn.markers import MarkerWriter
from dataplane.broker.txn.state import TopicPartitionKey, TxnMetadata, TxnState
from dataplane.errors import ErrorCode, MeridianError

log = logging.getLogger(__name__)

Locate = Callable[[int], common_pb2.BrokerInfo | None]  # txn state partition -> its owner


def _results(
    outcomes: dict[TopicPartitionKey, MeridianError | None],
) -> list[txn_pb2.TxnPartitionResult]:
    return [
        txn_pb2.TxnPartitionResult(
            topic=topic,
            partition=partition,
            error=error.code if error else ErrorCode.NONE,  # type: ignore[arg-type]
            error_message=error.message if error else "",
        )
        for (topic, partition), error in outcomes.items()
    ]


def description(meta: TxnMetadata, coordinator_id: int) -> txn_pb2.TransactionDescription:
    return txn_pb2.TransactionDescription(
        transactional_id=meta.transactional_id,
        state=int(meta.state),  # type: ignore[arg-type]
        producer_id=meta.producer_id,
        producer_epoch=meta.producer_epoch,
        transaction_timeout_ms=meta.timeout_ms,
        transaction_start_ms=meta.start_ms if meta.open or meta.state.preparing else -1,
        last_update_ms=meta.last_update_ms,
        partitions=[
            common_pb2.TopicPartition(topic=t, partition=p) for t, p in sorted(meta.partitions)
        ],
        coordinator_id=coordinator_id,
    )


class TransactionsServicer(txn_pb2_grpc.TransactionsServicer, _Instrumented):
    def __init__(
        self,
        coordinator: TransactionCoordinator,
        halves: HalfMessages,
        groups: GroupCoordinator,
        locate: Locate,
        metrics: BrokerMetrics,
        readiness: Readiness,
        authorizer: Authorizer = ALLOW_ALL,
        writer: MarkerWriter | None = None,
    ) -> None:
        """``writer``: this broker's marker writer, for the partition-leader calls
        (DescribeProducers, AbortProducer)."""
        super().__init__(metrics, readiness)
        self.coordinator = coordinator
        self.halves = halves
        self.groups = groups
        self.locate = locate
        self.authz = authorizer
        self.writer = writer

    def _check(self, name: str, operation: str) -> None:
        error = self.authz.transactional_id_error(name, operation)
        if error is not None:
            raise error

    # -- Kafka's transactions ----------------------------------------------------------
    async def FindCoordinator(
        self, request: txn_pb2.FindTxnCoordinatorRequest, context: Any
    ) -> Any:
        return await self._call("FindTxnCoordinator", context, self._find(request))

    async def _find(
        self, request: txn_pb2.FindTxnCoordinatorRequest
    ) -> txn_pb2.FindTxnCoordinatorResponse:
        self._check(request.transactional_id, DESCRIBE)
        check_transactional_id(request.transactional_id)
        partition = self.coordinator.partition_for(request.transactional_id)
        broker = self.locate(partition)
        if broker is None:
            raise MeridianError(
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                f"no broker owns __transaction_state partition {partition}",
            )
        return txn_pb2.FindTxnCoordinatorResponse(coordinator=broker)

    async def InitProducerId(self, request: txn_pb2.TxnInitProducerIdRequest, context: Any) -> Any:
        return await self._call("TxnInitProducerId", context, self._init(request))

    async def _init(
        self, request: txn_pb2.TxnInitProducerIdRequest
    ) -> txn_pb2.TxnInitProducerIdResponse:
        self._check(request.transactional_id, PRODUCE)
        self.authz.check_producer()
        try:
            pid, epoch = await self.coordinator.init_producer_id(
                request.transactional_id,
                request.transaction_timeout_ms,
                request.producer_id,
                request.producer_epoch,
            )
        except MeridianError as error:
            return txn_pb2.TxnInitProducerIdResponse(
                error=error.code,  # type: ignore[arg-type]
                error_message=error.message,
                producer_id=-1,
                producer_epoch=-1,
            )
        return txn_pb2.TxnInitProducerIdResponse(producer_id=pid, producer_epoch=epoch)

    async def AddPartitions(self, request: txn_pb2.AddPartitionsToTxnRequest, context: Any) -> Any:
        return await self._call("AddPartitionsToTxn", context, self._add_partitions(request))

    async def _add_partitions(
        self, request: txn_pb2.AddPartitionsToTxnRequest
    ) -> txn_pb2.AddPartitionsToTxnResponse:
        self._check(request.transactional_id, PRODUCE)
        refused: dict[TopicPartitionKey, MeridianError | None] = {}
        wanted: list[TopicPartitionKey] = []
        for tp in request.partitions:
            error = self.authz.topic_error(tp.topic, PRODUCE)
            if error is not None:
                refused[(tp.topic, tp.partition)] = error
            else:
                wanted.append((tp.topic, tp.partition))
        added = (
            await self.coordinator.add_partitions(
                request.transactional_id, request.producer_id, request.producer_epoch, wanted
            )
            if wanted
            else {}
        )
        return txn_pb2.AddPartitionsToTxnResponse(results=_results({**added, **refused}))

    async def AddOffsets(self, request: txn_pb2.AddOffsetsToTxnRequest, context: Any) -> Any:
        return await self._call("AddOffsetsToTxn", context, self._add_offsets(request))

    async def _add_offsets(
        self, request: txn_pb2.AddOffsetsToTxnRequest
    ) -> txn_pb2.AddOffsetsToTxnResponse:
        self._check(request.transactional_id, PRODUCE)
        group_refusal = self.authz.group_error(request.group_id, CONSUME)
        if group_refusal is not None:
            raise group_refusal
        check_group_id(request.group_id)
        await self.coordinator.add_offsets(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            self.groups.partition_for(request.group_id),
        )
        return txn_pb2.AddOffsetsToTxnResponse()

    async def EndTxn(self, request: txn_pb2.EndTxnRequest, context: Any) -> Any:
        return await self._call("EndTxn", context, self._end(request))

    async def _end(self, request: txn_pb2.EndTxnRequest) -> txn_pb2.EndTxnResponse:
        self._check(request.transactional_id, PRODUCE)
        await self.coordinator.end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, request.commit
        )
        return txn_pb2.EndTxnResponse()

    async def TxnOffsetCommit(self, request: txn_pb2.TxnOffsetCommitRequest, context: Any) -> Any:
        return await self._call("TxnOffsetCommit", context, self._txn_commit(request))

    async def _txn_commit(
        self, request: txn_pb2.TxnOffsetCommitRequest
    ) -> txn_pb2.TxnOffsetCommitResponse:
        self._check(request.transactional_id, PRODUCE)
        group_refusal = self.authz.group_error(request.group_id, CONSUME)
        if group_refusal is not None:
            raise group_refusal
        refused: dict[TopicPartitionKey, MeridianError | None] = {}
        commits = []
        for o in request.offsets:
            error = self.authz.topic_error(o.topic, CONSUME)
            if error is not None:
                refused[(o.topic, o.partition)] = error
            else:
                commits.append(
                    OffsetCommit(o.topic, o.partition, o.offset, o.metadata, o.leader_epoch)
                )
        done = (
            await self.groups.txn_offset_commit(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.group_id,
                request.generation_id,
                request.member_id,
                commits,
            )
            if commits
            else {}
        )
        return txn_pb2.TxnOffsetCommitResponse(results=_results({**done, **refused}))

    # -- administration ----------------------------------------------------------------
    async def DescribeTransactions(
        self, request: txn_pb2.DescribeTransactionsRequest, context: Any
    ) -> Any:
        return await self._call("DescribeTransactions", context, self._describe(request))

    async def _describe(
        self, request: txn_pb2.DescribeTransactionsRequest
    ) -> txn_pb2.DescribeTransactionsResponse:
        response = txn_pb2.DescribeTransactionsResponse()
        for transactional_id in request.transactional_ids:
            try:
                self._check(transactional_id, DESCRIBE)
                meta = self.coordinator.describe(transactional_id)
                response.transactions.append(description(meta, self.coordinator.broker_id))
            except MeridianError as error:
                response.transactions.add(
                    transactional_id=transactional_id,
                    error=error.code,
                    error_message=error.message,
                )
        return response

    async def ListTransactions(self, request: txn_pb2.ListTransactionsRequest, context: Any) -> Any:
        return await self._call("ListTransactions", context, self._list(request))

    async def _list(
        self, request: txn_pb2.ListTransactionsRequest
    ) -> txn_pb2.ListTransactionsResponse:
        states = [TxnState(s) for s in request.states]
        found = [
            description(meta, self.coordinator.broker_id)
            for meta in self.coordinator.transactions(states)
            if self.authz.transactional_id_error(meta.transactional_id, DESCRIBE) is None
        ]
        return txn_pb2.ListTransactionsResponse(transactions=found)

    async def AbortTransaction(self, request: txn_pb2.AbortTransactionRequest, context: Any) -> Any:
        return await self._call("AbortTransaction", context, self._abort(request))

    async def _abort(
        self, request: txn_pb2.AbortTransactionRequest
    ) -> txn_pb2.AbortTransactionResponse:
        self._check(request.transactional_id, ADMIN)
        meta = await self.coordinator.abort(request.transactional_id)
        return txn_pb2.AbortTransactionResponse(
            state=int(meta.state),  # type: ignore[arg-type]
            producer_epoch=meta.producer_epoch,
        )

    # -- a partition's producers (at its leader) ------------------------------------------
    async def DescribeProducers(
        self, request: txn_pb2.DescribeProducersRequest, context: Any
    ) -> Any:
        return await self._call("DescribeProducers", context, self._producers(request))

    async def _producers(
        self, request: txn_pb2.DescribeProducersRequest
    ) -> txn_pb2.DescribeProducersResponse:
        self._check_topic(request.topic, DESCRIBE)
        found = self._writer().describe_producers(request.topic, request.partition)
        return txn_pb2.DescribeProducersResponse(producers=found)

    async def AbortProducer(self, request: txn_pb2.AbortProducerRequest, context: Any) -> Any:
        return await self._call("AbortProducer", context, self._abort_producer(request))

    async def _abort_producer(
        self, request: txn_pb2.AbortProducerRequest
    ) -> txn_pb2.AbortProducerResponse:
        self._check_topic(request.topic, ADMIN)
        first = await self._writer().abort_producer(
            request.topic, request.partition, request.producer_id
        )
        return txn_pb2.AbortProducerResponse(txn_first_offset=first)

    def _check_topic(self, topic: str, operation: str) -> None:
        error = self.authz.topic_error(topic, operation)
        if error is not None:
            raise error

    def _writer(self) -> MarkerWriter:
        if self.writer is None:
            raise MeridianError(ErrorCode.BROKER_NOT_AVAILABLE, "no marker writer here")
        return self.writer

    # -- half messages -----------------------------------------------------------------
    async def BeginHalf(self, request: txn_pb2.BeginHalfRequest, context: Any) -> Any:
        return await self._call("BeginHalf", context, self._begin_half(request))

    async def _begin_half(self, request: txn_pb2.BeginHalfRequest) -> txn_pb2.BeginHalfResponse:
        self._check(request.producer_group, PRODUCE)
        topic_refusal = self.authz.topic_error(request.topic, PRODUCE)
        if topic_refusal is not None:
            raise topic_refusal
        default = {txn_pb2.HALF_COMMIT: True, txn_pb2.HALF_ROLLBACK: False}.get(
            request.default_outcome
        )
        meta = await self.halves.begin(
            request.producer_group,
            request.topic,
            request.partition,
            key=request.key or None,
            headers=[(h.key, h.value) for h in request.headers],
            check_interval_ms=request.check_interval_ms,
            max_checks=request.max_checks,
            default_commit=default,
            client_id=request.client_id,
        )
        assert meta.half is not None
        return txn_pb2.BeginHalfResponse(
            half_id=meta.half.half_id,
            transactional_id=meta.transactional_id,
            producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
        )

    async def EndHalf(self, request: txn_pb2.EndHalfRequest, context: Any) -> Any:
        return await self._call("EndHalf", context, self._end_half(request))

    async def _end_half(self, request: txn_pb2.EndHalfRequest) -> txn_pb2.EndHalfResponse:
        self._check(request.producer_group, PRODUCE)
        if request.outcome not in (txn_pb2.HALF_COMMIT, txn_pb2.HALF_ROLLBACK):
            raise MeridianError(
                ErrorCode.INVALID_REQUEST, "a half message ends in HALF_COMMIT or HALF_ROLLBACK"
            )
        commit = request.outcome == txn_pb2.HALF_COMMIT
        if request.by_operator:
            # Recorded as an operator's decision only for a caller that administers the
            # group (a tenant admin, the control plane), never on a producer's say-so.
            self._check(request.producer_group, ADMIN)
        by = "operator" if request.by_operator else "producer"
        meta = await self.halves.end(request.producer_group, request.half_id, commit, by=by)
        return txn_pb2.EndHalfResponse(state=int(meta.state))  # type: ignore[arg-type]

    async def ListHalfMessages(self, request: txn_pb2.ListHalfMessagesRequest, context: Any) -> Any:
        return await self._call("ListHalfMessages", context, self._list_halves(request))

    async def _list_halves(
        self, request: txn_pb2.ListHalfMessagesRequest
    ) -> txn_pb2.ListHalfMessagesResponse:
        if request.producer_group:
            self._check(request.producer_group, DESCRIBE)
        found = [
            half_message(meta)
            for meta in self.halves.list(request.producer_group or None)
            if meta.half is not None
            and self.authz.transactional_id_error(meta.half.group, DESCRIBE) is None
        ]
        return txn_pb2.ListHalfMessagesResponse(half_messages=found)

    async def CheckBack(
        self, request_iterator: AsyncIterator[txn_pb2.CheckBackAnswer], context: Any
    ) -> AsyncIterator[txn_pb2.CheckBackRequest]:
        """The hello names the group; then requests go out as they come due while the
        producer's answers are read alongside."""
        try:
            self.readiness.check()
            hello = await anext(aiter(request_iterator), None)
            if hello is None or not hello.HasField("hello"):
                raise MeridianError(
                    ErrorCode.INVALID_REQUEST, "a CheckBack stream starts with its hello"
                )
            group = hello.hello.producer_group
            self._check(group, PRODUCE)
            check_transactional_id(group)
            self.coordinator.loaded(group)
        except Exception as exc:  # the stream ends with the typed status
            self.metrics.observe("CheckBack", to_error(exc).code_name, 0.0)
            await abort(context, to_error(exc))
        member = self.halves.hub.connect(group, hello.hello.client_id)
        reader = asyncio.ensure_future(self._answers(group, request_iterator))
        getting: asyncio.Future[txn_pb2.CheckBackRequest] | None = None
        try:
            while not reader.done():
                getting = asyncio.ensure_future(member.requests.get())
                done, _ = await asyncio.wait([getting, reader], return_when=asyncio.FIRST_COMPLETED)
                if getting not in done:
                    break
                yield getting.result()
                getting = None
        finally:
            if getting is not None:
                getting.cancel()
            self.halves.hub.disconnect(member)
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await reader

    async def _answers(self, group: str, answers: AsyncIterator[txn_pb2.CheckBackAnswer]) -> None:
        async for answer in answers:
            if answer.half_id:
                await self.halves.answer(group, answer)


class TxnMarkersServicer(txn_pb2_grpc.TxnMarkersServicer, _Instrumented):
    def __init__(
        self,
        writer: MarkerWriter,
        coordinator: TransactionCoordinator,
        metrics: BrokerMetrics,
        readiness: Readiness,
        authorizer: Authorizer = ALLOW_ALL,
    ) -> None:
        super().__init__(metrics, readiness)
        self.writer = writer
        self.coordinator = coordinator
        self.authz = authorizer

    async def WriteTxnMarkers(self, request: txn_pb2.WriteTxnMarkersRequest, context: Any) -> Any:
        return await self._call("WriteTxnMarkers", context, self._write(request))

    async def _write(
        self, request: txn_pb2.WriteTxnMarkersRequest
    ) -> txn_pb2.WriteTxnMarkersResponse:
        self.authz.check_internal("WriteTxnMarkers")
        return await self.writer.write(request)

    async def VerifyTxn(self, request: txn_pb2.VerifyTxnRequest, context: Any) -> Any:
        return await self._call("VerifyTxn", context, self._verify(request))

    async def _verify(self, request: txn_pb2.VerifyTxnRequest) -> txn_pb2.VerifyTxnResponse:
        self.authz.check_internal("VerifyTxn")
        answers = self.coordinator.verify(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            [(tp.topic, tp.partition) for tp in request.partitions],
        )
        return txn_pb2.VerifyTxnResponse(results=_results(answers))

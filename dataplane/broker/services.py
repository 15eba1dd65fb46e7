# ruff: noqa: N802 - method names are the RPC names of the protos
"""The gRPC servicers: thin adapters from the wire to the broker's handlers.

Each method records its latency and outcome in the metrics and turns a request-level
``MeridianError`` into an aborted call (``errors.abort``); per-partition failures are in
the results the handlers build.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Iterable
from typing import Any, TypeVar

import grpc

from dataplane._gen.meridian.v1 import admin_pb2, admin_pb2_grpc, broker_pb2, broker_pb2_grpc
from dataplane.broker.admin import AdminHandler
from dataplane.broker.auth import ALLOW_ALL, Authorizer, guard
from dataplane.broker.cluster import ClusterView
from dataplane.broker.errors import abort, to_error
from dataplane.broker.fetch import FetchHandler, OffsetsHandler
from dataplane.broker.metrics import BrokerMetrics
from dataplane.broker.produce import ProduceHandler
from dataplane.broker.producer_ids import ProducerIdAllocator
from dataplane.errors import ErrorCode, MeridianError

T = TypeVar("T")
_NAMES = {value: name for name, value in ErrorCode.items()}


def first_error(results: Iterable[Any]) -> str:
    """The first per-partition error code name of ``results``, or NONE."""
    for result in results:
        if result.error:
            return _NAMES.get(result.error, "UNKNOWN_SERVER_ERROR")
    return "NONE"


class Readiness:
    """Whether the broker has loaded its logs; calls before that are refused (retriably)."""

    ready = False

    def check(self) -> None:
        if not self.ready:
            raise MeridianError(
                ErrorCode.BROKER_NOT_AVAILABLE, "the broker is starting or stopping"
            )


class _Instrumented:
    def __init__(self, metrics: BrokerMetrics, readiness: Readiness) -> None:
        self.metrics = metrics
        self.readiness = readiness

    async def _call(self, rpc: str, context: grpc.aio.ServicerContext, work: Awaitable[T]) -> T:
        started, outcome = time.perf_counter(), "NONE"
        try:
            self.readiness.check()
            response = await work
            outcome = first_error(getattr(response, "results", ()))
            return response
        except Exception as exc:  # every failure leaves as a typed status
            error = to_error(exc)
            outcome = error.code_name
            await abort(context, error)
        finally:
            if inspect.iscoroutine(work):
                work.close()  # never started when the broker was not ready
            self.metrics.observe(rpc, outcome, time.perf_counter() - started)


class BrokerServicer(broker_pb2_grpc.BrokerServicer, _Instrumented):
    def __init__(
        self,
        produce: ProduceHandler,
        fetch: FetchHandler,
        offsets: OffsetsHandler,
        cluster: ClusterView,
        producer_ids: ProducerIdAllocator,
        metrics: BrokerMetrics,
        readiness: Readiness,
        *,
        max_in_flight: int,
        authorizer: Authorizer = ALLOW_ALL,
    ) -> None:
        super().__init__(metrics, readiness)
        self._authz = authorizer
        self._produce = produce
        self._fetch = fetch
        self._offsets = offsets
        self._cluster = cluster
        self._producer_ids = producer_ids
        self._max_in_flight = max_in_flight

    async def Produce(self, request: broker_pb2.ProduceRequest, context: Any) -> Any:
        work = guard.produce(self._authz, request, self._produce.produce)
        return await self._call("Produce", context, work)

    def start_produce(
        self, request: broker_pb2.ProduceRequest
    ) -> Awaitable[broker_pb2.ProduceResponse]:
        """A ``Produce`` whose appends start now, in call order (the Kafka listener's
        pipelined produce); raises ``MeridianError`` for the request as a whole. Observed
        in the metrics as ``Produce``, like the unary call."""
        started = time.perf_counter()
        try:
            self.readiness.check()
            pending = asyncio.ensure_future(
                guard.submit_produce(self._authz, request, self._produce.submit)
            )
        except Exception as exc:
            error = to_error(exc)
            self.metrics.observe("Produce", error.code_name, time.perf_counter() - started)
            raise error from None

        def observed(done: asyncio.Future[broker_pb2.ProduceResponse]) -> None:
            if done.cancelled():
                outcome = "CANCELLED"
            elif done.exception() is not None:
                outcome = to_error(done.exception()).code_name  # type: ignore[arg-type]
            else:
                outcome = first_error(done.result().results)
            self.metrics.observe("Produce", outcome, time.perf_counter() - started)

        pending.add_done_callback(observed)
        return pending

    async def ProduceStream(
        self, request_iterator: AsyncIterator[broker_pb2.ProduceRequest], context: Any
    ) -> AsyncIterator[broker_pb2.ProduceResponse]:
        """Pipelined: requests are read and their appends started while earlier ones are
        still running; responses leave strictly in request order, one per request."""
        try:
            self.readiness.check()
        except MeridianError as exc:
            await abort(context, exc)
        pending: asyncio.Queue[Any] = asyncio.Queue(maxsize=self._max_in_flight)
        reader = asyncio.create_task(self._read_stream(request_iterator, pending))
        try:
            while (item := await pending.get()) is not None:
                if isinstance(item, MeridianError):
                    self.metrics.observe("ProduceStream", item.code_name, 0.0)
                    await abort(context, item)
                started, response_future = item
                response = await response_future
                self.metrics.observe(
                    "ProduceStream", first_error(response.results), time.perf_counter() - started
                )
                yield response
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    async def _read_stream(
        self, requests: AsyncIterator[broker_pb2.ProduceRequest], pending: asyncio.Queue[Any]
    ) -> None:
        try:
            async for request in requests:
                started = time.perf_counter()
                try:
                    future = guard.submit_produce(self._authz, request, self._produce.submit)
                except MeridianError as exc:
                    await pending.put(exc)
                    return
                await pending.put((started, future))
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            pass  # the client went away; the writer ends with what it has
        except MeridianError as exc:  # the stream's credentials no longer hold
            await pending.put(exc)
            return
        await pending.put(None)

    async def Fetch(self, request: broker_pb2.FetchRequest, context: Any) -> Any:
        work = guard.fetch(self._authz, request, self._fetch.fetch)
        return await self._call("Fetch", context, work)

    async def ListOffsets(self, request: broker_pb2.ListOffsetsRequest, context: Any) -> Any:
        work = guard.list_offsets(self._authz, request, self._offsets.list_offsets)
        return await self._call("ListOffsets", context, work)

    async def Metadata(self, request: broker_pb2.MetadataRequest, context: Any) -> Any:
        work = guard.metadata(self._authz, request, self._cluster.metadata)
        return await self._call("Metadata", context, work)

    async def InitProducerId(self, request: broker_pb2.InitProducerIdRequest, context: Any) -> Any:
        return await self._call("InitProducerId", context, self._init_producer(request))

    async def _init_producer(
        self, request: broker_pb2.InitProducerIdRequest
    ) -> broker_pb2.InitProducerIdResponse:
        self._authz.check_producer()
        loop = asyncio.get_running_loop()
        try:
            pid, epoch = await loop.run_in_executor(
                None, self._producer_ids.init_producer, request.producer_id, request.producer_epoch
            )
        except MeridianError as exc:
            return broker_pb2.InitProducerIdResponse(
                error=exc.code,  # type: ignore[arg-type]
                error_message=exc.message,
                producer_id=-1,
                producer_epoch=-1,
            )
        return broker_pb2.InitProducerIdResponse(producer_id=pid, producer_epoch=epoch)


class AdminServicer(admin_pb2_grpc.AdminServicer, _Instrumented):
    def __init__(
        self,
        admin: AdminHandler,
        metrics: BrokerMetrics,
        readiness: Readiness,
        authorizer: Authorizer = ALLOW_ALL,
    ) -> None:
        super().__init__(metrics, readiness)
        self._admin = admin
        self._authz = authorizer

    async def CreatePartitions(
        self, request: admin_pb2.CreatePartitionsRequest, context: Any
    ) -> Any:
        return await self._call("CreatePartitions", context, self._admin.create(request))

    async def DeletePartitions(
        self, request: admin_pb2.DeletePartitionsRequest, context: Any
    ) -> Any:
        return await self._call("DeletePartitions", context, self._admin.delete(request))

    async def AlterPartitionConfigs(
        self, request: admin_pb2.AlterPartitionConfigsRequest, context: Any
    ) -> Any:
        return await self._call("AlterPartitionConfigs", context, self._admin.alter(request))

    async def DescribeState(self, request: admin_pb2.DescribeStateRequest, context: Any) -> Any:
        return await self._call("DescribeState", context, self._describe(request))

    async def UpdateMetadata(self, request: admin_pb2.UpdateMetadataRequest, context: Any) -> Any:
        return await self._call("UpdateMetadata", context, self._admin.update_metadata(request))

    async def _describe(
        self, request: admin_pb2.DescribeStateRequest
    ) -> admin_pb2.DescribeStateResponse:
        return guard.describe_state(self._authz, request, self._admin.describe)

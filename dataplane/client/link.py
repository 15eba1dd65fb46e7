"""One producer's pipelined ``ProduceStream`` to one broker, on the sender's event loop.

A ``BrokerLink`` owns a ``grpc.aio`` channel and at most one open stream. ``send`` queues
a request for the writer task and records it as in flight; the reader task matches each
response to the oldest request in flight (the broker answers in order) and hands both to
``on_response``. When the stream fails, every request in flight goes to ``on_failure``
with the error, the channel is closed (a new one is opened on the next send, so a
restarted broker is reached without gRPC's reconnect backoff) and the link backs off.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import grpc.aio

from dataplane._gen.meridian.v1 import broker_pb2, broker_pb2_grpc
from dataplane.client.batch import ProducerBatch
from dataplane.client.connection import PLAINTEXT, ChannelSecurity
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc

log = logging.getLogger(__name__)


@dataclass(slots=True)
class InFlight:
    """One request on the wire: its batches by (topic, partition)."""

    correlation_id: int
    batches: dict[tuple[str, int], ProducerBatch]
    sent_at: float = field(default_factory=time.monotonic)


ResponseHandler = Callable[["BrokerLink", InFlight, broker_pb2.ProduceResponse], None]
FailureHandler = Callable[["BrokerLink", InFlight, MeridianError], None]


class BrokerLink:
    def __init__(
        self,
        address: str,
        on_response: ResponseHandler,
        on_failure: FailureHandler,
        security: ChannelSecurity = PLAINTEXT,
    ) -> None:
        self.address = address
        self.security = security
        self._on_response = on_response
        self._on_failure = on_failure
        self._channel: grpc.aio.Channel | None = None
        self._call: grpc.aio.StreamStreamCall | None = None
        self._outbox: asyncio.Queue[broker_pb2.ProduceRequest | None] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._reset_error: MeridianError | None = None
        self.inflight: deque[InFlight] = deque()
        self.ready_at = 0.0  # backoff after a failure, or the broker's throttle
        self.failures = 0  # consecutive stream failures

    @property
    def stub(self) -> broker_pb2_grpc.BrokerStub:
        if self._channel is None:
            self._channel = self.security.aio_channel(self.address)
        return broker_pb2_grpc.BrokerStub(self._channel)

    def free_slots(self, max_in_flight: int, now: float) -> int:
        return 0 if now < self.ready_at else max(0, max_in_flight - len(self.inflight))

    def send(self, request: broker_pb2.ProduceRequest, entry: InFlight) -> None:
        if self._call is None:
            self._open()
        self.inflight.append(entry)
        self._outbox.put_nowait(request)

    def _open(self) -> None:
        call = self.stub.ProduceStream()
        self._call = call
        self._outbox = asyncio.Queue()
        self._reset_error = None
        self._tasks = [
            asyncio.create_task(self._write(call, self._outbox)),
            asyncio.create_task(self._read(call)),
        ]

    async def _write(
        self,
        call: grpc.aio.StreamStreamCall,
        outbox: asyncio.Queue[broker_pb2.ProduceRequest | None],
    ) -> None:
        try:
            while (request := await outbox.get()) is not None:
                await call.write(request)
            await call.done_writing()
        except (grpc.RpcError, asyncio.InvalidStateError, grpc.aio.UsageError):
            call.cancel()  # the reader reports the failure

    async def _read(self, call: grpc.aio.StreamStreamCall) -> None:
        error: MeridianError
        try:
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    error = MeridianError(ErrorCode.BROKER_NOT_AVAILABLE, "the stream ended")
                    break
                if not self.inflight:
                    error = MeridianError(ErrorCode.INVALID_REQUEST, "an unexpected response")
                    break
                self._on_response(self, self.inflight.popleft(), response)
        except grpc.RpcError as exc:
            error = self._reset_error or error_from_rpc(exc)
        except asyncio.CancelledError:
            error = self._reset_error or MeridianError(
                ErrorCode.BROKER_NOT_AVAILABLE, "the stream was closed"
            )
        except Exception as exc:  # a bug in a handler must not leave requests hanging
            log.exception("handling a produce response failed")
            error = MeridianError(ErrorCode.UNKNOWN_SERVER_ERROR, f"client error: {exc!r}")
        self._failed(call, error)

    def _failed(self, call: grpc.aio.StreamStreamCall, error: MeridianError) -> None:
        if call is not self._call:
            return
        self._call = None
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        call.cancel()  # type: ignore[union-attr]  # mypy narrows it by `is` above
        entries, self.inflight = list(self.inflight), deque()
        self._drop_channel()
        for entry in entries:
            self._on_failure(self, entry, error)

    def reset(self, error: MeridianError) -> None:
        """Abandon the stream (a request timed out); its requests fail with ``error``."""
        if self._call is not None:
            self._reset_error = error
            self._failed(self._call, error)

    def _drop_channel(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            asyncio.get_running_loop().create_task(channel.close())

    async def close(self) -> None:
        if self._call is not None:
            self._outbox.put_nowait(None)
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

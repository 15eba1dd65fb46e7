"""One producer's pipelined ``ProduceStream`` to one broker, on the sender's event loop.

A ``BrokerLink`` owns a ``grpc.aio`` channel and at most one open stream. ``send`` queues
a request for the stream's writer and records it as in flight; the reader task matches each
response to the oldest request in flight (the broker answers in order) and hands both to
``on_response``. When the stream fails, every request in flight goes to ``on_failure``
with the error, the channel is closed (a new one is opened on the next send, so a
restarted broker is reached without gRPC's reconnect backoff) and the link backs off.

Every task a link starts ends, and ``close`` awaits them. gRPC writes a stream's
requests from an asynchronous iterator over the link's queue, which the link ends
(``None``) whenever the stream ends: gRPC does not cancel its writer task with a call
that already ended by itself, and such a task, left waiting, was destroyed at the loop's
close, printing "Task was destroyed but it is pending!" and "aclose(): asynchronous
generator is already running" on the application's stderr. (``call.write()`` offers no
such handle through interceptors, which turn writes into an iterator of their own.)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

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
        self._reader: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
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
        self._outbox = asyncio.Queue()
        call = self.stub.ProduceStream(_requests(self._outbox))
        self._call = call
        self._reset_error = None
        self._reader = self._spawn(self._read(call))

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A task of this link, referenced until it ends (the loop holds tasks weakly)."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

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
        # Ends gRPC's writer of this stream even when the call already ended by itself,
        # when cancel() below leaves that writer alone.
        self._outbox.put_nowait(None)
        if self._reader is not None and self._reader is not asyncio.current_task():
            self._reader.cancel()
        self._reader = None
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
            self._spawn(channel.close())

    async def close(self) -> None:
        """End the stream and wait for every task of the link; closes the channel."""
        if self._call is not None:
            self._outbox.put_nowait(None)
        if self._reader is not None:
            self._reader.cancel()
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._channel is not None:
            await self._channel.close()
            self._channel = None


async def _requests(
    outbox: asyncio.Queue[broker_pb2.ProduceRequest | None],
) -> AsyncIterator[broker_pb2.ProduceRequest]:
    """The requests of one stream, as they are queued, until ``None``."""
    while (request := await outbox.get()) is not None:
        yield request

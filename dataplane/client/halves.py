"""Half messages (RocketMQ's transactional messages): a record that stays invisible until
the local transaction that sent it commits.

```python
def check_back(message: HalfMessage) -> HalfOutcome:      # asked when we go silent
    return HalfOutcome.COMMIT if orders.paid(message.key) else HalfOutcome.ROLLBACK

producer = Producer(bootstrap, producer_group="acme.payments", check_back=check_back)
half = producer.send_half("acme.payments", b'{"order": 7}', key=b"order-7")
try:
    orders.mark_paid(7)                                   # the local transaction
    half.commit()                                         # now consumers see it
except Exception:
    half.rollback()                                       # no consumer ever will
```

``send_half`` asks the producer group's coordinator for a half message
(``Transactions.BeginHalf``: its id, and a producer id and epoch of its own), appends the
record to its partition as a transactional batch, and returns a ``HalfMessage`` once the
partition's leader (and its in-sync replicas) stored it. ``commit`` / ``rollback``
(``EndHalf``) decide it; they return once the marker is written, so a commit is visible
to consumers when it returns. No consumer sees a half message before its commit, nor one
rolled back, whatever its isolation level.

Check-back: a producer with a ``producer_group`` keeps a ``CheckBack`` stream to the
group's coordinator (``CheckBackStream``, a thread of its own, reconnecting with backoff
when the coordinator moves or restarts). A half message neither committed nor rolled
back within its ``check_interval_ms`` is handed to one connected producer of the group —
any of them: the one that sent it may be gone — whose ``check_back(message)`` callback
(run on a small pool of threads) answers ``HalfOutcome.COMMIT``, ``ROLLBACK`` or
``UNKNOWN`` (asked again later; so is a callback that raises, which is logged). After
``max_checks`` checks without a decision the coordinator applies ``default_outcome``.
The message handed to the callback carries the record's topic, partition, key and
headers, not its value.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import logging
import random
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import grpc

from dataplane._gen.meridian.v1 import broker_pb2, txn_pb2, txn_pb2_grpc
from dataplane.client.coordinator import backoff_s
from dataplane.client.metadata import ClusterMetadata
from dataplane.client.transactions import coordinator_link
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc
from dataplane.records import BatchBuilder

log = logging.getLogger(__name__)

CALLBACK_THREADS = 4
_RECONNECT_MAX_S = 5.0


class HalfOutcome(enum.Enum):
    COMMIT = txn_pb2.HALF_COMMIT
    ROLLBACK = txn_pb2.HALF_ROLLBACK
    UNKNOWN = txn_pb2.HALF_UNKNOWN


CheckBack = Callable[["HalfMessage"], HalfOutcome | None]


@dataclass
class HalfMessage:
    """A half message: where it is, and (the producer's own) how to decide it. In a
    check-back, ``check_number`` counts the checks so far (1 for the first)."""

    producer_group: str
    half_id: str
    topic: str
    partition: int
    key: bytes | None = None
    headers: tuple[tuple[str, bytes], ...] = ()
    offset: int = -1  # -1 in a check-back (the coordinator does not know it)
    check_number: int = 0
    created_ms: int = -1
    _end: Callable[[str, HalfOutcome, float | None], None] | None = field(
        default=None, repr=False, compare=False
    )

    def commit(self, timeout: float | None = None) -> None:
        """Make the record visible (returns once its commit marker is written)."""
        self._decide(HalfOutcome.COMMIT, timeout)

    def rollback(self, timeout: float | None = None) -> None:
        """Discard the record: no consumer will see it."""
        self._decide(HalfOutcome.ROLLBACK, timeout)

    def _decide(self, outcome: HalfOutcome, timeout: float | None) -> None:
        if self._end is None:
            raise MeridianError(
                ErrorCode.INVALID_REQUEST, "a check-back's message is decided by its answer"
            )
        self._end(self.half_id, outcome, timeout)


class HalfMessages:
    """The half messages of one producer (module docstring)."""

    def __init__(
        self,
        metadata: ClusterMetadata,
        group: str,
        *,
        client_id: str,
        request_timeout_s: float,
        max_block_s: float,
        check_interval_ms: int = 0,
        max_checks: int = 0,
        default_outcome: HalfOutcome | None = None,
        check_back: CheckBack | None = None,
    ) -> None:
        self.group = group
        self._metadata = metadata
        self._client_id = client_id
        self._request_timeout_s = request_timeout_s
        self._max_block_s = max_block_s
        self._interval_ms = check_interval_ms
        self._max_checks = max_checks
        self._default = default_outcome
        self._link = coordinator_link(metadata, group)
        self._stream = (
            CheckBackStream(metadata, group, client_id, check_back) if check_back else None
        )

    def start(self) -> None:
        if self._stream is not None:
            self._stream.start()

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()

    def send(
        self,
        topic: str,
        partition: int,
        value: bytes | None,
        key: bytes | None,
        headers: list[tuple[str, bytes]],
        timestamp_ms: int,
    ) -> HalfMessage:
        """BeginHalf, then the record appended as a transactional batch (acks=all)."""
        begin = txn_pb2.BeginHalfRequest(
            producer_group=self.group,
            topic=topic,
            partition=partition,
            key=key or b"",
            headers=[txn_pb2.HalfHeader(key=k, value=v) for k, v in headers],
            check_interval_ms=self._interval_ms,
            max_checks=self._max_checks,
            default_outcome=self._default.value if self._default else txn_pb2.HALF_UNKNOWN,
            client_id=self._client_id,
        )
        started = self._link.call("BeginHalf", begin, api_timeout_s=self._max_block_s)
        builder = BatchBuilder(
            producer_id=started.producer_id,
            producer_epoch=started.producer_epoch,
            base_sequence=0,
            is_transactional=True,
        )
        builder.append(value, key=key, timestamp=timestamp_ms, headers=headers)
        batch = builder.build()
        offset = self._produce(topic, partition, batch, started.transactional_id)
        return HalfMessage(
            self.group, started.half_id, topic, partition, key, tuple(headers), offset,
            _end=self._end,
        )  # fmt: skip

    def _produce(self, topic: str, partition: int, batch: bytes, transactional_id: str) -> int:
        """Append ``batch`` to the partition's leader, retrying retriable errors (a retry
        of a batch already stored is answered with its offset: same id, sequence 0)."""
        request = broker_pb2.ProduceRequest(
            acks=-1,
            timeout_ms=int(self._request_timeout_s * 1000),
            transactional_id=transactional_id,
            partitions=[
                broker_pb2.PartitionRecords(topic=topic, partition=partition, records=batch)
            ],
        )
        deadline = time.monotonic() + self._max_block_s
        attempt = 0
        while True:
            try:
                leader = self._metadata.leader_for(topic, partition)
                response = self._metadata.pool.get(leader.address).broker.Produce(
                    request, timeout=self._request_timeout_s
                )
                result = response.results[0]
                if not result.error:
                    return int(result.base_offset)
                error = MeridianError(result.error, f"{topic}/{partition}: {result.error_message}")
            except grpc.RpcError as exc:
                error = error_from_rpc(exc)
            except MeridianError as exc:
                error = exc
            if not error.retriable or time.monotonic() > deadline:
                raise error
            time.sleep(backoff_s(attempt))
            attempt += 1
            self._metadata.refresh([topic])

    def _end(self, half_id: str, outcome: HalfOutcome, timeout: float | None) -> None:
        request = txn_pb2.EndHalfRequest(
            producer_group=self.group, half_id=half_id, outcome=outcome.value
        )
        self._link.call("EndHalf", request, api_timeout_s=timeout or self._max_block_s)


class CheckBackStream:
    """A producer's CheckBack stream to its group's coordinator, kept open in a thread of
    its own; the callback runs on ``CALLBACK_THREADS`` threads (module docstring)."""

    def __init__(
        self, metadata: ClusterMetadata, group: str, client_id: str, callback: CheckBack
    ) -> None:
        self._metadata = metadata
        self._group = group
        self._client_id = client_id
        self._callback = callback
        self._link = coordinator_link(metadata, group)
        self._callbacks = concurrent.futures.ThreadPoolExecutor(
            CALLBACK_THREADS, thread_name_prefix=f"meridian-check-back-{client_id}"
        )
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self.connected = threading.Event()  # set while a stream is open
        self._thread = threading.Thread(
            target=self._run, name=f"meridian-check-back-{client_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float | None = 5.0) -> None:
        self._stopping.set()
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            loop.call_soon_threadsafe(task.cancel)
        self._thread.join(timeout)
        self._callbacks.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        try:
            self._task = loop.create_task(self._forever())
            loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        finally:
            # What gRPC left running ends here too, before the loop closes.
            others = asyncio.all_tasks(loop)
            for task in others:
                task.cancel()
            if others:  # (gather of nothing looks for this thread's loop, and finds none)
                loop.run_until_complete(asyncio.gather(*others, return_exceptions=True))
            loop.close()

    async def _forever(self) -> None:
        attempt = 0
        while not self._stopping.is_set():
            try:
                await self._stream_once()
                attempt = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the coordinator moved, restarted or refused
                error = error_from_rpc(exc) if isinstance(exc, grpc.RpcError) else exc
                log.info("check-back stream of %r: %s", self._group, error)
                self._link.forget(transport=True)
            finally:
                self.connected.clear()
            attempt += 1
            await asyncio.sleep(min(_RECONNECT_MAX_S, backoff_s(attempt) * random.uniform(1, 2)))

    async def _stream_once(self) -> None:
        conn = await asyncio.to_thread(self._link.coordinator)
        security = self._metadata.pool.security
        channel = security.aio_channel(conn.address)
        try:
            stub = txn_pb2_grpc.TransactionsStub(channel)
            answers: asyncio.Queue[txn_pb2.CheckBackAnswer | None] = asyncio.Queue()
            await answers.put(
                txn_pb2.CheckBackAnswer(
                    hello=txn_pb2.CheckBackHello(
                        producer_group=self._group, client_id=self._client_id
                    )
                )
            )
            call = stub.CheckBack(_drain(answers))
            self.connected.set()
            answering: set[asyncio.Task[None]] = set()
            async for request in call:
                task = asyncio.ensure_future(self._answer(request, answers))
                answering.add(task)
                task.add_done_callback(answering.discard)
        finally:
            await channel.close()

    async def _answer(
        self,
        request: txn_pb2.CheckBackRequest,
        answers: asyncio.Queue[txn_pb2.CheckBackAnswer | None],
    ) -> None:
        message = _from_wire(request)
        answer = txn_pb2.CheckBackAnswer(half_id=message.half_id)
        loop = asyncio.get_running_loop()
        try:
            outcome = await loop.run_in_executor(self._callbacks, self._callback, message)
            answer.outcome = (outcome or HalfOutcome.UNKNOWN).value
        except Exception as exc:  # a raising callback is an unknown outcome: asked again
            log.warning("check_back of half message %s raised: %r", message.half_id, exc)
            answer.outcome = txn_pb2.HALF_UNKNOWN
            answer.error_message = repr(exc)[:1000] or "the callback raised"
        await answers.put(answer)


async def _drain(
    answers: asyncio.Queue[txn_pb2.CheckBackAnswer | None],
) -> AsyncIterator[txn_pb2.CheckBackAnswer]:
    while (answer := await answers.get()) is not None:
        yield answer


def _from_wire(request: txn_pb2.CheckBackRequest) -> HalfMessage:
    wire = request.half_message
    return HalfMessage(
        wire.producer_group,
        wire.half_id,
        wire.topic,
        wire.partition,
        wire.key or None,
        tuple((h.key, h.value) for h in wire.headers),
        -1,
        request.check_number,
        wire.created_ms,
    )

"""Delayed delivery in the SDK (docs/delay.md): scheduling, cancelling and listing.

``Producer.send(..., deliver_at=, deliver_after=)`` (or a record carrying an
``x-deliver-at`` header) and ``Producer.send_batch(..., deliver_at=, deliver_after=)``
hand records to ``Scheduler``: it routes each record as an ordinary send would (lanes,
then the partitioner of its topic, or the partition named), then queues it, with the
scheduling headers of ``dataplane.delays``, for the timer partition of its topic and
partition in the tenant's timer log ``__delay.<tenant>``. It travels there as any
record of the producer does (batched, idempotent, retried); the broker checks it (the
time, and that the caller may write to the topic) and the leader of the timer partition
delivers it when due. The futures answer ``RecordMetadata(topic, partition, -1, ...,
delayed_id=..., deliver_at=...)``: where and when the record will be delivered, and its
id, which ``Producer.cancel_delayed`` takes. The first delayed record of a tenant on a
cluster waits (up to ``max_block_ms``) while the controller makes the timer log.

``DelayClient`` makes the Delay service's calls on the brokers leading the timer
partitions: cancel by id, list what is scheduled, count what is pending, read a consumer
group's retry policy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, overload

import grpc

from dataplane._gen.meridian.v1 import delay_pb2, delay_pb2_grpc
from dataplane.client.future import DeliveryCallback, DeliveryFuture, DeliveryFutures
from dataplane.client.metadata import ClusterMetadata
from dataplane.client.types import RecordMetadata
from dataplane.delays import (
    DELAY_PARTITION,
    DELAY_TOPIC,
    DELIVER_AT,
    SCHEDULING_HEADERS,
    DelayedId,
    check_deliver_at,
    deliver_at_after,
    deliver_at_in,
    encode_deliver_at,
    tenant_of_topic,
    timer_partition,
    timer_topic,
)
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc
from dataplane.records import encode_headers

if TYPE_CHECKING:
    from dataplane.client.producer import Producer

Header = tuple[str, bytes | None]
_RETRIES = 5


def due_time(deliver_at: int | float | datetime | None, deliver_after: float | None) -> int:
    """The delivery time (ms since the epoch) of ``deliver_at`` (ms since the epoch, or
    an aware ``datetime``) or ``deliver_after`` (seconds from now); ``INVALID_DELAY``
    outside the bounds (``dataplane.delays``), ``TypeError`` for both or a bad type."""
    now = time.time_ns() // 1_000_000
    if deliver_at is not None and deliver_after is not None:
        raise TypeError("give deliver_at or deliver_after, not both")
    if deliver_after is not None:
        if isinstance(deliver_after, bool) or not isinstance(deliver_after, int | float):
            raise TypeError(f"deliver_after is seconds, not {type(deliver_after).__name__}")
        return deliver_at_after(deliver_after * 1000, now)
    if isinstance(deliver_at, datetime):
        if deliver_at.tzinfo is None:
            raise TypeError("deliver_at as a datetime needs a time zone")
        deliver_at = deliver_at.timestamp() * 1000
    if isinstance(deliver_at, bool) or not isinstance(deliver_at, int | float):
        raise TypeError(f"deliver_at is ms since the epoch, not {type(deliver_at).__name__}")
    if deliver_at < 0:
        raise MeridianError(ErrorCode.INVALID_DELAY, f"deliver_at {deliver_at} is before 1970")
    return check_deliver_at(int(deliver_at), now)


def header_deliver_at(headers: Any) -> int | None:
    """The ``x-deliver-at`` a record's headers carry (checked: ``INVALID_DELAY`` for a
    malformed one, or more than one), or None."""
    if not headers:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    found = [
        (key, value if value is None or isinstance(value, bytes) else str(value).encode())
        for key, value in items
        if key == DELIVER_AT
    ]
    due = deliver_at_in(found)
    return None if due is None else check_deliver_at(due, time.time_ns() // 1_000_000)


def scheduled_headers(
    headers: Sequence[Header], deliver_at: int, topic: str, partition: int
) -> list[Header]:
    """A record's own headers (less any scheduling ones) and the scheduling headers."""
    own = [(k, v) for k, v in headers if k not in SCHEDULING_HEADERS]
    return [
        *own,
        (DELIVER_AT, encode_deliver_at(deliver_at)),
        (DELAY_TOPIC, topic.encode()),
        (DELAY_PARTITION, str(partition).encode()),
    ]


class DelayedFuture:
    """A scheduled record's acceptance: ``result()`` is its ``RecordMetadata`` (topic
    and partition it will be delivered to, offset -1, ``delayed_id`` and
    ``deliver_at``) once its timer log stored it, or raises the error."""

    __slots__ = ("_deliver_at", "_future", "_partition", "_topic")

    def __init__(self, future: DeliveryFuture, topic: str, partition: int, deliver_at: int) -> None:
        self._future = future
        self._topic = topic
        self._partition = partition
        self._deliver_at = deliver_at

    def done(self) -> bool:
        return self._future.done()

    def exception(self, timeout: float | None = None) -> MeridianError | None:
        return self._future.exception(timeout)

    def result(self, timeout: float | None = None) -> RecordMetadata:
        return self._scheduled(self._future.result(timeout))

    def _scheduled(self, stored: RecordMetadata) -> RecordMetadata:
        delayed = DelayedId(self._topic, stored.partition, stored.offset)
        return RecordMetadata(
            self._topic,
            self._partition,
            -1,
            stored.timestamp,
            delayed_id=str(delayed) if stored.offset >= 0 else None,
            deliver_at=self._deliver_at,
        )

    def add_done_callback(self, fn: Callable[[DelayedFuture], object]) -> None:
        self._future.add_done_callback(lambda _: fn(self))

    def add_delivery_callback(self, fn: DeliveryCallback) -> None:
        def deliver(error: MeridianError | None, stored: RecordMetadata | None) -> None:
            fn(error, None if stored is None else self._scheduled(stored))

        self._future.add_delivery_callback(deliver)

    def __repr__(self) -> str:
        return f"DelayedFuture({self._topic}/{self._partition} at {self._deliver_at})"


@dataclass(frozen=True)
class _Part:
    """The records of a ``send_batch`` call that went to one timer partition: their
    deliveries, their places in the call, and where each will be delivered."""

    sent: DeliveryFutures
    positions: list[int]
    places: list[tuple[str, int]]


class DelayedFutures(Sequence[DelayedFuture]):
    """The scheduled records of one ``send_batch`` call, in call order (each future made
    when asked for); the waits cost one per batch."""

    def __init__(self, parts: list[_Part], size: int, deliver_at: int) -> None:
        self._parts = parts
        self._size = size
        self._deliver_at = deliver_at
        self._futures: list[DelayedFuture] | None = None

    def _all(self) -> list[DelayedFuture]:
        if self._futures is None:
            futures: list[DelayedFuture | None] = [None] * self._size
            for part in self._parts:
                for at, stored, place in zip(part.positions, part.sent, part.places, strict=True):
                    futures[at] = DelayedFuture(stored, place[0], place[1], self._deliver_at)
            self._futures = [f for f in futures if f is not None]
        return self._futures

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> DelayedFuture: ...
    @overload
    def __getitem__(self, index: slice) -> list[DelayedFuture]: ...
    def __getitem__(self, index: int | slice) -> DelayedFuture | list[DelayedFuture]:
        return self._all()[index]

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for part in self._parts:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not part.sent.wait(left):
                return False
        return True

    def done(self) -> bool:
        return all(part.sent.done() for part in self._parts)

    def exception(self, timeout: float | None = None) -> MeridianError | None:
        if not self.wait(timeout):
            raise TimeoutError(f"records not scheduled within {timeout} s")
        return next((e for p in self._parts if (e := p.sent.exception()) is not None), None)

    def result(self, timeout: float | None = None) -> list[RecordMetadata]:
        error = self.exception(timeout)
        if error is not None:
            raise error
        return [future.result() for future in self._all()]


class Scheduler:
    """The producer's delayed sends (see the module docstring)."""

    def __init__(self, producer: Producer) -> None:
        self._producer = producer
        self._timer_partitions: dict[tuple[str, int, int], int] = {}

    def _target(self, topic: str, lane: str | None, headers: Any) -> tuple[str, list[Header]]:
        """Where the record goes (lanes applied) and its headers as pairs."""
        producer = self._producer
        plain = not headers and lane is None and producer.lane is None and "~" not in topic
        if plain and (not producer.route_lanes or _no_lane_in_effect()):
            return topic, []
        if producer.route_lanes:
            topic, headers = producer._lane_route(topic, lane, headers)
        items = list(headers.items()) if isinstance(headers, Mapping) else list(headers or ())
        return topic, items

    def _partition_of(self, topic: str, key: bytes | None, partition: int | None, size: int) -> int:
        producer = self._producer
        queues = producer._topics.get(topic) or producer._prepare(topic)
        if partition is not None:
            if not (type(partition) is int and 0 <= partition < queues.count):
                queues = producer._check_partition(topic, partition)
            return partition
        return producer._acc.choose_partition(queues, key, max(1, size))

    def _timer(self, topic: str, partition: int) -> tuple[str, int, Any]:
        producer = self._producer
        timer = timer_topic(tenant_of_topic(topic))
        queues = producer._topics.get(timer) or producer._prepare(timer)
        key = (topic, partition, queues.count)
        found = self._timer_partitions.get(key)
        if found is None:
            if len(self._timer_partitions) > 65_536:
                self._timer_partitions.clear()
            found = self._timer_partitions[key] = timer_partition(topic, partition, queues.count)
        return timer, found, queues

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Any,
        partition: int | None,
        timestamp_ms: int | None,
        on_delivery: DeliveryCallback | None,
        lane: str | None,
        deliver_at: int,
    ) -> DelayedFuture:
        target, items = self._target(topic, lane, headers)
        chosen = self._partition_of(target, key, partition, _size(key, value))
        _, timer_part, queues = self._timer(target, chosen)
        encoded = encode_headers(scheduled_headers(items, deliver_at, target, chosen))
        stamp = time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        stored = self._producer._append(queues, timer_part, key, value, encoded, stamp)
        future = DelayedFuture(stored, target, chosen, deliver_at)
        if on_delivery is not None:
            future.add_delivery_callback(on_delivery)
        return future

    def send_batch(
        self,
        topic: str,
        records: Sequence[Any],
        partition: int | None,
        on_delivery: DeliveryCallback | None,
        lane: str | None,
        deliver_at: int,
    ) -> DelayedFutures:
        """Every record of the call, due at ``deliver_at``: grouped by the partition each
        goes to (its timer partition), each group one ``send_batch`` of the producer, in
        call order. Records without headers of their own share their group's encoded
        scheduling headers (the compiled codec writes them into every record)."""
        now = time.time_ns() // 1_000_000
        groups: dict[tuple[str, int], list[int]] = {}
        timed: list[tuple[Any, ...]] = []
        plain = True
        for index, record in enumerate(records):
            key, value, headers, stamp = _fields(record, index)
            target, items = self._target(topic, lane, headers)
            chosen = self._partition_of(target, key, partition, _size(key, value))
            timed.append((key, value, items, now if stamp is None else stamp))
            plain = plain and not items
            groups.setdefault((target, chosen), []).append(index)
        parts = []
        for (target, chosen), positions in groups.items():
            timer, timer_part, _ = self._timer(target, chosen)
            if plain:
                shared = encode_headers(scheduled_headers([], deliver_at, target, chosen))
                part = [timed[i][:2] + timed[i][3:] for i in positions]
                part = [(k, v, None, t) for k, v, t in part]
            else:
                shared = None
                part = [
                    (k, v, scheduled_headers(h, deliver_at, target, chosen), t)
                    for k, v, h, t in (timed[i] for i in positions)
                ]
            sent = self._producer._send_batch(timer, part, timer_part, None, now, shared=shared)
            parts.append(_Part(sent, positions, [(target, chosen)] * len(positions)))
        futures = DelayedFutures(parts, len(timed), deliver_at)
        if on_delivery is not None:
            for delayed in futures:
                delayed.add_delivery_callback(on_delivery)
        return futures


def _size(key: Any, value: Any) -> int:
    return len(key or b"") + len(value or b"")


def _no_lane_in_effect() -> bool:
    import lanes

    return lanes.current_lane.get() is None


def _fields(record: Any, index: int) -> tuple[bytes | None, bytes | None, Any, int | None]:
    if record is None or isinstance(record, bytes):
        return None, record, None, None
    if isinstance(record, tuple) and 2 <= len(record) <= 4:
        padded = (*record, None, None)
        return padded[0], padded[1], padded[2], padded[3]
    raise TypeError(f"record {index}: a value or a (key, value[, headers[, timestamp_ms]]) tuple")


# -- the Delay service ----------------------------------------------------------------------
@dataclass(frozen=True)
class ScheduledRecord:
    """A pending record, as ``DelayClient.scheduled`` shows it."""

    id: str
    topic: str
    partition: int
    deliver_at: int
    timestamp: int
    key: bytes | None
    value: bytes | None  # cut to the asked length
    value_size: int
    headers: tuple[Header, ...]


@dataclass(frozen=True)
class RetryPolicy:
    group_id: str
    max_attempts: int
    backoff_initial_ms: int
    backoff_multiplier: float
    backoff_max_ms: int
    retry_topic: str
    dead_letter_topic: str


class DelayClient:
    """Calls of the Delay service over a client's connections (its credentials)."""

    def __init__(self, metadata: ClusterMetadata, *, timeout_s: float = 30.0) -> None:
        self._metadata = metadata
        self._timeout_s = timeout_s

    def _on_leader(self, timer: str, partition: int, call: Callable[[Any], Any]) -> Any:
        """``call(stub)`` on the leader of ``timer``-``partition``, asking again after a
        leadership move or a timer log still being made."""
        error: MeridianError | None = None
        for attempt in range(_RETRIES):
            try:
                conn = self._metadata.connection_for(timer, partition)
                return call(delay_pb2_grpc.DelayStub(conn.channel))
            except grpc.RpcError as exc:
                error = error_from_rpc(exc)
            except MeridianError as exc:
                error = exc
            if not error.retriable:
                raise error
            time.sleep(0.1 * 2**attempt)
            self._metadata.refresh([timer])
        assert error is not None
        raise error

    def _call(self, method: str, request: Any) -> Callable[[Any], Any]:
        def call(stub: Any) -> Any:
            return getattr(stub, method)(request, timeout=self._timeout_s)

        return call

    def cancel(self, delayed_id: str) -> int:
        """Cancel a scheduled record; returns when it was due. Raises
        ``DELAYED_RECORD_NOT_FOUND`` or ``DELAYED_RECORD_DELIVERED``."""
        delayed = DelayedId.parse(delayed_id)
        timer = timer_topic(tenant_of_topic(delayed.topic))
        request = delay_pb2.CancelDelayedRequest(id=str(delayed))
        answer = self._on_leader(timer, delayed.partition, self._call("CancelDelayed", request))
        if answer.error:
            raise MeridianError(answer.error, answer.error_message)
        return int(answer.deliver_at_ms)

    def scheduled(
        self, tenant: str, *, topic: str = "", limit: int = 100, value_bytes: int = 0
    ) -> list[ScheduledRecord]:
        """The first ``limit`` pending records of ``tenant`` (for ``topic``), by due time."""
        timer = timer_topic(tenant)
        found: list[ScheduledRecord] = []
        for partition in self._metadata.partitions_for(timer):
            request = delay_pb2.ListDelayedRequest(
                tenant=tenant, partition=partition, topic=topic, after_deliver_at_ms=-1,
                after_offset=-1, limit=limit, value_bytes=value_bytes,
            )  # fmt: skip
            answer = self._on_leader(timer, partition, self._call("ListDelayed", request))
            if answer.error:
                raise MeridianError(answer.error, answer.error_message)
            found += [_scheduled(r) for r in answer.records]
        return sorted(found, key=lambda r: (r.deliver_at, r.id))[:limit]

    def pending(self, tenant: str) -> list[Any]:
        """What each timer partition of ``tenant`` holds, from its leader."""
        timer = timer_topic(tenant)
        states: list[Any] = []
        for partition in self._metadata.partitions_for(timer):
            request = delay_pb2.DescribeDelayRequest(tenants=[tenant])
            answer = self._on_leader(timer, partition, self._call("DescribeDelay", request))
            states += [p for p in answer.partitions if p.partition == partition]
        return states

    def retry_policy(self, group_id: str) -> RetryPolicy | None:
        """The group's retry policy, or None when it has none."""
        request = delay_pb2.GetRetryPolicyRequest(group_id=group_id)
        try:
            conn = self._metadata.any_connection()
            answer = delay_pb2_grpc.DelayStub(conn.channel).GetRetryPolicy(
                request, timeout=self._timeout_s
            )
        except grpc.RpcError as exc:
            raise error_from_rpc(exc) from None
        if answer.error == ErrorCode.RETRY_POLICY_NOT_FOUND:
            return None
        if answer.error:
            raise MeridianError(answer.error, answer.error_message)
        p = answer.policy
        return RetryPolicy(
            p.group_id, p.max_attempts, p.backoff_initial_ms, p.backoff_multiplier,
            p.backoff_max_ms, p.retry_topic, p.dead_letter_topic,
        )  # fmt: skip


def _scheduled(record: delay_pb2.DelayedRecord) -> ScheduledRecord:
    return ScheduledRecord(
        id=record.id,
        topic=record.topic,
        partition=record.partition,
        deliver_at=record.deliver_at_ms,
        timestamp=record.timestamp,
        key=record.key if record.HasField("key") else None,
        value=record.value if record.HasField("value") else None,
        value_size=record.value_size,
        headers=tuple((h.key, h.value if h.HasField("value") else None) for h in record.headers),
    )

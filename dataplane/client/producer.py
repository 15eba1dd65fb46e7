"""The producer: ``send`` records, delivered in batches by one background thread.

```python
with Producer("127.0.0.1:9092", client_id="orders") as producer:
    future = producer.send("acme.orders", b'{"order": 1}', key=b"customer-7")
    producer.send("acme.orders", b"...", on_delivery=lambda err, md: print(err or md))
    producer.flush()
    future.result().offset
```

``send`` encodes the record into its partition's open batch (``accumulator.py``,
``batch.py``) and returns a ``DeliveryFuture`` at once; the sender thread
(``sender.py``) ships ready batches to the partition leaders and completes the futures.
Delivery callbacks and future callbacks run in the sender thread, in record order per
partition; they should be quick.

Ordering: records of one partition are stored in the order they were sent, retries
included, when idempotence is on (the default). Without it, a retry may land after a
later batch unless ``max_in_flight`` is 1, as in Kafka.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, TypeAlias

from dataplane.client.accumulator import RecordAccumulator, TopicQueues
from dataplane.client.auth import Credentials
from dataplane.client.connection import ChannelSecurity, ConnectionPool, Tls
from dataplane.client.errors import ConfigError
from dataplane.client.future import DeliveryCallback, DeliveryFuture, DeliveryFutures
from dataplane.client.inflight import SenderConfig
from dataplane.client.metadata import ClusterMetadata
from dataplane.client.partitioner import Partitioner, PartitionerFn, make_partitioner
from dataplane.client.sender import Sender
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import (
    HEADER_SIZE,
    Compression,
    HeadersLike,
    as_bytes,
    builder,
    encode_headers,
)

_CODECS = {codec.name.lower(): codec for codec in Compression}
_NO_HEADERS = b"\x00"
_BATCH_RECORD_OVERHEAD = 6  # a record's length prefix and deltas, mostly


class ProducerRecord(NamedTuple):
    """A record for ``Producer.send_batch`` (a plain ``(key, value)`` tuple works too)."""

    key: bytes | None
    value: bytes | None
    headers: HeadersLike | None = None
    timestamp_ms: int | None = None


RecordLike: TypeAlias = bytes | ProducerRecord | tuple[Any, ...] | None


def _timestamps(records: Sequence[RecordLike], now: int) -> list[int]:
    """Each record's timestamp: its own, or ``now``."""
    return [
        r[3] if isinstance(r, tuple) and len(r) > 3 and r[3] is not None
        else now
        for r in records
    ]  # fmt: skip


def _acks(acks: object) -> int:
    if acks in ("all", -1, "-1"):
        return -1
    if acks not in (0, 1, "0", "1"):
        raise ConfigError(
            f"acks must be 'all' (-1), 0 or 1, not {acks!r}", ErrorCode.INVALID_REQUIRED_ACKS
        )
    return int(acks)


def _timestamp(timestamp_ms: object) -> int:
    if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int | float):
        raise TypeError(f"timestamp_ms must be an int, not {type(timestamp_ms).__name__}")
    if timestamp_ms < 0:
        raise MeridianError(ErrorCode.INVALID_TIMESTAMP, f"negative timestamp {timestamp_ms}")
    return int(timestamp_ms)


def _positive(**values: float) -> None:
    for name, value in values.items():
        if value <= 0:
            raise ConfigError(f"{name} must be positive, not {value}")


def _not_negative(**values: float) -> None:
    for name, value in values.items():
        if value < 0:
            raise ConfigError(f"{name} must not be negative, not {value}")


class Producer:
    """Sends records to a Meridian cluster; thread-safe; see the module docstring.

    Settings: ``acks`` ``"all"`` (-1: every in-sync replica has the record; the broker
    refuses it while fewer than the topic's ``min_insync_replicas`` are in sync, and the
    producer retries), 1 (the leader stored it) or 0 (no acknowledgement); ``linger_ms``
    how long a batch waits for more records; ``batch_bytes`` the size a partition's
    batch is closed at; ``max_request_bytes`` the bound of one request (and of one
    record); ``compression`` none, gzip, snappy, lz4 or zstd; ``partitioner`` murmur2,
    sticky, round_robin or a callable ``(topic, key, partitions) -> partition``;
    ``enable_idempotence`` (ignored with ``acks=0``, which has no acknowledgement to
    deduplicate against); ``retries`` and ``delivery_timeout_ms`` bound retries of
    retriable failures (a leader moving or failing, too few in-sync replicas), with a
    metadata refresh when the leader may have changed; ``retry_backoff_ms`` the first
    backoff (doubling, with jitter, up to ``retry_backoff_max_ms``); ``buffer_memory``
    bounds the bytes of records not yet acknowledged: when full, ``send`` blocks up to
    ``max_block_ms`` (``block_on_full``) or raises ``BufferFull`` at once;
    ``request_timeout_ms`` bounds the wait for one answer (an idempotent producer stops
    waiting on a leader that hangs sooner, once fresh metadata names another: see
    ``sender``); ``max_in_flight`` requests per broker at once. ``credentials`` (a token
    source of ``dataplane.client.auth`` or a token string) authenticate every call;
    ``tls`` is a CA file path, or True for the system's roots.
    """

    def __init__(
        self,
        bootstrap: str | Iterable[str],
        *,
        client_id: str = "meridian-producer",
        acks: int | str = 1,
        linger_ms: float = 5,
        batch_bytes: int = 256 * 1024,
        max_request_bytes: int = 4 * 1024 * 1024,
        compression: str = "none",
        partitioner: str | PartitionerFn | Partitioner = "murmur2",
        enable_idempotence: bool = True,
        retries: int = 2**31 - 1,
        delivery_timeout_ms: float = 120_000,
        retry_backoff_ms: float = 100,
        retry_backoff_max_ms: float = 1_000,
        buffer_memory: int = 32 * 1024 * 1024,
        block_on_full: bool = True,
        max_block_ms: float = 60_000,
        request_timeout_ms: float = 30_000,
        max_in_flight: int = 5,
        credentials: Credentials = None,
        tls: Tls = None,
    ) -> None:
        ack_level = _acks(acks)
        codec = _CODECS.get(str(compression).lower())
        if codec is None:
            raise ConfigError(f"unknown compression {compression!r}: use one of {list(_CODECS)}")
        _positive(
            batch_bytes=batch_bytes - HEADER_SIZE,
            max_request_bytes=max_request_bytes,
            buffer_memory=buffer_memory,
            delivery_timeout_ms=delivery_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            max_in_flight=max_in_flight,
        )
        _not_negative(
            linger_ms=linger_ms,
            retries=retries,
            retry_backoff_ms=retry_backoff_ms,
            max_block_ms=max_block_ms,
        )
        try:
            chosen = make_partitioner(partitioner)
        except (TypeError, ValueError) as err:
            raise ConfigError(str(err)) from None
        self.client_id = client_id
        self._max_block_s = max_block_ms / 1000
        self._pool = ConnectionPool(
            bootstrap, client_id=client_id, security=ChannelSecurity.of(credentials, tls)
        )
        self._metadata = ClusterMetadata(self._pool)
        self._acc = RecordAccumulator(
            chosen,
            batch_bytes=batch_bytes,
            linger_s=linger_ms / 1000,
            buffer_memory=buffer_memory,
            block_on_full=block_on_full,
            max_block_s=self._max_block_s,
            max_record_bytes=max_request_bytes - HEADER_SIZE,
        )
        config = SenderConfig(
            acks=ack_level,
            compression=codec,
            idempotent=bool(enable_idempotence) and ack_level != 0,
            retries=retries,
            delivery_timeout_s=delivery_timeout_ms / 1000,
            retry_backoff_s=retry_backoff_ms / 1000,
            retry_backoff_max_s=max(retry_backoff_max_ms, retry_backoff_ms) / 1000,
            request_timeout_s=request_timeout_ms / 1000,
            max_in_flight=max_in_flight,
            max_request_bytes=max_request_bytes,
            client_id=client_id,
        )
        self._sender = Sender(self._acc, self._metadata, config, self._update_topics)
        self._topics = self._acc.topics
        self._append = self._acc.append
        self._topic_lock = threading.Lock()
        self._closed = False
        self._sender.start()

    # -- sending -------------------------------------------------------------------------
    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: HeadersLike | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> DeliveryFuture:
        """Queue one record; returns its ``DeliveryFuture`` without waiting.

        ``on_delivery(error, metadata)`` is called once delivered or failed. Raises at
        once: ``TypeError`` for a key, value or header that is not bytes;
        ``MESSAGE_TOO_LARGE`` for a record larger than ``max_request_bytes``;
        ``UNKNOWN_TOPIC_OR_PARTITION`` when the topic is not found within
        ``max_block_ms``; ``INVALID_PARTITIONS`` for a partition the topic still lacks
        after ``max_block_ms``;
        ``BufferFull``; and the producer's fatal error once it has one.
        """
        if type(value) is not bytes and value is not None:
            value = as_bytes(value, "value")
        if key is not None and type(key) is not bytes:
            key = as_bytes(key, "key")
        queues = self._topics.get(topic) or self._prepare(topic)
        if partition is not None and not (type(partition) is int and 0 <= partition < queues.count):
            queues = self._check_partition(topic, partition)
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        elif type(timestamp_ms) is not int or timestamp_ms < 0:
            timestamp_ms = _timestamp(timestamp_ms)
        future = self._append(
            queues,
            partition,
            key,
            value,
            encode_headers(headers) if headers else _NO_HEADERS,
            timestamp_ms,
        )
        if on_delivery is not None:
            future.add_delivery_callback(on_delivery)
        return future

    def send_batch(
        self,
        topic: str,
        records: Sequence[RecordLike] | Iterable[RecordLike],
        partition: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> DeliveryFutures:
        """Queue many records in one call; returns their ``DeliveryFutures`` at once.

        Each record is a value (bytes or None) or a ``ProducerRecord`` / ``(key, value[,
        headers[, timestamp_ms]])`` tuple. They go to ``partition``, or where the
        partitioner sends each (the same choice ``send`` makes: keyless records stick to
        one partition until its batch fills, keyed ones go by murmur2 of the key), in
        call order within a partition. ``on_delivery(error, metadata)`` is called for
        each record, as with ``send`` (the futures' ``add_done_callback`` is called once
        for the call, and is cheaper). All or none are queued: raises before queuing any
        what ``send`` raises, with ``TypeError`` naming the index of the first bad record.
        Records without a timestamp share one taken now.

        This is the fast way to produce: the records are encoded into their batches by
        the compiled codec a batch at a time, not by Python record by record.
        """
        if not isinstance(records, list | tuple):
            records = list(records)
        queues = self._topics.get(topic) or self._prepare(topic)
        if partition is not None and not (type(partition) is int and 0 <= partition < queues.count):
            queues = self._check_partition(topic, partition)
        total, largest, earliest, keyed = builder.records_size(records)
        if earliest is not None and earliest < 0:
            raise MeridianError(ErrorCode.INVALID_TIMESTAMP, f"negative timestamp {earliest}")
        if largest > self._acc.max_record_bytes:
            self._acc.too_large(largest)
        now = time.time_ns() // 1_000_000
        reserve = total + _BATCH_RECORD_OVERHEAD * len(records)
        segments = self._acc.append_many(queues, partition, records, now, reserve, keyed)
        stamps = [now] * len(records) if earliest is None else _timestamps(records, now)
        futures = DeliveryFutures(segments, len(records), stamps)
        if on_delivery is not None:
            for future in futures:
                future.add_delivery_callback(on_delivery)
        return futures

    def _prepare(self, topic: str) -> TopicQueues:
        if self._acc.refusal is not None:
            raise self._acc.refusal
        if not isinstance(topic, str) or not topic:
            raise MeridianError(ErrorCode.INVALID_TOPIC, f"bad topic name {topic!r}")
        with self._topic_lock:
            queues = self._acc.topics.get(topic)
            if queues is None:
                count = len(self._wait_for_topic(topic))
                queues = TopicQueues(topic, count, self._available(topic))
                with self._acc.lock:
                    self._acc.topics[topic] = queues
        return queues

    def _wait_for_topic(self, topic: str) -> list[int]:
        deadline = time.monotonic() + self._max_block_s
        delay = 0.05
        while True:
            try:
                return self._metadata.partitions_for(topic)
            except MeridianError as error:
                if not error.retriable or time.monotonic() + delay > deadline:
                    raise MeridianError(
                        error.code,
                        f"{error.message} (waited {self._max_block_s * 1000:.0f} ms, max_block_ms)",
                    ) from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
            self._metadata.refresh([topic])

    def _check_partition(self, topic: str, partition: object) -> TopicQueues:
        if not isinstance(partition, int) or isinstance(partition, bool):
            raise TypeError(f"partition must be an int, not {type(partition).__name__}")
        if partition < 0:
            raise MeridianError(ErrorCode.INVALID_PARTITIONS, f"no partition {partition}")
        # A partition the metadata does not show yet may be on its way (a topic being
        # created or grown): wait for it, as for an unknown topic, up to max_block_ms.
        deadline = time.monotonic() + self._max_block_s
        delay = 0.05
        while True:
            self._metadata.refresh([topic])
            self._update_topics()
            queues = self._acc.topics[topic]
            if partition < queues.count:
                return queues
            if time.monotonic() + delay > deadline:
                raise MeridianError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"topic {topic!r} has {queues.count} partitions; there is no partition"
                    f" {partition} (waited {self._max_block_s * 1000:.0f} ms, max_block_ms)",
                )
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _available(self, topic: str) -> list[int]:
        snapshot = self._metadata.snapshot()
        leaders = snapshot.leaders.get(topic, {})
        return sorted(p for p, leader in leaders.items() if leader in snapshot.brokers)

    def _update_topics(self) -> None:
        """Adopt refreshed metadata: partition counts and which partitions have leaders."""
        snapshot = self._metadata.snapshot()
        with self._acc.lock:
            for name, queues in self._acc.topics.items():
                leaders = snapshot.leaders.get(name)
                if leaders:
                    queues.resize(max(leaders) + 1, self._available(name))

    def partitions_for(self, topic: str) -> list[int]:
        """The partitions of ``topic``."""
        return self._metadata.partitions_for(topic)

    # -- flushing and closing ------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now, without lingering, and wait until it is delivered.

        Failed deliveries do not make it raise (their futures hold the errors); raises
        ``REQUEST_TIMED_OUT`` when ``timeout`` seconds pass first.
        """
        self._not_from_a_callback("flush")
        with self._acc.lock:
            self._acc.flushing += 1
            batches = list(self._acc.incomplete)
        self._sender.wakeup()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for batch in batches:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not batch.result.wait(remaining):
                    left = sum(1 for b in batches if not b.result.done())
                    raise MeridianError(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"flush timed out after {timeout} s with {left} batches undelivered",
                    )
        finally:
            with self._acc.lock:
                self._acc.flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is queued (waiting up to ``timeout`` seconds), then stop.

        What is still undelivered when the time is up fails with ``REQUEST_TIMED_OUT``.
        Further sends raise. Calling it again does nothing.
        """
        if self._closed:
            return
        self._not_from_a_callback("close")
        self._closed = True
        self._acc.close()
        self._sender.wakeup()
        if not self._sender.join(timeout):
            self._sender.abort(
                MeridianError(
                    ErrorCode.REQUEST_TIMED_OUT, "the producer closed before delivering it"
                )
            )
            self._sender.join()
        self._pool.close()

    def _not_from_a_callback(self, what: str) -> None:
        if threading.current_thread() is self._acc.sender_thread:
            raise MeridianError(
                ErrorCode.INVALID_REQUEST,
                f"{what}() from a delivery callback would wait for the thread running it",
            )

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Producer(client_id={self.client_id!r}, bootstrap={self._pool.bootstrap})"

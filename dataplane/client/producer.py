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

Lanes: a record goes to a lane topic (``acme.orders~ppe``, see ``lanes``) when it has a
lane, in this order: ``send(..., lane=)``, the record's own ``x-lane`` header, the
producer's ``lane=``, the lane in effect (``lanes.context.current_lane``, set by the
consumer while the application processes a lane record); else to the trunk topic. A
record sent to a lane carries ``x-lane: <lane>`` (added when missing, never twice). A
lane topic not created yet (``LANE_TOPIC_PENDING``) holds its records until it exists
(``lanetopics.py``); a lane that is not declared fails its records'
futures with ``LaneNotFoundError`` and nothing goes to the trunk.

```python
with Producer("127.0.0.1:9092", lane="ppe") as producer:   # every record to lane ppe
    producer.send("acme.orders", b"...")                   # -> acme.orders~ppe
    producer.send("acme.orders", b"...", lane="boe-alice") # -> acme.orders~boe-alice
```

Copying tools (mirrors) need every record written where it is named, as it is:
``Producer(route_lanes=False)`` turns lane routing off, so a record goes to the topic and
partition ``send`` / ``send_batch`` name (a lane topic by its full name) with its headers
unchanged, whatever its ``x-lane`` header, the lane in effect or a ``lane=`` says
(``lane=`` is refused on such a producer).

Ordering: records of one partition are stored in the order they were sent, retries
included, when idempotence is on (the default). Without it, a retry may land after a
later batch unless ``max_in_flight`` is 1, as in Kafka.

Delays: ``send(..., deliver_after=60)`` / ``deliver_at=`` (or an ``x-deliver-at``
header) schedule a record in the tenant's timer log instead, to be delivered to its
topic and partition when due; ``cancel_delayed(id)`` cancels one (``delayed.py``).

Transactions: ``Producer(transactional_id="acme.loader")`` writes in transactions
(``transactions.py``): ``init_transactions()`` once, then ``begin_transaction()``,
``send``..., ``send_offsets_to_transaction(offsets, consumer.group_metadata())``, and
``commit_transaction()`` or ``abort_transaction()``; read_committed consumers see all of
a transaction or nothing of it. Half messages (RocketMQ's): ``send_half`` with a
``producer_group`` (``halves.py``).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple, TypeAlias

import lanes
from dataplane.client.accumulator import RecordAccumulator, TopicQueues
from dataplane.client.auth import Credentials
from dataplane.client.connection import ChannelSecurity, ConnectionPool, Tls
from dataplane.client.delayed import (
    DelayClient,
    DelayedFuture,
    DelayedFutures,
    Scheduler,
    due_time,
    header_deliver_at,
)
from dataplane.client.errors import ConfigError
from dataplane.client.future import (
    DeliveryCallback,
    DeliveryFuture,
    DeliveryFutures,
    ProduceResult,
    Segment,
)
from dataplane.client.halves import CheckBack, HalfMessage, HalfMessages, HalfOutcome
from dataplane.client.inflight import SenderConfig
from dataplane.client.lanetopics import PendingLaneTopics, lane_error
from dataplane.client.metadata import ClusterMetadata
from dataplane.client.partitioner import Partitioner, PartitionerFn, make_partitioner
from dataplane.client.sender import Sender
from dataplane.client.transactions import TransactionManager
from dataplane.client.types import (
    ConsumerGroupMetadata,
    CopiedBatch,
    PolledBatch,
    Provenance,
    TopicPartition,
)
from dataplane.delays import DELIVER_AT
from dataplane.errors import ErrorCode, MeridianError
from dataplane.hashing import partition_for_key
from dataplane.records import (
    HEADER_SIZE,
    Compression,
    HeadersLike,
    as_bytes,
    builder,
    copying,
    encode_headers,
)

_CODECS = {codec.name.lower(): codec for codec in Compression}
_NO_HEADERS = b"\x00"
_BATCH_RECORD_OVERHEAD = 6  # a record's length prefix and deltas, mostly
_current_lane = lanes.current_lane.get  # bound once: read on every send
_LANE_ERRORS = (ErrorCode.LANE_TOPIC_PENDING, ErrorCode.LANE_NOT_FOUND)
_LANE_ROUTES_KEPT = 4096  # (topic, lane) routes remembered by a producer


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


def _header_items(headers: HeadersLike | None) -> list[tuple[str, bytes | None]]:
    """``headers`` as pairs; the codec's ``TypeError`` for what it would refuse (a
    one-shot iterator would be read here and found empty by the encoder)."""
    if not headers:
        return []
    if isinstance(headers, Mapping):
        return list(headers.items())
    if not isinstance(headers, list | tuple):
        raise TypeError(
            f"a record's headers are a mapping, list or tuple, not {type(headers).__name__}"
        )
    return list(headers)


def _keys(headers: HeadersLike) -> Iterable[str]:
    """The names of a record's headers (what ``send`` checks for ``x-deliver-at``)."""
    if isinstance(headers, Mapping):
        return headers.keys()
    return [item[0] for item in headers] if isinstance(headers, list | tuple) else ()


def _any_headers(records: Sequence[RecordLike]) -> bool:
    """Whether some record has headers (which may name a lane)."""
    for record in records:
        if (
            type(record) is not bytes
            and isinstance(record, tuple)
            and len(record) > 2
            and record[2]
        ):
            return True
    return False


def _reposition(sent: DeliveryFutures, positions: list[int]) -> list[Segment]:
    """``sent``'s segments (of a part of a call) placed at the part's ``positions``."""
    out = []
    for seg in sent._segments:
        at = positions if seg.positions is None else [positions[i] for i in seg.positions]
        out.append(Segment(seg.result, seg.first, seg.start, seg.length, at))
    return out


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
    ``tls`` is a CA file path, or True for the system's roots. ``lane`` sends every
    record without a lane of its own to that lane (see the module docstring); an invalid
    name raises ``lanes.InvalidLaneNameError`` (a ``ValueError``). ``lane_confirm_ms``:
    how long a lane topic the brokers call ``LANE_NOT_FOUND`` is asked again before its
    records fail, since a lane declared a moment ago reaches the brokers with the
    controller's next metadata push (every second by default). ``route_lanes=False``:
    no lane routing at all (see the module docstring): records go to the topic named,
    headers untouched; ``lane`` must then be None.
    ``close_gaps``: when a batch fails for good and the broker surely did not store it,
    the idempotent producer moves the sequences of the partition's later batches down so
    they still land (the default, as Kafka's). ``close_gaps=False`` stops the partition
    instead: every later batch of it, in flight, queued or sent afterwards, fails with the
    first failure's error for the rest of the producer's life, so nothing is ever written
    after records that failed (a copier that resumes from the last record written, such
    as the mirror worker, must not jump over them). Make a new producer to write to the
    partition again.
    ``transactional_id`` (``<tenant>.<id>``) makes it transactional (module docstring;
    idempotent, with ``acks="all"`` whatever ``acks`` says, ``acks=0`` refused);
    ``transaction_timeout_ms`` is how long a transaction may stay open before its
    coordinator aborts it (and fences this producer).
    ``producer_group`` (``<tenant>.<group>``) lets it send half messages (``send_half``,
    ``halves.py``); with ``check_back`` (a callable given a ``HalfMessage``, returning a
    ``HalfOutcome``) it answers the group's check-backs. ``half_check_interval_ms``,
    ``half_max_checks`` and ``half_default_outcome`` (``"commit"`` or ``"rollback"``)
    set them for its half messages (0 / None: the brokers' defaults).
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
        lane: str | None = None,
        lane_confirm_ms: float = 3_000,
        route_lanes: bool = True,
        close_gaps: bool = True,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        producer_group: str | None = None,
        check_back: CheckBack | None = None,
        half_check_interval_ms: int = 0,
        half_max_checks: int = 0,
        half_default_outcome: str | None = None,
    ) -> None:
        self.lane = None if lane is None else lanes.check_lane_name(lane)
        if not route_lanes and lane is not None:
            raise ConfigError("a producer without lane routing (route_lanes=False) has no lane")
        self.route_lanes = bool(route_lanes)
        ack_level = _acks(acks)
        if transactional_id is not None:
            if not enable_idempotence or ack_level == 0:
                raise ConfigError("a transactional producer is idempotent, with acks='all'")
            ack_level = -1
            _positive(transaction_timeout_ms=transaction_timeout_ms)
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
            close_gaps=bool(close_gaps),
            transactional_id=transactional_id or "",
        )
        self._sender = Sender(self._acc, self._metadata, config, self._on_metadata)
        self._txn = (
            TransactionManager(
                transactional_id,
                int(transaction_timeout_ms),
                self._metadata,
                self._sender,
                self._acc,
                max_block_s=self._max_block_s,
            )
            if transactional_id is not None
            else None
        )
        self._topics = self._acc.topics
        self._append = self._acc.append
        self._topic_lock = threading.Lock()
        self._lane_routes: dict[
            tuple[str, str | None, str | None], tuple[str, bytes, dict[str, bytes | None]]
        ] = {}
        self._header_routes: dict[tuple[Any, ...], tuple[str, bytes]] = {}
        self._pending_lanes = PendingLaneTopics(
            self._metadata,
            delivery_timeout_s=delivery_timeout_ms / 1000,
            max_bytes=buffer_memory,
            block=block_on_full,
            max_block_s=self._max_block_s,
            confirm_s=lane_confirm_ms / 1000,
        )
        self._lane_confirm_s = lane_confirm_ms / 1000
        self._lane_refused_since: dict[str, float] = {}  # the sender's thread only
        self._scheduler = Scheduler(self)
        self._delays = DelayClient(self._metadata, timeout_s=request_timeout_ms / 1000)
        self._halves = self._half_messages(
            producer_group,
            check_back,
            half_check_interval_ms,
            half_max_checks,
            half_default_outcome,
            request_timeout_ms,
        )
        self._closed = False
        self._sender.start()
        if self._halves is not None:
            self._halves.start()

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
        lane: str | None = None,
        deliver_at: int | datetime | None = None,
        deliver_after: float | None = None,
    ) -> DeliveryFuture | DelayedFuture:
        """Queue one record; returns its ``DeliveryFuture`` without waiting.

        ``lane`` sends it to that lane (it wins over the record's ``x-lane`` header, the
        producer's lane and the lane in effect); see the module docstring.

        ``deliver_after`` (seconds, 1 s to 30 days) or ``deliver_at`` (ms since the epoch,
        or an aware ``datetime``; earlier than a second ahead: at once), or an
        ``x-deliver-at`` header, delays it: it is scheduled and delivered to its topic
        and partition when due, and a ``DelayedFuture`` answers its id
        (``RecordMetadata.delayed_id``). Raises ``INVALID_DELAY`` out of bounds.

        ``on_delivery(error, metadata)`` is called once delivered or failed. Raises at
        once: ``TypeError`` for a key, value or header that is not bytes;
        ``MESSAGE_TOO_LARGE`` for a record larger than ``max_request_bytes``;
        ``UNKNOWN_TOPIC_OR_PARTITION`` when the topic is not found within
        ``max_block_ms``; ``INVALID_PARTITIONS`` for a partition the topic still lacks
        after ``max_block_ms``;
        ``BufferFull``; the producer's fatal error once it has one; and, for a
        transactional producer, ``INVALID_TXN_STATE`` outside a transaction.
        """
        if self._txn is not None:
            self._txn.check_sending()
        if type(value) is not bytes and value is not None:
            value = as_bytes(value, "value")
        if key is not None and type(key) is not bytes:
            key = as_bytes(key, "key")
        if (
            deliver_at is not None
            or deliver_after is not None
            or (headers and DELIVER_AT in _keys(headers))
        ):
            due = (
                due_time(deliver_at, deliver_after)
                if deliver_at is not None or deliver_after is not None
                else header_deliver_at(headers)
            )
            return self._scheduler.send(
                topic,
                value,
                key,
                headers,
                partition,
                None if timestamp_ms is None else _timestamp(timestamp_ms),
                on_delivery,
                lane,
                int(due or 0),
            )
        encoded = _NO_HEADERS
        if not self.route_lanes:
            if lane is not None:
                raise ConfigError("lane= on a producer without lane routing (route_lanes=False)")
            if headers:
                encoded = encode_headers(_header_items(headers))
        elif (
            lane is not None
            or headers
            or self.lane is not None
            or _current_lane() is not None
            or (type(topic) is str and lanes.SEPARATOR in topic)  # a lane topic named outright
        ):
            if headers:
                if not isinstance(headers, Mapping | list | tuple):
                    headers = list(headers)  # read once, for the lane and for the encoder
                topic, encoded = self._route_with_headers(topic, lane, headers)
            else:
                topic, encoded = self._lane_only(topic, lane)
            if topic not in self._topics and lanes.is_lane_topic(topic):
                parked = self._send_to_lane(
                    topic, value, key, encoded, partition, timestamp_ms, on_delivery
                )
                if parked is not None:
                    return parked
        queues = self._topics.get(topic) or self._prepare(topic)
        if partition is not None and not (type(partition) is int and 0 <= partition < queues.count):
            queues = self._check_partition(topic, partition)
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        elif type(timestamp_ms) is not int or timestamp_ms < 0:
            timestamp_ms = _timestamp(timestamp_ms)
        future = self._append(queues, partition, key, value, encoded, timestamp_ms)
        if on_delivery is not None:
            future.add_delivery_callback(on_delivery)
        return future

    def send_batch(
        self,
        topic: str,
        records: Sequence[RecordLike] | Iterable[RecordLike],
        partition: int | None = None,
        on_delivery: DeliveryCallback | None = None,
        lane: str | None = None,
        deliver_at: int | datetime | None = None,
        deliver_after: float | None = None,
    ) -> DeliveryFutures | DelayedFutures:
        """Queue many records in one call; returns their ``DeliveryFutures`` at once.

        ``deliver_at`` / ``deliver_after`` delay every record of the call, as ``send``
        does (a ``DelayedFutures`` then answers, in call order).

        Lanes: ``lane`` sends every record to that lane; without it each record goes
        where ``send`` would send it (its ``x-lane`` header, the producer's lane, the
        lane in effect): the call's records are split by lane, each part keeping call
        order, and the futures stay in call order.

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
        if self._txn is not None:
            self._txn.check_sending()
        if not isinstance(records, list | tuple):
            records = list(records)
        if deliver_at is not None or deliver_after is not None:
            due = due_time(deliver_at, deliver_after)
            return self._scheduler.send_batch(topic, records, partition, on_delivery, lane, due)
        if not self.route_lanes:
            if lane is not None:
                raise ConfigError("lane= on a producer without lane routing (route_lanes=False)")
            return self._send_batch(topic, records, partition, on_delivery)
        with_headers = _any_headers(records)
        if with_headers:
            return self._send_batch_lanes(topic, records, partition, on_delivery, lane)
        if lane is not None or self.lane is not None or _current_lane() is not None:
            return self._send_batch_lane(topic, records, partition, on_delivery, lane)
        return self._send_batch(topic, records, partition, on_delivery)

    def _send_batch(
        self,
        topic: str,
        records: Sequence[RecordLike],
        partition: int | None,
        on_delivery: DeliveryCallback | None,
        now: int | None = None,
        shared: bytes | None = None,
    ) -> DeliveryFutures:
        """``shared``: the encoded headers of every record (records without headers of
        their own, as ``_send_batch_lane`` gives them)."""
        queues = self._topics.get(topic) or self._prepare(topic)
        if partition is not None and not (type(partition) is int and 0 <= partition < queues.count):
            queues = self._check_partition(topic, partition)
        total, largest, earliest, keyed = builder.records_size(records, shared)
        if earliest is not None and earliest < 0:
            raise MeridianError(ErrorCode.INVALID_TIMESTAMP, f"negative timestamp {earliest}")
        if largest > self._acc.max_record_bytes:
            self._acc.too_large(largest)
        if now is None:
            now = time.time_ns() // 1_000_000
        reserve = total + _BATCH_RECORD_OVERHEAD * len(records)
        segments = self._acc.append_many(queues, partition, records, now, reserve, keyed, shared)
        stamps = [now] * len(records) if earliest is None else _timestamps(records, now)
        futures = DeliveryFutures(segments, len(records), stamps)
        if on_delivery is not None:
            for future in futures:
                future.add_delivery_callback(on_delivery)
        return futures

    def send_copy(
        self, topic: str, polled: PolledBatch, partition: int, provenance: Provenance
    ) -> CopiedBatch:
        """Queue copies of a fetched batch's records (``Consumer.poll_batches``) to
        ``partition`` of ``topic``, in order, with no Python object per record: each keeps
        its key, value, timestamp and headers, and ``provenance`` adds or leaves out as
        ``Provenance`` says. Only on a producer without lane routing (``route_lanes=
        False``: an ``x-lane`` header never moves a copy). Records below the batch's
        ``min_offset`` are not copied.

        Raises ``CORRUPT_MESSAGE`` before queuing any when a record is malformed (checked
        as the decoder checks it), and what ``send_batch`` raises. The futures' metadata
        carry offsets; their timestamps are -1 (the records are never decoded).
        """
        if self.route_lanes:
            raise ConfigError("send_copy needs a producer without lane routing (route_lanes=False)")
        queues = self._topics.get(topic) or self._prepare(topic)
        if not (type(partition) is int and 0 <= partition < queues.count):
            queues = self._check_partition(topic, partition)
        rule = (provenance.origin_header.encode(), provenance.origin,
                provenance.offset_header.encode())  # fmt: skip
        fetched = polled.batch
        try:  # checked whole first, so that all or none are queued
            sized = copying.copy_records(
                None, fetched.data, fetched.start, fetched.end, fetched.base_offset,
                fetched.base_timestamp, polled.min_offset, 0, None, 2**62, *rule,
            )  # fmt: skip
        except ValueError as error:
            tp = f"{polled.tp.topic}/{polled.tp.partition}"
            raise MeridianError(
                ErrorCode.CORRUPT_MESSAGE,
                f"{tp}: the batch at offset {fetched.base_offset} has a bad record: {error}",
            ) from None
        if not sized[1]:
            return CopiedBatch(DeliveryFutures([], 0, []), sized[5], -1, 0, None)
        reserve = sized[4] + _BATCH_RECORD_OVERHEAD * sized[1]
        segments, copied, dropped, last, payload = self._acc.append_copy(
            queues, partition, polled, reserve, rule
        )
        futures = DeliveryFutures(segments, copied, [-1] * copied)
        return CopiedBatch(futures, dropped, last, payload, sized[2])

    # -- lanes ---------------------------------------------------------------------------
    def _lane_route(
        self, topic: str, explicit: str | None, headers: HeadersLike | None
    ) -> tuple[str, HeadersLike | None]:
        """The topic a record goes to and the headers it carries (see the module
        docstring); a name that already is a lane topic keeps its lane."""
        items = _header_items(headers)
        trunk, its_lane = lanes.split_topic(topic) if isinstance(topic, str) else (topic, None)
        if its_lane is not None:
            chosen: str | None = its_lane
            if explicit is not None and lanes.check_lane_name(explicit) != its_lane:
                raise ValueError(f"{topic!r} is a topic of lane {its_lane!r}, not {explicit!r}")
        else:
            chosen = lanes.lane_for_record(explicit=explicit, headers=items, configured=self.lane)
        if chosen is None:
            return topic, headers
        return lanes.lane_topic(trunk, chosen), lanes.with_lane_header(items, chosen)

    def _route_with_headers(
        self, topic: str, explicit: str | None, headers: HeadersLike
    ) -> tuple[str, bytes]:
        """``_lane_route`` of a record with headers, and its headers encoded; remembered
        per topic, lane and headers when the headers are a list or tuple of pairs (the
        usual case: the same few headers on every record of a stream)."""
        try:
            key = (
                (topic, explicit, _current_lane(), tuple(headers))
                if type(headers)
                in (
                    list,
                    tuple,
                )
                else None
            )
            known = None if key is None else self._header_routes.get(key)
        except TypeError:  # a pair that is not hashable: not remembered
            key = known = None
        if known is not None:
            return known
        target, routed = self._lane_route(topic, explicit, headers)
        known = (target, encode_headers(routed) if routed else _NO_HEADERS)
        if key is not None:
            if len(self._header_routes) >= _LANE_ROUTES_KEPT:
                self._header_routes.clear()
            self._header_routes[key] = known
        return known

    def _lane_only(self, topic: str, explicit: str | None) -> tuple[str, bytes]:
        """``_lane_route`` of a record without headers: the topic and its encoded
        ``x-lane`` header, remembered per topic and lane (the lane send path's cost)."""
        target, encoded, _ = self._lane_of_plain(topic, explicit)
        return target, encoded

    def _lane_of_plain(
        self, topic: str, explicit: str | None
    ) -> tuple[str, bytes, dict[str, bytes | None]]:
        """Where a record without headers goes: topic, and its headers encoded and as a
        dict (which the compiled codec encodes twice as fast as a list, for send_batch)."""
        in_effect = _current_lane() if explicit is None and self.lane is None else None
        cache_key = (topic, explicit, in_effect)
        known = self._lane_routes.get(cache_key)
        if known is None:
            target, headers = self._lane_route(topic, explicit, None)
            pairs = _header_items(headers)
            known = (target, encode_headers(pairs) if pairs else _NO_HEADERS, dict(pairs))
            if len(self._lane_routes) >= _LANE_ROUTES_KEPT:
                self._lane_routes.clear()
            self._lane_routes[cache_key] = known
        return known

    def _send_to_lane(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        encoded: bytes,
        partition: int | None,
        timestamp_ms: int | None,
        on_delivery: DeliveryCallback | None,
    ) -> DeliveryFuture | None:
        """Park the record behind ``topic``'s pending records, or fail it when its lane
        is not declared; None when the topic exists (send it as any record)."""
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000

        def replay() -> list[DeliveryFuture]:
            queues = self._topics.get(topic) or self._prepare(topic)
            if partition is not None and not (0 <= partition < queues.count):
                queues = self._check_partition(topic, partition)
            return [self._append(queues, partition, key, value, encoded, int(timestamp_ms))]

        results = self._pending_lanes.stand_ins(topic, 1)
        size = len(encoded) + len(key or b"") + len(value or b"")
        if not self._park_or_check(topic, replay, results, size):
            return None
        future = DeliveryFuture(results[0], 0, int(timestamp_ms))
        if on_delivery is not None:
            future.add_delivery_callback(on_delivery)
        return future

    def _park_or_check(
        self, topic: str, replay: Any, results: list[ProduceResult], size: int
    ) -> bool:
        """Park ``replay`` if ``topic`` waits to be created (or now turns out to), fail
        ``results`` if its lane is refused; False when the topic is ready."""
        if self._pending_lanes.park(topic, replay, results, start=False, size=size):
            return True
        try:
            self._prepare(topic)
        except MeridianError as error:
            # Not found is asked again for a while too (PendingLaneTopics.confirm_s): the
            # lane may have been declared a moment ago.
            if error.code in _LANE_ERRORS and self._pending_lanes.park(
                topic, replay, results, start=True, size=size
            ):
                return True
            if error.code != ErrorCode.LANE_NOT_FOUND:
                raise
            refusal = lane_error(topic, error.code, error.message)
            for result in results:
                result.complete(-1, error=refusal)
            return True
        return False

    def _send_batch_lane(
        self,
        topic: str,
        records: Sequence[RecordLike],
        partition: int | None,
        on_delivery: DeliveryCallback | None,
        lane: str | None,
    ) -> DeliveryFutures:
        """``send_batch`` of records without headers: all to one lane, each given the
        lane's header."""
        target, encoded, pairs = self._lane_of_plain(topic, lane)
        if not pairs:
            return self._send_batch(target, records, partition, on_delivery)
        if target in self._topics or self._lane_topic_ready(target):
            # the codec gives every record the lane's header
            return self._send_batch(target, records, partition, on_delivery, shared=encoded)
        routed: list[RecordLike] = [
            (r[0], r[1], pairs, *r[3:]) if isinstance(r, tuple) else (None, r, pairs)
            for r in records
        ]
        now = time.time_ns() // 1_000_000
        positions = list(range(len(routed)))
        segments = self._lane_part(target, routed, partition, positions, now)
        result = DeliveryFutures(segments, len(routed), _timestamps(routed, now))
        if on_delivery is not None:
            for future in result:
                future.add_delivery_callback(on_delivery)
        return result

    def _lane_topic_ready(self, topic: str) -> bool:
        """Whether the lane topic exists (now known to the producer); False while it is
        being made or its lane is refused (the parking path decides) or records already
        wait for it."""
        if self._pending_lanes.waiting(topic):
            return False
        try:
            self._prepare(topic)
        except MeridianError as error:
            if error.code in _LANE_ERRORS:
                return False
            raise
        return True

    def _send_batch_lanes(
        self,
        topic: str,
        records: Sequence[RecordLike],
        partition: int | None,
        on_delivery: DeliveryCallback | None,
        lane: str | None,
    ) -> DeliveryFutures:
        """``send_batch`` with lanes: the records split by the topic each goes to."""
        groups: dict[str, list[int]] = {}
        routed: list[RecordLike] = []
        for index, record in enumerate(records):
            headers = record[2] if isinstance(record, tuple) and len(record) > 2 else None
            try:
                target, carried = self._lane_route(topic, lane, headers)
            except TypeError as error:
                raise TypeError(f"record {index}: {error}") from None
            if carried is not headers:
                if isinstance(record, tuple):
                    record = (record[0], record[1], carried, *record[3:])
                else:  # a bare value
                    record = (None, record, carried)
            routed.append(record)
            groups.setdefault(target, []).append(index)
        # all or none: what the parts would refuse is refused before any is queued
        _, largest, earliest, _ = builder.records_size(routed)
        if earliest is not None and earliest < 0:
            raise MeridianError(ErrorCode.INVALID_TIMESTAMP, f"negative timestamp {earliest}")
        if largest > self._acc.max_record_bytes:
            self._acc.too_large(largest)
        now = time.time_ns() // 1_000_000
        stamps = _timestamps(routed, now)
        segments: list[Segment] = []
        for target, positions in groups.items():
            part = [routed[i] for i in positions]
            futures = self._lane_part(target, part, partition, positions, now)
            segments.extend(futures)
        result = DeliveryFutures(segments, len(records), stamps)
        if on_delivery is not None:
            for future in result:
                future.add_delivery_callback(on_delivery)
        return result

    def _lane_part(
        self,
        target: str,
        part: list[RecordLike],
        partition: int | None,
        positions: list[int],
        now: int,
    ) -> list[Segment]:
        """The segments of one topic's share of a ``send_batch`` call."""
        if target in self._topics or not lanes.is_lane_topic(target):
            sent = self._send_batch(target, part, partition, None, now)
            return _reposition(sent, positions)

        def replay() -> list[DeliveryFuture]:
            return list(self._send_batch(target, part, partition, None, now))

        size = builder.records_size(part)[0]  # (and refuses bad records now, not later)
        results = self._pending_lanes.stand_ins(target, len(part))
        if self._park_or_check(target, replay, results, size):
            return [Segment(r, 0, i, 1, positions) for i, r in enumerate(results)]
        return _reposition(self._send_batch(target, part, partition, None, now), positions)

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
                if error.code in _LANE_ERRORS:  # the caller parks or fails the records
                    raise
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

    def _on_metadata(self) -> None:
        """The sender refreshed the metadata (on its thread): adopt it, and fail the
        records of a lane topic whose lane the brokers have refused for
        ``lane_confirm_ms`` (the lane was deleted, or no longer covers the trunk) with
        ``LANE_NOT_FOUND`` rather than let them wait for a leader."""
        self._update_topics()
        snapshot = self._metadata.snapshot()
        now = time.monotonic()
        with self._acc.lock:
            names = list(self._acc.topics)
        refused: list[str] = []
        for name in names:
            if snapshot.topic_errors.get(name) != ErrorCode.LANE_NOT_FOUND:
                self._lane_refused_since.pop(name, None)
                continue
            since = self._lane_refused_since.setdefault(name, now)
            if now - since >= self._lane_confirm_s:
                refused.append(name)
        for name in refused:
            error = lane_error(name, ErrorCode.LANE_NOT_FOUND, "refused by the brokers")
            self._sender.fail_topic(name, error)

    def partitions_for(self, topic: str) -> list[int]:
        """The partitions of ``topic``."""
        return self._metadata.partitions_for(topic)

    def cancel_delayed(self, delayed_id: str) -> int:
        """Cancel the scheduled record ``delayed_id`` (``RecordMetadata.delayed_id``);
        returns when it was due. Raises ``DELAYED_RECORD_NOT_FOUND`` (no such pending
        record) or ``DELAYED_RECORD_DELIVERED`` (too late); cancelling twice is fine."""
        return self._delays.cancel(delayed_id)

    # -- half messages -------------------------------------------------------------------
    def _half_messages(
        self,
        group: str | None,
        check_back: CheckBack | None,
        interval_ms: int,
        max_checks: int,
        default: str | None,
        request_timeout_ms: float,
    ) -> HalfMessages | None:
        if group is None:
            if check_back is not None:
                raise ConfigError("check_back needs a producer_group")
            return None
        outcomes = {"commit": HalfOutcome.COMMIT, "rollback": HalfOutcome.ROLLBACK, None: None}
        if default not in outcomes:
            raise ConfigError(
                f"half_default_outcome must be 'commit' or 'rollback', not {default!r}"
            )
        _not_negative(half_check_interval_ms=interval_ms, half_max_checks=max_checks)
        return HalfMessages(
            self._metadata,
            group,
            client_id=self.client_id,
            request_timeout_s=request_timeout_ms / 1000,
            max_block_s=self._max_block_s,
            check_interval_ms=int(interval_ms),
            max_checks=int(max_checks),
            default_outcome=outcomes[default],
            check_back=check_back,
        )

    def send_half(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: HeadersLike | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> HalfMessage:
        """Store a half message and return its handle once stored (blocking): invisible
        to every consumer until ``commit()``, never visible after ``rollback()``; checked
        back with the producer group when neither comes (``halves.py``). It goes to the
        topic named (no lane routing), to ``partition`` or its key's (murmur2), else to a
        random one."""
        if self._halves is None:
            raise ConfigError("send_half needs Producer(producer_group=...)")
        if type(value) is not bytes and value is not None:
            value = as_bytes(value, "value")
        if key is not None and type(key) is not bytes:
            key = as_bytes(key, "key")
        pairs = [(name, as_bytes(data, "a header value")) for name, data in _header_items(headers)]
        partitions = self._wait_for_topic(topic)
        if partition is None:
            partition = (
                partition_for_key(key, len(partitions))
                if key is not None
                else random.choice(partitions)
            )
        elif partition not in partitions:
            self._check_partition(topic, partition)
        stamp = time.time_ns() // 1_000_000 if timestamp_ms is None else _timestamp(timestamp_ms)
        return self._halves.send(topic, partition, value, key, pairs, stamp)

    # -- transactions --------------------------------------------------------------------
    def _transactions(self, call: str) -> TransactionManager:
        if self._txn is None:
            raise ConfigError(f"{call} needs Producer(transactional_id=...)")
        self._not_from_a_callback(call)
        return self._txn

    def init_transactions(self, timeout: float | None = None) -> None:
        """Take the transactional id's producer id and a new epoch (fencing every older
        producer of it, whose open transaction is aborted). Once, before the first
        transaction; ``timeout`` seconds (default ``max_block_ms``)."""
        self._transactions("init_transactions").init_transactions(timeout)

    def begin_transaction(self) -> None:
        """Open a transaction: what is sent until it ends belongs to it."""
        self._transactions("begin_transaction").begin_transaction()

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, int],
        group_metadata: ConsumerGroupMetadata,
        timeout: float | None = None,
    ) -> None:
        """Commit a consumer group's ``offsets`` (the next offsets to read) inside the
        transaction: they count only if it commits. ``group_metadata`` is
        ``Consumer.group_metadata()``: a consumer of an older generation is refused."""
        self._transactions("send_offsets_to_transaction").send_offsets(
            offsets, group_metadata, timeout
        )

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Deliver everything sent in the transaction, then commit it. Raises when it
        cannot commit (a record failed): abort it then."""
        self._transactions("commit_transaction").commit_transaction(self.flush, timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: what was not sent is dropped (its futures fail), what
        was is never visible to read_committed consumers."""
        self._transactions("abort_transaction").abort_transaction(timeout)

    # -- flushing and closing ------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now, without lingering, and wait until it is delivered.

        Failed deliveries do not make it raise (their futures hold the errors); raises
        ``REQUEST_TIMED_OUT`` when ``timeout`` seconds pass first.
        """
        self._not_from_a_callback("flush")
        parked = self._pending_lanes.results()
        with self._acc.lock:
            self._acc.flushing += 1
            batches = list(self._acc.incomplete)
        self._sender.wakeup()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            # records waiting for their lane topic join the accumulator once it exists
            # (while flushing counts, so they do not linger either)
            waits = [b.result for b in batches] + parked
            for result in waits:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not result.wait(remaining):
                    left = sum(1 for r in waits if not r.done())
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
        self._pending_lanes.close(
            timeout,
            MeridianError(
                ErrorCode.REQUEST_TIMED_OUT, "the producer closed before its lane topic existed"
            ),
        )
        if self._halves is not None:
            self._halves.close()
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

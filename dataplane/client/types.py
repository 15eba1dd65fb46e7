"""Value types of the SDK's public API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from dataplane.delays import attempt_in
from lanes import SEPARATOR


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record landed (offset -1 with ``acks=0``). A record sent
    with a delay (``deliver_at``/``deliver_after``) has offset -1, ``deliver_at`` (ms
    since the epoch) and ``delayed_id``, which cancels it (``Producer.cancel_delayed``)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    log_append_time: int = -1
    delayed_id: str | None = None
    deliver_at: int = -1


class RecordSource(NamedTuple):
    """What every record of one fetched batch shares."""

    topic: str
    partition: int
    timestamp_type: int  # 0: CreateTime, 1: LogAppendTime
    leader_epoch: int = -1


Headers = tuple[tuple[str, bytes | None], ...]


class ConsumerRecord:
    """One consumed record: ``topic``, ``partition``, ``offset``, ``timestamp``,
    ``timestamp_type`` (0 CreateTime, 1 LogAppendTime), ``key``, ``value``, ``headers``
    (``(key, value)`` pairs) and ``leader_epoch``; ``lane`` is the lane of its topic
    (None on the trunk).

    Read-only by contract. The consumer builds millions of these a second, so the
    fields a batch shares live in one ``RecordSource`` and headers are decoded on first
    access (``dataplane.client.decoder``); equality compares every field.
    """

    __slots__ = ("_headers", "_source", "key", "offset", "timestamp", "value")

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    _source: RecordSource
    _headers: Any  # a Headers tuple, or a lazy reader with a decode() method

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        timestamp_type: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers = (),
        leader_epoch: int = -1,
    ) -> None:
        self._source = RecordSource(topic, partition, timestamp_type, leader_epoch)
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self._headers = tuple((k, v) for k, v in headers)

    @property
    def topic(self) -> str:
        return self._source.topic

    @property
    def partition(self) -> int:
        return self._source.partition

    @property
    def timestamp_type(self) -> int:
        return self._source.timestamp_type

    @property
    def leader_epoch(self) -> int:
        return self._source.leader_epoch

    @property
    def lane(self) -> str | None:
        """The record's lane: that of its lane topic (``acme.orders~ppe`` -> ``ppe``),
        None for a trunk topic's record."""
        topic = self._source.topic
        return topic.partition(SEPARATOR)[2] or None

    @property
    def headers(self) -> Headers:
        headers = self._headers
        if type(headers) is not tuple:
            headers = self._headers = headers.decode()
        return headers  # type: ignore[no-any-return]

    @property
    def attempt(self) -> int:
        """The number of this delivery of the record to its group: 1, or what its
        ``x-attempt`` header says when it was read from the retry topic of the group its
        ``x-retry-group`` names (``Consumer.retry_later``); the headers of a record read
        anywhere else count for nothing."""
        return attempt_in(self._source.topic, self.headers)

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self._source.topic, self._source.partition)

    def _fields(self) -> tuple[Any, ...]:
        return (
            self.topic,
            self.partition,
            self.offset,
            self.timestamp,
            self.timestamp_type,
            self.key,
            self.value,
            self.headers,
            self.leader_epoch,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConsumerRecord):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash((self.topic, self.partition, self.offset, self.timestamp))

    def __repr__(self) -> str:
        return (
            f"ConsumerRecord(topic={self.topic!r}, partition={self.partition}, "
            f"offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
            f"value={_short(self.value)}, headers={self.headers!r})"
        )


def _short(value: bytes | None) -> str:
    if value is None or len(value) <= 60:
        return repr(value)
    return f"{value[:60]!r}...({len(value)} bytes)"


ORIGIN_REGION = "x-origin-region"
ORIGIN_OFFSET = "x-origin-offset"


@dataclass(frozen=True, slots=True)
class PolledBatch:
    """One fetched batch of a partition, its records left undecoded (``Consumer.
    poll_batches``), for copying tools to hand to ``Producer.send_copy``.

    ``count`` is how many records the batch holds (of a batch ``poll`` began, those
    left), ``next_offset`` the offset after it (the
    consumer's position once it is returned); records below ``min_offset`` (the position
    it was taken at) were returned before and are not copied. The records are checked
    when they are copied, as the decoder checks them."""

    tp: TopicPartition
    min_offset: int
    next_offset: int
    count: int
    batch: Any  # dataplane.records.FetchedBatch: checked (CRC) and decompressed


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where copies come from (``Producer.send_copy``): a record without an
    ``origin_header`` gains ``origin_header: origin`` and ``offset_header: <its source
    offset, decimal ASCII>`` after its own headers; a record that has an origin (an
    ``origin_header`` with a value: it came by a copy itself) is left out, so records
    travel one hop and copies never loop."""

    origin: bytes
    origin_header: str = ORIGIN_REGION
    offset_header: str = ORIGIN_OFFSET


@dataclass(frozen=True, slots=True)
class CopiedBatch:
    """What ``Producer.send_copy`` queued: ``futures`` (one per copied record, in
    order), how many records were ``dropped`` by the provenance rule, the source offset
    of the last record copied (-1 if none), the key and value bytes copied and the
    timestamp of the first record copied (None if none)."""

    futures: Any  # DeliveryFutures
    dropped: int
    last_offset: int
    payload_bytes: int
    first_timestamp: int | None


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """A consumer's place in its group, for ``Producer.send_offsets_to_transaction``: the
    group coordinator refuses a transactional commit of an older generation (a zombie
    that lost its partitions). Generation -1 and no member: a consumer outside group
    membership (``assign``)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str = ""

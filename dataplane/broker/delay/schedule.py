"""Taking records due later: the checks on what goes into a timer log, and the records
with ``x-deliver-at`` sent to a topic (docs/delay.md).

A record of a timer log (``__delay.<tenant>``) is a scheduled record: the record to
deliver plus ``x-deliver-at``, ``x-delay-topic`` and ``x-delay-partition``, each once
(``scheduled_of`` reads them). A client producing to a timer log (the SDK's
``deliver_at=``) has every record checked before any is stored
(``check_timer_batches``): not a control or transactional batch, none of the leader's
own headers (``x-delay-marker``, ``x-delay-origin``), a delivery time at most 30 days
ahead, a target topic of the timer log's own tenant that the caller may produce to (each
record is checked: one batch may hold records for many topics), a partition number, and
a size its topic can take once delivered (its ``max_message_bytes``, when known here:
``MESSAGE_TOO_LARGE`` otherwise, rather than a drop at delivery). The batches are then
stored as sent, so the timer partition's producer table makes the client's retries
idempotent.

A client producing to a topic ``T`` a request holding records with ``x-deliver-at`` (a
Kafka client, or a plain gRPC producer) sees it *diverted* (``split_marked``): the log
noticed the header while validating the request and stored nothing
(``MarkedRecordsError``). Only requests without a producer id are diverted: an idempotent
producer's batch carries sequences for ``T``-``p`` that nothing written there would
account for, so such a request is refused whole (``DELAY_NOT_IDEMPOTENT``, nothing
stored) and the SDK schedules such records idempotently through the timer log instead.
Everything is built and checked before anything is stored: the records with the header
become scheduled records for the timer partition of ``T``-``p``; a batch without such a
record is kept as it was sent; the other records of a batch that has some are built into
a batch of their own with the same compression, within ``T``'s ``max_message_bytes``
(split when the rebuilt batch is larger; a record too large alone refuses the request,
``MESSAGE_TOO_LARGE``). Then the scheduled records are stored (acknowledged by every
in-sync replica), then the rest is appended to ``T``-``p``, in the order sent, so they
may land after records sent after them. A diverted request that fails after its delayed
records were scheduled is retried by a producer without idempotence, which may schedule
them twice, as any retry of such a producer may store a record twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from dataplane.delays import (
    BROKER_HEADERS,
    DELAY_MARKER,
    DELAY_ORIGIN,
    DELAY_PARTITION,
    DELAY_TOPIC,
    DELAYED_FROM,
    DELIVER_AT,
    NOT_DELIVERED,
    check_deliver_at,
    deliver_at_in,
    parse_deliver_at,
    tenant_of_topic,
)
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import HEADER_SIZE, BatchBuilder, BatchHeader, Record, decode_batch
from dataplane.records.header import read_header

MAX_TIMER_BATCH_BYTES = 512 * 1024
# The longest id a delivered record can carry beyond its topic's name:
# ":<timer partition>:<timer offset>".
_ID_TAIL = 1 + 5 + 1 + 19

TimerRecord = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]
LimitOf = Callable[[str, int], int | None]


@dataclass(frozen=True, slots=True)
class Scheduled:
    """Where and when a scheduled record is delivered."""

    deliver_at: int
    topic: str
    partition: int


def _once(record: Record, name: str) -> bytes | None:
    found = [value for key, value in record.headers if key == name]
    if len(found) > 1:
        raise MeridianError(ErrorCode.INVALID_RECORD, f"a record carries {name} twice")
    return found[0] if found else None


def scheduled_of(record: Record) -> Scheduled:
    """The scheduling headers of a timer log's record; ``INVALID_DELAY`` (the time) or
    ``INVALID_RECORD`` (the target) when they are missing, malformed or repeated."""
    if any(key == DELAY_MARKER for key, _ in record.headers):
        raise MeridianError(ErrorCode.INVALID_RECORD, f"{DELAY_MARKER} is the broker's own")
    due = deliver_at_in(record.headers)
    if due is None:
        due = parse_deliver_at(None)  # raises INVALID_DELAY
    topic, partition = _once(record, DELAY_TOPIC), _once(record, DELAY_PARTITION)
    if topic is None or partition is None:
        raise MeridianError(
            ErrorCode.INVALID_RECORD,
            f"a record of a timer log needs {DELAY_TOPIC} and {DELAY_PARTITION} headers",
        )
    try:
        name = topic.decode()
    except UnicodeDecodeError:
        raise MeridianError(ErrorCode.INVALID_RECORD, f"{DELAY_TOPIC} is not UTF-8") from None
    if not partition.isdigit() or len(partition) > 7:
        raise MeridianError(
            ErrorCode.INVALID_RECORD, f"{DELAY_PARTITION} {partition[:20]!r} is not a partition"
        )
    return Scheduled(due, name, int(partition))


def origin_of(record: Record) -> int | None:
    """The offset a carried-forward record's id names (None: it was not carried)."""
    value = _once(record, DELAY_ORIGIN)
    if value is None:
        return None
    if not value.isdigit() or len(value) > 19:
        raise MeridianError(ErrorCode.INVALID_RECORD, f"{DELAY_ORIGIN} {value[:20]!r}")
    return int(value)


def delivered_size(record: Record, delayed_id: object) -> int:
    """At most how many bytes ``record`` takes in a batch the mover delivers (its batch
    header aside): its key, value and headers less the scheduling ones, plus
    ``x-delayed-from: <delayed_id>``, and every length and delta at its widest."""
    size = 21 + len(record.key or b"") + len(record.value or b"") + 5
    for key, value in record.headers:
        if key not in NOT_DELIVERED:
            size += 10 + len(key.encode()) + len(value or b"")
    return size + 10 + len(DELAYED_FROM) + len(str(delayed_id))


def _check_size(record: Record, scheduled: Scheduled, limit: int | None, position: str) -> None:
    if limit is None or limit <= 0:
        return
    size = HEADER_SIZE + delivered_size(record, scheduled.topic + "x" * _ID_TAIL)
    if size > limit:
        raise MeridianError(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"{position} for {scheduled.topic} would be delivered in a batch of up to {size} "
            f"bytes, over the topic's max_message_bytes of {limit}",
        )


def batches(data: bytes) -> Iterator[tuple[int, BatchHeader, list[Record]]]:
    """Each batch of ``data`` (already validated by the log): its position, header and
    records."""
    position = 0
    while position < len(data):
        header = read_header(data, position)
        yield position, *decode_batch(data, position, verify_crc=False)
        position += header.size


def check_client_batch(header: BatchHeader) -> None:
    if header.is_control or header.is_transactional:
        raise MeridianError(
            ErrorCode.INVALID_RECORD, "control and transactional batches cannot be delayed"
        )


def _check_client_headers(record: Record, position: str) -> None:
    for key, _ in record.headers:
        if key in BROKER_HEADERS:
            raise MeridianError(ErrorCode.INVALID_RECORD, f"{position}: {key} is the broker's own")


def check_timer_batches(
    data: bytes,
    tenant: str,
    now_ms: int,
    may_produce: Callable[[str], MeridianError | None],
    limit_of: LimitOf | None = None,
) -> list[Scheduled]:
    """Check every record a client sends to tenant ``tenant``'s timer log (see the
    module docstring); ``may_produce(topic)`` refuses a topic the caller may not write
    (asked once per topic); ``limit_of(topic, partition)`` is the topic's
    ``max_message_bytes`` (None: not known here). Raises the first refusal; returns what
    each record asks."""
    allowed: dict[str, MeridianError | None] = {}
    out = []
    for _, header, records in batches(data):
        check_client_batch(header)
        for record in records:
            position = f"record {record.offset - header.base_offset}"
            _check_client_headers(record, position)
            scheduled = scheduled_of(record)
            if tenant_of_topic(scheduled.topic) != tenant or "." not in scheduled.topic:
                raise MeridianError(
                    ErrorCode.INVALID_RECORD,
                    f"{position} is for {scheduled.topic!r}, not a topic of tenant {tenant!r}",
                )
            check_deliver_at(scheduled.deliver_at, now_ms)
            if scheduled.topic not in allowed:
                allowed[scheduled.topic] = may_produce(scheduled.topic)
            refusal = allowed[scheduled.topic]
            if refusal is not None:
                raise refusal
            if limit_of is not None:
                _check_size(record, scheduled, limit_of(scheduled.topic, scheduled.partition),
                            position)  # fmt: skip
            out.append(scheduled)
    return out


@dataclass
class Diverted:
    """A request to a topic split: the records for the timer log (as timer records) and
    the batches to append to the topic itself, in the order sent."""

    timer_records: list[TimerRecord]
    immediate: list[bytes]


def split_marked(
    data: bytes, topic: str, partition: int, now_ms: int, max_batch_bytes: int
) -> Diverted:
    """Split a diverted request (see the module docstring); raises ``INVALID_RECORD``,
    ``DELAY_NOT_IDEMPOTENT``, ``INVALID_DELAY`` or ``MESSAGE_TOO_LARGE`` before anything
    is stored. ``max_batch_bytes``: the topic's ``max_message_bytes``."""
    parsed = list(batches(data))
    if any(header.producer_id >= 0 for _, header, _ in parsed):
        raise MeridianError(
            ErrorCode.DELAY_NOT_IDEMPOTENT,
            f"{topic}-{partition}: a request holding records with {DELIVER_AT} is taken only "
            "from a producer without idempotence; or use the SDK's deliver_at= (which "
            "schedules them idempotently)",
        )
    out = Diverted([], [])
    target: list[tuple[str, bytes | None]] = [
        (DELAY_TOPIC, topic.encode()),
        (DELAY_PARTITION, str(partition).encode()),
    ]
    for position, header, records in parsed:
        check_client_batch(header)
        dues = [deliver_at_in(r.headers) for r in records]
        if all(due is None for due in dues):
            out.immediate.append(data[position : position + header.size])
            continue
        kept = []
        for record, due in zip(records, dues, strict=True):
            if due is None:
                kept.append(record)
                continue
            where = f"record {record.offset - header.base_offset}"
            _check_client_headers(record, where)
            check_deliver_at(due, now_ms)
            scheduled = Scheduled(due, topic, partition)
            _check_size(record, scheduled, max_batch_bytes, where)
            headers = [(k, v) for k, v in record.headers if k not in (DELAY_TOPIC, DELAY_PARTITION)]
            out.timer_records.append((record.key, record.value, headers + target, record.timestamp))
        if kept:
            out.immediate += rebuild_batches(kept, header, max_batch_bytes)
    return out


def build_batches(records: list[TimerRecord]) -> list[bytes]:
    """Batches (no producer id) of ``(key, value, headers, timestamp)`` records, each of
    at most ``MAX_TIMER_BATCH_BYTES`` of records unless one record is larger."""
    out: list[bytes] = []
    builder = BatchBuilder()
    for key, value, headers, timestamp in records:
        if len(builder) and builder.estimated_size() > MAX_TIMER_BATCH_BYTES:
            out.append(builder.build())
            builder = BatchBuilder()
        builder.append(value, key=key, headers=headers, timestamp=timestamp)
    if len(builder):
        out.append(builder.build())
    return out


def rebuild_batches(records: list[Record], like: BatchHeader, max_batch_bytes: int) -> list[bytes]:
    """``records`` (keys, values, headers, timestamps) in batches without a producer id,
    compressed as the batch ``like`` was, each within ``max_batch_bytes`` (halved until
    they fit); ``MESSAGE_TOO_LARGE`` when one record alone does not."""
    builder = BatchBuilder(compression=like.compression)
    for record in records:
        builder.append(
            record.value, key=record.key, headers=record.headers, timestamp=record.timestamp
        )
    batch = builder.build()
    if len(batch) <= max_batch_bytes:
        return [batch]
    if len(records) == 1:
        raise MeridianError(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"a record of {len(batch)} bytes in a batch of its own is over the topic's "
            f"max_message_bytes of {max_batch_bytes}",
        )
    half = len(records) // 2
    return rebuild_batches(records[:half], like, max_batch_bytes) + rebuild_batches(
        records[half:], like, max_batch_bytes
    )

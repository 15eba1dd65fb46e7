"""Taking records due later: the checks on what goes into a timer log, and the records
with ``x-deliver-at`` sent to a topic (docs/delay.md).

A record of a timer log (``__delay.<tenant>``) is a scheduled record: the record to
deliver plus ``x-deliver-at``, ``x-delay-topic`` and ``x-delay-partition``
(``scheduled_of`` reads them). A client producing to a timer log (the SDK's
``deliver_at=``) has every record checked before any is stored
(``check_timer_batches``): not a control or transactional batch, no marker header, a
delivery time at most 30 days ahead, a target topic of the timer log's own tenant that
the caller may produce to (each record is checked: one batch may hold records for many
topics) and a partition number. The batches are then stored as sent, so the timer
partition's producer table makes the client's retries idempotent.

A client producing to a topic ``T`` a batch holding records with ``x-deliver-at`` (a
Kafka client, or a plain gRPC producer) sees it *diverted* (``divert``): the log noticed
the header while validating the request and stored nothing (``MarkedRecordsError``).
The records with the header go to the timer partition of ``T``-``p`` as scheduled
records (acknowledged by every in-sync replica), then the others, if any, are appended
to ``T``-``p`` in a new batch, so they may land after records sent after them. Only
batches without a producer id are diverted: an idempotent producer's batch carries a
sequence for ``T``-``p`` that nothing written there would account for, so it is refused
(``DELAY_NOT_IDEMPOTENT``, nothing stored) and the SDK schedules such records
idempotently through the timer log instead. A diverted request that fails after its
delayed records were scheduled is retried by a producer without idempotence, which
may schedule them twice, as any retry of such a producer may store a record twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from dataplane.delays import (
    DELAY_MARKER,
    DELAY_PARTITION,
    DELAY_TOPIC,
    DELIVER_AT,
    check_deliver_at,
    parse_deliver_at,
    tenant_of_topic,
)
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import BatchBuilder, BatchHeader, Record, decode_batch
from dataplane.records.header import read_header

MAX_TIMER_BATCH_BYTES = 512 * 1024


@dataclass(frozen=True, slots=True)
class Scheduled:
    """Where and when a scheduled record is delivered."""

    deliver_at: int
    topic: str
    partition: int


def scheduled_of(record: Record) -> Scheduled:
    """The scheduling headers of a timer log's record; ``INVALID_DELAY`` (the time) or
    ``INVALID_RECORD`` (the target) when they are missing or malformed."""
    deliver_at = topic = partition = None
    for key, value in record.headers:
        if key == DELIVER_AT:
            deliver_at = value
        elif key == DELAY_TOPIC:
            topic = value
        elif key == DELAY_PARTITION:
            partition = value
        elif key == DELAY_MARKER:
            raise MeridianError(ErrorCode.INVALID_RECORD, f"{DELAY_MARKER} is the broker's own")
    due = parse_deliver_at(deliver_at)
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


def batches(data: bytes) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Each batch of ``data`` (already validated by the log) with its records."""
    position = 0
    while position < len(data):
        header = read_header(data, position)
        yield decode_batch(data, position, verify_crc=False)
        position += header.size


def check_client_batch(header: BatchHeader) -> None:
    if header.is_control or header.is_transactional:
        raise MeridianError(
            ErrorCode.INVALID_RECORD, "control and transactional batches cannot be delayed"
        )


def check_timer_batches(
    data: bytes,
    tenant: str,
    now_ms: int,
    may_produce: Callable[[str], MeridianError | None],
) -> list[Scheduled]:
    """Check every record a client sends to tenant ``tenant``'s timer log (see the
    module docstring); ``may_produce(topic)`` refuses a topic the caller may not write
    (asked once per topic). Raises the first refusal; returns what each record asks."""
    allowed: dict[str, MeridianError | None] = {}
    out = []
    for header, records in batches(data):
        check_client_batch(header)
        for record in records:
            scheduled = scheduled_of(record)
            if tenant_of_topic(scheduled.topic) != tenant or "." not in scheduled.topic:
                raise MeridianError(
                    ErrorCode.INVALID_RECORD,
                    f"record {record.offset - header.base_offset} is for {scheduled.topic!r},"
                    f" not a topic of tenant {tenant!r}",
                )
            check_deliver_at(scheduled.deliver_at, now_ms)
            if scheduled.topic not in allowed:
                allowed[scheduled.topic] = may_produce(scheduled.topic)
            refusal = allowed[scheduled.topic]
            if refusal is not None:
                raise refusal
            out.append(scheduled)
    return out


@dataclass
class Diverted:
    """A request to a topic split: the records for the timer log (as timer records) and
    the others, to append to the topic itself."""

    timer_records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]
    immediate: list[Record]


def split_marked(data: bytes, topic: str, partition: int, now_ms: int) -> Diverted:
    """Split a diverted request (see the module docstring); raises ``INVALID_RECORD``
    (a control or transactional batch), ``DELAY_NOT_IDEMPOTENT`` or ``INVALID_DELAY``
    before anything is stored."""
    out = Diverted([], [])
    target: list[tuple[str, bytes | None]] = [
        (DELAY_TOPIC, topic.encode()),
        (DELAY_PARTITION, str(partition).encode()),
    ]
    for header, records in batches(data):
        check_client_batch(header)
        marked = [any(k == DELIVER_AT for k, _ in r.headers) for r in records]
        if any(marked) and header.producer_id >= 0:
            raise MeridianError(
                ErrorCode.DELAY_NOT_IDEMPOTENT,
                f"{topic}-{partition}: records with {DELIVER_AT} in an idempotent producer's "
                "batch are refused; send them without idempotence, or with the SDK's "
                "deliver_at= (which schedules them idempotently)",
            )
        for record, is_marked in zip(records, marked, strict=True):
            if not is_marked:
                out.immediate.append(record)
                continue
            due = parse_deliver_at(_last(record, DELIVER_AT))
            check_deliver_at(due, now_ms)
            headers = [(k, v) for k, v in record.headers if k not in (DELAY_TOPIC, DELAY_PARTITION)]
            out.timer_records.append((record.key, record.value, headers + target, record.timestamp))
    return out


def _last(record: Record, name: str) -> bytes | None:
    found = None
    for key, value in record.headers:
        if key == name:
            found = value
    return found


def build_batches(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
) -> list[bytes]:
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


def rebuild_batch(records: list[Record]) -> bytes:
    """One batch (no producer id) of ``records`` with their keys, values, headers and
    timestamps (the part of a diverted request that goes to its topic)."""
    builder = BatchBuilder()
    for record in records:
        builder.append(
            record.value, key=record.key, headers=record.headers, timestamp=record.timestamp
        )
    return builder.build()

"""Delayed delivery and retries: the names, headers, ids and bounds that the SDK and the
brokers share (docs/delay.md).

A record due later is scheduled in its tenant's *timer log*, the internal topic
``__delay.<tenant>`` of the cluster holding its topic, as the record itself plus three
headers: ``x-deliver-at`` (when, in ms since the epoch), ``x-delay-topic`` and
``x-delay-partition`` (where to). The timer partition of a record for partition ``p`` of
topic ``T`` is ``murmur2("T-p") mod n`` (``timer_partition``), so the delayed records of a
partition keep their order among equal delivery times. Its *id* is
``<topic>:<timer partition>:<timer offset>`` (``DelayedId``); the delivered record carries
it as ``x-delayed-from``, and loses the three scheduling headers.

Bounds: a delay (``deliver_after``) is 1 s to 30 days; a delivery time (``deliver_at`` or
``x-deliver-at``) later than 30 days from now (plus ``CLOCK_SKEW_MS`` for the sender's
clock) is refused, and one in the past, or under a second ahead, is due at once: the
record is delivered by the next pass of the mover. Both refusals are ``INVALID_DELAY``.

Retries: a consumer group's records retried by ``Consumer.retry_later`` come back on the
group's retry topic ``<group>.retry`` with ``x-retry-group`` (the group), ``x-attempt``
(the number of this delivery, the first being 1) and the original's place
(``x-retry-topic``, ``-partition``, ``-offset``); past the group's ``max_attempts`` they
go to its dead-letter topic ``<group>.dlq`` with ``x-dlq-reason``. Those headers are
anyone's to write, so they count only on a record read from the retry topic of the
group ``x-retry-group`` names (``retried_by``): anywhere else a record is a first
delivery, whatever it carries.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dataplane.errors import ErrorCode, MeridianError
from dataplane.hashing import murmur2

DELIVER_AT = "x-deliver-at"
DELAY_TOPIC = "x-delay-topic"
DELAY_PARTITION = "x-delay-partition"
DELAYED_FROM = "x-delayed-from"
# Records the leader of a timer partition writes into it (moves, requeues, cancellations);
# a client record carrying it is refused.
DELAY_MARKER = "x-delay-marker"
# A scheduled record the leader carried forward to the end of its timer partition: the
# offset its id names (where it was first scheduled). The leader's own: refused from clients.
DELAY_ORIGIN = "x-delay-origin"
BROKER_HEADERS = frozenset({DELAY_MARKER, DELAY_ORIGIN})
SCHEDULING_HEADERS = frozenset({DELIVER_AT, DELAY_TOPIC, DELAY_PARTITION})
NOT_DELIVERED = SCHEDULING_HEADERS | {DELAY_ORIGIN}  # what a delivered record loses

ATTEMPT = "x-attempt"
RETRY_TOPIC = "x-retry-topic"
RETRY_PARTITION = "x-retry-partition"
RETRY_OFFSET = "x-retry-offset"
RETRY_REASON = "x-retry-reason"
RETRY_GROUP = "x-retry-group"
DLQ_REASON = "x-dlq-reason"
RETRY_HEADERS = frozenset(
    {ATTEMPT, RETRY_TOPIC, RETRY_PARTITION, RETRY_OFFSET, RETRY_REASON, RETRY_GROUP}
)

SECOND_MS = 1000
MIN_DELAY_MS = SECOND_MS
MAX_DELAY_MS = 30 * 24 * 3600 * SECOND_MS
CLOCK_SKEW_MS = 60 * SECOND_MS
MAX_DELIVER_AT_DIGITS = 16  # ms since the epoch: 13 digits until the year 2286

TIMER_PREFIX = "__delay."
RETRY_SUFFIX = ".retry"
DEAD_LETTER_SUFFIX = ".dlq"


def timer_topic(tenant: str) -> str:
    """The timer log of tenant ``tenant`` (its slug)."""
    return TIMER_PREFIX + tenant


def is_timer_topic(topic: str) -> bool:
    return topic.startswith(TIMER_PREFIX) and len(topic) > len(TIMER_PREFIX)


def tenant_of_timer(topic: str) -> str:
    """The tenant whose timer log ``topic`` is (``__delay.acme`` -> ``acme``)."""
    return topic[len(TIMER_PREFIX) :]


def tenant_of_topic(topic: str) -> str:
    """The tenant prefix of a client topic (``acme.orders~ppe`` -> ``acme``)."""
    return topic.partition(".")[0]


def timer_partition(topic: str, partition: int, partitions: int) -> int:
    """The timer partition holding the delayed records of ``topic``-``partition``."""
    return (murmur2(f"{topic}-{partition}".encode()) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True, slots=True)
class DelayedId:
    """A scheduled record's id: the topic it is for and its place in the timer log."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition}:{self.offset}"

    @classmethod
    def parse(cls, text: str) -> DelayedId:
        """``INVALID_REQUEST`` for anything but ``<topic>:<partition>:<offset>``."""
        topic, _, rest = str(text).partition(":")
        partition, _, offset = rest.partition(":")
        if not (topic and partition.isdigit() and offset.isdigit()) or "." not in topic:
            raise MeridianError(
                ErrorCode.INVALID_REQUEST,
                f"{str(text)[:300]!r} is not a scheduled record's id "
                "(<topic>:<partition>:<offset>)",
            )
        return cls(topic, int(partition), int(offset))


def parse_deliver_at(value: bytes | None) -> int:
    """The delivery time an ``x-deliver-at`` value names (ms since the epoch, in ASCII
    digits); ``INVALID_DELAY`` for anything else."""
    if (
        value is None
        or not 0 < len(value) <= MAX_DELIVER_AT_DIGITS
        or not value.isdigit()
        or not value.isascii()
    ):
        shown = "null" if value is None else repr(bytes(value[:40]))
        raise MeridianError(
            ErrorCode.INVALID_DELAY,
            f"{DELIVER_AT} is {shown}: it must be a delivery time in ms since the epoch",
        )
    return int(value)


def deliver_at_in(headers: Iterable[tuple[str, bytes | None]]) -> int | None:
    """The delivery time a record's ``x-deliver-at`` header names (None: it has none);
    ``INVALID_DELAY`` for a malformed value or for more than one such header (which one
    would count is anybody's guess, so neither does)."""
    found: list[bytes | None] = [value for key, value in headers if key == DELIVER_AT]
    if not found:
        return None
    if len(found) > 1:
        raise MeridianError(
            ErrorCode.INVALID_DELAY, f"a record carries {len(found)} {DELIVER_AT} headers: one"
        )
    return parse_deliver_at(found[0])


def check_deliver_at(deliver_at: int, now_ms: int) -> int:
    """``deliver_at`` when it is at most 30 days ahead of ``now_ms`` (and the sender's
    clock skew); ``INVALID_DELAY`` otherwise. A time in the past is due at once."""
    if deliver_at - now_ms > MAX_DELAY_MS + CLOCK_SKEW_MS:
        raise MeridianError(
            ErrorCode.INVALID_DELAY,
            f"{DELIVER_AT} {deliver_at} is {(deliver_at - now_ms) // 1000} s ahead: "
            f"at most {MAX_DELAY_MS // 1000} s (30 days)",
        )
    return deliver_at


def deliver_at_after(delay_ms: float, now_ms: int) -> int:
    """The delivery time ``delay_ms`` after ``now_ms``; ``INVALID_DELAY`` outside 1 s to
    30 days."""
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int | float):
        raise TypeError(f"a delay is a number, not {type(delay_ms).__name__}")
    if not MIN_DELAY_MS <= delay_ms <= MAX_DELAY_MS:
        raise MeridianError(
            ErrorCode.INVALID_DELAY,
            f"a delay of {delay_ms / 1000:g} s: delays are 1 s to {MAX_DELAY_MS // 1000} s "
            "(30 days)",
        )
    return now_ms + int(delay_ms)


def encode_deliver_at(deliver_at: int) -> bytes:
    return str(int(deliver_at)).encode()


def header(headers: Iterable[tuple[str, bytes | None]], name: str) -> bytes | None:
    """The last value of header ``name`` (None when absent or null)."""
    found = None
    for key, value in headers:
        if key == name:
            found = value
    return found


def without(
    headers: Iterable[tuple[str, bytes | None]], names: frozenset[str]
) -> list[tuple[str, bytes | None]]:
    return [(key, value) for key, value in headers if key not in names]


# -- retries --------------------------------------------------------------------------------
def retry_topic(group_id: str) -> str:
    return group_id + RETRY_SUFFIX


def dead_letter_topic(group_id: str) -> str:
    return group_id + DEAD_LETTER_SUFFIX


def retried_by(topic: str, headers: Iterable[tuple[str, bytes | None]]) -> str | None:
    """The group a record read from ``topic`` was retried by: the one ``x-retry-group``
    names, when ``topic`` is that group's retry topic; else None (its retry headers then
    say nothing)."""
    group = header(headers, RETRY_GROUP)
    if group is None or not group.isascii():
        return None
    name = group.decode()
    return name if retry_topic(name) == topic else None


def attempt_in(topic: str, headers: Iterable[tuple[str, bytes | None]]) -> int:
    """The delivery number of a record read from ``topic``: what ``x-attempt`` says on a
    retried record (``retried_by``), else 1."""
    headers = tuple(headers)
    return attempt_of(headers) if retried_by(topic, headers) is not None else 1


def attempt_of(headers: Iterable[tuple[str, bytes | None]]) -> int:
    """The delivery number a record carries (``x-attempt``; 1 without it or when it is
    not a positive number), whoever wrote it (see ``attempt_in``)."""
    value = header(headers, ATTEMPT)
    if value is None or not value.isdigit() or not 0 < len(value) <= 9:
        return 1
    return max(1, int(value))


def backoff_ms(attempt: int, initial_ms: int, multiplier: float, max_ms: int) -> int:
    """The default wait before delivery number ``attempt`` (2 for the first retry):
    ``initial_ms * multiplier ** (attempt - 2)``, at most ``max_ms``."""
    wait = float(initial_ms)
    for _ in range(max(0, attempt - 2)):
        wait *= multiplier
        if wait >= max_ms:
            return max_ms
    return int(min(wait, max_ms))

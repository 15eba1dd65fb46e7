"""Retries and dead letters for a consumer group (docs/delay.md).

A group with a retry policy (made through the control plane; ``GetRetryPolicy`` on any
broker reads it) has a *retry topic* ``<group>.retry``, which its consumers read beside
their own topics (``Consumer.subscribe`` adds it), and a *dead-letter topic*
``<group>.dlq``. ``Consumer.retry_later(record, delay_s)`` sends a copy of ``record`` (key,
value, headers) back to the group after the delay: scheduled for the retry topic
through the tenant's timer log, with ``x-retry-group`` (this group), ``x-attempt`` (the
number of the delivery it will be: 2 for the first retry) and the original's place
(``x-retry-topic``, ``x-retry-partition``, ``x-retry-offset``, kept across retries).
Once the record has been delivered ``max_attempts`` times, it goes to the dead-letter
topic instead, at once, with ``x-dlq-reason``. ``Consumer.nack(record)`` is
``retry_later`` with the policy's backoff for that attempt.

Those headers count only on a record read from this group's retry topic and written
there by this group's retries (``x-retry-group``): a record read anywhere else (its
first delivery, a copy made by a pipeline, another group's retry topic) starts at
attempt 1 from its own place, and the retry headers it carries are dropped, so no
producer can pick a record's attempt count or the topic a dead letter is replayed to.
The group's consumers subscribe to its retry topic and no other group's do; the brokers
cannot tell groups apart on a fetch (it names no group), so a consumer that subscribes to
another group's retry topic by name, with the consume right on it, reads it.

Commits: a retry is sent asynchronously (a producer of the consumer's own, ``acks=all``),
and every commit of the consumer (by hand, automatic, before a revocation or on close)
first waits until every retry asked so far is stored. A retry that could not be stored
keeps the commit of its partition below the record and rewinds the consumer to it, so
the record is delivered again (the commit raises it; an automatic commit logs it); the
cap holds every later commit of the partition until one at or below it succeeds (a
commit tried again after a coordinator moved keeps it), or the partition is given up. A
consumer that dies after its retry was stored but before its commit sees the record
again when it restarts, and may retry it a second time: at least once, as every
consumer group is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dataplane.client.delayed import DelayClient, RetryPolicy
from dataplane.client.errors import ConfigError
from dataplane.client.types import ConsumerRecord, TopicPartition
from dataplane.delays import (
    ATTEMPT,
    DLQ_REASON,
    MAX_DELAY_MS,
    MIN_DELAY_MS,
    RETRY_GROUP,
    RETRY_HEADERS,
    RETRY_OFFSET,
    RETRY_PARTITION,
    RETRY_REASON,
    RETRY_TOPIC,
    attempt_of,
    backoff_ms,
    header,
    retried_by,
)
from dataplane.errors import ErrorCode, MeridianError

log = logging.getLogger(__name__)

POLICY_MAX_AGE_S = 30.0
MAX_REASON_BYTES = 1024

Header = tuple[str, bytes | None]


class RetryFailedError(MeridianError):
    """A retry of a record could not be stored; the consumer was rewound to it."""

    def __init__(self, record: tuple[str, int, int], cause: MeridianError) -> None:
        super().__init__(
            cause.code,
            f"the retry of {record[0]}/{record[1]} offset {record[2]} was not stored "
            f"({cause.message}); the record will be delivered again",
        )
        self.record = record
        self.cause = cause


class Retrier:
    """One consumer's retries (see the module docstring). ``make_producer()`` builds
    the producer (with the consumer's credentials) on the first retry."""

    def __init__(
        self,
        group_id: str,
        delays: DelayClient,
        make_producer: Callable[[], Any],
    ) -> None:
        self.group_id = group_id
        self._delays = delays
        self._make_producer = make_producer
        self._producer: Any = None
        self._policy: RetryPolicy | None = None
        self._policy_at = 0.0
        self._lock = threading.Lock()
        # (topic, partition) -> [(offset, future)], in the order asked
        self._pending: dict[TopicPartition, list[tuple[int, Any]]] = {}
        # Partitions whose retry failed: the offset commits stay at or below until one
        # of them succeeds (``committed``) or the partition is given up (``forget``).
        self._caps: dict[TopicPartition, int] = {}

    def policy(self, *, refresh: bool = False) -> RetryPolicy | None:
        """The group's retry policy (read again every ``POLICY_MAX_AGE_S``)."""
        if refresh or time.monotonic() - self._policy_at > POLICY_MAX_AGE_S:
            self._policy = self._delays.retry_policy(self.group_id)
            self._policy_at = time.monotonic()
        return self._policy

    def _require_policy(self) -> RetryPolicy:
        policy = self.policy()
        if policy is None:
            policy = self.policy(refresh=True)
        if policy is None:
            raise MeridianError(
                ErrorCode.RETRY_POLICY_NOT_FOUND,
                f"group {self.group_id!r} has no retry policy: create one (POST "
                "/api/v1/retry-policies, meridian retry-policies create) to retry records",
            )
        return policy

    def retry_later(self, record: ConsumerRecord, delay_s: float | None, reason: str | None) -> Any:
        """Send ``record`` back after ``delay_s`` (None: the policy's backoff; 0: at
        once), or to the dead-letter topic past ``max_attempts``; returns the send's
        future."""
        policy = self._require_policy()
        own = retried_by(record.topic, record.headers) == self.group_id
        attempt = (attempt_of(record.headers) if own else 1) + 1
        headers = _retry_headers(record, attempt, reason, self.group_id, own=own)
        producer = self._producer_now()
        if attempt > policy.max_attempts:
            why = reason or "retried too often"
            headers.append(
                (DLQ_REASON, f"{policy.max_attempts} attempts: {why}"[:MAX_REASON_BYTES].encode())
            )
            headers[:] = [(k, v) for k, v in headers if k != ATTEMPT] + [
                (ATTEMPT, str(attempt - 1).encode())
            ]
            future = producer.send(
                policy.dead_letter_topic, record.value, key=record.key, headers=headers
            )
        else:
            if delay_s is None:
                delay_ms = backoff_ms(
                    attempt,
                    policy.backoff_initial_ms,
                    policy.backoff_multiplier,
                    policy.backoff_max_ms,
                )
                delay_s = max(delay_ms, MIN_DELAY_MS) / 1000
            if delay_s == 0:
                future = producer.send(
                    policy.retry_topic, record.value, key=record.key, headers=headers
                )
            else:
                future = producer.send(
                    policy.retry_topic,
                    record.value,
                    key=record.key,
                    headers=headers,
                    deliver_after=delay_s,
                )
        tp = TopicPartition(record.topic, record.partition)
        with self._lock:
            self._pending.setdefault(tp, []).append((record.offset, future))
        return future

    def _producer_now(self) -> Any:
        if self._producer is None:
            self._producer = self._make_producer()
        return self._producer

    def settle(
        self, offsets: Mapping[TopicPartition, int]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int], RetryFailedError | None]:
        """Wait for every retry asked so far. Returns ``offsets`` capped at the first
        record of each partition whose retry failed (now or in a settle whose commit has
        not succeeded since), the records that failed now (where to rewind), and the
        first failure now (None: every retry asked since the last settle is stored)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        failed: dict[TopicPartition, int] = {}
        first: RetryFailedError | None = None
        for tp, asked in pending.items():
            for offset, future in asked:
                error = future.exception()
                if error is None or tp in failed:
                    continue
                first = first or RetryFailedError((tp.topic, tp.partition, offset), error)
                failed[tp] = offset
        with self._lock:
            for tp, offset in failed.items():
                self._caps[tp] = min(offset, self._caps.get(tp, offset))
            caps = dict(self._caps)
        capped = {tp: min(o, caps[tp]) if tp in caps else o for tp, o in offsets.items()}
        return capped, failed, first

    def committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        """A commit of ``offsets`` (as ``settle`` capped them) succeeded: the caps it
        honoured are done with (the records are read again from there)."""
        with self._lock:
            for tp, offset in offsets.items():
                if tp in self._caps and offset <= self._caps[tp]:
                    del self._caps[tp]

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """The partitions were given up: their next owner starts from their last commit."""
        with self._lock:
            for tp in partitions:
                self._caps.pop(tp, None)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()


def _retry_headers(
    record: ConsumerRecord, attempt: int, reason: str | None, group: str, *, own: bool
) -> list[Header]:
    """The retried copy's headers: its own (less any retry or dead-letter headers), the
    group, the attempt, and the original's place: the first delivery's, kept across the
    group's own retries (``own``), else where ``record`` was read."""
    carried = record.headers
    if own and header(carried, RETRY_TOPIC) is not None:
        origin = tuple(header(carried, h) for h in (RETRY_TOPIC, RETRY_PARTITION, RETRY_OFFSET))
    else:
        origin = (
            record.topic.encode(),
            str(record.partition).encode(),
            str(record.offset).encode(),
        )
    headers: list[Header] = [
        (k, v) for k, v in carried if k not in RETRY_HEADERS and k != DLQ_REASON
    ]
    headers += [
        (RETRY_GROUP, group.encode()),
        (ATTEMPT, str(attempt).encode()),
        (RETRY_TOPIC, origin[0]),
        (RETRY_PARTITION, origin[1]),
        (RETRY_OFFSET, origin[2]),
    ]
    if reason:
        headers.append((RETRY_REASON, reason.encode()[:MAX_REASON_BYTES]))
    return headers


def check_retry_delay(delay_s: float | None) -> None:
    if delay_s is None:
        return
    if isinstance(delay_s, bool) or not isinstance(delay_s, int | float):
        raise TypeError(f"a retry delay is seconds, not {type(delay_s).__name__}")
    if delay_s != 0 and not MIN_DELAY_MS <= delay_s * 1000 <= MAX_DELAY_MS:
        raise MeridianError(
            ErrorCode.INVALID_DELAY,
            f"a retry delay of {delay_s} s: 0 (at once), or 1 s to {MAX_DELAY_MS // 1000} s",
        )


def lane_refusal(lane: str | None) -> None:
    if lane is not None:
        raise ConfigError(
            "retries are for trunk consumer groups: a lane consumer cannot retry_later"
        )

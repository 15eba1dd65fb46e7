"""Retries and dead letters for a consumer group (docs/delay.md).

A group with a retry policy (made through the control plane; ``GetRetryPolicy`` on any
broker reads it) has a *retry topic* ``<group>.retry``, which its consumers read beside
their own topics (``Consumer.subscribe`` adds it), and a *dead-letter topic*
``<group>.dlq``. ``Consumer.retry_later(record, delay_s)`` sends a copy of ``record`` (key,
value, headers) back to the group after the delay: scheduled for the retry topic
through the tenant's timer log, with ``x-attempt`` (the number of the delivery it will
be: 2 for the first retry) and the original's place (``x-retry-topic``,
``x-retry-partition``, ``x-retry-offset``, kept across retries). Once the record has
been delivered ``max_attempts`` times, it goes to the dead-letter topic instead, at once,
with ``x-dlq-reason``. ``Consumer.nack(record)`` is ``retry_later`` with the policy's
backoff for that attempt. Only this group reads its retry topic, so a retried record is
never delivered to another group.

Commits: a retry is sent asynchronously (a producer of the consumer's own, ``acks=all``),
and every commit of the consumer (by hand, automatic, before a revocation or on close)
first waits until every retry asked so far is stored. A retry that could not be stored
keeps the commit of its partition below the record and rewinds the consumer to it, so
the record is delivered again (the commit raises it; an automatic commit logs it). A
consumer that dies after its retry was stored but before its commit sees the record
again when it restarts, and may retry it a second time: at least once, as every
consumer group is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from dataplane.client.delayed import DelayClient, RetryPolicy
from dataplane.client.errors import ConfigError
from dataplane.client.types import ConsumerRecord, TopicPartition
from dataplane.delays import (
    ATTEMPT,
    DLQ_REASON,
    MAX_DELAY_MS,
    MIN_DELAY_MS,
    RETRY_HEADERS,
    RETRY_OFFSET,
    RETRY_PARTITION,
    RETRY_REASON,
    RETRY_TOPIC,
    attempt_of,
    backoff_ms,
    header,
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
        attempt = attempt_of(record.headers) + 1
        headers = _retry_headers(record, attempt, reason)
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
        record of each partition whose retry failed, those records' offsets (where to
        rewind), and the first failure (None: every retry is stored)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        capped = dict(offsets)
        failed: dict[TopicPartition, int] = {}
        first: RetryFailedError | None = None
        for tp, asked in pending.items():
            for offset, future in asked:
                error = future.exception()
                if error is None or tp in failed:
                    continue
                first = first or RetryFailedError((tp.topic, tp.partition, offset), error)
                failed[tp] = offset
                if tp in capped:
                    capped[tp] = min(capped[tp], offset)
        return capped, failed, first

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()


def _retry_headers(record: ConsumerRecord, attempt: int, reason: str | None) -> list[Header]:
    """The retried copy's headers: its own (less earlier retry headers), the attempt, and
    the original's place (the first delivery's, kept across retries)."""
    own = record.headers
    origin = (
        (header(own, RETRY_TOPIC), header(own, RETRY_PARTITION), header(own, RETRY_OFFSET))
        if header(own, RETRY_TOPIC) is not None
        else (record.topic.encode(), str(record.partition).encode(), str(record.offset).encode())
    )
    headers: list[Header] = [(k, v) for k, v in own if k not in RETRY_HEADERS]
    headers += [
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

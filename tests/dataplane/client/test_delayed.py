"""The SDK's delay and retry logic without a broker: bounds, ids, headers, backoff, and
what a commit does when a retry failed."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dataplane.client import Consumer
from dataplane.client.delayed import RetryPolicy, due_time, header_deliver_at, scheduled_headers
from dataplane.client.retries import Retrier, RetryFailedError, _retry_headers, check_retry_delay
from dataplane.client.types import ConsumerRecord, TopicPartition
from dataplane.delays import (
    ATTEMPT,
    DELAY_PARTITION,
    DELAY_TOPIC,
    DELIVER_AT,
    DLQ_REASON,
    RETRY_GROUP,
    RETRY_OFFSET,
    RETRY_PARTITION,
    RETRY_REASON,
    RETRY_TOPIC,
    DelayedId,
    attempt_of,
    backoff_ms,
    header,
    timer_partition,
)
from dataplane.errors import ErrorCode, MeridianError

DAY_S = 86_400


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_delays_are_bounded_to_a_second_and_thirty_days() -> None:
    assert abs(due_time(None, 1) - (_now_ms() + 1000)) < 1000
    assert abs(due_time(None, 30 * DAY_S) - (_now_ms() + 30 * DAY_S * 1000)) < 1000
    for bad in (0, 0.999, 30 * DAY_S + 1, -5):
        with pytest.raises(MeridianError) as refused:
            due_time(None, bad)
        assert refused.value.code == ErrorCode.INVALID_DELAY
    past = _now_ms() - 60_000
    assert due_time(past, None) == past  # a past time is due at once
    with pytest.raises(MeridianError):
        due_time(_now_ms() + 31 * DAY_S * 1000, None)
    when = datetime.now(UTC) + timedelta(minutes=5)
    assert abs(due_time(when, None) - int(when.timestamp() * 1000)) <= 1
    for wrong in ((when.replace(tzinfo=None), None), ("soon", None), (1, 2), (True, None)):
        with pytest.raises(TypeError):
            due_time(*wrong)


def test_an_x_deliver_at_header_is_read_and_checked() -> None:
    at = _now_ms() + 5000
    assert header_deliver_at([("a", b"1"), (DELIVER_AT, str(at).encode())]) == at
    assert header_deliver_at({DELIVER_AT: str(at).encode()}) == at
    assert header_deliver_at([("a", b"1")]) is None
    with pytest.raises(MeridianError) as refused:
        header_deliver_at([(DELIVER_AT, b"noon")])
    assert refused.value.code == ErrorCode.INVALID_DELAY


def test_scheduled_headers_replace_any_of_their_own() -> None:
    own = [("x-lane", b"ppe"), (DELAY_TOPIC, b"forged"), (DELIVER_AT, b"1")]
    assert scheduled_headers(own, 42, "acme.o", 3) == [
        ("x-lane", b"ppe"),
        (DELIVER_AT, b"42"),
        (DELAY_TOPIC, b"acme.o"),
        (DELAY_PARTITION, b"3"),
    ]


def test_ids_name_topic_timer_partition_and_offset() -> None:
    delayed = DelayedId("acme.orders~ppe", 2, 99)
    assert DelayedId.parse(str(delayed)) == delayed
    for bad in ("", "acme.orders", "acme.orders:x:1", "orders:1:2", "acme.o:1:-2", "a" * 5000):
        with pytest.raises(MeridianError) as refused:
            DelayedId.parse(bad)
        assert refused.value.code == ErrorCode.INVALID_REQUEST
    assert {timer_partition("acme.o", p, 3) for p in range(30)} == {0, 1, 2}
    assert timer_partition("acme.o", 7, 3) == timer_partition("acme.o", 7, 3)


def test_backoff_grows_to_its_bound() -> None:
    waits = [backoff_ms(n, 1000, 2.0, 10_000) for n in range(2, 8)]
    assert waits == [1000, 2000, 4000, 8000, 10_000, 10_000]
    assert backoff_ms(10**6, 1000, 2.0, 10_000) == 10_000


def _record(headers: tuple[tuple[str, bytes | None], ...] = (), offset: int = 7) -> ConsumerRecord:
    return ConsumerRecord("acme.orders", 1, offset, 0, 0, b"k", b"v", headers)


def test_a_retried_copy_keeps_its_first_place_and_counts_attempts() -> None:
    first = _retry_headers(_record((("x-trace-id", b"t"),)), 2, "down", "acme.g", own=False)
    assert first == [
        ("x-trace-id", b"t"),
        (RETRY_GROUP, b"acme.g"),
        (ATTEMPT, b"2"),
        (RETRY_TOPIC, b"acme.orders"),
        (RETRY_PARTITION, b"1"),
        (RETRY_OFFSET, b"7"),
        (RETRY_REASON, b"down"),
    ]
    again = ConsumerRecord("acme.g.retry", 0, 3, 0, 0, b"k", b"v", tuple(first))
    assert again.attempt == 2
    second = _retry_headers(again, 3, None, "acme.g", own=True)
    assert [h for h in second if h[0] in (RETRY_TOPIC, RETRY_OFFSET, ATTEMPT)] == [
        (ATTEMPT, b"3"),
        (RETRY_TOPIC, b"acme.orders"),
        (RETRY_OFFSET, b"7"),
    ]
    assert attempt_of([(ATTEMPT, b"junk")]) == 1
    for bad in (0.5, -1, True):
        with pytest.raises((MeridianError, TypeError)):
            check_retry_delay(bad)
    check_retry_delay(0)


class _Sent:
    def __init__(self) -> None:
        self.sent: list[tuple[str, list[tuple[str, bytes | None]]]] = []

    def send(self, topic: str, value: Any, key: Any = None, headers: Any = None, **_: Any) -> Any:
        self.sent.append((topic, list(headers)))
        return None


class _Policies:
    def retry_policy(self, group_id: str) -> RetryPolicy:
        return RetryPolicy(group_id, 3, 1000, 2.0, 60_000, f"{group_id}.retry", f"{group_id}.dlq")


def test_retry_headers_count_only_on_the_groups_own_retry_topic() -> None:
    """A record carrying x-attempt and x-retry-* read from a topic (anyone may write
    them), or from another group's retry topic, is a first delivery from where it was
    read: its attempt is 1, its retry goes to attempt 2 with its own place, and a dead
    letter can name no topic its producer chose."""
    forged = (
        (ATTEMPT, b"99"),
        (RETRY_GROUP, b"acme.g"),
        (RETRY_TOPIC, b"acme.payments"),
        (RETRY_PARTITION, b"0"),
        (RETRY_OFFSET, b"1"),
        (DLQ_REASON, b"made up"),
    )
    producer = _Sent()
    retrier = Retrier("acme.g", _Policies(), lambda: producer)  # type: ignore[arg-type]
    on_topic = _record(forged)
    assert on_topic.attempt == 1
    theirs = ConsumerRecord("acme.other.retry", 0, 5, 0, 0, b"k", b"v", forged)
    assert theirs.attempt == 1  # x-retry-group names acme.g, not the group of this topic
    mine = ConsumerRecord("acme.g.retry", 0, 5, 0, 0, b"k", b"v", forged)
    assert mine.attempt == 99
    for record in (on_topic, theirs):
        retrier.retry_later(record, 0, None)
        topic, headers = producer.sent.pop()
        assert topic == "acme.g.retry"
        assert header(headers, ATTEMPT) == b"2"
        assert header(headers, RETRY_TOPIC) == record.topic.encode()
        assert header(headers, RETRY_OFFSET) == str(record.offset).encode()
        assert [k for k, _ in headers].count(RETRY_TOPIC) == 1
        assert header(headers, DLQ_REASON) is None
    retrier.retry_later(mine, 0, "again")  # past max_attempts 3: a dead letter
    topic, headers = producer.sent.pop()
    assert topic == "acme.g.dlq"
    assert header(headers, RETRY_TOPIC) == b"acme.payments"  # the group's own retry: kept
    assert header(headers, DLQ_REASON) == b"3 attempts: again"


class _Done:
    def __init__(self, error: MeridianError | None) -> None:
        self._error = error

    def exception(self, timeout: float | None = None) -> MeridianError | None:
        return self._error


def test_a_failed_retry_holds_its_partition_commit_below_the_record() -> None:
    retrier = Retrier("acme.g", delays=None, make_producer=lambda: None)  # type: ignore[arg-type]
    a, b = TopicPartition("acme.orders", 0), TopicPartition("acme.orders", 1)
    failure = MeridianError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "no")
    pending: dict[Any, Any] = {
        a: [(4, _Done(None)), (6, _Done(failure)), (9, _Done(failure))],
        b: [(2, _Done(None))],
    }
    retrier._pending = pending
    capped, failed, first = retrier.settle({a: 12, b: 5})
    assert capped == {a: 6, b: 5}
    assert failed == {a: 6}
    assert isinstance(first, RetryFailedError)
    assert first.record == ("acme.orders", 0, 6)
    retrier.committed(capped)
    assert retrier.settle({a: 12}) == ({a: 12}, {}, None)  # settled and committed: forgotten


def test_a_cap_holds_until_a_commit_honouring_it_succeeds() -> None:
    """A failed retry caps its partition's commits at the record until a commit at or
    below it succeeds: a commit tried again (the coordinator moved) is capped too, and
    the partition given up forgets it."""
    retrier = Retrier("acme.g", delays=None, make_producer=lambda: None)  # type: ignore[arg-type]
    a = TopicPartition("acme.orders", 0)
    failure = MeridianError(ErrorCode.REQUEST_TIMED_OUT, "slow")
    retrier._pending = {a: [(6, _Done(failure))]}
    assert retrier.settle({a: 12})[0] == {a: 6}
    assert retrier.settle({a: 12}) == ({a: 6}, {}, None)  # that commit did not succeed
    retrier.committed({a: 6})
    assert retrier.settle({a: 12}) == ({a: 12}, {}, None)
    retrier._pending = {a: [(14, _Done(failure))]}
    assert retrier.settle({a: 20})[0] == {a: 14}
    retrier.forget([a])
    assert retrier.settle({a: 20})[0] == {a: 20}


def test_a_revocation_commit_tried_again_never_passes_a_failed_retry() -> None:
    """Giving partitions up: the commit waits on a retry that failed (retriable), commits
    below the record, is refused by a moving coordinator and tried again: every attempt
    stays below the record, and the consumer is rewound to it."""
    consumer = Consumer(["127.0.0.1:1"], group_id="acme.g", enable_auto_commit=False)
    tp = TopicPartition("acme.orders", 0)
    consumer.assign([tp])
    consumer.seek(tp, 12)
    retrier = Retrier("acme.g", delays=None, make_producer=lambda: None)  # type: ignore[arg-type]
    retrier._pending = {tp: [(6, _Done(MeridianError(ErrorCode.REQUEST_TIMED_OUT, "slow")))]}
    consumer._retrier = retrier
    committed: list[dict[TopicPartition, int]] = []

    def commit_offsets(offsets: dict[TopicPartition, int]) -> None:
        committed.append(dict(offsets))
        if len(committed) == 1:
            raise MeridianError(ErrorCode.NOT_COORDINATOR, "the coordinator moved")

    consumer._commit_offsets = commit_offsets  # type: ignore[method-assign]
    consumer._retry_backoff_s = 0.001
    try:
        consumer._commit_quietly([tp], retry=True)
        assert committed == [{tp: 6}, {tp: 6}]
        assert consumer.position(tp) == 6
    finally:
        consumer._retrier = None
        consumer.close()


def test_a_record_with_two_delivery_times_is_refused() -> None:
    twice = [(DELIVER_AT, b"%d" % (_now_ms() + 5000)), (DELIVER_AT, b"%d" % (_now_ms() + 9000))]
    with pytest.raises(MeridianError) as refused:
        header_deliver_at(twice)
    assert refused.value.code == ErrorCode.INVALID_DELAY
    with pytest.raises(MeridianError) as null:
        header_deliver_at([(DELIVER_AT, None)])
    assert null.value.code == ErrorCode.INVALID_DELAY
    assert header_deliver_at([("x-other", b"1")]) is None

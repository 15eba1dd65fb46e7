"""The producer's retries, idempotence and failure classification, against a scripted broker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dataplane.client import ConfigError, MeridianError, Producer
from dataplane.errors import ErrorCode

from .fake_broker import FakeBroker

TOPIC = "t.orders"


@pytest.fixture
def fake() -> Iterator[FakeBroker]:
    broker = FakeBroker({TOPIC: 2})
    yield broker
    broker.stop()


def producer(fake: FakeBroker, **settings: Any) -> Producer:
    defaults: dict[str, Any] = {"linger_ms": 0, "retry_backoff_ms": 5, "request_timeout_ms": 5000}
    return Producer(fake.address, **{**defaults, **settings})


def test_a_retriable_error_is_retried_after_a_metadata_refresh(fake: FakeBroker) -> None:
    with producer(fake) as p:
        p.send(TOPIC, b"warm-up", partition=0).result(5)
        calls = fake.metadata_calls
        fake.fail(ErrorCode.NOT_LEADER_OR_FOLLOWER, times=2)
        metadata = p.send(TOPIC, b"moved", partition=0).result(5)
    assert metadata.offset == 1
    assert fake.values(TOPIC) == [b"warm-up", b"moved"]
    assert fake.metadata_calls > calls


def test_a_non_retriable_error_fails_the_future_with_its_code(fake: FakeBroker) -> None:
    with producer(fake) as p:
        fake.fail(ErrorCode.INVALID_RECORD)
        future = p.send(TOPIC, b"bad", partition=0)
        with pytest.raises(MeridianError) as info:
            future.result(5)
        assert info.value.code == ErrorCode.INVALID_RECORD
        assert not info.value.retriable
        assert fake.attempts == 1  # not retried
        assert p.send(TOPIC, b"next", partition=0).result(5).offset == 0
    assert fake.values(TOPIC) == [b"next"]


def test_a_lost_response_is_retried_and_deduplicated(fake: FakeBroker) -> None:
    """The broker stored the batch but the answer was lost: the retry is a duplicate."""
    with producer(fake) as p:
        fake.lose_responses(1)
        first = p.send(TOPIC, b"once", partition=0)
        assert first.result(10).offset == 0
        assert p.send(TOPIC, b"twice", partition=0).result(5).offset == 1
    assert fake.values(TOPIC) == [b"once", b"twice"]
    assert fake.attempts >= 3


def test_order_is_kept_when_an_early_batch_is_retried(fake: FakeBroker) -> None:
    """Several batches in flight, the first refused: every record lands once, in order."""
    with producer(fake, linger_ms=20, batch_bytes=61 + 200) as p:
        fake.stall.set()
        futures = [p.send(TOPIC, b"%04d" % i + b"x" * 60, partition=1) for i in range(40)]
        fake.fail(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        fake.stall.clear()
        offsets = [f.result(10).offset for f in futures]
    assert offsets == list(range(40))
    assert [v[:4] for v in fake.values(TOPIC, 1)] == [b"%04d" % i for i in range(40)]


def test_out_of_order_for_the_first_batch_is_retried_after_a_metadata_refresh(
    fake: FakeBroker,
) -> None:
    """A former leader whose log is behind answers a gap: the batch goes again, once the
    metadata names the partition's leader anew, and lands once."""
    with producer(fake) as p:
        p.send(TOPIC, b"warm-up", partition=0).result(5)
        calls = fake.metadata_calls
        fake.fail(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, times=2)
        metadata = p.send(TOPIC, b"after a gap", partition=0).result(5)
        assert p.send(TOPIC, b"next", partition=0).result(5).offset == 2
    assert metadata.offset == 1
    assert fake.values(TOPIC) == [b"warm-up", b"after a gap", b"next"]
    assert fake.metadata_calls > calls


def test_a_gap_that_outlives_every_attempt_fails_and_a_new_epoch_follows(
    fake: FakeBroker,
) -> None:
    with producer(fake, retries=2) as p:
        p.send(TOPIC, b"warm-up", partition=0).result(5)
        fake.fail(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, times=3)
        with pytest.raises(MeridianError) as info:
            p.send(TOPIC, b"gap", partition=0).result(5)
        assert info.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert p.send(TOPIC, b"after", partition=0).result(5).offset == 1
        assert p.send(TOPIC, b"other partition", partition=1).result(5).offset == 0
    assert fake.values(TOPIC) == [b"warm-up", b"after"]


def test_retries_are_bounded(fake: FakeBroker) -> None:
    with producer(fake, retries=2) as p:
        fake.fail(ErrorCode.STORAGE_ERROR, times=10)
        with pytest.raises(MeridianError) as info:
            p.send(TOPIC, b"doomed", partition=0).result(5)
    assert info.value.code == ErrorCode.STORAGE_ERROR
    assert fake.attempts == 3


def test_delivery_timeout_bounds_retrying(fake: FakeBroker) -> None:
    with producer(fake, delivery_timeout_ms=300) as p:
        fake.fail(ErrorCode.BROKER_NOT_AVAILABLE, times=10_000)
        with pytest.raises(MeridianError) as info:
            p.send(TOPIC, b"late", partition=0).result(10)
        assert info.value.retriable
        fake.script.clear()


def test_a_later_batch_moves_down_when_an_earlier_one_fails_for_good(fake: FakeBroker) -> None:
    """A batch refused for good leaves no sequence gap: the next one is renumbered."""
    with producer(fake, linger_ms=20, batch_bytes=61 + 100) as p:
        fake.stall.set()
        doomed = p.send(TOPIC, b"a" * 80, partition=0)
        kept = p.send(TOPIC, b"b" * 80, partition=0)
        fake.fail(ErrorCode.CORRUPT_MESSAGE)
        fake.stall.clear()
        with pytest.raises(MeridianError):
            doomed.result(10)
        assert kept.result(10).offset == 0
    assert fake.values(TOPIC) == [b"b" * 80]


def test_acks_zero_reports_no_offsets(fake: FakeBroker) -> None:
    with producer(fake, acks=0) as p:
        metadata = p.send(TOPIC, b"fire and forget", partition=0).result(5)
    assert metadata.offset == -1
    assert metadata.partition == 0


def test_acks_all_is_sent_as_minus_one(fake: FakeBroker) -> None:
    with producer(fake, acks="all") as p:
        metadata = p.send(TOPIC, b"replicated", partition=0).result(5)
    assert metadata.offset == 0
    assert fake.acks_seen == {-1}


def test_unknown_acks_are_refused() -> None:
    with pytest.raises(ConfigError, match="all") as info:
        Producer("127.0.0.1:1", acks=2)
    assert info.value.code == ErrorCode.INVALID_REQUIRED_ACKS


def test_bad_settings_are_refused() -> None:
    for settings in ({"compression": "brotli"}, {"batch_bytes": 10}, {"partitioner": "hash"}):
        with pytest.raises(ConfigError):
            Producer("127.0.0.1:1", **settings)


def test_close_fails_what_it_cannot_deliver_in_time(fake: FakeBroker) -> None:
    p = producer(fake)
    fake.fail(ErrorCode.BROKER_NOT_AVAILABLE, times=10_000)
    future = p.send(TOPIC, b"stuck", partition=0)
    p.close(timeout=0.3)
    with pytest.raises(MeridianError, match="closed before"):
        future.result(1)
    with pytest.raises(MeridianError, match="closed"):
        p.send(TOPIC, b"after close")
    fake.script.clear()


def test_flush_times_out_with_a_clear_error(fake: FakeBroker) -> None:
    with producer(fake) as p:
        fake.stall.set()
        p.send(TOPIC, b"slow", partition=0)
        with pytest.raises(MeridianError, match="flush timed out") as info:
            p.flush(timeout=0.2)
        assert info.value.code == ErrorCode.REQUEST_TIMED_OUT
        fake.stall.clear()
        p.flush(5)


def test_an_unknown_outcome_bumps_the_epoch_and_sequences_restart(fake: FakeBroker) -> None:
    """A batch whose every answer was lost runs out of time: the broker may have it, so
    the producer takes a new epoch before sending more, and the next batch is accepted."""
    with producer(fake, delivery_timeout_ms=400, retry_backoff_max_ms=50) as p:
        assert p.send(TOPIC, b"first", partition=0).result(5).offset == 0
        fake.lose_responses(10_000)
        with pytest.raises(MeridianError):
            p.send(TOPIC, b"unknown", partition=0).result(10)
        fake.lost = 0
        assert p.send(TOPIC, b"after", partition=0).result(10).offset >= 2
    assert fake.values(TOPIC)[0] == b"first"
    assert fake.values(TOPIC)[-1] == b"after"
    assert max(fake.epochs.values()) == 1


def test_bad_arguments_are_refused_at_send(fake: FakeBroker) -> None:
    with producer(fake) as p:
        with pytest.raises(MeridianError) as info:
            p.send(TOPIC, b"v", timestamp_ms=-5)
        assert info.value.code == ErrorCode.INVALID_TIMESTAMP
        with pytest.raises(TypeError, match="value must be bytes"):
            p.send(TOPIC, "text")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="partition must be an int"):
            p.send(TOPIC, b"v", partition="0")  # type: ignore[arg-type]
        assert p.send(TOPIC, b"v", partition=1, timestamp_ms=1.7e12).result(5).timestamp == int(
            1.7e12
        )
        assert p.send(TOPIC, bytearray(b"ba"), key=memoryview(b"k"), partition=0).result(5)


def test_flush_from_a_delivery_callback_is_refused(fake: FakeBroker) -> None:
    errors: list[BaseException] = []

    with producer(fake) as p:

        def on_delivery(error: Any, metadata: Any) -> None:
            try:
                p.flush()
            except MeridianError as exc:
                errors.append(exc)

        p.send(TOPIC, b"v", partition=0, on_delivery=on_delivery).result(5)
    assert errors
    assert "delivery callback" in str(errors[0])


def test_without_idempotence_batches_carry_no_producer_id(fake: FakeBroker) -> None:
    with producer(fake, enable_idempotence=False) as p:
        fake.fail(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        assert p.send(TOPIC, b"retried", partition=0).result(5).offset == 0
        fake.fail(ErrorCode.INVALID_RECORD)
        with pytest.raises(MeridianError):
            p.send(TOPIC, b"refused", partition=0).result(5)
        assert p.send(TOPIC, b"next", partition=0).result(5).offset == 1
    assert fake.values(TOPIC) == [b"retried", b"next"]
    assert fake.producer_ids == 0
    assert not fake.seen

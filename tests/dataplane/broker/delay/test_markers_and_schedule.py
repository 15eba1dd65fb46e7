"""What a mover writes into its timer partition, and what the schedule path reads from
clients' records: pure functions, no broker."""

from __future__ import annotations

import pytest

from dataplane.broker.delay.markers import (
    CANCEL,
    MOVE,
    MarkerError,
    MoveIntent,
    TargetMove,
    decode_cancel,
    decode_move,
    encode_cancel,
    encode_move,
    marker_batch,
    marker_kind,
)
from dataplane.broker.delay.schedule import check_timer_batches, scheduled_of, split_marked
from dataplane.delays import DELAY_PARTITION, DELAY_TOPIC, DELIVER_AT
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import BatchBuilder, Record, decode_batches

NOW = 1_700_000_000_000


def test_a_move_intent_reads_back_as_written() -> None:
    intent = MoveIntent(
        (7 << 40) | 3,
        0,
        (
            TargetMove("acme.orders", 2, 2**31 - 2, (2, 1), (5, 9, 2**40)),
            TargetMove("acme.b~ppe", 0, 0, (1,), (11,)),
        ),
    )
    assert decode_move(encode_move(intent)) == intent
    assert intent.offsets() == [5, 9, 2**40, 11]
    assert decode_cancel(encode_cancel([3, 1, 2])) == [3, 1, 2]


@pytest.mark.parametrize("cut", [0, 5, 20, -1])
def test_a_damaged_marker_is_refused_not_misread(cut: int) -> None:
    value = encode_move(MoveIntent(1, 0, (TargetMove("acme.o", 0, 0, (2,), (1, 2)),)))
    with pytest.raises(MarkerError):
        decode_move(value[:cut] if cut >= 0 else value + b"x")
    with pytest.raises(MarkerError):
        decode_cancel(encode_cancel([1, 2])[:-3])


def test_a_marker_batch_is_told_from_a_scheduled_record() -> None:
    (marker,) = decode_batches(marker_batch(MOVE, b"v", NOW))
    assert marker_kind(marker) == MOVE
    (other,) = decode_batches(marker_batch(CANCEL, b"v", NOW))
    assert marker_kind(other) == CANCEL
    assert marker_kind(Record(0, NOW, None, b"v", ((DELIVER_AT, b"1"),))) is None


def _record(*headers: tuple[str, bytes | None]) -> Record:
    return Record(0, NOW, b"k", b"v", tuple(headers))


def test_scheduling_headers_are_read_strictly() -> None:
    good = _record((DELIVER_AT, b"%d" % NOW), (DELAY_TOPIC, b"acme.o"), (DELAY_PARTITION, b"3"))
    scheduled = scheduled_of(good)
    assert (scheduled.deliver_at, scheduled.topic, scheduled.partition) == (NOW, "acme.o", 3)
    for bad, code in [
        ((DELIVER_AT, b"-1"), ErrorCode.INVALID_DELAY),
        ((DELIVER_AT, b"1e9"), ErrorCode.INVALID_DELAY),
        ((DELIVER_AT, None), ErrorCode.INVALID_DELAY),
        ((DELIVER_AT, b"\xd9\xa1"), ErrorCode.INVALID_DELAY),  # an Arabic-Indic digit
        ((DELAY_PARTITION, b"99999999"), ErrorCode.INVALID_RECORD),
        ((DELAY_TOPIC, b"\xff"), ErrorCode.INVALID_RECORD),
    ]:
        headers = dict(good.headers) | dict([bad])
        with pytest.raises(MeridianError) as refused:
            scheduled_of(_record(*headers.items()))
        assert refused.value.code == code, bad


def _batch(*records: tuple[bytes, list[tuple[str, bytes]]], producer_id: int = -1) -> bytes:
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                           base_sequence=0 if producer_id >= 0 else -1)  # fmt: skip
    for value, headers in records:
        builder.append(value, timestamp=NOW, headers=headers)
    return builder.build()


def test_a_diverted_request_splits_into_timer_records_and_the_rest() -> None:
    due = (DELIVER_AT, b"%d" % (NOW + 5000))
    data = _batch((b"a", []), (b"b", [due, ("x-trace-id", b"t")]), (b"c", []))
    split = split_marked(data, "acme.o", 4, NOW)
    assert [r.value for r in split.immediate] == [b"a", b"c"]
    ((_, value, headers, timestamp),) = split.timer_records
    assert (value, timestamp) == (b"b", NOW)
    assert headers == [due, ("x-trace-id", b"t"), (DELAY_TOPIC, b"acme.o"), (DELAY_PARTITION, b"4")]
    with pytest.raises(MeridianError) as idempotent:
        split_marked(_batch((b"b", [due]), producer_id=5), "acme.o", 4, NOW)
    assert idempotent.value.code == ErrorCode.DELAY_NOT_IDEMPOTENT
    far = (DELIVER_AT, b"%d" % (NOW + 40 * 86_400_000))
    with pytest.raises(MeridianError) as too_far:
        split_marked(_batch((b"b", [far])), "acme.o", 4, NOW)
    assert too_far.value.code == ErrorCode.INVALID_DELAY


def test_every_record_of_a_timer_batch_is_checked_against_its_own_topic() -> None:
    def headers(topic: bytes) -> list[tuple[str, bytes]]:
        return [(DELIVER_AT, b"%d" % NOW), (DELAY_TOPIC, topic), (DELAY_PARTITION, b"0")]

    data = _batch(
        (b"1", headers(b"acme.a")), (b"2", headers(b"acme.b")), (b"3", headers(b"acme.a"))
    )
    asked: list[str] = []

    def may_produce(topic: str) -> MeridianError | None:
        asked.append(topic)
        return (
            MeridianError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, topic)
            if topic == "acme.b"
            else None
        )

    with pytest.raises(MeridianError) as refused:
        check_timer_batches(data, "acme", NOW, may_produce)
    assert refused.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert asked == ["acme.a", "acme.b"]  # once per topic
    assert len(check_timer_batches(data, "acme", NOW, lambda t: None)) == 3
    with pytest.raises(MeridianError) as foreign:
        check_timer_batches(data, "other", NOW, lambda t: None)
    assert foreign.value.code == ErrorCode.INVALID_RECORD

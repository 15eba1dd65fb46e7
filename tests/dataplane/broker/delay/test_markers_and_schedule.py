"""What a mover writes into its timer partition, and what the schedule path reads from
clients' records: pure functions, no broker."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.broker.auth import ALLOW_ALL
from dataplane.broker.delay import manager as manager_module
from dataplane.broker.delay.manager import DelayManager
from dataplane.broker.delay.markers import (
    CANCEL,
    MOVE,
    MarkerError,
    MoveIntent,
    Requeued,
    TargetMove,
    decode_cancel,
    decode_move,
    decode_requeue,
    encode_cancel,
    encode_move,
    encode_requeue,
    marker_batch,
    marker_kind,
)
from dataplane.broker.delay.schedule import check_timer_batches, scheduled_of, split_marked
from dataplane.delays import (
    DELAY_MARKER,
    DELAY_ORIGIN,
    DELAY_PARTITION,
    DELAY_TOPIC,
    DELIVER_AT,
    deliver_at_in,
)
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import BatchBuilder, Compression, Record, decode_batches
from dataplane.records.errors import CorruptBatchError
from dataplane.records.header import read_header

NOW = 1_700_000_000_000
LIMIT = 1024 * 1024 + 12


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
    requeued = [Requeued(5, NOW, 2), Requeued(2**40, NOW + 1, 2**40)]
    assert decode_requeue(encode_requeue(requeued)) == requeued


@pytest.mark.parametrize("cut", [0, 5, 20, -1])
def test_a_damaged_marker_is_refused_not_misread(cut: int) -> None:
    value = encode_move(MoveIntent(1, 0, (TargetMove("acme.o", 0, 0, (2,), (1, 2)),)))
    with pytest.raises(MarkerError):
        decode_move(value[:cut] if cut >= 0 else value + b"x")
    with pytest.raises(MarkerError):
        decode_cancel(encode_cancel([1, 2])[:-3])
    with pytest.raises(MarkerError):
        decode_requeue(encode_requeue([Requeued(1, 2, 3)])[:-3])


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


def _values(data: bytes) -> list[bytes | None]:
    return [r.value for r in decode_batches(data)]


def test_a_diverted_request_splits_into_timer_records_and_the_rest() -> None:
    due = (DELIVER_AT, b"%d" % (NOW + 5000))
    plain = _batch((b"p", [("x-k", b"1")]))
    data = plain + _batch((b"a", []), (b"b", [due, ("x-trace-id", b"t")]), (b"c", []))
    split = split_marked(data, "acme.o", 4, NOW, LIMIT)
    assert split.immediate[0] == plain  # a batch without delayed records is kept as sent
    assert [_values(b) for b in split.immediate] == [[b"p"], [b"a", b"c"]]
    ((_, value, headers, timestamp),) = split.timer_records
    assert (value, timestamp) == (b"b", NOW)
    assert headers == [due, ("x-trace-id", b"t"), (DELAY_TOPIC, b"acme.o"), (DELAY_PARTITION, b"4")]
    far = (DELIVER_AT, b"%d" % (NOW + 40 * 86_400_000))
    with pytest.raises(MeridianError) as too_far:
        split_marked(_batch((b"b", [far])), "acme.o", 4, NOW, LIMIT)
    assert too_far.value.code == ErrorCode.INVALID_DELAY


def test_a_request_with_a_producer_id_anywhere_is_not_diverted() -> None:
    """An idempotent batch without the header beside a plain one with it: the whole
    request is refused, not stored with its producer id lost."""
    due = (DELIVER_AT, b"%d" % (NOW + 5000))
    for data in (
        _batch((b"b", [due]), producer_id=5),
        _batch((b"a", []), producer_id=5) + _batch((b"b", [due])),
    ):
        with pytest.raises(MeridianError) as idempotent:
            split_marked(data, "acme.o", 4, NOW, LIMIT)
        assert idempotent.value.code == ErrorCode.DELAY_NOT_IDEMPOTENT


def test_the_rest_of_a_compressed_batch_keeps_its_codec_and_the_topic_limit() -> None:
    """A 5 MB lz4 batch of about 100 KB with one delayed record: the rest is rebuilt lz4
    (uncompressed it would be over the 1 MiB limit and refused after the delayed record
    was scheduled); a rest over the limit is split; a record too large alone refuses
    the request before anything is stored."""
    builder = BatchBuilder(compression=Compression.LZ4)
    for i in range(5000):
        headers = [(DELIVER_AT, b"%d" % (NOW + 5000))] if i == 2500 else []
        builder.append(b"x" * 1000, key=b"%d" % i, timestamp=NOW, headers=headers)
    data = builder.build()
    assert len(data) < LIMIT
    split = split_marked(data, "acme.o", 0, NOW, LIMIT)
    (rest,) = split.immediate
    assert len(rest) < LIMIT
    assert read_header(rest, 0).compression == Compression.LZ4
    assert len(_values(rest)) == 4999
    assert len(split.timer_records) == 1
    small = split_marked(data, "acme.o", 0, NOW, len(rest) // 3)
    assert len(small.immediate) > 3
    assert all(len(b) <= len(rest) // 3 for b in small.immediate)
    assert sum(len(_values(b)) for b in small.immediate) == 4999
    big = _batch((b"y" * 5000, []), (b"z", [(DELIVER_AT, b"%d" % NOW)]))
    with pytest.raises(MeridianError) as too_large:
        split_marked(big, "acme.o", 0, NOW, 2000)
    assert too_large.value.code == ErrorCode.MESSAGE_TOO_LARGE
    with pytest.raises(MeridianError) as delayed_too_large:
        split_marked(_batch((b"y" * 5000, [(DELIVER_AT, b"%d" % NOW)])), "acme.o", 0, NOW, 2000)
    assert delayed_too_large.value.code == ErrorCode.MESSAGE_TOO_LARGE


def test_one_delivery_time_per_record_and_no_broker_headers_from_clients() -> None:
    """Two x-deliver-at headers are refused everywhere they are read (which one would
    count is anybody's guess), and the leader's own headers are refused in clients'
    records."""
    twice = [(DELIVER_AT, b"%d" % NOW), (DELIVER_AT, b"%d" % (NOW + 9000))]
    with pytest.raises(MeridianError) as refused:
        deliver_at_in(twice)
    assert refused.value.code == ErrorCode.INVALID_DELAY
    with pytest.raises(MeridianError) as refused:
        split_marked(_batch((b"b", twice)), "acme.o", 0, NOW, LIMIT)
    assert refused.value.code == ErrorCode.INVALID_DELAY
    target = [(DELAY_TOPIC, b"acme.o"), (DELAY_PARTITION, b"0")]
    with pytest.raises(MeridianError) as refused:
        check_timer_batches(_batch((b"b", twice + target)), "acme", NOW, lambda t: None)
    assert refused.value.code == ErrorCode.INVALID_DELAY
    assert deliver_at_in([("x-other", b"1")]) is None
    for own in (DELAY_MARKER, DELAY_ORIGIN):
        headers = [(DELIVER_AT, b"%d" % NOW), *target, (own, b"5")]
        with pytest.raises(MeridianError) as refused:
            check_timer_batches(_batch((b"b", headers)), "acme", NOW, lambda t: None)
        assert refused.value.code == ErrorCode.INVALID_RECORD, own
        with pytest.raises(MeridianError) as refused:
            split_marked(_batch((b"b", headers)), "acme.o", 0, NOW, LIMIT)
        assert refused.value.code == ErrorCode.INVALID_RECORD, own


def test_a_timer_record_its_topic_could_not_take_is_refused_at_scheduling() -> None:
    headers = [(DELIVER_AT, b"%d" % NOW), (DELAY_TOPIC, b"acme.o"), (DELAY_PARTITION, b"0")]
    data = _batch((b"v" * 100, headers), (b"v" * 3000, headers))
    limits = {"acme.o": 2000}
    with pytest.raises(MeridianError) as refused:
        check_timer_batches(data, "acme", NOW, lambda t: None, lambda t, p: limits.get(t))
    assert refused.value.code == ErrorCode.MESSAGE_TOO_LARGE
    assert "record 1" in refused.value.message
    assert len(check_timer_batches(data, "acme", NOW, lambda t: None, lambda t, p: None)) == 2


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


def test_a_timer_batch_the_checks_cannot_read_is_refused_not_stored_unchecked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever the record checks fail with, the batch is refused: a decoding fault as
    the codec names it, anything else as INVALID_RECORD."""
    manager = DelayManager(
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        broker_id=1,
        authorizer=ALLOW_ALL,
        push=lambda: None,
        placement=dict,
        metrics=CollectorRegistry(),
        clock_ms=lambda: NOW,
    )
    item = broker_pb2.PartitionRecords(topic="__delay.acme", partition=0, records=b"")
    for raised, code in [
        (CorruptBatchError("a batch that does not decode"), ErrorCode.CORRUPT_MESSAGE),
        (ValueError("something unforeseen"), ErrorCode.INVALID_RECORD),
    ]:

        def failing(*args: object, error: Exception = raised) -> None:
            raise error

        monkeypatch.setattr(manager_module, "check_timer_batches", failing)
        refusal = manager.timer_produce_refusal(item)
        assert refusal is not None
        assert refusal.code == code

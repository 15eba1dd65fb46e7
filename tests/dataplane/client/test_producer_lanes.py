"""The producer's lanes against the fake broker: routing order, the x-lane header, lane
topics being created (LANE_TOPIC_PENDING) and undeclared lanes (LANE_NOT_FOUND)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.partitioner.default import murmur2 as kafka_murmur2

import lanes
from dataplane.client import BufferFull, MeridianError, Producer, ProducerRecord
from dataplane.client.errors import LaneNotFoundError
from dataplane.errors import ErrorCode

from .fake_broker import FakeBroker

TOPIC = "acme.orders"
OTHER = "acme.invoices"


@pytest.fixture
def fake() -> Iterator[FakeBroker]:
    broker = FakeBroker(
        {TOPIC: 3, OTHER: 1, f"{TOPIC}~ppe": 3, f"{TOPIC}~boe-alice": 3, f"{TOPIC}~qat": 3}
    )
    yield broker
    broker.stop()


def producer(fake: FakeBroker, **settings: Any) -> Producer:
    defaults: dict[str, Any] = {"linger_ms": 0, "retry_backoff_ms": 5, "request_timeout_ms": 5000}
    return Producer(fake.address, **{**defaults, **settings})


def stored(fake: FakeBroker, topic: str, partitions: int = 3) -> list[Any]:
    return [r for p in range(partitions) for r in fake.records(topic, p)]


def lane_headers(record: Any) -> list[bytes | None]:
    return [v for k, v in record.headers if k == lanes.LANE_HEADER]


def test_routing_order_explicit_header_configured_context_trunk(fake: FakeBroker) -> None:
    header = [("x-lane", b"boe-alice")]
    with producer(fake) as plain, producer(fake, lane="qat") as configured:
        # explicit lane= wins over the header, the producer's lane and the context
        with lanes.processing_lane("ppe"):
            to = configured.send(TOPIC, b"explicit", headers=header, lane="ppe").result(5)
            assert to.topic == f"{TOPIC}~ppe"
            # a record's own header wins over the producer's lane and the context
            assert configured.send(TOPIC, b"h", headers=header).result(5).topic == (
                f"{TOPIC}~boe-alice"
            )
            # the producer's lane wins over the context
            assert configured.send(TOPIC, b"configured").result(5).topic == f"{TOPIC}~qat"
            # the lane in effect, when nothing else names one
            assert plain.send(TOPIC, b"context").result(5).topic == f"{TOPIC}~ppe"
        # no lane at all: the trunk
        assert plain.send(TOPIC, b"trunk").result(5).topic == TOPIC
    assert sorted(r.value for r in stored(fake, f"{TOPIC}~ppe")) == [b"context", b"explicit"]
    assert [r.value for r in stored(fake, f"{TOPIC}~boe-alice")] == [b"h"]
    assert [r.value for r in stored(fake, f"{TOPIC}~qat")] == [b"configured"]
    assert [r.value for r in stored(fake, TOPIC)] == [b"trunk"]


def test_a_lane_record_carries_one_x_lane_header_naming_its_lane(fake: FakeBroker) -> None:
    with producer(fake) as p:
        p.send(TOPIC, b"none", lane="ppe", headers=[("trace", b"1")]).result(5)
        p.send(TOPIC, b"same", headers=[("x-lane", b"ppe"), ("trace", b"2")]).result(5)
        p.send(TOPIC, b"mapping", headers={"x-lane": b"ppe"}).result(5)
        p.send(TOPIC, b"other", headers=[("x-lane", b"qat")], lane="ppe").result(5)
        p.send(TOPIC, b"trunk", headers=[("trace", b"3")]).result(5)
    records = {r.value: r for r in stored(fake, f"{TOPIC}~ppe")}
    assert set(records) == {b"none", b"same", b"mapping", b"other"}
    for record in records.values():
        assert lane_headers(record) == [b"ppe"]
    assert records[b"none"].headers[0] == ("trace", b"1")  # other headers kept, in order
    assert records[b"same"].headers == (("x-lane", b"ppe"), ("trace", b"2"))  # untouched
    (trunk,) = stored(fake, TOPIC)
    assert lane_headers(trunk) == []


def test_a_key_lands_on_the_same_partition_number_in_the_lane(fake: FakeBroker) -> None:
    keys = [f"k{i}".encode() for i in range(30)]
    with producer(fake) as p:
        trunk = [p.send(TOPIC, b"t", key=k).result(5).partition for k in keys]
        lane = [p.send(TOPIC, b"l", key=k, lane="ppe").result(5).partition for k in keys]
    assert trunk == lane == [(kafka_murmur2(k) & 0x7FFFFFFF) % 3 for k in keys]


@pytest.mark.parametrize("name", ["P", "ab", "bad_lane", "a--b", "-ab", "ab-", "x" * 33])
def test_bad_lane_names_are_refused(fake: FakeBroker, name: str) -> None:
    with pytest.raises(lanes.InvalidLaneNameError):
        Producer(fake.address, lane=name)
    with pytest.raises(ValueError, match="invalid lane name"):  # it is a ValueError
        Producer(fake.address, lane=name)
    with producer(fake) as p:
        with pytest.raises(lanes.InvalidLaneNameError):
            p.send(TOPIC, b"v", lane=name)
        with pytest.raises(lanes.InvalidLaneNameError):
            p.send(TOPIC, b"v", headers=[("x-lane", name.encode())])
        with pytest.raises(lanes.InvalidLaneNameError):
            p.send_batch(TOPIC, [b"v"], lane=name)
    assert stored(fake, TOPIC) == []


def test_send_batch_splits_the_call_by_lane_and_keeps_call_order(fake: FakeBroker) -> None:
    records = [
        ProducerRecord(b"k1", b"0", [("x-lane", b"ppe")]),
        (b"k2", b"1"),
        (b"k3", b"2", [("x-lane", b"qat")]),
        (b"k4", b"3", [("other", b"x")]),
        ProducerRecord(b"k5", b"4", [("x-lane", b"ppe")]),
    ]
    with producer(fake) as p:
        futures = p.send_batch(TOPIC, records)
        placed = futures.result(5)
        explicit = p.send_batch(TOPIC, [b"a", (b"k", b"b")], lane="boe-alice").result(5)
    assert [m.topic for m in placed] == [
        f"{TOPIC}~ppe",
        TOPIC,
        f"{TOPIC}~qat",
        TOPIC,
        f"{TOPIC}~ppe",
    ]
    assert [m.topic for m in explicit] == [f"{TOPIC}~boe-alice"] * 2
    ppe = stored(fake, f"{TOPIC}~ppe")
    assert sorted(r.value for r in ppe) == [b"0", b"4"]
    assert all(lane_headers(r) == [b"ppe"] for r in ppe)
    assert all(lane_headers(r) == [b"boe-alice"] for r in stored(fake, f"{TOPIC}~boe-alice"))
    assert sorted(r.value for r in stored(fake, TOPIC)) == [b"1", b"3"]
    for metadata, future in zip(placed, futures, strict=True):  # futures in call order
        assert future.result(0) == metadata


def test_send_batch_inherits_the_lane_in_effect(fake: FakeBroker) -> None:
    with producer(fake) as p, lanes.processing_lane("ppe"):
        placed = p.send_batch(TOPIC, [b"a", b"b"]).result(5)
        # Once the lane topic is known, the codec gives each record the lane's header.
        placed += p.send_batch(TOPIC, [b"c", (b"k", b"d")]).result(5)
    assert {m.topic for m in placed} == {f"{TOPIC}~ppe"}
    got = stored(fake, f"{TOPIC}~ppe")
    assert sorted(r.value for r in got) == [b"a", b"b", b"c", b"d"]
    assert all(lane_headers(r) == [b"ppe"] for r in got)


def test_a_pending_lane_topic_holds_its_records_until_it_exists(fake: FakeBroker) -> None:
    lane_topic = f"{TOPIC}~new"
    fake.pend_lane_topic(lane_topic, 3)
    delivered: list[Any] = []
    with producer(fake) as p:
        first = p.send(
            TOPIC, b"0", key=b"k", lane="new", on_delivery=lambda e, m: delivered.append(m)
        )
        batch = p.send_batch(TOPIC, [(b"k", b"1"), (b"k", b"2")], lane="new")
        later = p.send(TOPIC, b"3", key=b"k", lane="new")
        trunk = p.send(TOPIC, b"trunk").result(5)  # other topics are not held up
        assert trunk.topic == TOPIC
        assert fake.lane_metadata_calls[lane_topic] >= 1
        assert not first.done()
        assert not later.done()
        assert threading_wait(lambda: fake.lane_metadata_calls[lane_topic] >= 3)  # asked again
        assert not first.done()
        fake.create_topic(lane_topic)
        results = [first.result(10), *batch.result(10), later.result(10)]
    partition = (kafka_murmur2(b"k") & 0x7FFFFFFF) % 3
    assert [(m.topic, m.partition, m.offset) for m in results] == [
        (lane_topic, partition, i) for i in range(4)
    ]
    assert delivered == [results[0]]
    assert [r.value for r in fake.records(lane_topic, partition)] == [b"0", b"1", b"2", b"3"]
    assert all(lane_headers(r) == [b"new"] for r in fake.records(lane_topic, partition))


def test_flush_waits_for_records_of_a_pending_lane_topic(fake: FakeBroker) -> None:
    lane_topic = f"{TOPIC}~later"
    fake.pend_lane_topic(lane_topic, 1)
    with producer(fake, linger_ms=10_000) as p:
        future = p.send(TOPIC, b"v", lane="later")
        timer = threading.Timer(0.3, fake.create_topic, [lane_topic])
        timer.start()
        p.flush(10)
        assert future.done()
        assert future.result(0).topic == lane_topic


def test_an_undeclared_lane_fails_only_its_records(fake: FakeBroker) -> None:
    refused = f"{TOPIC}~gone"
    fake.refuse_lane_topic(refused)
    errors: list[Any] = []
    with producer(fake) as p:
        future = p.send(TOPIC, b"x", lane="gone", on_delivery=lambda e, m: errors.append(e))
        ok = p.send(TOPIC, b"ok", lane="ppe")
        trunk = p.send(TOPIC, b"trunk")
        mixed = p.send_batch(TOPIC, [(None, b"a", [("x-lane", b"gone")]), b"b"])
        with pytest.raises(LaneNotFoundError) as info:
            future.result(5)
        assert ok.result(5).topic == f"{TOPIC}~ppe"
        assert trunk.result(5).topic == TOPIC
        failed = mixed.errors(5)
        assert [i for i, _ in failed] == [0]
        assert mixed[1].result(5).topic == TOPIC
    error = info.value
    assert error.code == ErrorCode.LANE_NOT_FOUND
    assert not error.retriable
    assert (error.lane, error.topic) == ("gone", TOPIC)
    assert "gone" in str(error)
    assert TOPIC in str(error)
    assert isinstance(errors[0], LaneNotFoundError)
    assert sorted(r.value for r in stored(fake, TOPIC)) == [b"b", b"trunk"]  # none fell in


def test_a_lane_declared_a_moment_ago_is_asked_again_before_its_records_fail(
    fake: FakeBroker,
) -> None:
    """The brokers learn a new lane with the controller's next push: until then they
    answer LANE_NOT_FOUND, which the producer confirms for lane_confirm_ms."""
    lane_topic = f"{TOPIC}~fresh"
    fake.refuse_lane_topic(lane_topic)
    with producer(fake, lane_confirm_ms=5_000) as p:
        future = p.send(TOPIC, b"x", lane="fresh")
        assert threading_wait(lambda: fake.lane_metadata_calls[lane_topic] >= 3)
        assert not future.done()
        fake.pend_lane_topic(lane_topic, 1)  # the push declaring the lane arrived
        fake.create_topic(lane_topic)
        assert future.result(10).topic == lane_topic
    fake.refuse_lane_topic(f"{TOPIC}~gone")
    with producer(fake, lane_confirm_ms=300) as p, pytest.raises(LaneNotFoundError):
        p.send(TOPIC, b"y", lane="gone").result(10)


def test_a_lane_refused_while_pending_fails_its_parked_records(fake: FakeBroker) -> None:
    lane_topic = f"{TOPIC}~soon"
    fake.pend_lane_topic(lane_topic, 1)
    with producer(fake) as p:
        future = p.send(TOPIC, b"x", lane="soon")
        assert threading_wait(lambda: fake.lane_metadata_calls[lane_topic] >= 2)
        fake.refuse_lane_topic(lane_topic)
        with pytest.raises(LaneNotFoundError):
            future.result(5)


def test_a_pending_lane_topic_fails_after_the_delivery_timeout(fake: FakeBroker) -> None:
    fake.pend_lane_topic(f"{TOPIC}~never", 1)
    with producer(fake, delivery_timeout_ms=400) as p:
        future = p.send(TOPIC, b"x", lane="never")
        with pytest.raises(MeridianError) as info:
            future.result(10)
    assert info.value.code == ErrorCode.REQUEST_TIMED_OUT


def threading_wait(condition: Any, timeout_s: float = 10.0) -> bool:
    done = threading.Event()
    deadline = 0.0
    while deadline < timeout_s:
        if condition():
            return True
        done.wait(0.01)
        deadline += 0.01
    return bool(condition())


def test_records_waiting_for_a_lane_topic_are_bounded_by_buffer_memory(
    fake: FakeBroker,
) -> None:
    lane_topic = f"{TOPIC}~big"
    fake.pend_lane_topic(lane_topic, 1)
    with producer(fake, buffer_memory=1000, block_on_full=False) as p:
        first = p.send(TOPIC, b"a" * 400, lane="big")
        second = p.send(TOPIC, b"b" * 400, lane="big")
        with pytest.raises(BufferFull):
            p.send(TOPIC, b"c" * 400, lane="big")
        assert p.send(TOPIC, b"trunk").result(5).topic == TOPIC  # the trunk is not held
        fake.create_topic(lane_topic)
        assert [first.result(10).offset, second.result(10).offset] == [0, 1]
        assert p.send(TOPIC, b"c" * 400, lane="big").result(10).offset == 2  # room again


def test_a_lane_undeclared_after_its_topic_existed_fails_with_the_typed_error(
    fake: FakeBroker,
) -> None:
    with producer(fake) as p:
        assert p.send(TOPIC, b"before", lane="ppe", partition=0).result(5).offset == 0
        fake.fail(ErrorCode.LANE_NOT_FOUND)  # the lane was deleted meanwhile
        with pytest.raises(LaneNotFoundError) as info:
            p.send(TOPIC, b"after", lane="ppe", partition=0).result(5)
        assert p.send(TOPIC, b"trunk", partition=0).result(5).topic == TOPIC
    assert (info.value.lane, info.value.topic) == ("ppe", TOPIC)
    assert fake.values(f"{TOPIC}~ppe") == [b"before"]


def test_records_of_a_lane_topic_deleted_with_its_lane_fail_instead_of_waiting(
    fake: FakeBroker,
) -> None:
    """A lane deleted by force takes its lane topics with it. A broker that lost the
    topic before it heard of the lane's deletion answers LANE_TOPIC_PENDING (retriable:
    the records wait for a leader); then the brokers' metadata calls it LANE_NOT_FOUND.
    The waiting records fail with the typed error once that is confirmed, rather than
    wait for a leader until the delivery timeout."""
    lane_topic = f"{TOPIC}~ppe"
    with producer(fake, lane_confirm_ms=300, delivery_timeout_ms=120_000) as p:
        assert p.send(TOPIC, b"before", lane="ppe").result(5).topic == lane_topic
        fake.delete_topic(lane_topic)
        fake.pend_lane_topic(lane_topic, 3)
        futures = [p.send(TOPIC, f"after-{i}".encode(), lane="ppe") for i in range(5)]
        assert threading_wait(lambda: fake.lane_metadata_calls[lane_topic] >= 2)
        # no leader known now: these wait in the producer's queues
        futures += [p.send(TOPIC, f"queued-{i}".encode(), lane="ppe", key=b"k") for i in range(3)]
        assert not any(future.done() for future in futures)
        fake.refuse_lane_topic(lane_topic)
        for future in futures:
            with pytest.raises(LaneNotFoundError) as info:
                future.result(10)
            assert (info.value.lane, info.value.topic) == ("ppe", TOPIC)
        assert p.send(TOPIC, b"trunk").result(5).topic == TOPIC
        # The lane is declared again and its topic made anew: records go through again,
        # none of them caught in what was failed, and the failed ones hold no memory.
        with fake.lock:
            fake.refused.discard(lane_topic)
        fake.pend_lane_topic(lane_topic, 3)
        fake.create_topic(lane_topic)
        again = [p.send(TOPIC, f"again-{i}".encode(), lane="ppe", key=b"k") for i in range(8)]
        assert {future.result(10).topic for future in again} == {lane_topic}
        p.flush(10)
        assert p._acc.used == 0  # every record's memory came back
    assert sorted(r.value for r in stored(fake, lane_topic)) == sorted(
        f"again-{i}".encode() for i in range(8)
    )  # the topic made anew holds only what came after


def test_a_lane_topic_made_anew_under_a_live_producer_fails_one_batch_then_takes_records(
    fake: FakeBroker,
) -> None:
    """A lane topic collected after its TTL and made again on first use holds no state
    of the producers that wrote to the old one: the broker answers their next batch
    UNKNOWN_PRODUCER_ID. That batch fails with the error (never silently); the producer
    takes a new epoch, whose sequences start at 0, and what it sends next goes through."""
    lane_topic = f"{TOPIC}~ppe"
    with producer(fake) as p:
        for i in range(3):
            p.send(TOPIC, f"old-{i}".encode(), lane="ppe", partition=1).result(5)
        fake.delete_topic(lane_topic)
        with fake.lock:
            fake.topics[lane_topic] = 3  # made anew
        with pytest.raises(MeridianError) as refused:
            p.send(TOPIC, b"lost-state", lane="ppe", partition=1).result(10)
        assert refused.value.code == ErrorCode.UNKNOWN_PRODUCER_ID
        futures = [p.send(TOPIC, f"new-{i}".encode(), lane="ppe", partition=1) for i in range(5)]
        assert [future.result(10).offset for future in futures] == [0, 1, 2, 3, 4]
    assert fake.values(lane_topic, 1) == [f"new-{i}".encode() for i in range(5)]


def test_a_send_batch_over_lanes_refuses_a_bad_record_before_queuing_any(
    fake: FakeBroker,
) -> None:
    records = [(None, b"ok", [("x-lane", b"ppe")]), (None, b"ok"), (None, b"bad", [("k", 7)])]
    with producer(fake) as p:
        with pytest.raises(TypeError):
            p.send_batch(TOPIC, records)
        p.flush(5)
    assert stored(fake, TOPIC) == []
    assert stored(fake, f"{TOPIC}~ppe") == []


def test_a_lane_topic_named_outright_keeps_its_lane(fake: FakeBroker) -> None:
    with producer(fake, lane="qat") as p:
        placed = p.send(f"{TOPIC}~ppe", b"v").result(5)
        with pytest.raises(ValueError, match="is a topic of lane"):
            p.send(f"{TOPIC}~ppe", b"v", lane="boe-alice")
    assert placed.topic == f"{TOPIC}~ppe"
    assert [lane_headers(r) for r in stored(fake, f"{TOPIC}~ppe")] == [[b"ppe"]]


def test_a_lane_topic_named_outright_by_a_plain_producer_is_routed_as_its_lane(
    fake: FakeBroker,
) -> None:
    """No lane configured, no header, none in effect: the name alone makes it a lane
    record (its header added, held while its topic is made, refused typed)."""
    pending = f"{TOPIC}~later"
    fake.pend_lane_topic(pending, 1)
    fake.refuse_lane_topic(f"{TOPIC}~gone")
    with producer(fake, lane_confirm_ms=200) as p:
        held = p.send(pending, b"held")
        assert not held.done()
        fake.create_topic(pending)
        assert held.result(10).topic == pending
        with pytest.raises(LaneNotFoundError):
            p.send(f"{TOPIC}~gone", b"x").result(10)
        p.send(f"{TOPIC}~ppe", b"v").result(5)
    assert [lane_headers(r) for r in stored(fake, f"{TOPIC}~ppe")] == [[b"ppe"]]
    assert [lane_headers(r) for r in stored(fake, pending, 1)] == [[b"later"]]


def test_without_lane_routing_records_go_where_named_with_headers_unchanged(
    fake: FakeBroker,
) -> None:
    """route_lanes=False (copying tools): no header, lane in effect or lane topic moves a
    record, and no x-lane header is added or changed."""
    other_lane = [("x-lane", b"qat"), ("trace", b"1")]
    with producer(fake, route_lanes=False) as p, lanes.processing_lane("ppe"):
        assert p.send(TOPIC, b"one", headers=other_lane, partition=1).result(5).topic == TOPIC
        p.send_batch(TOPIC, [(b"k", b"two", other_lane, 7)], partition=2).result(5)
        p.send_batch(f"{TOPIC}~ppe", [(None, b"three", other_lane)], partition=0).result(5)
        p.send(TOPIC, b"plain", partition=0).result(5)
        with pytest.raises(MeridianError):
            p.send_batch(TOPIC, [b"x"], lane="ppe")
    assert [(r.value, r.headers) for r in fake.records(TOPIC, 1)] == [(b"one", tuple(other_lane))]
    two = fake.records(TOPIC, 2)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in two] == [
        (b"k", b"two", tuple(other_lane), 7)
    ]
    assert [r.headers for r in fake.records(f"{TOPIC}~ppe", 0)] == [tuple(other_lane)]
    assert [(r.value, r.headers) for r in fake.records(TOPIC, 0)] == [(b"plain", ())]
    assert stored(fake, f"{TOPIC}~qat") == []
    with pytest.raises(MeridianError):
        Producer(fake.address, lane="ppe", route_lanes=False)

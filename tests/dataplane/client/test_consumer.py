"""The consumer against a real broker: positions, seeks, pause, resets, commits."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dataplane.client import Consumer, MeridianError, Producer, TopicPartition
from dataplane.errors import ErrorCode
from tests.support.brokers import BrokerProcess

TopicMaker = Callable[..., str]
T0 = 1_700_000_000_000


@pytest.fixture
def filled(shared_broker: BrokerProcess, topic: TopicMaker) -> str:
    """A two-partition topic: 100 records each, values ``b"<p>-<i>"``, timestamps T0 + i."""
    name = topic(2)
    with Producer(shared_broker.address, batch_bytes=600) as producer:
        for i in range(100):
            for p in (0, 1):
                producer.send(name, b"%d-%d" % (p, i), partition=p, timestamp_ms=T0 + i)
    return name


@pytest.fixture
def consumer(shared_broker: BrokerProcess) -> Iterator[Callable[..., Consumer]]:
    made: list[Consumer] = []

    def make(**settings: Any) -> Consumer:
        made.append(Consumer(shared_broker.address, **settings))
        return made[-1]

    yield make
    for c in made:
        c.close()


def drain(c: Consumer, count: int, timeout_s: float = 10.0) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        out += c.poll(timeout_ms=100)
    return out


def test_assign_reads_every_partition_in_order(filled: str, consumer: Any) -> None:
    c = consumer(auto_offset_reset="earliest", max_poll_records=30)
    tps = [TopicPartition(filled, 0), TopicPartition(filled, 1)]
    c.assign(tps)
    assert c.assignment() == set(tps)
    records = drain(c, 200)
    assert len(records) == 200
    for p in (0, 1):
        mine = [r for r in records if r.partition == p]
        assert [r.value for r in mine] == [b"%d-%d" % (p, i) for i in range(100)]
        assert [r.offset for r in mine] == list(range(100))
        assert [r.timestamp for r in mine] == [T0 + i for i in range(100)]
    assert c.position(tps[0]) == 100
    assert c.lag(tps[0]) == 0
    assert c.poll(timeout_ms=50) == []


def test_max_poll_records_bounds_a_poll(filled: str, consumer: Any) -> None:
    c = consumer(auto_offset_reset="earliest", max_poll_records=7)
    c.assign([TopicPartition(filled, 0)])
    assert len(drain(c, 1)) == 7


def test_latest_starts_at_the_end(filled: str, consumer: Any, shared_broker: Any) -> None:
    c = consumer(auto_offset_reset="latest")
    tp = TopicPartition(filled, 0)
    c.assign([tp])
    assert c.position(tp) == 100
    with Producer(shared_broker.address) as producer:
        producer.send(filled, b"new", partition=0)
    (record,) = drain(c, 1)
    assert (record.offset, record.value) == (100, b"new")


def test_seek_and_seek_to_beginning_and_end(filled: str, consumer: Any) -> None:
    c = consumer(auto_offset_reset="earliest", max_poll_records=5)
    tp = TopicPartition(filled, 1)
    c.assign([tp])
    assert [r.offset for r in drain(c, 5)] == [0, 1, 2, 3, 4]
    c.seek(tp, 42)
    assert [r.offset for r in drain(c, 5)] == [42, 43, 44, 45, 46]
    c.seek_to_end([tp])
    assert c.position(tp) == 100
    assert c.poll(timeout_ms=50) == []
    c.seek_to_beginning()
    assert drain(c, 1)[0].offset == 0


def test_seek_to_timestamp(filled: str, consumer: Any) -> None:
    c = consumer(auto_offset_reset="earliest")
    tps = [TopicPartition(filled, 0), TopicPartition(filled, 1)]
    c.assign(tps)
    c.seek_to_timestamp(None, T0 + 60)
    assert [c.position(tp) for tp in tps] == [60, 60]
    c.seek_to_timestamp(tps[0], T0 + 10_000)  # after every record: the end
    assert c.position(tps[0]) == 100
    assert {(r.partition, r.offset) for r in drain(c, 40)} == {(1, i) for i in range(60, 100)}


def test_pause_and_resume(filled: str, consumer: Any) -> None:
    c = consumer(auto_offset_reset="earliest")
    tps = [TopicPartition(filled, 0), TopicPartition(filled, 1)]
    c.assign(tps)
    c.pause([tps[0]])
    assert c.paused() == {tps[0]}
    records = drain(c, 100)
    assert {r.partition for r in records} == {1}
    assert c.poll(timeout_ms=100) == []
    c.resume([tps[0]])
    assert {r.partition for r in drain(c, 100)} == {0}


def test_auto_offset_reset_none_raises_without_a_position(filled: str, consumer: Any) -> None:
    c = consumer(auto_offset_reset="none")
    c.assign([TopicPartition(filled, 0)])
    with pytest.raises(MeridianError, match="auto_offset_reset") as info:
        c.poll(timeout_ms=100)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_a_position_past_the_end_resets_by_policy(filled: str, consumer: Any) -> None:
    c = consumer(auto_offset_reset="earliest")
    tp = TopicPartition(filled, 0)
    c.assign([tp])
    c.seek(tp, 5_000)
    assert drain(c, 1)[0].offset == 0


def test_a_position_past_the_end_raises_with_reset_none(filled: str, consumer: Any) -> None:
    c = consumer(auto_offset_reset="none")
    tp = TopicPartition(filled, 0)
    c.assign([tp])
    c.seek(tp, 5_000)
    with pytest.raises(MeridianError) as info:
        drain(c, 1, timeout_s=5)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_commit_and_committed_with_assign(filled: str, consumer: Any) -> None:
    """assign() + commit: a later consumer of the same group starts where it stopped."""
    group = f"g-{filled}"
    c = consumer(
        group_id=group, auto_offset_reset="earliest", max_poll_records=10, enable_auto_commit=False
    )
    tp = TopicPartition(filled, 0)
    c.assign([tp])
    assert c.committed([tp]) == {tp: None}
    drain(c, 10)
    c.commit()
    assert c.committed([tp]) == {tp: 10}
    c.commit({tp: 25})
    assert c.committed([tp]) == {tp: 25}
    c.close()
    again = consumer(group_id=group, auto_offset_reset="earliest")
    again.assign([tp])
    assert again.position(tp) == 25
    assert drain(again, 1)[0].offset == 25


def test_auto_commit_on_close(filled: str, consumer: Any) -> None:
    group = f"auto-{filled}"
    c = consumer(group_id=group, auto_offset_reset="earliest", max_poll_records=13)
    tp = TopicPartition(filled, 1)
    c.assign([tp])
    drain(c, 13)
    c.close()
    checker = consumer(group_id=group)
    assert checker.committed([tp]) == {tp: 13}


def test_commit_without_a_group_is_refused(filled: str, consumer: Any) -> None:
    c = consumer()
    with pytest.raises(MeridianError) as info:
        c.commit({TopicPartition(filled, 0): 1})
    assert info.value.code == ErrorCode.INVALID_GROUP_ID


def test_calls_on_an_unassigned_partition_are_refused(filled: str, consumer: Any) -> None:
    c = consumer()
    with pytest.raises(MeridianError, match="not assigned"):
        c.seek(TopicPartition(filled, 0), 3)
    c.close()
    with pytest.raises(MeridianError, match="closed"):
        c.poll()

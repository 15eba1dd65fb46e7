"""The consumer's lanes: a real broker behind ``LaneProxy``, which answers the lane fields
of metadata and the hand-over of offsets as a lane-aware broker does (see fake_broker)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import lanes
from dataplane.client import Admin, Consumer, MeridianError, Producer, TopicPartition
from dataplane.client.connection import ConnectionPool
from dataplane.client.errors import ConfigError
from dataplane.client.group import commit_offsets
from dataplane.client.metadata import ClusterMetadata
from dataplane.errors import ErrorCode
from tests.support.brokers import BrokerProcess

from .fake_broker import LaneProxy

_groups = itertools.count()


@pytest.fixture
def proxy(shared_broker: BrokerProcess) -> Iterator[LaneProxy]:
    lane_proxy = LaneProxy(shared_broker.address)
    yield lane_proxy
    lane_proxy.stop()


@pytest.fixture
def family(topic: Callable[..., str], admin: Admin) -> Callable[..., str]:
    """``family(*lanes)``: a fresh trunk topic and its lane topics, one partition each."""

    def make(*names: str) -> str:
        trunk = topic(1)
        for lane in names:
            admin.create_topic(lanes.lane_topic(trunk, lane), 1, {"durability": "never"})
        return trunk

    return make


def group() -> str:
    return f"billing{next(_groups)}"


def consumer(proxy: LaneProxy, **settings: Any) -> Consumer:
    defaults: dict[str, Any] = {
        "auto_offset_reset": "earliest",
        "heartbeat_interval_ms": 200,
        "lane_refresh_ms": 200,
        "fetch_max_wait_ms": 100,
    }
    return Consumer(proxy.address, **{**defaults, **settings})


def produce(address: str, topic: str, values: list[bytes]) -> None:
    with Producer(address, linger_ms=0) as producer:
        for value in values:
            producer.send(topic, value, partition=0)
        producer.flush(10)


def read(c: Consumer, count: int, timeout_s: float = 20.0) -> list[Any]:
    records: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count and time.monotonic() < deadline:
        records.extend(c.poll(200))
    return records


def wait(condition: Callable[[], bool], c: Consumer | None = None, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        if c is not None:
            c.poll(50)
        else:
            time.sleep(0.05)
    return condition()


def test_a_lane_consumer_joins_the_lane_group_and_reads_the_lane_topic(
    proxy: LaneProxy, shared_broker: BrokerProcess, family: Callable[..., str]
) -> None:
    trunk = family("ppe")
    lane_topic = f"{trunk}~ppe"
    produce(shared_broker.address, trunk, [b"t0", b"t1"])
    produce(shared_broker.address, lane_topic, [b"l0", b"l1", b"l2"])
    name = group()
    c = consumer(proxy, group_id=name, lane="ppe", enable_auto_commit=False)
    try:
        assert c.group_id == f"{name}~ppe"
        assert c.trunk_group_id == name
        c.subscribe([trunk])
        assert c.reading() == (lane_topic,)
        records = read(c, 3)
        assert [r.value for r in records] == [b"l0", b"l1", b"l2"]
        assert {r.topic for r in records} == {lane_topic}  # the topic as stored
        assert {r.lane for r in records} == {"ppe"}
        assert c.assignment() == {TopicPartition(lane_topic, 0)}
        assert read(c, 1, timeout_s=1.0) == []  # the trunk is not read
        c.commit()
    finally:
        c.close()
    assert (f"{name}~ppe", lane_topic, 0, 3) in proxy.commits


def test_a_lane_with_consume_trunk_reads_the_trunk_too(
    proxy: LaneProxy, shared_broker: BrokerProcess, family: Callable[..., str]
) -> None:
    trunk = family("ppe")
    lane_topic = f"{trunk}~ppe"
    proxy.consume_trunk.add(lane_topic)
    produce(shared_broker.address, trunk, [b"t0"])
    produce(shared_broker.address, lane_topic, [b"l0"])
    with consumer(proxy, group_id=group(), lane="ppe") as c:
        c.subscribe([trunk])
        assert c.reading() == (trunk, lane_topic)
        records = read(c, 2)
    assert sorted((r.value, r.lane) for r in records) == [(b"l0", "ppe"), (b"t0", None)]


def test_a_pending_lane_topic_stays_subscribed_and_is_read_once_it_exists(
    proxy: LaneProxy, shared_broker: BrokerProcess, family: Callable[..., str], admin: Admin
) -> None:
    trunk = family()
    lane_topic = f"{trunk}~new"
    proxy.pending.add(lane_topic)
    with consumer(proxy, group_id=group(), lane="new") as c:
        c.subscribe([trunk])
        assert c.reading() == (lane_topic,)
        assert read(c, 1, timeout_s=1.0) == []
        admin.create_topic(lane_topic, 1, {"durability": "never"})
        produce(shared_broker.address, lane_topic, [b"first"])
        with proxy.lock:
            proxy.pending.discard(lane_topic)
        records = read(c, 1)
        assert c.reading() == (lane_topic,)
    assert [r.value for r in records] == [b"first"]


def test_a_trunk_consumer_takes_orphaned_lane_topics_and_gives_them_back(
    proxy: LaneProxy, shared_broker: BrokerProcess, family: Callable[..., str]
) -> None:
    trunk = family("ppe")
    lane_topic = f"{trunk}~ppe"
    lane_tp = TopicPartition(lane_topic, 0)
    produce(shared_broker.address, trunk, [b"t0"])
    produce(shared_broker.address, lane_topic, [b"l0", b"l1", b"l2"])
    name = group()
    # Auto commit, but not on its interval here: only the commit before a revocation.
    with consumer(proxy, group_id=name, auto_commit_interval_ms=600_000) as c:
        c.subscribe([trunk])
        assert c.reading() == (trunk,)
        assert [r.value for r in read(c, 1)] == [b"t0"]
        assert read(c, 1, timeout_s=1.0) == []  # a lane with a live consumer: not ours
        c.commit()  # (the rebalance below revokes the trunk partition too: eager)
        with proxy.lock:
            proxy.orphans[trunk] = [lane_topic]  # its lane consumers went away
        records = read(c, 3)
        assert [r.value for r in records] == [b"l0", b"l1", b"l2"]
        assert c.reading() == (trunk, lane_topic)
        assert lane_tp in c.assignment()
        given_back_at = len(proxy.commits)  # (a rebalance meanwhile may have committed)
        with proxy.lock:
            proxy.orphans[trunk] = []  # a lane consumer came back
        # (an eager rebalance passes through an empty assignment: wait for its end)
        assert wait(lambda: c.assignment() == {TopicPartition(trunk, 0)}, c)
        assert c.reading() == (trunk,)
    # given up: its position committed before the revocation (the lane group starts
    # from it)
    assert (name, lane_topic, 0, 3) in proxy.commits[given_back_at:]


def test_without_auto_commit_close_commits_nothing_lane_partitions_included(
    proxy: LaneProxy, shared_broker: BrokerProcess, family: Callable[..., str]
) -> None:
    """An application committing by hand commits what it processed: records polled but
    not processed are not committed for it (the next owner gets them again)."""
    trunk = family("ppe")
    lane_topic = f"{trunk}~ppe"
    proxy.consume_trunk.add(lane_topic)
    produce(shared_broker.address, trunk, [b"t0"])
    produce(shared_broker.address, lane_topic, [b"l0", b"l1"])
    name = group()
    c = consumer(proxy, group_id=name, lane="ppe", enable_auto_commit=False)
    c.subscribe([trunk])
    assert len(read(c, 3)) == 3
    c.close()
    assert not [commit for commit in proxy.commits if commit[0] == f"{name}~ppe"]


def test_a_lane_partition_without_commits_starts_at_its_earliest_record(
    proxy: LaneProxy, shared_broker: BrokerProcess, family: Callable[..., str]
) -> None:
    """Held records wait for the lane's first consumer whatever auto_offset_reset says."""
    trunk = family("ppe")
    lane_topic = f"{trunk}~ppe"
    produce(shared_broker.address, lane_topic, [b"held-0", b"held-1"])
    produce(shared_broker.address, trunk, [b"old-trunk"])
    with consumer(proxy, group_id=group(), lane="ppe", auto_offset_reset="latest") as c:
        c.subscribe([trunk])
        assert [r.value for r in read(c, 2)] == [b"held-0", b"held-1"]


def test_a_group_id_holding_the_lane_separator_is_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        Consumer("127.0.0.1:1", group_id="acme.billing~ppe")
    assert refused.value.code == ErrorCode.INVALID_GROUP_ID


def test_a_partition_in_hand_over_stays_unread_until_its_offset_comes(
    proxy: LaneProxy, shared_broker: BrokerProcess, family: Callable[..., str]
) -> None:
    trunk = family("ppe")
    lane_topic = f"{trunk}~ppe"
    lane_tp = TopicPartition(lane_topic, 0)
    produce(shared_broker.address, lane_topic, [b"l%d" % i for i in range(8)])
    name = group()
    # where the trunk's group stopped (the coordinator answers the family's highest commit)
    metadata = ClusterMetadata(ConnectionPool([shared_broker.address]))
    commit_offsets(metadata, f"{name}~ppe", {lane_tp: 5})
    metadata.pool.close()
    proxy.held.add((lane_topic, 0))
    with consumer(proxy, group_id=name, lane="ppe") as c:
        c.subscribe([trunk])
        assert wait(lambda: lane_tp in c.assignment(), c)
        asks = proxy.held_asks[f"{name}~ppe"]
        assert asks >= 1
        assert read(c, 1, timeout_s=1.5) == []  # paused: nothing fetched
        assert lane_tp in c.held()
        with pytest.raises(MeridianError) as info:
            c.position(lane_tp)
        assert info.value.code == ErrorCode.HANDOVER_IN_PROGRESS
        assert proxy.held_asks[f"{name}~ppe"] > asks  # asked again, with backoff
        with proxy.lock:
            proxy.held.clear()  # the trunk's group let it go
        records = read(c, 3)
        assert not c.held()
    assert [r.offset for r in records] == [5, 6, 7]  # from the offset given, no reset


def test_propagation_consume_then_produce_keeps_the_lane(
    proxy: LaneProxy, shared_broker: BrokerProcess, family: Callable[..., str]
) -> None:
    trunk = family("ppe")
    lane_topic = f"{trunk}~ppe"
    out = family("ppe", "qat")
    proxy.consume_trunk.add(lane_topic)
    produce(shared_broker.address, lane_topic, [b"l0"])
    produce(shared_broker.address, trunk, [b"t0"])
    seen: list[tuple[bytes | None, str | None]] = []
    sent: dict[bytes, str] = {}
    with (
        consumer(proxy, group_id=group(), lane="ppe") as c,
        Producer(shared_broker.address, linger_ms=0) as p,
    ):
        c.subscribe([trunk])
        for record in c.records(poll_timeout_ms=200, idle_timeout_ms=3000):
            assert record.value is not None
            seen.append((record.value, lanes.current_lane.get()))
            sent[record.value] = p.send(out, record.value).result(10).topic
            sent[record.value + b"!"] = p.send(out, record.value, lane="qat").result(10).topic
            if len(seen) == 2:
                break
        assert lanes.current_lane.get() is None  # leaving the loop restores it
        # poll(): the lane is in effect inside processing(record) only
        produce(shared_broker.address, lane_topic, [b"l1"])
        (record,) = read(c, 1)
        with c.processing(record):
            assert lanes.current_lane.get() == "ppe"
            sent[b"polled"] = p.send(out, b"x").result(10).topic
        assert lanes.current_lane.get() is None
    assert sorted(seen) == [(b"l0", "ppe"), (b"t0", None)]  # a trunk record resets it
    assert sent == {
        b"l0": f"{out}~ppe",  # inherited
        b"l0!": f"{out}~qat",  # explicit wins
        b"t0": out,  # a trunk record: the trunk
        b"t0!": f"{out}~qat",
        b"polled": f"{out}~ppe",
    }


def test_a_lane_consumer_needs_a_group_and_a_valid_lane(proxy: LaneProxy) -> None:
    with pytest.raises(ValueError, match="group_id"):
        Consumer(proxy.address, lane="ppe")
    with pytest.raises(lanes.InvalidLaneNameError):
        Consumer(proxy.address, group_id="g", lane="Not-A-Lane")


def test_unsubscribing_commits_the_lane_partitions_it_gives_up(
    proxy: LaneProxy, shared_broker: BrokerProcess, family: Callable[..., str]
) -> None:
    trunk = family("ppe")
    lane_topic = f"{trunk}~ppe"
    produce(shared_broker.address, lane_topic, [b"l0", b"l1"])
    name = group()
    with consumer(proxy, group_id=name, lane="ppe", auto_commit_interval_ms=600_000) as c:
        c.subscribe([trunk])
        assert len(read(c, 2)) == 2
        assert not proxy.commits
        c.unsubscribe()
        assert wait(lambda: not c.assignment(), c)
        assert (f"{name}~ppe", lane_topic, 0, 2) in proxy.commits


def test_a_trunk_consumer_asks_rarely_for_topics_no_lane_covers(
    proxy: LaneProxy, shared_broker: BrokerProcess, family: Callable[..., str]
) -> None:
    """Without a declared lane on its topics, a trunk consumer does not re-read their
    lane fields every lane_refresh_ms (orphans cannot appear)."""
    trunk = family("ppe")
    lane_topic = f"{trunk}~ppe"
    produce(shared_broker.address, lane_topic, [b"l0"])
    proxy.unlaned.add(trunk)
    with consumer(proxy, group_id=group()) as c:
        c.subscribe([trunk])
        read(c, 1, timeout_s=1.0)
        with proxy.lock:
            proxy.orphans[trunk] = [lane_topic]  # ignored until the slow refresh
        assert read(c, 1, timeout_s=1.5) == []
        assert c.reading() == (trunk,)

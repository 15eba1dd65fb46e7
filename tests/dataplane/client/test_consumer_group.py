"""Consumers in a group: subscribe, share partitions, hand them over with their commits."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from dataplane.client import Consumer, Producer, TopicPartition
from tests.support.brokers import BrokerProcess

from .support import wait_for

TopicMaker = Callable[..., str]


class Member(threading.Thread):
    """A consumer polling in its own thread (a join waits for the whole group)."""

    def __init__(self, broker: BrokerProcess, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            broker.address,
            group_id=group,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            max_poll_records=10,
        )
        self.topic = topic
        self.records: list[Any] = []
        self.events: list[tuple[str, frozenset[TopicPartition]]] = []
        self.assigned: frozenset[TopicPartition] = frozenset()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def on_partitions_assigned(self, tps: set[TopicPartition]) -> None:
        self.events.append(("assigned", frozenset(tps)))

    def on_partitions_revoked(self, tps: set[TopicPartition]) -> None:
        self.events.append(("revoked", frozenset(tps)))

    def run(self) -> None:
        try:
            self.consumer.subscribe([self.topic], listener=self)
            while not self.stop.is_set():
                self.records += self.consumer.poll(timeout_ms=50)
                self.assigned = frozenset(self.consumer.assignment())
                time.sleep(0.01)  # processing
            self.consumer.close()
        except BaseException as exc:
            self.error = exc

    def finish(self) -> None:
        self.stop.set()
        self.join(20)
        assert self.error is None, self.error


def test_a_group_shares_partitions_and_hands_them_over(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    """Two members split four partitions; when one leaves, its commits let the other
    resume exactly where it stopped: every record is consumed once."""
    name = topic(4)
    total = 1200
    with Producer(shared_broker.address) as producer:
        for i in range(total):
            producer.send(name, b"%d" % i, partition=i % 4)
    group = f"group-{name}"
    first, second = Member(shared_broker, group, name), Member(shared_broker, group, name)
    first.start()
    assert wait_for(lambda: len(first.assigned) == 4 and len(first.records) >= 50, 20)
    second.start()
    try:
        assert wait_for(lambda: len(first.assigned) == 2 and len(second.assigned) == 2, 20)
        assert first.assigned.isdisjoint(second.assigned)
        assert wait_for(lambda: len(second.records) >= 50, 20)
    finally:
        second.finish()  # commits its positions before leaving
    assert len(first.records) + len(second.records) < total, "hand over mid-way"
    assert wait_for(lambda: len(first.assigned) == 4, 20)
    assert wait_for(lambda: len(first.records) + len(second.records) >= total, 30)
    first.finish()
    values = sorted(int(r.value) for r in first.records + second.records)
    assert values == list(range(total))
    assert ("assigned", frozenset(TopicPartition(name, p) for p in range(4))) in first.events
    assert any(kind == "revoked" for kind, _ in first.events + second.events)
    with Consumer(shared_broker.address, group_id=group) as checker:
        committed = checker.committed([TopicPartition(name, p) for p in range(4)])
    assert committed == dict.fromkeys(committed, total // 4)


def test_one_poll_joins_the_group_and_returns_records(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    """A poll waiting for records is woken when the group's join ends in the background,
    installs the assignment and fetches within the same call."""
    name = topic(2)
    with Producer(shared_broker.address) as producer:
        for i in range(20):
            producer.send(name, b"%d" % i, partition=i % 2)
    with Consumer(
        shared_broker.address, group_id=f"group-{name}", auto_offset_reset="earliest"
    ) as consumer:
        consumer.subscribe([name])
        records = consumer.poll(timeout_ms=60_000)
        assert records, "the first poll returned nothing in its whole timeout"
        assert consumer.assignment() == {TopicPartition(name, 0), TopicPartition(name, 1)}


def test_positions_are_committed_when_partitions_are_given_up(
    shared_broker: BrokerProcess, topic: TopicMaker
) -> None:
    """Unsubscribing and closing revoke the assignment; with auto commit the consumer
    commits its positions on revocation, under the generation it still holds, so the
    group's next member starts exactly where this one stopped."""
    name = topic(2)
    with Producer(shared_broker.address) as producer:
        for i in range(40):
            producer.send(name, b"%d" % i, partition=i % 2)
    group = f"group-{name}"
    tps = [TopicPartition(name, 0), TopicPartition(name, 1)]
    # No periodic auto commit happens in this test: only the revocation commits.
    settings: dict[str, Any] = {"auto_offset_reset": "earliest", "auto_commit_interval_ms": 600_000}
    with Consumer(shared_broker.address, group_id=group, **settings) as consumer:
        consumer.subscribe([name])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 40 and time.monotonic() < deadline:
            seen += len(consumer.poll(timeout_ms=500))
        assert seen == 40
        consumer.unsubscribe()
        consumer.poll(timeout_ms=0)  # gives the partitions up
        assert consumer.committed(tps) == {tps[0]: 20, tps[1]: 20}
    with Consumer(shared_broker.address, group_id=group, **settings) as consumer:
        consumer.subscribe([name])
        assert consumer.poll(timeout_ms=3000) == []  # nothing again
        assert consumer.committed(tps) == {tps[0]: 20, tps[1]: 20}

"""librdkafka through a leader SIGKILL: an idempotent ``acks=all`` producer keeps sending
to a topic replicated on three brokers (min ISR 2) while the leader of every partition is
killed, a test-side controller (``tests.support.replication``) moves leadership, and the
killed broker comes back and leads again. Every acknowledged record is in the log exactly
once and nothing the client sent failed: its retries, NOT_LEADER_OR_FOLLOWER answers and
metadata refreshes carried it through unchanged.

The brokers run without authentication: the test controller pushes metadata over plain
channels (authentication on the Kafka listener is ``test_auth``'s)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.brokers import BrokerProcess, start_cluster, stop_all
from tests.support.replication import TestController

TOPIC = "acme.payments"
PARTITIONS = 3
LAG_MS = 1500
WAIT_S = 60


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[dict[int, BrokerProcess]]:
    started = start_cluster(
        tmp_path, 3, extra_args=["--replica-lag-time-max-ms", str(LAG_MS)], kafka=True
    )
    try:
        yield {b.broker_id: b for b in started}
    finally:
        stop_all(started)


class Sender(threading.Thread):
    """Sends numbered values as fast as ``pace_s`` allows until stopped, then flushes."""

    def __init__(self, bootstrap: str, pace_s: float = 0.0005) -> None:
        super().__init__(name="kafka-sender", daemon=True)
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 2,
                "retry.backoff.ms": 50,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self.pace_s = pace_s
        self.sent = 0
        self.acked: list[bytes] = []
        self.failed: list[Any] = []
        self.stopping = threading.Event()
        self.left = -1

    def _report(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.append(msg.value())
        else:
            self.failed.append(err)

    def run(self) -> None:
        while not self.stopping.is_set():
            value = b"v-%08d" % self.sent
            self.producer.produce(TOPIC, value=value, key=value, on_delivery=self._report)
            self.sent += 1
            self.producer.poll(0)
            time.sleep(self.pace_s)
        deadline = time.monotonic() + WAIT_S
        while self.producer.flush(0.5) and time.monotonic() < deadline:
            pass
        self.left = len(self.producer)

    def progress(self, more: int = 500) -> None:
        target = len(self.acked) + more
        deadline = time.monotonic() + WAIT_S
        while len(self.acked) < target:
            assert time.monotonic() < deadline, f"no progress: {len(self.acked)} acked"
            assert not self.failed, self.failed[:3]
            time.sleep(0.05)


def _elect_all(controller: TestController, leader: int, isr: list[int]) -> None:
    for partition in range(PARTITIONS):
        controller.elect(TOPIC, partition, leader=leader, isr=isr)


def _read_all(bootstrap: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "acme.check"})
    ends = {}
    for p in range(PARTITIONS):
        _, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)
        ends[p] = high
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    values: list[bytes] = []
    done = Counter[int]()
    deadline = time.monotonic() + WAIT_S
    while any(done[p] < end for p, end in ends.items()):
        assert time.monotonic() < deadline, f"read {dict(done)} of {ends}"
        for message in consumer.consume(1000, timeout=0.5):
            assert message.error() is None, message.error()
            if message.offset() < ends[message.partition()]:
                values.append(message.value())
                done[message.partition()] = message.offset() + 1
    consumer.close()
    return values


def test_no_acknowledged_record_is_lost_or_doubled_through_a_leader_sigkill(
    brokers: dict[int, BrokerProcess],
) -> None:
    bootstrap = ",".join(b.kafka_address for b in brokers.values())
    with TestController(brokers) as controller:
        controller.create_topic(TOPIC, [1, 2, 3], partitions=PARTITIONS, min_isr=2)
        controller.start()
        sender = Sender(bootstrap)
        sender.start()
        try:
            sender.progress()
            brokers[1].kill()  # SIGKILL: the leader of every partition
            _elect_all(controller, 2, [2, 3])
            sender.progress()
            brokers[1].restart()
            for partition in range(PARTITIONS):
                controller.wait_for_isr(TOPIC, partition, [1, 2, 3], timeout_s=WAIT_S)
            sender.progress()
            _elect_all(controller, 1, [1, 2, 3])
            sender.progress()
        finally:
            sender.stopping.set()
            sender.join(WAIT_S + 10)
        assert sender.failed == []
        assert sender.left == 0, "records still unacknowledged at the end"
        assert len(sender.acked) == sender.sent
        stored = _read_all(bootstrap)
    twice = [value for value, n in Counter(stored).items() if n > 1]
    assert twice == [], f"{len(twice)} records stored twice, e.g. {twice[:3]}"
    lost = set(sender.acked) - set(stored)
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:3]}"

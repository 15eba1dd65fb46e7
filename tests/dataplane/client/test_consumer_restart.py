"""A consumer rides out a broker restart: it resumes at its position, nothing skipped or
repeated."""

from __future__ import annotations

import time

from dataplane.client import Admin, Consumer, Producer, TopicPartition
from tests.support.brokers import BrokerProcess


def test_fetching_resumes_after_the_broker_restarts(broker: BrokerProcess) -> None:
    name = "test.refetch"
    with Admin(broker.address) as admin:
        admin.create_topic(name, 1)
    with Producer(broker.address, batch_bytes=2048) as producer:
        for i in range(2000):
            producer.send(name, b"%d:" % i + b"x" * 100)
    tp = TopicPartition(name, 0)
    consumer = Consumer(
        broker.address,
        auto_offset_reset="earliest",
        max_poll_records=100,
        max_partition_fetch_bytes=4096,  # many small fetches: some meet the restart
        retry_backoff_ms=20,
    )
    try:
        consumer.assign([tp])
        got = []
        while len(got) < 1000:
            got += consumer.poll(timeout_ms=500)
        broker.restart()
        deadline = time.monotonic() + 30
        while len(got) < 2000 and time.monotonic() < deadline:
            got += consumer.poll(timeout_ms=200)
    finally:
        consumer.close()
    assert [r.offset for r in got] == list(range(2000))
    assert [r.value for r in got] == [b"%d:" % i + b"x" * 100 for i in range(2000)]

"""Leader failure: SIGKILL the leader, elect another from the ISR, lose nothing acked.

The SDK producer (idempotent, acks=all) keeps sending through the failover and the SDK
consumer keeps reading: every acknowledged record is in the new leader's log exactly
once, and the consumer sees each one once, in order.
"""

from __future__ import annotations

import threading
import time

from dataplane.client import Consumer, Producer, TopicPartition
from tests.dataplane.broker.support import fetch_records, stubs, wait_for

from .conftest import Replicas

TOPIC = "acme.failover"
RECORDS = 300


def test_leader_failover_loses_and_duplicates_no_acknowledged_record(
    replicas: Replicas,
) -> None:
    controller = replicas.controller
    controller.create_topic(TOPIC, [1, 2, 3], min_isr=2)
    bootstrap = [b.address for b in replicas.brokers.values()]
    consumed: list[bytes] = []
    stop = threading.Event()

    def consume() -> None:
        consumer = Consumer(
            bootstrap,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
            retry_backoff_ms=50,
        )
        try:
            consumer.assign([TopicPartition(TOPIC, 0)])
            while not stop.is_set() or len(consumed) < RECORDS:
                consumed.extend(r.value for r in consumer.poll(200))
                if stop.is_set() and time.monotonic() > deadline:
                    return
        finally:
            consumer.close()

    deadline = float("inf")
    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    with Producer(
        bootstrap,
        acks="all",
        linger_ms=1,
        retry_backoff_ms=50,
        request_timeout_ms=5_000,
        delivery_timeout_ms=60_000,
    ) as producer:
        futures = []
        for i in range(RECORDS):
            futures.append(producer.send(TOPIC, b"v%04d" % i, partition=0))
            if i == RECORDS // 3:
                futures[-1].result(15)  # some records are acknowledged by leader 1
                replicas[1].kill()
                controller.elect(TOPIC, 0, leader=2, isr=[2, 3])
            time.sleep(0.002)
        producer.flush(60)
        offsets = [f.result(0).offset for f in futures]
    assert offsets == list(range(RECORDS))  # each acknowledged once, at its place
    expected = [b"v%04d" % i for i in range(RECORDS)]
    with stubs(replicas[2]) as s:
        assert wait_for(lambda: len(fetch_records(s, TOPIC)) >= RECORDS, timeout_s=15)
        stored = [r.value for r in fetch_records(s, TOPIC)]
    assert stored == expected
    deadline = time.monotonic() + 20
    stop.set()
    reader.join(30)
    assert consumed == expected

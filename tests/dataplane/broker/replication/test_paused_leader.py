"""A leader paused (SIGSTOP, as a network partition) while its partitions fail over.

Broker 1 leads every partition under an acks=all load when it is frozen; the controller
elects broker 2 for all of them in one push and keeps pushing, and the pushes to the
frozen broker time out. When it resumes, gRPC cancels the handlers of the pushes whose
deadline passed, some while they change the partitions' roles. Broker 1 must still
learn it follows broker 2, catch up and be back in every ISR within a few lag times (a
fetching follower fetches at least every third of the lag time).
"""

from __future__ import annotations

import threading
import time

from dataplane.client import Producer
from tests.support.replication import pause, resume

from .conftest import LAG_MS, Replicas

TOPIC = "acme.paused"
PARTITIONS = 16  # role changes that take long enough for a push's deadline to pass
PAUSE_S = 3.0
REJOIN_S = 10 * LAG_MS / 1000


def test_a_paused_leader_rejoins_every_isr_as_a_follower(replicas: Replicas) -> None:
    controller = replicas.controller
    controller.create_topic(TOPIC, [1, 2, 3], partitions=PARTITIONS, min_isr=2)
    bootstrap = [b.address for b in replicas.brokers.values()]
    stop = threading.Event()

    def send(producer: Producer) -> None:
        i = 0
        while not stop.wait(0.002):
            producer.send(TOPIC, b"v%06d" % i, partition=i % PARTITIONS)
            i += 1

    with Producer(
        bootstrap, acks="all", linger_ms=1, retry_backoff_ms=50, delivery_timeout_ms=120_000
    ) as producer:
        sender = threading.Thread(target=send, args=(producer,), daemon=True)
        sender.start()
        try:
            producer.send(TOPIC, b"first", partition=0).result(15)
            pause(replicas[1])
            try:
                for p in range(PARTITIONS):
                    controller.elect(TOPIC, p, leader=2, isr=[2, 3], push=False)
                controller.push()
                time.sleep(PAUSE_S)  # the partition lasts; pushes to broker 1 time out
            finally:
                resume(replicas[1])
            for p in range(PARTITIONS):
                controller.wait_for_isr(TOPIC, p, [1, 2, 3], timeout_s=REJOIN_S)
        finally:
            stop.set()
            sender.join(10)

"""A leader whose pushes end by their deadline while it changes its partitions' roles.

gRPC cancels an ``UpdateMetadata`` handler whose deadline passes: a broker resumed after
a pause (SIGSTOP, as a network partition) or slowed down finds the controller's push
under way timing out while it applies it. Broker 1 leads every partition when broker 2
is elected in its place; broker 1 must learn it follows broker 2, catch up and be back
in every ISR within a few lag times (a fetching follower fetches at least every third of
the lag time). The first test is the fault as the fault test makes it (whether a push
ends mid-way depends on the machine); the second makes every push end mid-way with a
deadline shorter than applying the election.
"""

from __future__ import annotations

import threading
import time

from dataplane._gen.meridian.v1 import admin_pb2
from dataplane.client import Producer
from tests.dataplane.broker.support import stubs, wait_for
from tests.support.replication import PUSH_TIMEOUT_S, TestController, pause, resume

from .conftest import LAG_MS, Replicas

TOPIC = "acme.paused"
PARTITIONS = 128  # applying an election of all takes longer than SHORT_PUSH_TIMEOUT_S
PAUSE_S = 3.0
SHORT_PUSH_TIMEOUT_S = 0.02
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
                _elect_everywhere(controller, leader=2, isr=[2, 3])
                time.sleep(PAUSE_S)  # the partition lasts; pushes to broker 1 time out
            finally:
                resume(replicas[1])
            _wait_for_full_isr(controller)
        finally:
            stop.set()
            sender.join(10)


def test_a_leader_whose_pushes_time_out_while_applied_rejoins_as_a_follower(
    replicas: Replicas,
) -> None:
    """Pushes to broker 1 end by their deadline while it applies the election (which
    goes on); once pushes are answered again, broker 1 is in every ISR."""
    controller = replicas.controller
    controller.create_topic(TOPIC, [1, 2, 3], partitions=PARTITIONS, min_isr=2)
    controller.push_timeout_s = SHORT_PUSH_TIMEOUT_S
    _elect_everywhere(controller, leader=2, isr=[2, 3])
    # Until broker 1 has taken the election from pushes that each end by their deadline
    # (on a machine too slow to start applying one within it, the test proves less).
    wait_for(lambda: _roles(replicas, 1) == {("follower", 2)}, timeout_s=REJOIN_S)
    controller.push_timeout_s = PUSH_TIMEOUT_S
    _wait_for_full_isr(controller)


def _elect_everywhere(controller: TestController, *, leader: int, isr: list[int]) -> None:
    """One push electing ``leader`` for every partition."""
    for p in range(PARTITIONS):
        controller.elect(TOPIC, p, leader=leader, isr=isr, push=False)
    controller.push()


def _wait_for_full_isr(controller: TestController) -> None:
    for p in range(PARTITIONS):
        controller.wait_for_isr(TOPIC, p, [1, 2, 3], timeout_s=REJOIN_S)


def _roles(replicas: Replicas, broker_id: int) -> set[tuple[str, int]]:
    """(role, leader epoch) of the topic's partitions on a broker."""
    with stubs(replicas[broker_id]) as s:
        state = s.admin.DescribeState(admin_pb2.DescribeStateRequest(topics=[TOPIC]), timeout=10)
    return {(p.role, p.leader_epoch) for p in state.partitions}

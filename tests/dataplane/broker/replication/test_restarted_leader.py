"""A former leader whose log is behind the real leader's.

A broker restarted after its leadership moved on must not lead again from the push it
saved: until the controller reaches it, it answers ``LEADER_NOT_AVAILABLE`` (retriable)
and writes nothing, so an idempotent producer that asks it retries elsewhere. (A paused
broker resumed before it is told can still answer ``OUT_OF_ORDER_SEQUENCE_NUMBER`` for
a producer's first unacknowledged batch; the SDK retries that after a metadata refresh,
see ``tests/dataplane/client/test_sender.py``.) The producer rides through either way
and lands each batch once at the real leader.
"""

from __future__ import annotations

import time

from dataplane.client import Producer
from dataplane.errors import ErrorCode
from dataplane.records import build_batch
from tests.dataplane.broker.support import fetch_records, produce, stubs, wait_for
from tests.support.replication import TestController

from ..test_idempotence import init_producer
from .conftest import Replicas

TOPIC = "acme.restarted"
ACKS_ALL = -1


def test_a_restarted_former_leader_does_not_lead_from_its_saved_push(
    replicas: Replicas,
) -> None:
    """On the wire: the restarted broker, whose saved push still names it leader,
    refuses the next sequence retriably and stores nothing of it."""
    controller = replicas.controller
    controller.create_topic(TOPIC, [1, 2, 3], min_isr=2)
    with stubs(replicas[1]) as s:
        pid, epoch = init_producer(s)
        assert produce(s, TOPIC, 0, _batch(pid, epoch, 0), acks=ACKS_ALL).error == 0
    replicas[1].kill()
    controller.elect(TOPIC, 0, leader=2, isr=[2, 3])
    with stubs(replicas[2]) as s:
        assert wait_for(
            lambda: produce(s, TOPIC, 0, _batch(pid, epoch, 3), acks=ACKS_ALL).error == 0,
            timeout_s=15,
        )
    _quiet(controller)
    replicas[1].start()
    with stubs(replicas[1]) as s:
        result = produce(s, TOPIC, 0, _batch(pid, epoch, 6), acks=ACKS_ALL)
    assert result.error == ErrorCode.LEADER_NOT_AVAILABLE, result
    controller.interval_s = 0.1
    controller.push()  # broker 1 learns it follows broker 2 at epoch 1
    with stubs(replicas[2]) as s:
        stored = [r.value for r in fetch_records(s, TOPIC)]
    assert stored == [b"s0", b"s1", b"s2", b"s3", b"s4", b"s5"]


def test_the_producer_rides_through_a_restarted_former_leader(replicas: Replicas) -> None:
    controller = replicas.controller
    controller.create_topic(TOPIC, [1, 2, 3], min_isr=2)
    bootstrap = [b.address for b in replicas.brokers.values()]
    with Producer(
        bootstrap,
        acks="all",
        linger_ms=0,
        retry_backoff_ms=50,
        retry_backoff_max_ms=200,
        request_timeout_ms=1_500,
        delivery_timeout_ms=60_000,
    ) as producer:
        assert producer.send(TOPIC, b"r0", partition=0).result(15).offset == 0
        replicas[1].kill()
        controller.elect(TOPIC, 0, leader=2, isr=[2, 3])
        assert producer.send(TOPIC, b"r1", partition=0).result(30).offset == 1
        _quiet(controller)
        replicas[2].kill()  # only the restarted broker answers metadata now, and its
        replicas[3].kill()  # saved push may not make it lead: no leader is available
        replicas[1].start()
        future = producer.send(TOPIC, b"r2", partition=0)
        wait_for(future.done, timeout_s=8)  # time for a failing send to fail (it must not)
        replicas[2].start()
        replicas[3].start()
        controller.interval_s = 0.1
        controller.push()  # broker 1 learns it follows broker 2 at epoch 1
        assert future.result(40).offset == 2
        assert producer.send(TOPIC, b"r3", partition=0).result(30).offset == 3
    with stubs(replicas[2]) as s:
        stored = [r.value for r in fetch_records(s, TOPIC)]
    assert stored == [b"r0", b"r1", b"r2", b"r3"]


def _batch(pid: int, epoch: int, seq: int) -> bytes:
    values = [b"s%d" % (seq + i) for i in range(3)]
    return build_batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def _quiet(controller: TestController) -> None:
    """The controller stops pushing (its pass under way finishes first)."""
    controller.interval_s = 3600.0
    time.sleep(0.5)

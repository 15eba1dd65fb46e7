"""A hung leader: the producer moves to the new leader while the old one is frozen.

The leader is SIGSTOPped with acks=all requests of an idempotent producer on its stream
(its process lives, so the stream stays open and nothing fails), and the controller
elects another replica. Every send must complete through the new leader *before* the
old one is resumed -- not at ``request_timeout_ms``, set far beyond the wait here --
and the new leader's log must hold each record once, in send order.
"""

from __future__ import annotations

from dataplane.client import Producer
from tests.dataplane.broker.support import fetch_records, stubs
from tests.support.replication import pause, resume

from .conftest import Replicas

TOPIC = "acme.hung"
BEFORE, WHILE_HUNG = 50, 150
WAIT_S = 60.0  # generous for a slow machine; the request timeout is twice as long


def test_sends_complete_through_the_new_leader_while_the_old_one_is_frozen(
    replicas: Replicas,
) -> None:
    controller = replicas.controller
    controller.create_topic(TOPIC, [1, 2, 3], min_isr=2)
    bootstrap = [b.address for b in replicas.brokers.values()]
    expected = [b"v%04d" % i for i in range(BEFORE + WHILE_HUNG)]
    with Producer(
        bootstrap,
        acks="all",
        linger_ms=2,
        request_timeout_ms=2 * WAIT_S * 1000,
        delivery_timeout_ms=4 * WAIT_S * 1000,
    ) as producer:
        first = [producer.send(TOPIC, v, partition=0) for v in expected[:BEFORE]]
        producer.flush(30)
        pause(replicas[1])
        try:
            # On the frozen leader's open stream: no error, no answer.
            hung = [producer.send(TOPIC, v, partition=0) for v in expected[BEFORE:]]
            controller.elect(TOPIC, 0, leader=2, isr=[2, 3])
            # Answered while broker 1 is still frozen (it is resumed only below).
            offsets = [f.result(WAIT_S).offset for f in first + hung]
        finally:
            resume(replicas[1])
    assert offsets == list(range(len(expected)))  # each acknowledged once, at its place
    with stubs(replicas[2]) as s:
        assert [r.value for r in fetch_records(s, TOPIC)] == expected

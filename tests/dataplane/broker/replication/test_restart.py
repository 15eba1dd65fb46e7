"""A restarted broker does not lead a replicated partition from its saved push: the
controller may have moved the leadership while it was down."""

from __future__ import annotations

from dataplane.errors import ErrorCode
from tests.dataplane.broker.support import produce, stubs, values_batch
from tests.support.replication import TestController

from .conftest import Replicas

TOPIC = "acme.restarted"
SINGLE = "acme.single"


def test_a_restarted_leader_waits_for_a_live_push_before_leading(replicas: Replicas) -> None:
    controller = replicas.controller
    controller.create_topic(TOPIC, [1, 2, 3], min_isr=2)
    controller.create_topic(SINGLE, [1])
    with stubs(replicas[1]) as s:
        assert produce(s, TOPIC, 0, values_batch([b"a"]), acks=-1).error == 0
    controller.stop()  # no controller speaks while broker 1 restarts
    replicas[1].restart()  # SIGKILL
    with stubs(replicas[1]) as s:
        refused = produce(s, TOPIC, 0, values_batch([b"b"]), acks=1)
        assert refused.error == ErrorCode.LEADER_NOT_AVAILABLE
        # A single-replica partition keeps serving from the saved push.
        assert produce(s, SINGLE, 0, values_batch([b"c"]), acks=1).error == 0
    # The controller speaks again (the same leadership): broker 1 leads.
    again = TestController(replicas.brokers)
    again.topics, again.epoch = controller.topics, controller.epoch
    try:
        again.push()
        with stubs(replicas[1]) as s:
            assert produce(s, TOPIC, 0, values_batch([b"d"]), acks=-1).error == 0
    finally:
        again.stop()

"""A restarted broker does not lead a replicated partition from its saved push: the
controller may have moved the leadership while it was down."""

from __future__ import annotations

from dataplane._gen.meridian.v1 import admin_pb2
from dataplane.errors import ErrorCode
from tests.dataplane.broker.support import produce, stubs, values_batch
from tests.support.replication import PartitionPlan, TestController

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


def test_a_partition_created_ahead_of_the_push_naming_it_is_offline(replicas: Replicas) -> None:
    """A new partition of a replicated topic, created on its replicas before the push
    names it, does not lead unreplicated on each of them meanwhile."""
    controller = replicas.controller
    controller.create_topic(TOPIC, [1, 2, 3], min_isr=2)
    for broker_id in (1, 2, 3):
        with stubs(replicas[broker_id]) as s:
            created = s.admin.CreatePartitions(
                admin_pb2.CreatePartitionsRequest(
                    partitions=[admin_pb2.PartitionSpec(topic=TOPIC, partition=1)]
                ),
                timeout=15,
            )
            assert not created.results[0].error
            refused = produce(s, TOPIC, 1, values_batch([b"own"]), acks=1)
            assert refused.error == ErrorCode.LEADER_NOT_AVAILABLE
    with controller._lock:
        controller.topics[TOPIC].partitions[1] = PartitionPlan(1, 1, [1, 2, 3], [1, 2, 3])
    controller.push()
    with stubs(replicas[1]) as s:
        assert produce(s, TOPIC, 1, values_batch([b"named"]), acks=-1).error == 0

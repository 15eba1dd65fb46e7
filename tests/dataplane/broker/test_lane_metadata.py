"""Trunk topics' metadata says whether any declared lane covers them
(``lanes_declared``), so consumers of topics without lanes need not follow their lane
fields closely."""

from __future__ import annotations

from tests.dataplane.broker.support import create, stubs
from tests.dataplane.broker.test_lanes import lane, push, topic_meta
from tests.support.brokers import BrokerProcess


def test_trunk_metadata_says_whether_a_declared_lane_covers_the_topic(
    broker: BrokerProcess,
) -> None:
    with stubs(broker) as s:
        for topic in ("acme.orders", "acme.audit", "globex.orders"):
            create(s, topic)
        assert not topic_meta(broker, "acme.orders").lanes_declared  # nothing pushed
        push(s, broker, 1, [lane("narrow", all_topics=False, topics=["acme.orders"])])
    assert topic_meta(broker, "acme.orders").lanes_declared
    assert not topic_meta(broker, "acme.audit").lanes_declared  # not covered
    assert not topic_meta(broker, "globex.orders").lanes_declared  # another tenant's lane
    with stubs(broker) as s:
        push(s, broker, 2, [lane("wide")])
    assert topic_meta(broker, "acme.audit").lanes_declared
    assert not topic_meta(broker, "globex.orders").lanes_declared

"""A lane topic is authorized exactly as its trunk topic: the trunk's ACL entries decide
produce, fetch and metadata of ``T~L``."""

from __future__ import annotations

from dataplane._gen.meridian.v1 import admin_pb2, broker_pb2, common_pb2
from dataplane.records import build_batch
from tests.support.brokers import BrokerProcess
from tests.support.issuer import TestIssuer

from .support import NAMES, caller, create_topic, errors_by_topic, fetch_request, produce_request

TRUNK, LANE_TOPIC = "acme.orders", "acme.orders~ppe"
DENIED = "TOPIC_AUTHORIZATION_FAILED"


def _push(broker: BrokerProcess, issuer: TestIssuer, trunk_acls: list, lane_acls: list) -> None:
    def topic(name: str, acls: list) -> admin_pb2.MetadataTopic:
        partition = admin_pb2.MetadataPartition(
            partition=0, leader_id=1, leader_epoch=0, replicas=[1], isr=[1]
        )
        return admin_pb2.MetadataTopic(name=name, partitions=[partition], acls=acls)

    request = admin_pb2.UpdateMetadataRequest(
        controller_id="test",
        controller_epoch=1,
        cluster_id="meridian",
        brokers=[common_pb2.BrokerInfo(id=1, host="127.0.0.1", port=broker.port)],
        topics=[topic(TRUNK, trunk_acls), topic(LANE_TOPIC, lane_acls)],
    )
    with caller(broker.address, issuer.internal_token()) as internal:
        internal.admin.UpdateMetadata(request, timeout=10)


def _outcomes(broker: BrokerProcess, token: str) -> dict[str, tuple[str, ...]]:
    """Per topic: (produce, fetch, metadata) outcome codes."""
    found: dict[str, tuple[str, ...]] = {}
    with caller(broker.address, token) as c:
        for topic in (TRUNK, LANE_TOPIC):
            produced = c.broker.Produce(produce_request(topic, 0, build_batch([b"r"])), timeout=10)
            fetched = c.broker.Fetch(fetch_request(topic), timeout=10)
            described = c.broker.Metadata(broker_pb2.MetadataRequest(topics=[topic]), timeout=10)
            found[topic] = (
                errors_by_topic(produced.results)[topic],
                errors_by_topic(fetched.results)[topic],
                NAMES[described.topics[0].error],
            )
    return found


def test_a_lane_topic_has_its_trunks_acls(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    with caller(secured_broker.address, issuer.internal_token()) as internal:
        create_topic(internal, LANE_TOPIC)
    # The lane topic's own entries (were any pushed) never decide: the trunk's do.
    _push(
        secured_broker,
        issuer,
        trunk_acls=[admin_pb2.AclEntry(principal="acme--writer", operations=["produce"])],
        lane_acls=[admin_pb2.AclEntry(principal="acme--other", operations=["produce"])],
    )
    writer = issuer.token(tenants={"acme": "developer"}, client_id="acme--writer")
    other = issuer.token(tenants={"acme": "developer"}, client_id="acme--other")
    allowed = _outcomes(secured_broker, writer)
    refused = _outcomes(secured_broker, other)
    # The writer may produce to T only, not consume it: so for T~L.
    assert allowed[TRUNK] == ("NONE", DENIED, "NONE")
    assert allowed[LANE_TOPIC] == allowed[TRUNK]
    assert refused[TRUNK] == (DENIED, DENIED, "NONE")
    assert refused[LANE_TOPIC] == refused[TRUNK]

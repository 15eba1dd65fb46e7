"""What an authenticated caller may do: its tenant's topics and groups, by role and ACL;
internal calls only with the internal role."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest

from dataplane._gen.meridian.v1 import (
    admin_pb2,
    broker_pb2,
    common_pb2,
    delay_pb2,
    delay_pb2_grpc,
    replication_pb2,
    replication_pb2_grpc,
)
from dataplane.delays import DELAY_PARTITION, DELAY_TOPIC, DELIVER_AT
from dataplane.errors import ErrorCode, error_from_rpc
from dataplane.records import BatchBuilder, build_batch
from tests.support.brokers import BrokerProcess
from tests.support.issuer import TestIssuer

from .support import (
    NAMES,
    caller,
    create_topic,
    errors_by_topic,
    fetch_request,
    list_offsets_request,
    produce_request,
    refusal,
)

TOPIC_DENIED = "TOPIC_AUTHORIZATION_FAILED"
TIMER = "__delay.acme"


def test_a_developer_produces_and_consumes_its_tenants_topic(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    with caller(secured_broker.address, issuer.token(tenants={"acme": "developer"})) as c:
        produced = c.broker.Produce(
            produce_request("acme.audit", 0, build_batch([b"x"])), timeout=10
        )
        assert errors_by_topic(produced.results) == {"acme.audit": "NONE"}
        fetched = c.broker.Fetch(fetch_request("acme.audit"), timeout=10)
        assert errors_by_topic(fetched.results) == {"acme.audit": "NONE"}
        assert fetched.results[0].records


def test_another_tenants_topic_is_refused_partition_by_partition(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    with caller(secured_broker.address, issuer.token(tenants={"acme": "developer"})) as c:
        request = produce_request("acme.audit", 0, build_batch([b"mine"]))
        request.partitions.add(topic="beta.secret", partition=0, records=build_batch([b"theirs"]))
        produced = c.broker.Produce(request, timeout=10)
        assert errors_by_topic(produced.results) == {
            "acme.audit": "NONE",
            "beta.secret": TOPIC_DENIED,
        }
        fetched = c.broker.Fetch(fetch_request("acme.audit", "beta.secret"), timeout=10)
        assert errors_by_topic(fetched.results) == {
            "acme.audit": "NONE",
            "beta.secret": TOPIC_DENIED,
        }
        refused = next(r for r in fetched.results if r.topic == "beta.secret")
        assert not refused.records
        assert refused.high_watermark == -1
        listed = c.broker.ListOffsets(list_offsets_request("acme.audit", "beta.secret"), timeout=10)
        assert errors_by_topic(listed.results) == {
            "acme.audit": "NONE",
            "beta.secret": TOPIC_DENIED,
        }
        described = c.broker.Metadata(
            broker_pb2.MetadataRequest(topics=["acme.audit", "beta.secret"]), timeout=10
        )
        assert errors_by_topic_metadata(described) == {
            "acme.audit": "NONE",
            "beta.secret": TOPIC_DENIED,
        }
    with caller(secured_broker.address, issuer.token(tenants={"beta": "viewer"})) as beta:
        fetched = beta.broker.Fetch(fetch_request("beta.secret"), timeout=10)
        assert b"theirs" not in fetched.results[0].records  # nothing was appended


def errors_by_topic_metadata(response: broker_pb2.MetadataResponse) -> dict[str, str]:
    return {t.name: NAMES[t.error] for t in response.topics}


def test_internal_topics_are_refused_to_clients(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    admin_token = issuer.token(tenants={"acme": "tenant-admin"}, realm_roles=["platform-admin"])
    with caller(secured_broker.address, admin_token) as c:
        fetched = c.broker.Fetch(fetch_request("__consumer_offsets"), timeout=10)
        assert errors_by_topic(fetched.results) == {"__consumer_offsets": TOPIC_DENIED}
        listed = c.broker.Metadata(broker_pb2.MetadataRequest(), timeout=10)
        assert "__consumer_offsets" not in [t.name for t in listed.topics]


def test_a_viewer_consumes_but_cannot_produce(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    with caller(secured_broker.address, issuer.token(tenants={"acme": "viewer"})) as c:
        produced = c.broker.Produce(
            produce_request("acme.audit", 0, build_batch([b"v"])), timeout=10
        )
        assert errors_by_topic(produced.results) == {"acme.audit": TOPIC_DENIED}
        fetched = c.broker.Fetch(fetch_request("acme.audit"), timeout=10)
        assert errors_by_topic(fetched.results) == {"acme.audit": "NONE"}
        error = refusal(c.broker.InitProducerId, broker_pb2.InitProducerIdRequest(producer_id=-1))
        assert error.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_a_platform_admin_reads_every_tenants_metadata_but_not_records(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    with caller(secured_broker.address, issuer.token(realm_roles=["platform-admin"])) as c:
        listed = c.broker.Metadata(broker_pb2.MetadataRequest(), timeout=10)
        assert {t.name for t in listed.topics} == {"acme.audit", "acme.orders", "beta.secret"}
        fetched = c.broker.Fetch(fetch_request("beta.secret"), timeout=10)
        assert errors_by_topic(fetched.results) == {"beta.secret": TOPIC_DENIED}


def _push_acls(
    secured_broker: BrokerProcess,
    issuer: TestIssuer,
    epoch: int,
    acls: list,
    also: tuple[str, ...] = (),
) -> None:
    """Push ``acme.orders`` (2 partitions) with ``acls``, and the one-partition topics
    ``also``, all led by broker 1."""
    request = admin_pb2.UpdateMetadataRequest(
        controller_id="test",
        controller_epoch=epoch,
        cluster_id="meridian",
        brokers=[common_pb2.BrokerInfo(id=1, host="127.0.0.1", port=secured_broker.port)],
        topics=[
            admin_pb2.MetadataTopic(
                name=name,
                partitions=[
                    admin_pb2.MetadataPartition(
                        partition=p, leader_id=1, leader_epoch=0, replicas=[1], isr=[1]
                    )
                    for p in range(2 if name == "acme.orders" else 1)
                ],
                acls=acls if name == "acme.orders" else [],
            )
            for name in ["acme.orders", *also]
        ],
    )
    with caller(secured_broker.address, issuer.internal_token()) as internal:
        internal.admin.UpdateMetadata(request, timeout=10)


def test_acls_restrict_a_topic_to_the_principals_they_name(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    acls = [
        admin_pb2.AclEntry(principal="acme--reader", operations=["consume"]),
        admin_pb2.AclEntry(principal="acme--writer", operations=["produce", "consume"]),
    ]
    _push_acls(secured_broker, issuer, 1, acls)
    try:
        batch = build_batch([b"acl"])
        outcomes = {}
        for client_id, role in [
            ("acme--reader", "developer"),
            ("acme--writer", "developer"),
            ("acme--other", "developer"),
            ("acme--owner", "tenant-admin"),
        ]:
            token = issuer.token(tenants={"acme": role}, client_id=client_id)
            with caller(secured_broker.address, token) as c:
                produced = c.broker.Produce(produce_request("acme.orders", 0, batch), timeout=10)
                fetched = c.broker.Fetch(fetch_request("acme.orders"), timeout=10)
                outcomes[client_id] = (
                    errors_by_topic(produced.results)["acme.orders"],
                    errors_by_topic(fetched.results)["acme.orders"],
                )
        assert outcomes == {
            "acme--reader": (TOPIC_DENIED, "NONE"),
            "acme--writer": ("NONE", "NONE"),
            "acme--other": (TOPIC_DENIED, TOPIC_DENIED),
            "acme--owner": ("NONE", "NONE"),  # a tenant-admin keeps full access
        }
        # Other topics of the tenant have no entries: the role alone decides.
        token = issuer.token(tenants={"acme": "developer"}, client_id="acme--other")
        with caller(secured_broker.address, token) as c:
            produced = c.broker.Produce(produce_request("acme.audit", 0, batch), timeout=10)
            assert errors_by_topic(produced.results) == {"acme.audit": "NONE"}
    finally:
        _push_acls(secured_broker, issuer, 2, [])


def test_an_acl_entry_does_not_lift_a_role(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    _push_acls(
        secured_broker, issuer, 3, [admin_pb2.AclEntry(principal="acme--v", operations=["produce"])]
    )
    try:
        token = issuer.token(tenants={"acme": "viewer"}, client_id="acme--v")
        with caller(secured_broker.address, token) as c:
            produced = c.broker.Produce(
                produce_request("acme.orders", 0, build_batch([b"v"])), timeout=10
            )
        assert errors_by_topic(produced.results) == {"acme.orders": TOPIC_DENIED}
    finally:
        _push_acls(secured_broker, issuer, 4, [])


INTERNAL_CALLS = [
    ("CreatePartitions", admin_pb2.CreatePartitionsRequest()),
    ("DeletePartitions", admin_pb2.DeletePartitionsRequest()),
    ("AlterPartitionConfigs", admin_pb2.AlterPartitionConfigsRequest()),
    ("DescribeState", admin_pb2.DescribeStateRequest()),
    ("UpdateMetadata", admin_pb2.UpdateMetadataRequest()),
]


@pytest.mark.parametrize("roles", [{"acme": "tenant-admin"}, {}], ids=["tenant-admin", "none"])
@pytest.mark.parametrize(("method", "request_"), INTERNAL_CALLS, ids=[m for m, _ in INTERNAL_CALLS])
def test_client_tokens_cannot_call_admin(
    secured_broker: BrokerProcess, issuer: TestIssuer, method: str, request_: object, roles: dict
) -> None:
    token = issuer.token(tenants=roles, realm_roles=["platform-admin"])
    with caller(secured_broker.address, token) as c:
        error = refusal(getattr(c.admin, method), request_)
    assert error.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error


def test_a_tenant_describes_the_state_of_its_own_topics_and_nothing_else(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    """Admin.DescribeState answers a client about the topics it names and may describe
    (sizes, segments, offsets); another tenant's topic is answered like a missing one."""
    token = issuer.token(tenants={"acme": "viewer"})
    with caller(secured_broker.address, issuer.internal_token()) as internal:
        internal.broker.Produce(
            produce_request("acme.audit", 0, build_batch([b"sized"])), timeout=10
        )
    asked = admin_pb2.DescribeStateRequest(topics=["acme.audit", "beta.secret", "acme.nothing"])
    with caller(secured_broker.address, token) as c:
        state = c.admin.DescribeState(asked, timeout=10)
    assert [(p.topic, p.partition) for p in state.partitions] == [("acme.audit", 0)]
    assert state.partitions[0].size_bytes > 0
    assert state.partitions[0].segments == 1
    assert state.partitions[0].log_end_offset >= 1
    with caller(secured_broker.address, token) as c:
        alone = c.admin.DescribeState(
            admin_pb2.DescribeStateRequest(topics=["beta.secret"]), timeout=10
        )
        missing = c.admin.DescribeState(
            admin_pb2.DescribeStateRequest(topics=["beta.nothing"]), timeout=10
        )
    assert list(alone.partitions) == list(missing.partitions) == []


def test_client_tokens_cannot_ask_for_peer_metadata(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    token = issuer.token(tenants={"acme": "tenant-admin"}, realm_roles=["platform-admin"])
    with caller(secured_broker.address, token) as c:
        error = refusal(c.broker.Metadata, broker_pb2.MetadataRequest(local_only=True))
    assert error.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    with caller(secured_broker.address, issuer.internal_token("meridian-broker")) as internal:
        response = internal.broker.Metadata(broker_pb2.MetadataRequest(local_only=True), timeout=10)
    assert "beta.secret" in [t.name for t in response.topics]


def test_client_tokens_cannot_replica_fetch(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    token = issuer.token(tenants={"acme": "tenant-admin"})
    with caller(secured_broker.address, token) as c:
        stub = replication_pb2_grpc.ReplicationStub(c.channel)
        error = refusal(stub.ReplicaFetch, replication_pb2.ReplicaFetchRequest(replica_id=2))
    assert error.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_the_produce_stream_is_authorized_request_by_request(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    requests = [
        produce_request("acme.audit", 0, build_batch([b"streamed"])),
        produce_request("beta.secret", 0, build_batch([b"smuggled"])),
    ]
    for i, request in enumerate(requests):
        request.correlation_id = i + 1
    with caller(secured_broker.address, issuer.token(tenants={"acme": "developer"})) as c:
        responses = list(c.broker.ProduceStream(iter(requests), timeout=15))
    assert [r.correlation_id for r in responses] == [1, 2]
    assert [errors_by_topic(r.results) for r in responses] == [
        {"acme.audit": "NONE"},
        {"beta.secret": TOPIC_DENIED},
    ]


def test_listing_scheduled_records_needs_the_consume_right_on_their_topics(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    """A timer log's listing shows keys, values and headers: only of the topics the
    caller may consume from (the rest are left out; a topic named that it may not is
    refused), each value cut at 4 KiB whatever is asked."""
    with caller(secured_broker.address, issuer.internal_token()) as internal:
        create_topic(internal, TIMER, 1)
    acls = [admin_pb2.AclEntry(principal="acme--writer", operations=["produce", "consume"])]
    _push_acls(secured_broker, issuer, 10, acls, also=(TIMER,))
    try:
        due = b"%d" % (time.time_ns() // 1_000_000 + 3_600_000)
        builder = BatchBuilder()
        for topic in ("acme.orders", "acme.audit"):
            headers = [(DELIVER_AT, due), (DELAY_TOPIC, topic.encode()), (DELAY_PARTITION, b"0")]
            builder.append(b"v" * 10_000, key=topic.encode(), headers=headers)
        writer = issuer.token(tenants={"acme": "developer"}, client_id="acme--writer")
        with caller(secured_broker.address, writer) as c:
            produced = c.broker.Produce(produce_request(TIMER, 0, builder.build()), timeout=10)
            assert errors_by_topic(produced.results) == {TIMER: "NONE"}
            assert _listed(c, "") == [("acme.orders", 4096), ("acme.audit", 4096)]
        other = issuer.token(tenants={"acme": "developer"}, client_id="acme--other")
        with caller(secured_broker.address, other) as c:
            assert _listed(c, "") == [("acme.audit", 4096)]
            request = delay_pb2.ListDelayedRequest(tenant="acme", topic="acme.orders")
            error = refusal(delay_pb2_grpc.DelayStub(c.channel).ListDelayed, request)
            assert error.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    finally:
        _push_acls(secured_broker, issuer, 11, [])


def _listed(c: Any, topic: str) -> list[tuple[str, int]]:
    """(topic, value bytes shown) of what ListDelayed shows, once the mover is ready."""
    stub = delay_pb2_grpc.DelayStub(c.channel)
    request = delay_pb2.ListDelayedRequest(tenant="acme", topic=topic, value_bytes=1_000_000)
    deadline = time.monotonic() + 15
    while True:
        try:
            response = stub.ListDelayed(request, timeout=10)
            return [(r.topic, len(r.value)) for r in response.records]
        except grpc.RpcError as exc:
            if time.monotonic() > deadline or not error_from_rpc(exc).retriable:
                raise
            time.sleep(0.1)

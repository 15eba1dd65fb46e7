"""Tenant isolation: another tenant's groups are refused by name on every group RPC, and
no request lets tenant ``acme`` tell tenant ``beta``'s existing topics and groups from
names that do not exist — Metadata and ListGroups never mention them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dataplane._gen.meridian.v1 import broker_pb2, common_pb2, group_pb2
from dataplane.errors import ErrorCode
from dataplane.records import build_batch
from tests.support.brokers import BrokerProcess
from tests.support.issuer import TestIssuer

from .support import (
    Caller,
    caller,
    fetch_request,
    list_offsets_request,
    outcome,
    produce_request,
    refusal,
)

BETA_GROUP = "beta.workers"  # exists: beta committed an offset
BETA_TOPIC = "beta.secret"  # exists


@pytest.fixture(scope="module")
def beta_group(secured_broker: BrokerProcess, issuer: TestIssuer) -> str:
    with caller(secured_broker.address, issuer.token(tenants={"beta": "developer"})) as beta:
        commit = group_pb2.OffsetCommitRequest(
            group_id=BETA_GROUP,
            generation_id=-1,
            partitions=[group_pb2.OffsetCommitPartition(topic=BETA_TOPIC, partition=0, offset=0)],
        )
        (result,) = beta.group.OffsetCommit(commit, timeout=10).results
        assert result.error == 0, result
        listed = beta.group.ListGroups(group_pb2.ListGroupsRequest(), timeout=10)
        assert [g.group_id for g in listed.groups] == [BETA_GROUP]
    return BETA_GROUP


@pytest.fixture
def acme(secured_broker: BrokerProcess, issuer: TestIssuer) -> Iterator[Caller]:
    token = issuer.token(tenants={"acme": "tenant-admin"}, client_id="acme--admin")
    with caller(secured_broker.address, token) as c:
        yield c


def group_calls(group_id: str) -> dict[str, tuple[str, Any]]:
    """Every group RPC naming ``group_id`` (RPC name -> (stub method, request))."""
    tp = common_pb2.TopicPartition(topic="acme.orders", partition=0)
    return {
        "FindCoordinator": ("FindCoordinator", group_pb2.FindCoordinatorRequest(group_id=group_id)),
        "JoinGroup": (
            "JoinGroup",
            group_pb2.JoinGroupRequest(
                group_id=group_id,
                session_timeout_ms=10_000,
                rebalance_timeout_ms=10_000,
                protocol_type="consumer",
                protocols=[group_pb2.GroupProtocol(name="range", metadata=b"")],
            ),
        ),
        "SyncGroup": (
            "SyncGroup",
            group_pb2.SyncGroupRequest(group_id=group_id, generation_id=1, member_id="m"),
        ),
        "Heartbeat": (
            "Heartbeat",
            group_pb2.HeartbeatRequest(group_id=group_id, generation_id=1, member_id="m"),
        ),
        "LeaveGroup": ("LeaveGroup", group_pb2.LeaveGroupRequest(group_id=group_id, member_id="m")),
        "OffsetCommit": (
            "OffsetCommit",
            group_pb2.OffsetCommitRequest(
                group_id=group_id,
                generation_id=-1,
                partitions=[
                    group_pb2.OffsetCommitPartition(topic="acme.orders", partition=0, offset=1)
                ],
            ),
        ),
        "OffsetFetch": (
            "OffsetFetch",
            group_pb2.OffsetFetchRequest(group_id=group_id, partitions=[tp]),
        ),
    }


@pytest.mark.parametrize("rpc", list(group_calls("x")))
def test_another_tenants_group_is_refused_on_every_group_rpc(
    acme: Caller, beta_group: str, rpc: str
) -> None:
    method, request = group_calls(beta_group)[rpc]
    error = refusal(getattr(acme.group, method), request)
    assert error.code == ErrorCode.GROUP_AUTHORIZATION_FAILED, error


def test_describe_and_delete_refuse_another_tenants_group_per_group(
    acme: Caller, beta_group: str
) -> None:
    described = acme.group.DescribeGroups(
        group_pb2.DescribeGroupsRequest(group_ids=[beta_group]), timeout=10
    )
    (group,) = described.groups
    assert group.error == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert not group.members
    assert not group.offsets
    deleted = acme.group.DeleteGroups(
        group_pb2.DeleteGroupsRequest(group_ids=[beta_group]), timeout=10
    )
    assert [r.error for r in deleted.results] == [ErrorCode.GROUP_AUTHORIZATION_FAILED]


def test_group_ids_must_carry_the_tenant_prefix(acme: Caller) -> None:
    error = refusal(
        acme.group.FindCoordinator, group_pb2.FindCoordinatorRequest(group_id="workers")
    )
    assert error.code == ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_own_group_offsets_of_another_tenants_topic_are_refused(acme: Caller) -> None:
    commit = group_pb2.OffsetCommitRequest(
        group_id="acme.reader",
        generation_id=-1,
        partitions=[
            group_pb2.OffsetCommitPartition(topic="acme.orders", partition=0, offset=0),
            group_pb2.OffsetCommitPartition(topic=BETA_TOPIC, partition=0, offset=0),
        ],
    )
    results = {r.topic: r.error for r in acme.group.OffsetCommit(commit, timeout=10).results}
    assert results == {"acme.orders": 0, BETA_TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED}


def _requests(topic: str, group_id: str) -> dict[str, Callable[[Caller], str]]:
    """Every request naming ``topic`` or ``group_id``, answered as comparable text with
    the names replaced by placeholders."""

    def broker(method: str, request: Any) -> Callable[[Caller], str]:
        return lambda c: outcome(getattr(c.broker, method), request)

    def group(method: str, request: Any) -> Callable[[Caller], str]:
        return lambda c: outcome(getattr(c.group, method), request)

    calls = {
        "Produce": broker("Produce", produce_request(topic, 0, build_batch([b"probe"]))),
        "Fetch": broker("Fetch", fetch_request(topic)),
        "ListOffsets": broker("ListOffsets", list_offsets_request(topic)),
        "Metadata": broker("Metadata", broker_pb2.MetadataRequest(topics=[topic])),
        "DescribeGroups": group(
            "DescribeGroups", group_pb2.DescribeGroupsRequest(group_ids=[group_id])
        ),
        "DeleteGroups": group("DeleteGroups", group_pb2.DeleteGroupsRequest(group_ids=[group_id])),
        "OffsetFetchOfTopic": group(
            "OffsetFetch",
            group_pb2.OffsetFetchRequest(
                group_id="acme.probe",
                partitions=[common_pb2.TopicPartition(topic=topic, partition=0)],
            ),
        ),
    }
    for rpc, (method, request) in group_calls(group_id).items():
        calls[rpc] = group(method, request)
    return calls


def _masked(text: str, topic: str, group_id: str) -> str:
    return text.replace(topic, "<topic>").replace(group_id, "<group>")


def test_existing_and_missing_names_of_another_tenant_answer_alike(
    acme: Caller, beta_group: str
) -> None:
    existing = _requests(BETA_TOPIC, beta_group)
    missing = _requests("beta.nothing", "beta.nobody")
    for rpc, call in existing.items():
        seen = _masked(call(acme), BETA_TOPIC, beta_group)
        unseen = _masked(missing[rpc](acme), "beta.nothing", "beta.nobody")
        assert seen == unseen, rpc
        assert (
            "AUTHORIZATION_FAILED" in seen or "authorized" in seen or rpc == "OffsetFetchOfTopic"
        ), (
            rpc,
            seen,
        )


def test_listings_never_mention_another_tenant(acme: Caller, beta_group: str) -> None:
    metadata = acme.broker.Metadata(broker_pb2.MetadataRequest(), timeout=10)
    groups = acme.group.ListGroups(group_pb2.ListGroupsRequest(), timeout=10)
    assert "beta" not in str(metadata)
    assert "beta" not in str(groups)
    assert {t.name for t in metadata.topics} == {"acme.audit", "acme.orders"}

"""The typed Admin calls the control plane makes to brokers.

Every call carries a deadline (``settings.BROKER_RPC_TIMEOUT_S``, or the caller's for
``update_metadata``) and fails with the typed errors of ``controlplane.gateway.errors``;
a failure that may be the transport's drops the pooled channel, so the next call
reconnects at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import grpc
from django.conf import settings

from controlplane.gateway.channels import admin_stub, broker_stub, drop_channel, group_stub
from controlplane.gateway.errors import BrokerUnavailable, check_results, classify
from dataplane._gen.meridian.v1 import admin_pb2, broker_pb2, common_pb2, group_pb2
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc

K = TypeVar("K")


@dataclass(frozen=True)
class DesiredConfig:
    """The partition configuration the control plane owns (a topic's settings).

    ``topic_id`` names the topic's objects in the object store; a broker keeps the
    first one it is given and refuses another (``INVALID_CONFIG``). ``without_topic_id``
    is the same config asking nothing of the id: what an alter of a partition that
    already has another id can still send."""

    retention_ms: int
    retention_bytes: int
    max_message_bytes: int
    durability: str
    remote_storage: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    max_segment_bytes: int = 1024 * 2**20
    segment_ms: int = 7 * 24 * 3600 * 1000
    topic_id: str | None = None

    def to_proto(self) -> common_pb2.PartitionConfig:
        config = common_pb2.PartitionConfig(
            retention_ms=self.retention_ms,
            retention_bytes=self.retention_bytes,
            max_message_bytes=self.max_message_bytes,
            durability=self.durability,
            remote_storage=self.remote_storage,
            local_retention_ms=self.local_retention_ms,
            local_retention_bytes=self.local_retention_bytes,
            max_segment_bytes=self.max_segment_bytes,
            segment_ms=self.segment_ms,
        )
        if self.topic_id is not None:
            config.topic_id = self.topic_id
        return config

    def differences(self, actual: common_pb2.PartitionConfig) -> list[str]:
        """The names of the fields whose value on the broker is not the desired one."""
        names = [*CONFIG_FIELDS, *(("topic_id",) if self.topic_id is not None else ())]
        return [name for name in names if getattr(actual, name) != getattr(self, name)]

    def without_topic_id(self) -> DesiredConfig:
        return replace(self, topic_id=None)


# The fields of ``DesiredConfig`` every create and alter sends (``topic_id`` aside).
CONFIG_FIELDS = (
    "retention_ms",
    "retention_bytes",
    "max_message_bytes",
    "durability",
    "remote_storage",
    "local_retention_ms",
    "local_retention_bytes",
    "max_segment_bytes",
    "segment_ms",
)


def spec(topic: str, partition: int, config: DesiredConfig) -> admin_pb2.PartitionSpec:
    return admin_pb2.PartitionSpec(topic=topic, partition=partition, config=config.to_proto())


def _call(address: str, method: str, request: object, *, service: str = "Admin") -> object:
    """Call ``<service>.<method>`` (``Admin``, ``Group`` or ``Broker``); a failed call
    raises ``BrokerUnavailable`` when its code is retriable (transport failures are),
    ``BrokerRefusedError`` when not."""
    if not address:
        raise BrokerUnavailable(address, "the broker has no address yet")
    stubs = {"Admin": admin_stub, "Group": group_stub, "Broker": broker_stub}
    stub = stubs[service](address)
    try:
        return getattr(stub, method)(request, timeout=settings.BROKER_RPC_TIMEOUT_S)
    except grpc.RpcError as exc:
        failure = classify(address, method, exc)
        if isinstance(failure, BrokerUnavailable):
            drop_channel(address)
        raise failure from exc


def create_partitions(
    address: str, specs: Sequence[admin_pb2.PartitionSpec]
) -> list[admin_pb2.AdminResult]:
    """``CreatePartitions``; per-partition results in the order of ``specs``."""
    request = admin_pb2.CreatePartitionsRequest(partitions=list(specs))
    response = _call(address, "CreatePartitions", request)
    assert isinstance(response, admin_pb2.CreatePartitionsResponse)
    return list(response.results)


def alter_partition_configs(
    address: str, specs: Sequence[admin_pb2.PartitionSpec]
) -> list[admin_pb2.AdminResult]:
    """``AlterPartitionConfigs`` (only the set fields change); results in order."""
    request = admin_pb2.AlterPartitionConfigsRequest(partitions=list(specs))
    response = _call(address, "AlterPartitionConfigs", request)
    assert isinstance(response, admin_pb2.AlterPartitionConfigsResponse)
    return list(response.results)


def delete_partitions(address: str, partitions: Iterable[tuple[str, int]]) -> None:
    """``DeletePartitions``; a partition already gone is fine. Raises as
    ``check_results``."""
    request = admin_pb2.DeletePartitionsRequest(
        partitions=[common_pb2.TopicPartition(topic=t, partition=p) for t, p in partitions]
    )
    response = _call(address, "DeletePartitions", request)
    assert isinstance(response, admin_pb2.DeletePartitionsResponse)
    check_results(address, response.results)


def describe_state(address: str, topics: Iterable[str] = ()) -> admin_pb2.DescribeStateResponse:
    """``DescribeState``: every partition the broker hosts (or only of ``topics``)."""
    response = _call(address, "DescribeState", admin_pb2.DescribeStateRequest(topics=list(topics)))
    assert isinstance(response, admin_pb2.DescribeStateResponse)
    return response


def list_groups(address: str) -> list[group_pb2.ListedGroup]:
    """``GroupCoordinator.ListGroups``: the groups this broker coordinates."""
    response = _call(address, "ListGroups", group_pb2.ListGroupsRequest(), service="Group")
    assert isinstance(response, group_pb2.ListGroupsResponse)
    return list(response.groups)


def describe_groups(address: str, group_ids: Sequence[str]) -> list[group_pb2.GroupDescription]:
    """``GroupCoordinator.DescribeGroups`` of groups this broker coordinates (with their
    committed offsets); a group's own failure is in its ``error`` field."""
    request = group_pb2.DescribeGroupsRequest(group_ids=list(group_ids))
    response = _call(address, "DescribeGroups", request, service="Group")
    assert isinstance(response, group_pb2.DescribeGroupsResponse)
    return list(response.groups)


@dataclass(frozen=True)
class RecordAt:
    """The record at ``offset`` of a partition (a group's committed offset)."""

    topic: str
    partition: int
    offset: int


def record_ages(address: str, asked: Sequence[RecordAt]) -> dict[RecordAt, int]:
    """``Broker.ListOffsets`` with ``record_at``: from the partitions' leader at
    ``address``, the age in ms of the record at each offset (0 when there is none: the
    group is caught up), in one call. An item the broker refused (not its leader any
    more, an unknown partition) is left out."""
    request = broker_pb2.ListOffsetsRequest(
        partitions=[
            broker_pb2.ListOffsetsPartition(
                topic=a.topic, partition=a.partition, timestamp=-1, record_at=a.offset
            )
            for a in asked
        ]
    )
    response = _call(address, "ListOffsets", request, service="Broker")
    assert isinstance(response, broker_pb2.ListOffsetsResponse)
    # The answers keep the order of the asks, except that refused ones (whole topics,
    # always with an error) may come last: match each answer to the next ask of its
    # partition.
    queues: dict[tuple[str, int], list[RecordAt]] = {}
    for a in asked:
        queues.setdefault((a.topic, a.partition), []).append(a)
    ages: dict[RecordAt, int] = {}
    for result in response.results:
        queue = queues.get((result.topic, result.partition))
        if not queue:
            continue
        item = queue.pop(0)
        if result.error == ErrorCode.NONE:
            ages[item] = max(0, result.record_age_ms)
    return ages


def ensure_partitions(
    address: str, specs: Sequence[admin_pb2.PartitionSpec]
) -> set[tuple[str, int]]:
    """Make every partition of ``specs`` exist on the broker with the spec's config:
    create it, or alter one that exists with another config. Idempotent. Returns the
    (topic, partition) pairs the broker changed; raises as ``check_results``."""
    results = create_partitions(address, specs)
    exists = [
        s for s, r in zip(specs, results, strict=True) if r.error == ErrorCode.TOPIC_ALREADY_EXISTS
    ]
    check_results(address, (r for r in results if r.error != ErrorCode.TOPIC_ALREADY_EXISTS))
    altered = alter_partition_configs(address, exists) if exists else []
    check_results(address, altered)
    return {(r.topic, r.partition) for r in [*results, *altered] if r.changed}


def update_metadata(
    targets: Mapping[K, str], request: admin_pb2.UpdateMetadataRequest, *, timeout_s: float
) -> dict[K, admin_pb2.UpdateMetadataResponse | MeridianError]:
    """``UpdateMetadata`` to every broker of ``targets`` (key -> address) at once (gRPC
    futures, one deadline each): each broker's answer, or its failure as a typed
    ``MeridianError`` (whose code the controller reads, e.g. ``STALE_CONTROLLER_EPOCH``),
    by key."""
    calls = {
        key: admin_stub(address).UpdateMetadata.future(request, timeout=timeout_s)
        for key, address in targets.items()
    }
    outcomes: dict[K, admin_pb2.UpdateMetadataResponse | MeridianError] = {}
    for key, call in calls.items():
        try:
            outcomes[key] = call.result()
        except grpc.RpcError as exc:
            outcomes[key] = error_from_rpc(exc)
            if exc.code() == grpc.StatusCode.UNAVAILABLE:  # as _call: reconnect at once
                drop_channel(targets[key])
    return outcomes

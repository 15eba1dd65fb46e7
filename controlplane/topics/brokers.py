"""The broker Admin RPCs the reconciler drives, with the control plane's error model.

Two kinds of failure, kept apart because the reconciler reacts to them differently:

- ``BrokerUnavailable`` (transient): the broker did not answer (down, unreachable, timed
  out) or answered with a retriable code (``dataplane.errors.is_retriable``). Retrying
  later may work; Celery tasks retry on it.
- ``BrokerRefusedError`` (permanent), and its ``PartitionRejectedError`` for one partition: the
  broker refused with a fatal code (an invalid name or config...). Retrying the same
  request cannot work; the topic fails.

Every call carries a deadline (``settings.BROKER_RPC_TIMEOUT_S``). Channels are cached per
(process, address) — a forked worker never reuses its parent's — and dropped after a
transport failure so the next call reconnects at once instead of waiting out gRPC's
reconnect backoff.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import grpc
from django.conf import settings

from controlplane.accounts.internal import broker_channel
from controlplane.core.errors import DomainError, Unavailable
from dataplane._gen.meridian.v1 import admin_pb2, admin_pb2_grpc, common_pb2
from dataplane.client.connection import CHANNEL_OPTIONS
from dataplane.errors import ErrorCode, error_from_rpc, is_retriable

# A restarted broker is found quickly: gRPC's default reconnect backoff reaches 2 minutes.
_OPTIONS = [
    *CHANNEL_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]

_channels: dict[tuple[int, str], grpc.Channel] = {}
_lock = threading.Lock()


class BrokerUnavailable(Unavailable):
    """A broker did not answer, or answered with a retriable error; retry later."""

    code = "broker_unavailable"

    def __init__(self, address: str, message: str) -> None:
        super().__init__(f"broker {address or '(no address)'}: {message}", address=address)
        self.address = address


class BrokerRefusedError(DomainError):
    """A broker refused a request with a non-retriable error: retrying cannot help."""

    code = "broker_refused"


class PartitionRejectedError(BrokerRefusedError):
    """A broker refused a partition with a non-retriable error code."""

    code = "partition_rejected"

    def __init__(self, address: str, result: admin_pb2.AdminResult) -> None:
        name = ErrorCode.Name(result.error)
        super().__init__(
            f"{result.topic}-{result.partition} on broker {address}: {name}: "
            f"{result.error_message}",
            address=address,
            topic=result.topic,
            partition=result.partition,
            error=name,
        )
        self.error_code = int(result.error)


@dataclass(frozen=True)
class DesiredConfig:
    """The partition configuration the control plane owns (a topic's settings)."""

    retention_ms: int
    retention_bytes: int
    max_message_bytes: int
    durability: str

    def to_proto(self) -> common_pb2.PartitionConfig:
        return common_pb2.PartitionConfig(
            retention_ms=self.retention_ms,
            retention_bytes=self.retention_bytes,
            max_message_bytes=self.max_message_bytes,
            durability=self.durability,
        )

    def differences(self, actual: common_pb2.PartitionConfig) -> list[str]:
        """The names of the fields whose value on the broker is not the desired one."""
        return [
            name
            for name in ("retention_ms", "retention_bytes", "max_message_bytes", "durability")
            if getattr(actual, name) != getattr(self, name)
        ]


def admin_stub(address: str) -> admin_pb2_grpc.AdminStub:
    """An Admin stub on the cached channel to ``address``."""
    if not address:
        raise BrokerUnavailable(address, "the broker has no address yet")
    key = (os.getpid(), address)
    with _lock:
        channel = _channels.get(key)
        if channel is None:
            channel = _channels[key] = broker_channel(address, _OPTIONS)
    return admin_pb2_grpc.AdminStub(channel)


def drop_channel(address: str) -> None:
    """Close and forget the cached channel to ``address`` (if any)."""
    with _lock:
        channel = _channels.pop((os.getpid(), address), None)
    if channel is not None:
        channel.close()


def close_channels() -> None:
    """Close every cached channel of this process."""
    with _lock:
        channels = [c for (pid, _), c in _channels.items() if pid == os.getpid()]
        _channels.clear()
    for channel in channels:
        channel.close()


def _call(address: str, method: str, request: object) -> object:
    """Call ``Admin.<method>``; a failed call raises ``BrokerUnavailable`` when its code
    is retriable (transport failures are), ``BrokerRefusedError`` when not."""
    stub = admin_stub(address)
    try:
        return getattr(stub, method)(request, timeout=settings.BROKER_RPC_TIMEOUT_S)
    except grpc.RpcError as exc:
        error = error_from_rpc(exc)
        if error.retriable:
            drop_channel(address)
            raise BrokerUnavailable(address, str(error)) from exc
        raise BrokerRefusedError(
            f"broker {address} refused {method}: {error}",
            address=address,
            method=method,
            error=error.code_name,
        ) from exc


def check_results(address: str, results: Iterable[admin_pb2.AdminResult]) -> None:
    """Raise for the first failed result: ``BrokerUnavailable`` when its code is
    retriable, ``PartitionRejectedError`` when it is not."""
    for result in results:
        if result.error == ErrorCode.NONE:
            continue
        if is_retriable(result.error):
            raise BrokerUnavailable(
                address,
                f"{result.topic}-{result.partition}: {ErrorCode.Name(result.error)}: "
                f"{result.error_message}",
            )
        raise PartitionRejectedError(address, result)


def spec(topic: str, partition: int, config: DesiredConfig) -> admin_pb2.PartitionSpec:
    return admin_pb2.PartitionSpec(topic=topic, partition=partition, config=config.to_proto())


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

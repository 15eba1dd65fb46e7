"""Helpers for broker authentication tests: stubs carrying a token, typed errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import grpc

from dataplane._gen.meridian.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    broker_pb2,
    broker_pb2_grpc,
    common_pb2,
    group_pb2_grpc,
)
from dataplane.client.connection import ChannelSecurity
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc

TIMEOUT_S = 15
NAMES = {value: name for name, value in ErrorCode.items()}


@dataclass
class Caller:
    """Stubs of one broker whose every call carries ``token`` (none when empty)."""

    channel: grpc.Channel
    broker: broker_pb2_grpc.BrokerStub
    group: group_pb2_grpc.GroupCoordinatorStub
    admin: admin_pb2_grpc.AdminStub


@contextmanager
def caller(address: str, token: str | None, tls: Any = None) -> Iterator[Caller]:
    with ChannelSecurity.of(token, tls).channel(address) as channel:
        yield Caller(
            channel,
            broker_pb2_grpc.BrokerStub(channel),
            group_pb2_grpc.GroupCoordinatorStub(channel),
            admin_pb2_grpc.AdminStub(channel),
        )


def refusal(call: Any, request: Any) -> MeridianError:
    """The typed error ``call(request)`` fails with (fails the test if it succeeds)."""
    try:
        call(request, timeout=TIMEOUT_S)
    except grpc.RpcError as exc:
        return error_from_rpc(exc)
    raise AssertionError(f"{call} succeeded")


def outcome(call: Any, request: Any) -> str:
    """A comparable summary of a call's answer: the error code and message, or the
    response's text with every per-item error."""
    try:
        response = call(request, timeout=TIMEOUT_S)
    except grpc.RpcError as exc:
        error = error_from_rpc(exc)
        return f"error {error.code_name}: {error.message}"
    return str(response)


def create_topic(c: Caller, topic: str, partitions: int = 1) -> None:
    specs = [
        admin_pb2.PartitionSpec(topic=topic, partition=p, config=common_pb2.PartitionConfig())
        for p in range(partitions)
    ]
    response = c.admin.CreatePartitions(
        admin_pb2.CreatePartitionsRequest(partitions=specs), timeout=TIMEOUT_S
    )
    assert all(r.error == 0 for r in response.results), response


def produce_request(topic: str, partition: int, records: bytes) -> broker_pb2.ProduceRequest:
    return broker_pb2.ProduceRequest(
        acks=1,
        partitions=[broker_pb2.PartitionRecords(topic=topic, partition=partition, records=records)],
    )


def fetch_request(*topics: str, partition: int = 0) -> broker_pb2.FetchRequest:
    return broker_pb2.FetchRequest(
        max_wait_ms=0,
        partitions=[
            broker_pb2.FetchPartition(topic=t, partition=partition, fetch_offset=0) for t in topics
        ],
    )


def list_offsets_request(*topics: str) -> broker_pb2.ListOffsetsRequest:
    partitions = [
        broker_pb2.ListOffsetsPartition(topic=t, partition=0, timestamp=-1) for t in topics
    ]
    return broker_pb2.ListOffsetsRequest(partitions=partitions)


def errors_by_topic(results: Any) -> dict[str, str]:
    return {r.topic: NAMES[r.error] for r in results}

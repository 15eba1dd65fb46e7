"""Helpers for broker tests: raw stubs, topic creation, produce and fetch in one call."""

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
)
from dataplane.errors import MeridianError, error_from_rpc
from dataplane.records import Record, build_batch, decode_batches
from tests.dataplane.storage.support import wait_for
from tests.support.brokers import BrokerProcess

__all__ = [
    "Stubs",
    "create",
    "end_offset",
    "fetch_records",
    "produce",
    "rpc_error",
    "stubs",
    "values_batch",
    "wait_for",
]

TIMEOUT_S = 15


@dataclass
class Stubs:
    channel: grpc.Channel
    broker: broker_pb2_grpc.BrokerStub
    admin: admin_pb2_grpc.AdminStub


@contextmanager
def stubs(process: BrokerProcess) -> Iterator[Stubs]:
    with process.channel() as channel:
        yield Stubs(channel, broker_pb2_grpc.BrokerStub(channel), admin_pb2_grpc.AdminStub(channel))


def create(s: Stubs, topic: str, partitions: int = 1, **config: Any) -> None:
    specs = [
        admin_pb2.PartitionSpec(
            topic=topic, partition=p, config=common_pb2.PartitionConfig(**config)
        )
        for p in range(partitions)
    ]
    response = s.admin.CreatePartitions(
        admin_pb2.CreatePartitionsRequest(partitions=specs), timeout=TIMEOUT_S
    )
    assert all(r.error == 0 for r in response.results), response


def produce(
    s: Stubs, topic: str, partition: int, records: bytes, *, acks: int = 1
) -> broker_pb2.PartitionProduceResult:
    request = broker_pb2.ProduceRequest(
        acks=acks,
        partitions=[broker_pb2.PartitionRecords(topic=topic, partition=partition, records=records)],
    )
    response = s.broker.Produce(request, timeout=TIMEOUT_S)
    (result,) = response.results
    return result


def values_batch(values: list[bytes], **kwargs: Any) -> bytes:
    return build_batch(values, **kwargs)


def fetch_records(
    s: Stubs, topic: str, partition: int = 0, offset: int = 0, **kwargs: Any
) -> list[Record]:
    """Records from ``offset`` to the high watermark, fetched repeatedly."""
    out: list[Record] = []
    while True:
        request = broker_pb2.FetchRequest(
            max_wait_ms=0,
            partitions=[
                broker_pb2.FetchPartition(topic=topic, partition=partition, fetch_offset=offset)
            ],
            **kwargs,
        )
        (result,) = s.broker.Fetch(request, timeout=TIMEOUT_S).results
        assert result.error == 0, result
        got = [r for r in decode_batches(result.records) if r.offset >= offset]
        if not got:
            return out
        out.extend(got)
        offset = got[-1].offset + 1


def rpc_error(call: Any, *args: Any, **kwargs: Any) -> MeridianError:
    """The typed error a call fails with (fails the test if it succeeds)."""
    try:
        call(*args, timeout=TIMEOUT_S, **kwargs)
    except grpc.RpcError as exc:
        return error_from_rpc(exc)
    raise AssertionError("the call succeeded")


def end_offset(s: Stubs, topic: str, partition: int = 0) -> int:
    request = broker_pb2.ListOffsetsRequest(
        partitions=[broker_pb2.ListOffsetsPartition(topic=topic, partition=partition, timestamp=-1)]
    )
    (result,) = s.broker.ListOffsets(request, timeout=TIMEOUT_S).results
    assert result.error == 0, result
    return result.offset

"""The brokers' Delay service and the reads and writes of dead letters, for the control
plane (``controlplane.delays``, ``controlplane.retries``), with its own channel security
(TLS and the controller's token: the caller decides what a tenant may see).

Failures leave as the gateway's typed errors: ``BrokerUnavailable`` when retrying may
help (no answer, a retriable code), ``BrokerRefusedError`` when not. Every read is
bounded (``MAX_READ_BYTES``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from django.conf import settings

from controlplane.gateway.channels import broker_stub, delay_stub, drop_channel
from controlplane.gateway.errors import BrokerRefusedError, BrokerUnavailable, classify
from dataplane._gen.meridian.v1 import broker_pb2, delay_pb2
from dataplane.errors import ErrorCode, is_retriable
from dataplane.records import BatchBuilder, Record, decode_batches

MAX_READ_BYTES = 1024 * 1024


def _call(address: str, stub: Any, method: str, request: Any) -> Any:
    if not address:
        raise BrokerUnavailable(address, "the broker has no address yet")
    try:
        return getattr(stub(address), method)(request, timeout=settings.BROKER_RPC_TIMEOUT_S)
    except grpc.RpcError as exc:
        failure = classify(address, method, exc)
        if isinstance(failure, BrokerUnavailable):
            drop_channel(address)
        raise failure from exc


def describe_delay(address: str, tenants: Sequence[str]) -> delay_pb2.DescribeDelayResponse:
    """What each timer partition of ``tenants`` led by the broker holds."""
    request = delay_pb2.DescribeDelayRequest(tenants=list(tenants))
    answer: delay_pb2.DescribeDelayResponse = _call(address, delay_stub, "DescribeDelay", request)
    return answer


def list_delayed(address: str, request: delay_pb2.ListDelayedRequest) -> list[Any]:
    """The pending records a timer partition's leader lists (``ListDelayed``)."""
    answer = _call(address, delay_stub, "ListDelayed", request)
    _check(address, answer)
    return list(answer.records)


def cancel_delayed(address: str, delayed_id: str) -> delay_pb2.CancelDelayedResponse:
    """``CancelDelayed`` on the timer partition's leader; the answer's ``error`` says
    whether it was pending (NONE), already delivered or unknown."""
    request = delay_pb2.CancelDelayedRequest(id=delayed_id)
    answer: delay_pb2.CancelDelayedResponse = _call(address, delay_stub, "CancelDelayed", request)
    if answer.error and is_retriable(answer.error):
        raise BrokerUnavailable(address, answer.error_message)
    return answer


def read(address: str, topic: str, partition: int, offset: int) -> tuple[list[Record], Any]:
    """Records of a partition from ``offset`` (at most ``MAX_READ_BYTES`` of batches) and
    the fetch's result (its high watermark and log start)."""
    request = broker_pb2.FetchRequest(
        max_wait_ms=0,
        max_bytes=MAX_READ_BYTES,
        partitions=[
            broker_pb2.FetchPartition(
                topic=topic,
                partition=partition,
                fetch_offset=offset,
                partition_max_bytes=MAX_READ_BYTES,
            )
        ],
    )
    (result,) = _call(address, broker_stub, "Fetch", request).results
    _check(address, result)
    return [r for r in decode_batches(result.records) if r.offset >= offset], result


def append(
    address: str,
    topic: str,
    partition: int,
    records: Sequence[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]],
) -> int:
    """Append ``records`` (key, value, headers) to a partition as one batch, acknowledged
    by every in-sync replica; the base offset."""
    builder = BatchBuilder()
    for key, value, headers in records:
        builder.append(value, key=key, headers=list(headers))
    request = broker_pb2.ProduceRequest(
        acks=-1,
        timeout_ms=int(settings.BROKER_RPC_TIMEOUT_S * 1000),
        partitions=[
            broker_pb2.PartitionRecords(topic=topic, partition=partition, records=builder.build())
        ],
    )
    (result,) = _call(address, broker_stub, "Produce", request).results
    _check(address, result)
    return int(result.base_offset)


def _check(address: str, result: Any) -> None:
    if not result.error:
        return
    if is_retriable(result.error):
        raise BrokerUnavailable(address, result.error_message)
    raise BrokerRefusedError(
        f"broker {address}: {ErrorCode.Name(result.error)}: {result.error_message}",
        address=address,
        error=ErrorCode.Name(result.error),
    )

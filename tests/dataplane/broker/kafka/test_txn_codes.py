"""PRODUCER_FENCED reaches a Kafka client only at the versions that know it; the older
ones get INVALID_PRODUCER_EPOCH, as Kafka's brokers answer. The listener's transaction
handlers in process, over a stand-in for the transactions servicer that answers every
call fenced (the servicer's own answers are ``tests/dataplane/broker/txn``'s)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from dataplane._gen.meridian.v1 import txn_pb2
from dataplane.broker.kafka import codes, txns
from dataplane.broker.kafka.wire import Request
from dataplane.broker.quotas import QuotaManager
from dataplane.errors import ErrorCode

FENCED = codes.kafka_code(ErrorCode.PRODUCER_FENCED)
OLD = codes.kafka_code(ErrorCode.INVALID_PRODUCER_EPOCH)


class _Fenced:
    async def InitProducerId(self, request: Any, ctx: Any) -> Any:  # noqa: N802
        return txn_pb2.TxnInitProducerIdResponse(error=ErrorCode.PRODUCER_FENCED)

    async def AddPartitions(self, request: Any, ctx: Any) -> Any:  # noqa: N802
        return txn_pb2.AddPartitionsToTxnResponse(
            results=[
                txn_pb2.TxnPartitionResult(
                    topic=p.topic, partition=p.partition, error=ErrorCode.PRODUCER_FENCED
                )
                for p in request.partitions
            ]
        )

    async def AddOffsets(self, request: Any, ctx: Any) -> Any:  # noqa: N802
        return txn_pb2.AddOffsetsToTxnResponse(error=ErrorCode.PRODUCER_FENCED)

    async def EndTxn(self, request: Any, ctx: Any) -> Any:  # noqa: N802
        return txn_pb2.EndTxnResponse(error=ErrorCode.PRODUCER_FENCED)

    async def TxnOffsetCommit(self, request: Any, ctx: Any) -> Any:  # noqa: N802
        return txn_pb2.TxnOffsetCommitResponse(
            results=[
                txn_pb2.TxnPartitionResult(
                    topic=o.topic, partition=o.partition, error=ErrorCode.PRODUCER_FENCED
                )
                for o in request.offsets
            ]
        )


def _services() -> txns.TxnServices:
    quotas = QuotaManager(lambda: None, registry=CollectorRegistry())
    return txns.TxnServices(_Fenced(), quotas)  # type: ignore[arg-type]


def _codes(api: str, version: int) -> list[int]:
    body = SimpleNamespace(
        transactional_id="acme.t",
        transaction_timeout_ms=1000,
        producer_id=1,
        producer_epoch=0,
        group_id="acme.g",
        committed=True,
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        v3_and_below_transactional_id="acme.t",
        v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=[SimpleNamespace(name="acme.o", partitions=[0])],
        topics=[
            SimpleNamespace(
                name="acme.o",
                partitions=[
                    SimpleNamespace(
                        partition_index=0,
                        committed_offset=5,
                        committed_metadata="",
                        committed_leader_epoch=-1,
                    )
                ],
            )
        ],
    )
    req = Request(None, version, 1, "c", body)  # type: ignore[arg-type]
    handler = {
        "InitProducerId": lambda: txns.init_producer_id(_services(), None, req, None),  # type: ignore[arg-type]
        "AddPartitions": lambda: txns.add_partitions(_services(), req, None),  # type: ignore[arg-type]
        "AddOffsets": lambda: txns.add_offsets(_services(), req, None),  # type: ignore[arg-type]
        "EndTxn": lambda: txns.end_txn(_services(), req, None),  # type: ignore[arg-type]
        "TxnOffsetCommit": lambda: txns.txn_offset_commit(_services(), req, None),  # type: ignore[arg-type]
    }[api]
    answer = asyncio.run(handler())
    if api == "AddPartitions":
        rows = answer["results_by_topic_v3_and_below"][0]["results_by_partition"]
        return [r["partition_error_code"] for r in rows]
    if api == "TxnOffsetCommit":
        return [r["error_code"] for r in answer["topics"][0]["partitions"]]
    return [answer["error_code"]]


@pytest.mark.parametrize(
    ("api", "first"),
    [
        ("InitProducerId", 4),
        ("AddPartitions", 2),
        ("AddOffsets", 2),
        ("EndTxn", 2),
        ("TxnOffsetCommit", 3),
    ],
)
def test_producer_fenced_is_invalid_producer_epoch_before_the_version_that_knows_it(
    api: str, first: int
) -> None:
    assert _codes(api, first - 1) == [OLD]
    assert _codes(api, first) == [FENCED]

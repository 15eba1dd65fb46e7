"""The coordinator's marker sender in process, its brokers stand-ins that record what
reaches them: a partition without a leader is retried until it has one (never given
up: its part of the transaction would never be visible and its last stable offset
stuck), a partition known deleted is given up, and a marker refused as fenced is
counted as an alert."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from dataplane._gen.meridian.v1 import txn_pb2
from dataplane.broker.txn.markers import MarkerSender
from dataplane.broker.txn.metrics import TxnMetrics
from dataplane.broker.txn.state import TxnMetadata, TxnState
from dataplane.errors import ErrorCode

TP = ("acme.orders", 0)
META = TxnMetadata("acme.loader", 7, 3, 60_000, TxnState.PREPARE_COMMIT, frozenset({TP}))


class Broker:
    """This broker's marker writer: answers each marker with ``error`` (0: written)."""

    def __init__(self, error: int = 0) -> None:
        self.error = error
        self.written: list[tuple[str, int]] = []

    async def write(
        self, request: txn_pb2.WriteTxnMarkersRequest
    ) -> txn_pb2.WriteTxnMarkersResponse:
        response = txn_pb2.WriteTxnMarkersResponse()
        for marker in request.markers:
            result = response.markers.add(producer_id=marker.producer_id)
            for tp in marker.partitions:
                result.results.add(topic=tp.topic, partition=tp.partition, error=self.error)
                if not self.error:
                    self.written.append((tp.topic, tp.partition))
        return response


async def no_remote(broker_id: int, request: object) -> txn_pb2.WriteTxnMarkersResponse:
    raise AssertionError("only this broker leads")


def sender(broker: Broker, leader_of, *, deleted: bool = False, metrics=None) -> MarkerSender:
    return MarkerSender(
        1,
        leader_of,
        broker,  # type: ignore[arg-type]
        no_remote,
        is_deleted=lambda topic, partition: deleted,
        metrics=metrics,
        unknown_topic_ms=0,
    )


def test_a_partition_without_a_leader_gets_its_marker_once_it_has_one_again() -> None:
    broker, asked = Broker(), []

    def leader_of(topic: str, partition: int) -> int | None:
        asked.append((topic, partition))
        return 1 if len(asked) > 3 else None  # leaderless past unknown_topic_ms

    asyncio.run(sender(broker, leader_of).send(META, 1))
    assert broker.written == [TP]


def test_a_deleted_partition_is_given_up() -> None:
    broker = Broker()
    asyncio.run(asyncio.wait_for(sender(broker, lambda t, p: None, deleted=True).send(META, 1), 10))
    assert broker.written == []


def test_a_marker_refused_as_fenced_is_counted() -> None:
    metrics = TxnMetrics(CollectorRegistry())
    broker = Broker(ErrorCode.TRANSACTION_COORDINATOR_FENCED)
    asyncio.run(sender(broker, lambda t, p: 1, metrics=metrics).send(META, 1))
    fenced = metrics.registry.get_sample_value(
        "meridian_txn_markers_fenced_total", {"code": "TRANSACTION_COORDINATOR_FENCED"}
    )
    assert fenced == 1

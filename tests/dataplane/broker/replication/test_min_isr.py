"""acks=all and ``min_insync_replicas``: an ISR shrink never acknowledges alone.

Freezing two followers of three under an acks=all wait with min ISR 2: once the
controller commits the ISR shrink to the leader alone, the high watermark jumps past the
waiting append -- and the waiting produce (and a retry of it, the duplicate path) must
be answered NOT_ENOUGH_REPLICAS_AFTER_APPEND, as Kafka answers, not success.
"""

from __future__ import annotations

from typing import Any

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.errors import ErrorCode
from dataplane.records import build_batch
from tests.dataplane.broker.support import produce, stubs, values_batch
from tests.support.replication import pause, resume

from .conftest import Replicas

TOPIC = "acme.minisr"


def _request(records: bytes) -> broker_pb2.ProduceRequest:
    return broker_pb2.ProduceRequest(
        acks=-1,
        timeout_ms=30_000,
        partitions=[broker_pb2.PartitionRecords(topic=TOPIC, partition=0, records=records)],
    )


def _producer_id(s: Any) -> tuple[int, int]:
    request = broker_pb2.InitProducerIdRequest(producer_id=-1, producer_epoch=-1)
    response = s.broker.InitProducerId(request, timeout=10)
    assert response.error == 0, response
    return response.producer_id, response.producer_epoch


def test_a_committed_shrink_below_min_isr_fails_the_waiting_acks_all_produce(
    replicas: Replicas,
) -> None:
    controller = replicas.controller
    controller.auto_commit = False
    controller.create_topic(TOPIC, [1, 2, 3], min_isr=2)
    with stubs(replicas[1]) as s:
        assert produce(s, TOPIC, 0, values_batch([b"before"]), acks=-1).error == 0
        pid, epoch = _producer_id(s)
        stalled = build_batch([b"stalled"], producer_id=pid, producer_epoch=epoch, base_sequence=0)
        pause(replicas[2])
        pause(replicas[3])
        try:
            original = s.broker.Produce.future(_request(stalled))
            controller.wait_for_proposal(TOPIC, 0, [1])
            # The same batch again while the original waits: a duplicate, waiting too.
            retry = s.broker.Produce.future(_request(stalled))
            assert not original.done()
            assert not retry.done()
            assert controller.commit(TOPIC, 0) == [1]
            # The shrink moved the HW past the append; only the leader has it.
            for call in (original, retry):
                (result,) = call.result(timeout=15).results
                assert result.error == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, result
            refused = produce(s, TOPIC, 0, values_batch([b"after"]), acks=-1)
            assert refused.error == ErrorCode.NOT_ENOUGH_REPLICAS
        finally:
            resume(replicas[2])
            resume(replicas[3])

"""Records due later (``x-deliver-at``) in a transactional batch are refused whole, before
anything is written or scheduled: the timer log is outside the transaction, so they
would be delivered whether it commits or aborts. The broker's ``ProduceHandler`` on a
real partition log, with a stand-in for the delay manager that fails the test if asked."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.broker.partitions import Partition
from dataplane.broker.produce import ProduceHandler
from dataplane.broker.producers import ProducerStateTable
from dataplane.delays import DELIVER_AT
from dataplane.errors import ErrorCode
from dataplane.records import Record, build_batch
from dataplane.storage.log import PartitionLog
from dataplane.storage.manager import TopicPartition


class _Registry:
    def __init__(self, part: Partition) -> None:
        self._part = part

    def get(self, topic: str, partition: int) -> Partition | None:
        return self._part if (topic, partition) == ("acme.orders", 0) else None


class _NoDelays:
    """Nothing may be scheduled."""

    async def divert(self, part: Partition, item: object) -> None:
        raise AssertionError("a transactional batch's records were scheduled")


def test_records_due_later_in_a_transaction_are_refused_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    due = Record(offset=0, timestamp=0, key=None, value=b"later", headers=[(DELIVER_AT, b"9")])
    batch = build_batch(
        [b"now", due], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    with ThreadPoolExecutor(1) as pool:
        log = PartitionLog.open(tmp_path / "acme.orders-0")
        try:
            table = ProducerStateTable()
            table.verified(7, 0)  # the coordinator confirmed the partition
            part = Partition(TopicPartition("acme.orders", 0), log, table, pool)
            part.marker = DELIVER_AT.encode()
            handler = ProduceHandler(
                _Registry(part),  # type: ignore[arg-type]
                max_request_bytes=1 << 20,
                delay=_NoDelays(),  # type: ignore[arg-type]
            )
            request = broker_pb2.ProduceRequest(
                acks=1,
                timeout_ms=10_000,
                partitions=[
                    broker_pb2.PartitionRecords(topic="acme.orders", partition=0, records=batch)
                ],
            )
            (result,) = asyncio.run(handler.produce(request)).results
            assert result.error == ErrorCode.INVALID_RECORD
            assert "cannot be sent in a transaction" in result.error_message
            assert log.log_end_offset == 0
            assert table.open_transactions() == {}
        finally:
            log.close()

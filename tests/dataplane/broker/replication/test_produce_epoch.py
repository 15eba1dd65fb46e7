"""An acks=all produce answers for the leader epoch its append was stamped with: real
partition logs and the broker's ``ProduceHandler``, without broker processes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.broker.partitions import Partition
from dataplane.broker.produce import ACKS_ALL, ProduceHandler
from dataplane.broker.producers import ProducerStateTable
from dataplane.broker.replication.state import ReplicaState, Role
from dataplane.errors import ErrorCode
from dataplane.records import build_batch
from dataplane.storage.leader_epoch import LeaderEpochCache
from dataplane.storage.log import PartitionLog
from dataplane.storage.manager import TopicPartition


class _Registry:
    """The two partitions the handler looks up (the registry's ``get``)."""

    def __init__(self, parts: list[Partition]) -> None:
        self._parts = {(p.topic, p.index): p for p in parts}

    def get(self, topic: str, partition: int) -> Partition | None:
        return self._parts.get((topic, partition))


@pytest.fixture
def leaders(tmp_path: Path) -> Iterator[list[Partition]]:
    executor = ThreadPoolExecutor(1)
    parts = []
    for index in (0, 1):
        log = PartitionLog.open(tmp_path / f"t-{index}", replicated=True)
        part = Partition(TopicPartition("t", index), log, ProducerStateTable(), executor)
        part.replica = ReplicaState(
            1,
            LeaderEpochCache(log.directory),
            role=Role.LEADER,
            leader_id=1,
            leader_epoch=5,
            replicas=[1, 2],
            isr=[1, 2],
        )
        parts.append(part)
    try:
        yield parts
    finally:
        for part in parts:
            part.log.close()
        executor.shutdown()


def test_an_offset_truncated_and_reused_under_a_later_epoch_is_not_acknowledged(
    leaders: list[Partition],
) -> None:
    """Partition 1 is appended at epoch 5 while the request waits on partition 0; it
    then loses its tail in a leadership round trip (epoch 6 elsewhere, 7 here again) and
    its HW at epoch 7 passes the offset, which now holds another record."""
    slow, moved = leaders

    async def scenario() -> broker_pb2.ProduceResponse:
        handler = ProduceHandler(_Registry(leaders), max_request_bytes=1 << 20)  # type: ignore[arg-type]
        request = broker_pb2.ProduceRequest(
            acks=ACKS_ALL,
            timeout_ms=30_000,
            partitions=[
                broker_pb2.PartitionRecords(topic="t", partition=0, records=build_batch([b"a"])),
                broker_pb2.PartitionRecords(topic="t", partition=1, records=build_batch([b"b"])),
            ],
        )
        pending = handler.submit(request)
        while moved.log.log_end_offset < 1 or slow.log.log_end_offset < 1:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # the handler waits on partition 0's HW now
        # Partition 1's round trip: truncated, then leading again at epoch 7 with
        # another record at offset 0 that the ISR has.
        state = moved.replica
        assert state is not None
        state.leader_epoch = 7
        moved.log.truncate_to(0)
        moved.log.append(build_batch([b"other"]), leader_epoch=7)
        moved.log.update_high_watermark(1)
        moved.notify()
        slow.log.update_high_watermark(1)  # partition 0 is replicated at last
        slow.notify()
        return await asyncio.wait_for(pending, 10)

    response = asyncio.run(scenario())
    first, second = response.results
    assert first.error == ErrorCode.NONE
    assert first.base_offset == 0
    assert second.error == ErrorCode.NOT_LEADER_OR_FOLLOWER

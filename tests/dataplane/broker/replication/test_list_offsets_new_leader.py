"""A new leader lists no latest offset until its high watermark reaches the start of its
epoch: it took the HW it knew as a follower, and the previous leader may have answered
a higher one (latest, the last stable offset). Real partition logs and the broker's
``OffsetsHandler``, without broker processes."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.broker.fetch import OffsetsHandler
from dataplane.broker.partitions import Partition
from dataplane.broker.producers import ProducerStateTable
from dataplane.broker.replication.state import ReplicaState, Role
from dataplane.errors import ErrorCode
from dataplane.records import build_batch
from dataplane.storage.leader_epoch import LeaderEpochCache
from dataplane.storage.log import PartitionLog
from dataplane.storage.manager import TopicPartition


class _Registry:
    def __init__(self, part: Partition) -> None:
        self._part = part

    def get(self, topic: str, partition: int) -> Partition | None:
        return self._part if (topic, partition) == (self._part.topic, self._part.index) else None


@pytest.fixture
def new_leader(tmp_path: Path) -> Iterator[Partition]:
    """Three records replicated here as a follower, which learnt a HW of 2; then it
    leads at epoch 6 from its LEO, 3."""
    executor = ThreadPoolExecutor(1)
    log = PartitionLog.open(tmp_path / "t-0", replicated=True)
    part = Partition(TopicPartition("t", 0), log, ProducerStateTable(), executor)
    try:
        for value in (b"a", b"b", b"c"):
            log.append(build_batch([value]))
        log.update_high_watermark(2)
        epochs = LeaderEpochCache(log.directory)
        epochs.assign(6, log.log_end_offset)
        part.replica = ReplicaState(
            1, epochs, role=Role.LEADER, leader_id=1, leader_epoch=6, replicas=[1, 2], isr=[1, 2]
        )
        yield part
    finally:
        log.close()
        executor.shutdown()


def _latest(
    handler: OffsetsHandler, committed: bool, spec: int = -1
) -> broker_pb2.ListOffsetsResult:
    request = broker_pb2.ListOffsetsRequest(
        partitions=[broker_pb2.ListOffsetsPartition(topic="t", partition=0, timestamp=spec)],
        isolation_level=broker_pb2.READ_COMMITTED if committed else broker_pb2.READ_UNCOMMITTED,
    )
    (result,) = handler._lookup_all(request)
    return result


def test_latest_is_refused_until_the_high_watermark_reaches_the_epoch_start(
    new_leader: Partition,
) -> None:
    handler = OffsetsHandler(_Registry(new_leader), ThreadPoolExecutor(1))  # type: ignore[arg-type]
    for committed in (False, True):
        refused = _latest(handler, committed)
        assert refused.error == ErrorCode.LEADER_NOT_AVAILABLE, "HW 2 would go backwards"
        assert refused.offset == -1
        assert "behind the start of its leader epoch" in refused.error_message
    earliest = _latest(handler, False, spec=-2)  # the log start does not hang on the HW
    assert (earliest.error, earliest.offset) == (ErrorCode.NONE, 0)
    new_leader.log.update_high_watermark(3)  # the follower fetched from the new leader
    for committed in (False, True):
        answered = _latest(handler, committed)
        assert (answered.error, answered.offset) == (ErrorCode.NONE, 3)

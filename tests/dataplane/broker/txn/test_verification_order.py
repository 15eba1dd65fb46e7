"""A transaction's first batches of a partition wait for the coordinator's verification
and are then appended in the order they came: the broker's ``ProduceHandler`` on a real
partition log, without broker processes; the coordinator is a function here (its
answers are ``test_coordinator.py``'s)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.broker.partitions import Partition
from dataplane.broker.produce import ProduceHandler
from dataplane.broker.producers import ProducerStateTable
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import build_batch
from dataplane.records.control import Marker
from dataplane.storage.log import PartitionLog
from dataplane.storage.manager import TopicPartition

PID, EPOCH, TID = 7, 0, "acme.ordered"
Key = tuple[str, int]


class _Registry:
    def __init__(self, part: Partition) -> None:
        self.part = part

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.part if (topic, partition) == (self.part.topic, self.part.index) else None


@pytest.fixture
def part(tmp_path: Path) -> Iterator[Partition]:
    executor = ThreadPoolExecutor(1)
    log = PartitionLog.open(tmp_path / "t-0")
    try:
        yield Partition(TopicPartition("t", 0), log, ProducerStateTable(), executor)
    finally:
        log.close()
        executor.shutdown()


def _request(first_sequence: int, records: int) -> broker_pb2.ProduceRequest:
    batch = build_batch(
        [b"v"] * records,
        producer_id=PID,
        producer_epoch=EPOCH,
        base_sequence=first_sequence,
        is_transactional=True,
    )
    item = broker_pb2.PartitionRecords(topic="t", partition=0, records=batch)
    return broker_pb2.ProduceRequest(acks=1, partitions=[item], transactional_id=TID)


@pytest.mark.parametrize("suspends", [False, True], ids=["answers-at-once", "answers-later"])
def test_batches_waiting_on_one_verification_are_appended_in_arrival_order(
    part: Partition, suspends: bool
) -> None:
    """Pipelined requests of one producer: the first opens the transaction and is
    verified; one arrives while it waits, one just as the answer comes (before the first
    has woken up: awaiting an answer already given does not yield). A coordinator on the
    same broker answers without suspending. No later request may overtake the first
    (it would be refused as not starting at sequence 0)."""
    asked: list[list[Key]] = []
    pending: list[asyncio.Future[broker_pb2.ProduceResponse]] = []

    async def scenario() -> list[broker_pb2.ProduceResponse]:
        loop = asyncio.get_running_loop()

        def submit(first_sequence: int) -> None:
            pending.append(asyncio.ensure_future(handler.submit(_request(first_sequence, 5))))

        async def verify(tid: str, pid: int, epoch: int, keys: list[Key]) -> dict[Key, None]:
            asked.append(keys)
            if suspends:
                submit(5)
                await asyncio.sleep(0.01)
            loop.call_soon(submit, 10)  # runs after the answer is set, before anyone wakes
            return dict.fromkeys(keys)

        handler = ProduceHandler(_Registry(part), max_request_bytes=1 << 20, verify=verify)  # type: ignore[arg-type]
        submit(0)
        if not suspends:
            submit(5)
        while len(pending) < 3:
            await asyncio.sleep(0.001)
        return list(await asyncio.wait_for(asyncio.gather(*pending), 10))

    responses = asyncio.run(scenario())
    results = [r.results[0] for r in responses]
    assert [(r.error, r.base_offset) for r in results] == [
        (ErrorCode.NONE, 0),
        (ErrorCode.NONE, 5),
        (ErrorCode.NONE, 10),
    ]
    assert asked == [[("t", 0)]]  # one verification, shared
    assert part.producers.in_transaction(PID, EPOCH)


def test_a_refused_verification_refuses_every_waiting_request_and_appends_nothing(
    part: Partition,
) -> None:
    async def verify(tid: str, pid: int, epoch: int, keys: list[Key]) -> dict[Key, MeridianError]:
        return dict.fromkeys(keys, MeridianError(ErrorCode.INVALID_TXN_STATE, "not added"))

    async def scenario() -> list[broker_pb2.ProduceResponse]:
        handler = ProduceHandler(_Registry(part), max_request_bytes=1 << 20, verify=verify)  # type: ignore[arg-type]
        pending = [handler.submit(_request(seq, 5)) for seq in (0, 5)]
        return list(await asyncio.wait_for(asyncio.gather(*pending), 10))

    responses = asyncio.run(scenario())
    assert [r.results[0].error for r in responses] == [ErrorCode.INVALID_TXN_STATE] * 2
    assert part.log.log_end_offset == 0
    assert not part.producers.in_transaction(PID, EPOCH)


def test_a_marker_landing_while_the_coordinator_answers_leaves_nothing_open(
    part: Partition,
) -> None:
    """KIP-890's sentinel: the coordinator confirms the partition, but before its answer
    arrives the client has aborted and the abort marker reaches the partition. The late
    answer must not let the batch open a transaction that marker already closed (no
    marker would ever close it: its records could join the producer's next
    transaction)."""

    async def scenario() -> broker_pb2.ProduceResponse:
        async def verify(tid: str, pid: int, epoch: int, keys: list[Key]) -> dict[Key, None]:
            # the abort's marker, written while the answer is on its way
            await asyncio.get_running_loop().run_in_executor(
                None, part.append_marker, Marker(PID, EPOCH, False, 0)
            )
            return dict.fromkeys(keys)

        handler = ProduceHandler(_Registry(part), max_request_bytes=1 << 20, verify=verify)  # type: ignore[arg-type]
        return await asyncio.wait_for(handler.submit(_request(0, 5)), 10)

    (result,) = asyncio.run(scenario()).results
    assert result.error == ErrorCode.INVALID_TXN_STATE
    assert part.producers.open_transactions() == {}
    assert part.log.log_end_offset == 1  # the marker alone
    assert not part.producers.in_transaction(PID, EPOCH)

"""The transactional producer's ``TransactionManager`` against a scripted coordinator: an
AddPartitions still in flight when a transaction ends must land before its EndTxn.

The coordinator link is a fake here (the order of calls across threads is what is
tested, and a real coordinator cannot be held mid-call on cue); the end-to-end
behaviour is ``tests/dataplane/broker/txn``'s."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from dataplane._gen.meridian.v1 import txn_pb2
from dataplane.client.transactions import TransactionManager
from dataplane.client.types import TopicPartition
from dataplane.errors import ErrorCode, MeridianError

TP = TopicPartition("acme.t", 0)


class _Coordinator:
    """A coordinator link: records each call's start and end; AddPartitions waits for
    ``release`` when ``hold`` is set."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.hold = False
        self.release = threading.Event()
        self.adding = threading.Event()

    def call(self, rpc: str, request: Any, api_timeout_s: float) -> Any:
        self.events.append(f"{rpc} start")
        if rpc == "AddPartitions" and self.hold:
            self.adding.set()
            assert self.release.wait(10)
        self.events.append(f"{rpc} end")
        if rpc == "InitProducerId":
            return txn_pb2.TxnInitProducerIdResponse(producer_id=7, producer_epoch=0)
        if rpc == "AddPartitions":
            return txn_pb2.AddPartitionsToTxnResponse(
                results=[
                    txn_pb2.TxnPartitionResult(topic=p.topic, partition=p.partition)
                    for p in request.partitions
                ]
            )
        return SimpleNamespace()


def _manager() -> tuple[TransactionManager, _Coordinator]:
    sender = SimpleNamespace(txn=None, set_identity=lambda pid, epoch: None)
    accumulator = SimpleNamespace(on_open=None, wakeup=lambda: None)
    manager = TransactionManager(
        "acme.tid",
        60_000,
        SimpleNamespace(),  # type: ignore[arg-type]
        sender,  # type: ignore[arg-type]
        accumulator,  # type: ignore[arg-type]
        max_block_s=10,
    )
    coordinator = _Coordinator()
    manager._link = coordinator  # type: ignore[assignment]
    manager.init_transactions()
    return manager, coordinator


def _add_in_background(manager: TransactionManager) -> threading.Thread:
    thread = threading.Thread(target=lambda: asyncio.run(manager.add()))
    thread.start()
    return thread


def test_an_add_in_flight_lands_before_the_transaction_ends() -> None:
    manager, coordinator = _manager()
    manager.begin_transaction()
    assert not manager.addable(TP)  # the sender's first batch of TP asks for it
    coordinator.hold = True
    adding = _add_in_background(manager)
    assert coordinator.adding.wait(10)
    committing = threading.Thread(target=lambda: manager.commit_transaction(lambda t: None))
    committing.start()
    committing.join(0.2)
    assert committing.is_alive(), "EndTxn went out with AddPartitions in flight"
    coordinator.release.set()
    adding.join(10)
    committing.join(10)
    assert coordinator.events[-4:] == [
        "AddPartitions start",
        "AddPartitions end",
        "EndTxn start",
        "EndTxn end",
    ]


def test_a_partition_asked_for_again_while_being_added_is_added_once() -> None:
    """The sender asks for TP again (another of its batches) while the first
    AddPartitions is in flight: the next pass adds nothing, so no AddPartitions of this
    transaction is left to land in the next one."""
    manager, coordinator = _manager()
    manager.begin_transaction()
    assert not manager.addable(TP)
    coordinator.hold = True
    adding = _add_in_background(manager)
    assert coordinator.adding.wait(10)
    assert not manager.addable(TP)  # still being added
    coordinator.release.set()
    adding.join(10)
    assert manager.addable(TP)
    asyncio.run(manager.add())
    manager.commit_transaction(lambda t: None)
    manager.begin_transaction()
    assert coordinator.events.count("AddPartitions start") == 1
    assert not manager.addable(TP), "a new transaction adds its partitions afresh"


@pytest.mark.parametrize("state", ["READY", "IN_TRANSACTION"])
def test_a_batch_opened_in_a_transaction_adds_its_partition_at_once(state: str) -> None:
    """``send`` opening a batch (the accumulator's ``on_open``) asks for its partition
    before the batch is ready; outside a transaction it asks nothing."""
    manager, coordinator = _manager()
    if state == "IN_TRANSACTION":
        manager.begin_transaction()
    manager._opened(TP)
    asyncio.run(manager.add())
    added = coordinator.events.count("AddPartitions start")
    assert added == (1 if state == "IN_TRANSACTION" else 0)


def test_an_add_whose_answer_was_lost_is_still_ended() -> None:
    """AddPartitions reached the coordinator (the transaction is open there) but its
    answer was lost: the abort still sends EndTxn, or the transaction would stay open
    at the coordinator until its timeout, holding back its partitions' readers. Had the
    add not landed, the coordinator's INVALID_TXN_STATE is nothing to end."""
    manager, coordinator = _manager()
    lost = MeridianError(ErrorCode.REQUEST_TIMED_OUT, "the answer was lost")
    real_call = coordinator.call

    def call(rpc: str, request: Any, api_timeout_s: float) -> Any:
        answer = real_call(rpc, request, api_timeout_s)
        if rpc == "AddPartitions":
            raise lost
        if rpc == "EndTxn" and landed == [False]:
            raise MeridianError(ErrorCode.INVALID_TXN_STATE, "no open transaction")
        return answer

    coordinator.call = call  # type: ignore[method-assign]
    manager._sender = SimpleNamespace(  # type: ignore[assignment]
        call_on_loop=lambda f: f(),
        drop_unsent=lambda error: False,
        in_flight=lambda: False,
        set_identity=lambda pid, epoch: None,
        fail_all=lambda error: None,
    )
    landed: list[bool] = []
    for add_landed in (True, False):
        landed[:] = [add_landed]
        manager.begin_transaction()
        assert not manager.addable(TP)
        asyncio.run(manager.add())
        manager.abort_transaction()
    assert coordinator.events.count("EndTxn start") == 2

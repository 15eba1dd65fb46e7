"""The transaction coordinator in process (no broker): its state machine, its log across
restarts, fencing, timeouts, verification, and half messages with their check-backs.
The markers are what a fake sender records (the real one is tested on brokers); the
clock is the test's."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from dataplane._gen.meridian.v1 import txn_pb2
from dataplane.broker.producers import HALF_PRODUCER_BIT
from dataplane.broker.txn.coordinator import TransactionCoordinator, TxnConfig
from dataplane.broker.txn.halves import CheckBackHub, HalfMessages
from dataplane.broker.txn.state import TxnState
from dataplane.errors import ErrorCode, MeridianError
from dataplane.storage.manager import LogManager

TID = "acme.loader"
TP = ("acme.orders", 0)
OTHER = ("acme.orders", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class Markers:
    """A fake marker sender: records each decided transaction, and may hold them."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, TxnState, frozenset[tuple[str, int]], int, int]] = []
        self.producer_ids: list[int] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def send(self, meta: Any, coordinator_epoch: int) -> None:
        await self.gate.wait()
        self.producer_ids.append(meta.producer_id)
        self.sent.append(
            (
                meta.transactional_id,
                meta.state,
                meta.partitions,
                meta.producer_epoch,
                coordinator_epoch,
            )
        )


async def known(topic: str, partition: int) -> MeridianError | None:
    if topic == "acme.orders" and partition < 4:
        return None
    return MeridianError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition}")


@asynccontextmanager
async def coordinator(
    directory: Path, clock: Clock, markers: Markers, **config: Any
) -> AsyncIterator[tuple[TransactionCoordinator, HalfMessages, CheckBackHub]]:
    manager = LogManager(directory)
    manager.open()
    ids = itertools.count(100)
    core = TransactionCoordinator(
        broker_id=1,
        manager=manager,
        num_partitions=4,
        new_producer_id=lambda: next(ids),
        send_markers=markers.send,
        check_partition=known,
        clock_ms=clock,
        config=TxnConfig(**{"tick_interval_ms": 10, "complete_wait_ms": 2_000, **config}),
    )
    hub = CheckBackHub()
    halves = HalfMessages(core, hub, lambda: next(ids), known)
    await core.start(range(4))
    try:
        yield core, halves, hub
    finally:
        await core.stop()
        manager.close()


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


async def code_of(call: Awaitable[Any]) -> int:
    with pytest.raises(MeridianError) as caught:
        await call
    return caught.value.code


async def settle(core: TransactionCoordinator, tid: str = TID) -> None:
    await core.wait_completed(tid)


def test_a_transaction_commits_then_a_new_one_opens(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock, markers = Clock(), Markers()
        async with coordinator(tmp_path, clock, markers) as (core, _, _):
            pid, epoch = await core.init_producer_id(TID, 60_000)
            added = await core.add_partitions(TID, pid, epoch, [TP, ("acme.orders", 9)])
            assert added[TP] is None
            assert added[("acme.orders", 9)].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            verified = core.verify(TID, pid, epoch, [TP, OTHER])
            assert verified[TP] is None
            assert verified[OTHER].code == ErrorCode.INVALID_TXN_STATE
            await core.end_txn(TID, pid, epoch, commit=True)
            await core.end_txn(TID, pid, epoch, commit=True)  # a retry is answered alike
            await settle(core)
            assert markers.sent == [(TID, TxnState.PREPARE_COMMIT, frozenset({TP}), epoch, 1)]
            assert core.describe(TID).state is TxnState.COMPLETE_COMMIT
            await core.add_partitions(TID, pid, epoch, [OTHER])
            assert core.describe(TID).partitions == frozenset({OTHER})

    run(scenario)


def test_ending_a_transaction_the_wrong_way_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock, markers = Clock(), Markers()
        async with coordinator(tmp_path, clock, markers) as (core, _, _):
            pid, epoch = await core.init_producer_id(TID, 60_000)
            assert await code_of(core.end_txn(TID, pid, epoch, commit=True)) == (
                ErrorCode.INVALID_TXN_STATE  # nothing open
            )
            await core.add_partitions(TID, pid, epoch, [TP])
            await core.end_txn(TID, pid, epoch, commit=False)
            await settle(core)
            assert await code_of(core.end_txn(TID, pid, epoch, commit=True)) == (
                ErrorCode.INVALID_TXN_STATE  # committing an aborted transaction
            )
            assert await code_of(core.add_partitions(TID, pid + 1, epoch, [TP])) == (
                ErrorCode.INVALID_PRODUCER_ID_MAPPING
            )
            assert await code_of(core.init_producer_id(TID, 10**9)) == (
                ErrorCode.INVALID_TRANSACTION_TIMEOUT
            )
            assert await code_of(core.init_producer_id("", 1000)) == (
                ErrorCode.INVALID_TRANSACTIONAL_ID
            )

    run(scenario)


def test_a_new_producer_aborts_the_open_transaction_and_fences_the_old_one(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock, markers = Clock(), Markers()
        async with coordinator(tmp_path, clock, markers) as (core, _, _):
            pid, old = await core.init_producer_id(TID, 60_000)
            await core.add_partitions(TID, pid, old, [TP, OTHER])
            same, new = await core.init_producer_id(TID, 60_000)
            assert same == pid
            assert new == old + 2  # one bump for the abort's markers, one for the producer
            assert markers.sent == [
                (TID, TxnState.PREPARE_ABORT, frozenset({TP, OTHER}), old + 1, 1)
            ]
            assert await code_of(core.end_txn(TID, pid, old, commit=True)) == (
                ErrorCode.PRODUCER_FENCED
            )
            assert core.verify(TID, pid, old, [TP])[TP].code == ErrorCode.PRODUCER_FENCED

    run(scenario)


async def at_epoch(core: TransactionCoordinator, epoch: int) -> None:
    """Move ``TID``'s producer to ``epoch`` (as ~32,000 InitProducerIds would)."""
    async with core.locked(TID) as loaded:
        meta = loaded.store.get(TID)
        assert meta is not None
        await core.change(loaded, meta.replace(producer_epoch=epoch))


def test_an_exhausted_producer_is_fenced_under_its_own_id_then_given_a_new_one(
    tmp_path: Path,
) -> None:
    """At the last epoch a producer may hold (32766), a new producer's fence still aborts
    with the same producer id (epoch 32767): a marker of another id would close nothing
    on the partitions, and their last stable offset would stay behind the open
    transaction for ever. Only the InitProducerId that follows hands out a new id."""

    async def scenario() -> None:
        clock, markers = Clock(), Markers()
        async with coordinator(tmp_path, clock, markers) as (core, _, _):
            pid, _ = await core.init_producer_id(TID, 60_000)
            await at_epoch(core, 32766)
            await core.add_partitions(TID, pid, 32766, [TP])
            new_pid, epoch = await core.init_producer_id(TID, 60_000)
            assert markers.producer_ids == [pid]
            assert markers.sent == [(TID, TxnState.PREPARE_ABORT, frozenset({TP}), 32767, 1)]
            assert new_pid != pid
            assert epoch == 0
            assert await code_of(core.end_txn(TID, pid, 32766, commit=True)) == (
                ErrorCode.INVALID_PRODUCER_ID_MAPPING
            )
            # A transaction timing out at the last epoch is aborted under its own id too.
            await at_epoch(core, 32766)
            await core.add_partitions(TID, new_pid, 32766, [OTHER])
            clock.now += 60_001
            while core.describe(TID).state is not TxnState.COMPLETE_ABORT:
                await asyncio.sleep(0.01)
            assert markers.producer_ids == [pid, new_pid]
            assert markers.sent[-1][3] == 32767

    run(scenario)


def test_a_retried_init_producer_id_gets_the_answer_it_lost(tmp_path: Path) -> None:
    """KIP-360: a producer bumping its own epoch whose answer was lost asks again with
    the epoch it had, and gets the epoch it was given (not PRODUCER_FENCED); so does
    one whose exhausted id was replaced by a new one, across a restart of the
    coordinator. An older epoch is fenced; an id the transactional id never had is
    INVALID_PRODUCER_ID_MAPPING."""

    async def scenario() -> None:
        clock, markers = Clock(), Markers()
        async with coordinator(tmp_path, clock, markers) as (core, _, _):
            pid, _ = await core.init_producer_id(TID, 60_000)
            assert await core.init_producer_id(TID, 60_000, pid, 0) == (pid, 1)
            assert await core.init_producer_id(TID, 60_000, pid, 0) == (pid, 1)  # retried
            assert await core.init_producer_id(TID, 60_000, pid, 1) == (pid, 2)
            assert await code_of(core.init_producer_id(TID, 60_000, pid, 0)) == (
                ErrorCode.PRODUCER_FENCED
            )
            assert await code_of(core.init_producer_id(TID, 60_000, pid + 7, 2)) == (
                ErrorCode.INVALID_PRODUCER_ID_MAPPING
            )
            await at_epoch(core, 32766)
            rotated, epoch = await core.init_producer_id(TID, 60_000, pid, 32766)
            assert rotated != pid
            assert epoch == 0
        async with coordinator(tmp_path, clock, markers) as (core, _, _):
            assert await core.init_producer_id(TID, 60_000, pid, 32766) == (rotated, 0)
            # Once the new id began a transaction, the old one's retry is stale.
            await core.add_partitions(TID, rotated, 0, [TP])
            assert await code_of(core.init_producer_id(TID, 60_000, pid, 32766)) == (
                ErrorCode.PRODUCER_FENCED
            )
            assert core.describe(TID).state is TxnState.ONGOING

    run(scenario)


def test_an_id_used_while_it_expires_is_kept(tmp_path: Path) -> None:
    """The expiry of idle transactional ids leaves out the ids a request holds and checks
    each again right before its tombstone is queued: a request holding the id (here,
    bumping it) is never undone by a tombstone, and the expiry never waits for it; the
    idle ones expire, written together."""

    async def scenario() -> None:
        clock, markers = Clock(), Markers()
        async with coordinator(tmp_path, clock, markers, id_expiration_ms=1_000) as (
            core,
            _,
            _,
        ):
            pid, _ = await core.init_producer_id(TID, 60_000)
            idle = [f"acme.idle-{n}" for n in range(5)]
            for transactional_id in idle:
                await core.init_producer_id(transactional_id, 60_000)
            async with core.locked(TID) as loaded:
                clock.now += 2_000  # every id idle past its expiration
                await asyncio.wait_for(core._expire(clock.now), 10)
                meta = loaded.store.get(TID)
                assert meta is not None, "expired under a request holding the id"
                await core.change(loaded, meta.replace(last_update_ms=clock.now))
            assert core.describe(TID).producer_id == pid
            for transactional_id in idle:
                with pytest.raises(MeridianError) as caught:
                    core.describe(transactional_id)
                assert caught.value.code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND

    run(scenario)


def test_a_transaction_open_past_its_timeout_is_aborted(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock, markers = Clock(), Markers()
        async with coordinator(tmp_path, clock, markers) as (core, _, _):
            pid, epoch = await core.init_producer_id(TID, 5_000)
            await core.add_partitions(TID, pid, epoch, [TP])
            clock.now += 5_001
            while core.describe(TID).state is not TxnState.COMPLETE_ABORT:
                await asyncio.sleep(0.01)
            assert markers.sent[-1][1:4] == (TxnState.PREPARE_ABORT, frozenset({TP}), epoch + 1)
            assert await code_of(core.add_partitions(TID, pid, epoch, [TP])) == (
                ErrorCode.PRODUCER_FENCED
            )

    run(scenario)


def test_a_decided_transaction_is_completed_after_a_restart(tmp_path: Path) -> None:
    """The coordinator died between deciding and writing the markers: its log says
    PREPARE_COMMIT, so the next load writes them, with a newer coordinator epoch."""

    async def scenario() -> None:
        clock, markers = Clock(), Markers()
        markers.gate.clear()  # the markers never get through before the "crash"
        async with coordinator(tmp_path, clock, markers) as (core, _, _):
            pid, epoch = await core.init_producer_id(TID, 60_000)
            await core.add_partitions(TID, pid, epoch, [TP, OTHER])
            await core.end_txn(TID, pid, epoch, commit=True)
            assert await code_of(core.add_partitions(TID, pid, epoch, [TP])) == (
                ErrorCode.CONCURRENT_TRANSACTIONS
            )
        again = Markers()
        async with coordinator(tmp_path, clock, again) as (core, _, _):
            await settle(core)
            assert again.sent == [(TID, TxnState.PREPARE_COMMIT, frozenset({TP, OTHER}), epoch, 2)]
            assert core.describe(TID).state is TxnState.COMPLETE_COMMIT
            await core.add_partitions(TID, pid, epoch, [TP])  # the producer goes on

    run(scenario)


def test_an_operator_aborts_a_hanging_transaction(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock, markers = Clock(), Markers()
        async with coordinator(tmp_path, clock, markers) as (core, _, _):
            pid, epoch = await core.init_producer_id(TID, 600_000)
            assert await code_of(core.abort(TID)) == ErrorCode.INVALID_TXN_STATE
            await core.add_partitions(TID, pid, epoch, [TP])
            after = await core.abort(TID)
            assert (after.state, after.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)
            assert await code_of(core.abort("acme.unknown")) == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND

    run(scenario)


def test_half_messages_are_decided_by_their_producer_and_remembered(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock, markers = Clock(), Markers()
        async with coordinator(tmp_path, clock, markers) as (core, halves, _):
            first = await halves.begin(
                "acme.payments", *TP, key=b"order-1", check_interval_ms=60_000
            )
            second = await halves.begin("acme.payments", *TP, check_interval_ms=60_000)
            assert first.producer_id & HALF_PRODUCER_BIT
            assert first.producer_id != second.producer_id
            assert core.verify(first.transactional_id, first.producer_id, 0, [TP]) == {TP: None}
            assert first.half is not None
            assert second.half is not None
            done = await halves.end("acme.payments", first.half.half_id, True)
            assert done.state is TxnState.COMPLETE_COMMIT
            await halves.end("acme.payments", first.half.half_id, True)  # again: alike
            await halves.end("acme.payments", second.half.half_id, False)
            assert await code_of(halves.end("acme.payments", second.half.half_id, True)) == (
                ErrorCode.INVALID_TXN_STATE
            )
            assert await code_of(halves.end("acme.payments", "nope", True)) == (
                ErrorCode.HALF_MESSAGE_NOT_FOUND
            )
            assert [s[1] for s in markers.sent] == [TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT]
            assert [m.half.resolved_by for m in halves.list("acme.payments") if m.half] == [
                "producer",
                "producer",
            ]

    run(scenario)


def test_a_half_message_outliving_the_brokers_limit_gets_its_default(tmp_path: Path) -> None:
    """Its producer asked for a check a day, a thousand times; the broker's
    ``half_max_lifetime_ms`` decides: its default outcome applies once it is that old,
    so it holds its partition's readers back no longer."""

    async def scenario() -> None:
        clock, markers = Clock(), Markers()
        async with coordinator(tmp_path, clock, markers, half_max_lifetime_ms=60_000) as (
            _,
            halves,
            _,
        ):
            meta = await halves.begin(
                "acme.payments", *TP, check_interval_ms=24 * 3600 * 1000, max_checks=1000
            )
            assert meta.half is not None
            clock.now += 60_000
            for _ in range(1000):  # the timer ticks every 10 ms
                if markers.sent:
                    break
                await asyncio.sleep(0.01)
            assert markers.sent, "still undecided past the broker's limit"
            assert markers.sent[0][1] is TxnState.PREPARE_ABORT  # the default: roll back
            (decided,) = halves.list("acme.payments")
            assert decided.half is not None
            assert decided.half.resolved_by == "default"

    run(scenario)


def test_a_tenants_share_of_a_coordinator_is_bounded(tmp_path: Path) -> None:
    """A transaction of more partitions than ``max_partitions``, and more undecided half
    messages of one tenant than ``half_max_open_per_tenant``, are QUOTA_EXCEEDED, with
    nothing changed; another tenant is not held back, and deciding one makes room."""

    async def scenario() -> None:
        clock, markers = Clock(), Markers()
        limits = {"max_partitions": 2, "half_max_open_per_tenant": 2}
        async with coordinator(tmp_path, clock, markers, **limits) as (core, halves, _):
            pid, epoch = await core.init_producer_id(TID, 60_000)
            await core.add_partitions(TID, pid, epoch, [TP, OTHER])
            assert await code_of(core.add_partitions(TID, pid, epoch, [("acme.orders", 2)])) == (
                ErrorCode.QUOTA_EXCEEDED
            )
            assert core.describe(TID).partitions == frozenset({TP, OTHER})
            first = await halves.begin("acme.payments", *TP)
            await halves.begin("acme.refunds", *TP)
            assert await code_of(halves.begin("acme.payments", *TP)) == ErrorCode.QUOTA_EXCEEDED
            await halves.begin("globex.payments", *TP)  # another tenant's own share
            assert first.half is not None
            await halves.end("acme.payments", first.half.half_id, False)
            for _ in range(1000):  # the next tick counts what is still undecided
                try:
                    await halves.begin("acme.payments", *TP)
                    break
                except MeridianError as error:
                    if error.code != ErrorCode.QUOTA_EXCEEDED:
                        raise
                    await asyncio.sleep(0.01)
            else:
                raise AssertionError("no room after a half message was decided")

    run(scenario)


def test_ending_a_half_message_or_aborting_returns_only_once_it_is_visible(
    tmp_path: Path,
) -> None:
    """A half message's commit, and an operator's abort, answer once the markers are
    written (what was decided is visible then); while they are still being written
    after ``complete_wait_ms``, ``CONCURRENT_TRANSACTIONS`` (retriable), and the same
    call again joins the decision already made."""

    async def scenario() -> None:
        clock, markers = Clock(), Markers()
        async with coordinator(tmp_path, clock, markers, complete_wait_ms=50) as (
            core,
            halves,
            _,
        ):
            meta = await halves.begin("acme.payments", *TP, check_interval_ms=60_000)
            assert meta.half is not None
            pid, epoch = await core.init_producer_id(TID, 60_000)
            await core.add_partitions(TID, pid, epoch, [TP])
            markers.gate.clear()  # a partition's leader is away
            assert await code_of(halves.end("acme.payments", meta.half.half_id, True)) == (
                ErrorCode.CONCURRENT_TRANSACTIONS
            )
            assert await code_of(core.abort(TID)) == ErrorCode.CONCURRENT_TRANSACTIONS
            assert await code_of(core.abort(TID)) == ErrorCode.CONCURRENT_TRANSACTIONS
            markers.gate.set()
            done = await halves.end("acme.payments", meta.half.half_id, True)
            assert done.state is TxnState.COMPLETE_COMMIT
            await settle(core)
            aborted = core.describe(TID)
            assert (aborted.state, aborted.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)
            assert [s[1] for s in markers.sent] == [TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT]

    run(scenario)


def test_an_unanswered_half_message_is_checked_back_then_given_its_default(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock, markers = Clock(), Markers()
        async with coordinator(tmp_path, clock, markers) as (core, halves, hub):
            member = hub.connect("acme.payments", "producer-2")
            meta = await halves.begin(
                "acme.payments", *TP, key=b"k", check_interval_ms=1_000, max_checks=2,
                default_commit=True,
            )  # fmt: skip
            assert meta.half is not None
            half_id = meta.half.half_id
            clock.now += 1_000
            asked = await asyncio.wait_for(member.requests.get(), 5)
            assert (asked.half_message.half_id, asked.half_message.key, asked.check_number) == (
                half_id,
                b"k",
                1,
            )
            hub.disconnect(member)  # the second check finds no producer: it counts anyway
            while halves.list()[0].state is TxnState.ONGOING:
                clock.now += 100
                await asyncio.sleep(0.01)
            await core.wait_completed(meta.transactional_id)
            (done,) = halves.list()
            assert done.half is not None
            assert (done.state, done.half.resolved_by, done.half.checks) == (
                TxnState.COMPLETE_COMMIT,
                "default",
                2,
            )

    run(scenario)


def test_a_check_back_answer_decides_and_an_unknown_one_waits(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock, markers = Clock(), Markers()
        async with coordinator(tmp_path, clock, markers) as (_core, halves, hub):
            hub.connect("acme.payments", "p")
            meta = await halves.begin("acme.payments", *TP, check_interval_ms=1_000, max_checks=5)
            assert meta.half is not None
            unknown = txn_pb2.CheckBackAnswer(
                half_id=meta.half.half_id, outcome=txn_pb2.HALF_UNKNOWN
            )
            await halves.answer("acme.payments", unknown)
            raised = txn_pb2.CheckBackAnswer(half_id=meta.half.half_id, error_message="boom")
            await halves.answer("acme.payments", raised)
            assert halves.list()[0].state is TxnState.ONGOING
            rollback = txn_pb2.CheckBackAnswer(
                half_id=meta.half.half_id, outcome=txn_pb2.HALF_ROLLBACK
            )
            await halves.answer("acme.payments", rollback)
            (done,) = halves.list()
            assert done.half is not None
            assert (done.state, done.half.resolved_by) == (TxnState.COMPLETE_ABORT, "check-back")

    run(scenario)


def test_half_messages_and_their_checks_survive_a_restart(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock, markers = Clock(), Markers()
        async with coordinator(tmp_path, clock, markers) as (_, halves, hub):
            hub.connect("acme.payments", "p")
            meta = await halves.begin("acme.payments", *TP, check_interval_ms=1_000, max_checks=3)
            clock.now += 1_000
            while halves.list()[0].half.checks < 1:  # type: ignore[union-attr]
                await asyncio.sleep(0.01)
        async with coordinator(tmp_path, clock, markers) as (_, halves, _):
            (found,) = halves.list("acme.payments")
            assert found.transactional_id == meta.transactional_id
            assert found.state is TxnState.ONGOING
            assert found.half is not None
            assert found.half.checks == 1

    run(scenario)

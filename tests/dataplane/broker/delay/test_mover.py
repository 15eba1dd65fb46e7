"""Movers in-process on real partition logs: a timer partition, and target partitions
written through the broker's own produce handler (its producer checks and size limits),
with faults made where a cluster would make them: a target's leader dying after an
append its follower copied only in part, a timer leader dying mid-round, a mover stopped
with an append under way, a target refusing large batches, a record pending for weeks
while thousands pass it. Every test counts each record's deliveries by its
``x-delayed-from`` id: each exactly once, none lost. No process is started."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from dataplane._gen.meridian.v1 import admin_pb2, broker_pb2
from dataplane.broker.delay import mover as mover_module
from dataplane.broker.delay.mover import (
    MOVER_PRODUCER_ID,
    Mover,
    MoverHooks,
    mover_counter,
    mover_producer_id,
)
from dataplane.broker.delay.targets import TargetWriter
from dataplane.broker.partitions import Partition
from dataplane.broker.produce import ProduceHandler
from dataplane.broker.producers import ProducerStateTable
from dataplane.broker.quotas import QuotaManager
from dataplane.broker.replication.state import ReplicaState, Role
from dataplane.delays import (
    DELAY_PARTITION,
    DELAY_TOPIC,
    DELAYED_FROM,
    DELIVER_AT,
    DelayedId,
    header,
)
from dataplane.errors import ErrorCode
from dataplane.records import BatchBuilder, Record, decode_batches
from dataplane.records.header import read_header
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.leader_epoch import LeaderEpochCache
from dataplane.storage.log import PartitionLog
from dataplane.storage.manager import TopicPartition

NOW = 1_700_000_000_000
DAY_MS = 86_400_000
TIMER = "__delay.acme"
ORDERS = "acme.orders"
TP = (ORDERS, 0)


def _batches(data: bytes) -> int:
    count, position = 0, 0
    while position < len(data):
        position += read_header(data, position).size
        count += 1
    return count


class Cluster:
    """One timer partition and the target partitions, all led "here" (broker 1), written
    through a real ``ProduceHandler``; ``faults`` see every answer the movers get."""

    def __init__(self, root: Path, quotas: QuotaManager | None = None) -> None:
        self.root = root
        self.pool = ThreadPoolExecutor(4)
        self.parts: dict[tuple[str, int], Partition] = {}
        self.generation = 0
        self.now = NOW
        self.limits: dict[str, int] = {}  # topics' max_message_bytes as a push would say
        self.dropped: Counter[str] = Counter()
        self.faults: list[Callable[[dict[Any, bytes], dict[Any, Any]], None]] = []
        self.loop_thread = threading.current_thread()
        self.loop_reads = 0
        config = LogConfig(durability=Durability.NEVER, max_batch_bytes=64 << 20, retention_ms=-1)
        self.timer = self._open(TIMER, 0, config)
        self.handler = ProduceHandler(self, max_request_bytes=64 << 20)
        self._writer = TargetWriter(
            1,
            self.handler.produce,
            lambda t, p: 1 if (t, p) in self.parts else None,
            lambda b: None,
            quotas=quotas,
        )

    # -- what the produce handler and the mover ask ---------------------------------------
    def get(self, topic: str, partition: int) -> Partition | None:
        return self.parts.get((topic, partition))

    async def produce(self, parts: dict[Any, bytes], acks: int = -1) -> dict[Any, Any]:
        results = await self._writer.produce(parts, acks)
        for fault in list(self.faults):
            fault(parts, results)
        return results

    async def io(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn)

    def mover(self, epoch: int = 0, run_io: Callable[..., Any] | None = None) -> Mover:
        return Mover(
            self.timer,
            "acme",
            epoch,
            run_io=run_io or self.io,
            writer=self,  # type: ignore[arg-type]
            hooks=MoverHooks(
                moved=lambda tenant, topic, lateness: None,
                dropped=lambda tenant, reason, count: self.dropped.update({reason: count}),
                known_partitions=lambda t: {p for (n, p) in self.parts if n == t} or None,
                message_limit=lambda t, p: self.limits.get(t),
            ),
            clock_ms=lambda: self.now,
        )

    # -- partitions ---------------------------------------------------------------------
    def _open(self, topic: str, partition: int, config: LogConfig) -> Partition:
        self.generation += 1
        log = PartitionLog.open(self.root / f"{topic}-{partition}.{self.generation}", config)
        if topic == TIMER:
            read = log.read

            def watched(*args: Any, **kwargs: Any) -> Any:
                if threading.current_thread() is self.loop_thread:
                    self.loop_reads += 1
                return read(*args, **kwargs)

            log.read = watched  # type: ignore[method-assign]
        part = Partition(TopicPartition(topic, partition), log, ProducerStateTable(), self.pool)
        self.parts[(topic, partition)] = part
        return part

    def target(self, topic: str = ORDERS, partition: int = 0, **config: Any) -> Partition:
        return self._open(topic, partition, LogConfig(durability=Durability.NEVER, **config))

    def fail_over(self, tp: tuple[str, int], keep: int) -> None:
        """The target's leader dies; its follower, holding only its first ``keep``
        batches (and their producer state, replicated), leads."""
        old = self.parts[tp]
        new = self.target(*tp, max_batch_bytes=old.log.config.max_batch_bytes)
        for base, batch in list(old.log.batch_headers(0))[:keep]:
            data = old.log.read(base, 1, max_offset=old.log.log_end_offset).data[: batch.size]
            new.log.append(
                data,
                assign_offsets=False,
                before_write=lambda _, headers: new.producers.record_replicated(headers),
            )

    def remake(self, tp: tuple[str, int]) -> None:
        """The topic deleted and made anew: an empty log, a producer table knowing nobody."""
        old = self.parts[tp]
        self.target(*tp, max_batch_bytes=old.log.config.max_batch_bytes)

    # -- records --------------------------------------------------------------------------
    async def schedule(
        self, records: Iterable[tuple[int, bytes]], tp: tuple[str, int] = TP
    ) -> list[str]:
        """Scheduled records (due, value) for ``tp`` in one batch; their ids."""
        builder = BatchBuilder()
        count = 0
        for due, value in records:
            headers = [
                (DELIVER_AT, b"%d" % due),
                (DELAY_TOPIC, tp[0].encode()),
                (DELAY_PARTITION, b"%d" % tp[1]),
            ]
            builder.append(value, key=b"k", timestamp=NOW, headers=headers)
            count += 1
        info = await self.timer.submit(builder.build())
        return [str(DelayedId(tp[0], 0, info.base_offset + i)) for i in range(count)]

    def delivered(self, tp: tuple[str, int] = TP) -> list[Record]:
        log = self.parts[tp].log
        return list(decode_batches(log.read(0, 1 << 30, max_offset=log.log_end_offset).data))

    def delivered_ids(self, tp: tuple[str, int] = TP) -> Counter[str]:
        return Counter(
            (header(r.headers, DELAYED_FROM) or b"").decode() for r in self.delivered(tp)
        )

    def close(self) -> None:
        assert self.loop_reads == 0, "the timer log was read on the event loop"
        self.pool.shutdown(wait=True)
        for part in self.parts.values():
            part.log.close()


async def until(check: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def stop(task: asyncio.Task[Any]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def leader_dies(
    cluster: Cluster, tp: tuple[str, int], at: int, then: Callable[[], None] = lambda: None
) -> list[int]:
    """At the ``at``-th append the movers get acknowledged on ``tp``: the target's leader
    appended it and dies, its follower having copied half (rounded down) of that append's
    batches; the mover is told NOT_LEADER_OR_FOLLOWER; ``then()`` runs. Returns the list
    the fault appends to when it fires."""
    seen, fired = [0], []

    def fault(parts: dict[Any, bytes], results: dict[Any, Any]) -> None:
        if fired or tp not in parts or results[tp].error:
            return
        seen[0] += 1
        if seen[0] < at:
            return
        fired.append(_batches(parts[tp]))
        held = len(list(cluster.parts[tp].log.batch_headers(0)))
        cluster.fail_over(tp, held - fired[0] + fired[0] // 2)
        results[tp] = broker_pb2.PartitionProduceResult(
            topic=tp[0], partition=tp[1], error=ErrorCode.NOT_LEADER_OR_FOLLOWER, base_offset=-1
        )
        then()

    cluster.faults.append(fault)
    return fired


def _values(count: int, size: int = 1000, start: int = 0) -> list[tuple[int, bytes]]:
    return [(NOW - 10_000, b"%05d" % (start + i) + b"x" * size) for i in range(count)]


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of four 1 KB records, so a round of 16 sends a target four batches."""
    monkeypatch.setattr(mover_module, "BATCH_BYTES", 4400)
    monkeypatch.setattr(mover_module, "RETRY_BACKOFF_S", (0.01, 0.05))


def test_a_follower_that_copied_part_of_an_append_loses_and_doubles_nothing(
    tmp_path: Path, small_batches: None
) -> None:
    """A round of four batches for one target; the target's leader appends what it was
    sent and dies with its follower holding half of it; the mover goes on, then moves a
    second round: every record is in the target once (none dropped, none answered as a
    duplicate of another batch)."""

    async def main() -> None:
        cluster = Cluster(tmp_path)
        cluster.target()
        ids = await cluster.schedule(_values(16))
        fired = leader_dies(cluster, TP, at=1)
        mover = cluster.mover()
        task = asyncio.create_task(mover.run())
        await until(lambda: len(cluster.delivered()) >= 16, "the first round")
        ids += await cluster.schedule(_values(8, start=16))
        await until(lambda: len(cluster.delivered()) >= 24, "the second round")
        await until(lambda: mover.pending == 0, "nothing pending")
        await stop(task)
        assert fired
        assert cluster.delivered_ids() == Counter(ids)
        assert not cluster.dropped
        cluster.close()

    asyncio.run(main())


@pytest.mark.parametrize("at", [1, 2])
def test_a_timer_leader_dying_mid_round_is_resumed_exactly_once(
    tmp_path: Path, small_batches: None, at: int
) -> None:
    """The timer partition's leader dies while a target takes its round (at its first or
    second acknowledged append); the target's leader dies too, its follower holding half
    of the last append. The next timer leader rebuilds from the log and delivers the last
    intent again: each record once."""

    async def main() -> None:
        cluster = Cluster(tmp_path)
        cluster.target()
        ids = await cluster.schedule(_values(16))
        first = cluster.mover()
        task = asyncio.create_task(first.run())
        fired = leader_dies(cluster, TP, at=at, then=task.cancel)
        await until(lambda: bool(fired), "the fault")
        await asyncio.gather(task, return_exceptions=True)
        cluster.faults.clear()
        second = cluster.mover()
        task = asyncio.create_task(second.run())
        await until(lambda: len(cluster.delivered()) >= 16 and second.ready.is_set(), "a resend")
        await until(lambda: second.pending == 0, "nothing pending")
        await stop(task)
        assert cluster.delivered_ids() == Counter(ids)
        cluster.close()

    asyncio.run(main())


def test_a_resend_to_a_target_made_anew_is_requeued_not_dropped(
    tmp_path: Path, small_batches: None
) -> None:
    """A round is under way when its timer leader dies and the topic is made anew: the
    resend's first batch is UNKNOWN_PRODUCER_ID (its sequence is past 0 for a producer
    the new topic never saw). The records are requeued and moved under the new leader's
    producer id; a target answering sequence refusals to a live leader is the same."""

    async def main() -> None:
        cluster = Cluster(tmp_path)
        cluster.target()
        first = cluster.mover()
        task = asyncio.create_task(first.run())
        await cluster.schedule(_values(16))
        await until(lambda: len(cluster.delivered()) >= 16, "the first round")
        ids = await cluster.schedule(_values(16, start=16))
        fired = leader_dies(cluster, TP, at=2, then=task.cancel)
        await until(lambda: bool(fired), "the fault")
        await asyncio.gather(task, return_exceptions=True)
        cluster.faults.clear()
        cluster.remake(TP)
        second = cluster.mover()
        task = asyncio.create_task(second.run())
        await until(lambda: len(cluster.delivered()) >= 16, "the requeued records")
        await until(lambda: second.pending == 0, "nothing pending")
        assert cluster.delivered_ids() == Counter(ids)
        cluster.remake(TP)  # again, under the live leader: its next round is refused too
        ids2 = await cluster.schedule(_values(4, start=32))
        await until(lambda: len(cluster.delivered()) >= 4, "the round after")
        await stop(task)
        assert cluster.delivered_ids() == Counter(ids2)
        assert second.counts.requeued >= 16 + 4
        assert not cluster.dropped
        cluster.close()

    asyncio.run(main())


def test_an_append_of_a_stopped_mover_cannot_land_under_the_next_leadership(
    tmp_path: Path,
) -> None:
    """A mover's move intent is on its way to the log when its leadership ends (a new
    leader epoch on this same broker). The next mover rebuilds; then the old append gets
    its turn and is refused by the epoch check: the new mover never reads an intent
    whose records nobody would send, and moves them itself once due."""

    async def main() -> None:
        cluster = Cluster(tmp_path)
        cluster.target()
        timer = cluster.timer
        epochs = LeaderEpochCache(tmp_path / "epochs")
        timer.replica = ReplicaState(
            1, epochs, role=Role.LEADER, leader_id=1, leader_epoch=1, replicas=[1], isr=[1]
        )
        timer.on_leader_append = Partition.notify
        held, release, done = threading.Event(), threading.Event(), threading.Event()
        old_pool = ThreadPoolExecutor(1)

        async def held_io(fn: Callable[[], Any]) -> Any:
            def run() -> Any:
                if "_append_own" not in getattr(fn, "__qualname__", ""):
                    return fn()
                held.set()
                release.wait(20)
                try:
                    return fn()
                finally:
                    done.set()

            return await asyncio.get_running_loop().run_in_executor(old_pool, run)

        first = cluster.mover(epoch=1, run_io=held_io)
        task = asyncio.create_task(first.run())
        await until(first.ready.is_set, "the first mover")
        ids = await cluster.schedule(_values(5))
        await until(held.is_set, "the intent on its way")
        await stop(task)
        cluster.now -= 60_000  # not due for the next mover until the old append is settled
        timer.replica.leader_epoch = 2  # led again here, at a new epoch
        second = cluster.mover(epoch=2)
        task = asyncio.create_task(second.run())
        await until(second.ready.is_set, "the second mover")
        release.set()
        await until(done.is_set, "the old append")
        log = timer.log
        await until(lambda: second._ingested >= log.log_end_offset, "whatever landed, read")
        cluster.now += 60_000
        await until(lambda: len(cluster.delivered()) >= 5, "the records")
        await until(lambda: second.pending == 0, "nothing pending")
        await stop(task)
        old_pool.shutdown(wait=True)
        assert cluster.delivered_ids() == Counter(ids)
        cluster.close()

    asyncio.run(main())


@pytest.mark.parametrize("pushed", [False, True])
def test_batches_fit_the_target_and_only_an_oversized_record_is_dropped(
    tmp_path: Path, pushed: bool
) -> None:
    """A topic taking batches of at most 3,000 bytes: 1 KB records go in batches it
    takes (learnt from its refusals, or from the push's max_message_bytes at once); the
    one 5 KB record is dropped alone, counted; the rest of its round is delivered."""

    async def main() -> None:
        cluster = Cluster(tmp_path)
        cluster.target(max_batch_bytes=3000)
        if pushed:
            cluster.limits[ORDERS] = 3000
        ids = await cluster.schedule(_values(10))
        big = await cluster.schedule([(NOW - 1, b"B" * 5000)])
        ids += await cluster.schedule(_values(10, start=10))
        refusals: list[int] = []
        cluster.faults.append(
            lambda parts, results: refusals.extend(
                _batches(parts[tp]) for tp, r in results.items()
                if r.error == ErrorCode.MESSAGE_TOO_LARGE
            )
        )  # fmt: skip
        mover = cluster.mover()
        task = asyncio.create_task(mover.run())
        await until(
            lambda: len(cluster.delivered()) >= 20 and mover.pending == 0 and bool(cluster.dropped),
            "the records delivered and the oversized one dropped",
        )
        await stop(task)
        assert cluster.delivered_ids() == Counter(ids)
        assert big[0] not in cluster.delivered_ids()
        assert cluster.dropped == Counter({"message_too_large": 1})
        if pushed:  # only the oversized record's own batch was ever refused
            assert refusals == [1]
        else:
            assert len(refusals) > 1
        cluster.close()

    asyncio.run(main())


def test_a_long_pending_record_is_carried_forward_keeping_its_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two records due in 30 days, then 600 due at once: the log start moves past the
    long ones (carried to the end), and a new leader rebuilt from what is left still
    holds them once each, under their ids: one is cancelled by its id, the other
    delivered once when due."""
    monkeypatch.setattr(mover_module, "CARRY_SPAN", 64)
    monkeypatch.setattr(mover_module, "TRIM_INTERVAL_S", 0.01)

    async def main() -> None:
        cluster = Cluster(tmp_path)
        cluster.target()
        later = NOW + 30 * DAY_MS
        kept, cancelled = await cluster.schedule([(later, b"kept"), (later, b"cancelled")])
        ids = []
        for chunk in range(60):
            ids += await cluster.schedule(_values(10, size=10, start=10 * chunk))
        first = cluster.mover()
        task = asyncio.create_task(first.run())
        origin = DelayedId.parse(kept).offset
        log = cluster.timer.log
        await until(lambda: len(cluster.delivered()) >= 600, "the short ones")
        await until(lambda: log.log_start_offset > origin + 1, "the log start past the long ones")
        # Pending and listed all along: a copy takes over as it is read, in one step.
        assert first.pending == 2
        listed = await first.scheduled(ORDERS, (-1, -1), 10, 100, lambda topic: True)
        assert [r.id for r in listed] == [kept, cancelled]
        await stop(task)
        assert first.counts.carried >= 2
        second = cluster.mover()
        task = asyncio.create_task(second.run())
        await until(second.ready.is_set, "the rebuild")
        assert second.pending == 2
        listed = await second.scheduled(ORDERS, (-1, -1), 10, 100, lambda topic: True)
        assert [(r.id, r.value) for r in listed] == [(kept, b"kept"), (cancelled, b"cancelled")]
        assert (await second.cancel(DelayedId.parse(cancelled))).deliver_at_ms == later
        cluster.now = later
        await until(lambda: len(cluster.delivered()) >= 601 and second.pending == 0, "the kept one")
        await stop(task)
        assert cluster.delivered_ids() == Counter([*ids, kept])
        cluster.close()

    asyncio.run(main())


def test_mover_producer_ids_are_above_clients_and_never_repeat(tmp_path: Path) -> None:
    """A mover's producer id names its timer partition and a counter past the last
    intent's and the clock's, whatever a broker's own producer id state holds: a new
    leadership never reuses an id a target remembers."""
    assert mover_producer_id(5, 7) > (2**20 - 1) << 40 | (2**40 - 1)  # every client id
    assert mover_counter(mover_producer_id(5, 7), 5) == 7
    assert mover_counter(mover_producer_id(5, 7), 4) is None
    assert mover_counter((3 << 40) | 9, 5) is None

    async def main() -> None:
        cluster = Cluster(tmp_path)
        cluster.target()
        pids = []
        for _ in range(3):
            mover = cluster.mover()
            task = asyncio.create_task(mover.run())
            await cluster.schedule(_values(2))
            await until(lambda m=mover: m.ready.is_set() and m.pending == 0, "a round")
            await until(lambda: len(cluster.delivered()) >= 2 * (len(pids) + 1), "the records")
            await stop(task)
            pids.append(mover._producer_id)
            cluster.now -= 1000  # a clock stepping back changes nothing
        assert pids == sorted(set(pids))
        assert all(pid & MOVER_PRODUCER_ID for pid in pids)
        cluster.close()

    asyncio.run(main())


def test_deliveries_are_charged_at_the_tenants_produce_rate(tmp_path: Path) -> None:
    """Records due at once that a mover delivers to a topic led on its own broker are
    charged to the tenant's produce rate and held while it is in debt, as those sent to
    a peer are by its interceptor: 20 KB at 2 KB/s are held for seconds in all."""
    push = admin_pb2.UpdateMetadataRequest(
        quotas=[admin_pb2.TenantQuota(tenant="acme", produce_bytes_per_s=2000)]
    )
    held: list[float] = []

    async def sleep(seconds: float) -> None:
        held.append(seconds)

    quotas = QuotaManager(lambda: push, sleep=sleep)

    async def main() -> None:
        cluster = Cluster(tmp_path, quotas)
        cluster.target()
        ids = await cluster.schedule(_values(20))
        mover = cluster.mover()
        task = asyncio.create_task(mover.run())
        await until(lambda: len(cluster.delivered()) >= 20 and mover.pending == 0, "the records")
        await stop(task)
        assert cluster.delivered_ids() == Counter(ids)
        cluster.close()

    asyncio.run(main())
    assert sum(held) > 5
    assert quotas.metrics.throttled.labels("acme", "produce")._value.get() > 0


def test_the_log_start_moves_on_however_busy_and_past_the_last_intent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rounds of four records, forty due at once: the log start moves on while rounds
    follow each other (not only when the mover is idle), and once everything is moved it
    passes the last intent's records too (a requeue naming nothing says that intent is
    settled). A new leader rebuilt from what is left resends nothing."""
    monkeypatch.setattr(mover_module, "ROUND_RECORDS", 4)
    monkeypatch.setattr(mover_module, "TRIM_INTERVAL_S", 0.0)

    async def main() -> None:
        cluster = Cluster(tmp_path)
        cluster.target()
        log = cluster.timer.log
        ids = []
        for chunk in range(10):
            ids += await cluster.schedule(_values(4, size=10, start=4 * chunk))
        last = DelayedId.parse(ids[-1]).offset
        first = cluster.mover()
        starts_while_busy: list[int] = []
        cluster.faults.append(
            lambda parts, results: (
                starts_while_busy.append(log.log_start_offset) if first.pending else None
            )
        )
        task = asyncio.create_task(first.run())
        await until(lambda: len(cluster.delivered()) >= 40, "the records")
        await until(lambda: log.log_start_offset > last, "the log start past the last intent")
        await stop(task)
        assert max(starts_while_busy) > 0
        second = cluster.mover()
        task = asyncio.create_task(second.run())
        await until(second.ready.is_set, "the rebuild")
        await stop(task)
        assert second.pending == 0
        assert cluster.delivered_ids() == Counter(ids)
        cluster.close()

    asyncio.run(main())

"""Transactions and half messages through SIGKILLs: of the coordinator's broker between
deciding and writing the markers, of producers with a transaction open, of a
consume-transform-produce worker (exactly once, proven by counts), of a half message's
producer (resolved by another producer's check-back), and of a partition's leader
(its follower serves the same last stable offset and aborted transactions)."""

from __future__ import annotations

import collections
from pathlib import Path

from dataplane.client import Admin, Producer, TopicPartition
from dataplane.client.halves import HalfMessage, HalfOutcome
from dataplane.errors import ErrorCode, MeridianError
from tests.dataplane.broker.txn.support import (
    Worker,
    coordinator_of,
    ends,
    leader_of,
    read_topic,
    stable,
    values,
)
from tests.dataplane.storage.support import wait_for
from tests.support.brokers import BrokerProcess
from tests.support.replication import TestController, pause, resume


def lists_offsets(bootstrap: str, tps: list[TopicPartition]) -> bool:
    try:
        ends(bootstrap, tps, committed=False)
    except MeridianError as error:
        if error.code != ErrorCode.LEADER_NOT_AVAILABLE:
            raise
        return False
    return True


def create(bootstrap: str, topic: str, partitions: int = 3) -> None:
    with Admin(bootstrap) as admin:
        admin.create_topic(topic, partitions)


def test_a_coordinator_killed_after_deciding_commits_on_restart(
    cluster: list[BrokerProcess],
) -> None:
    """EndTxn(commit) was answered (the decision is durable) but one partition's leader
    was frozen, so its marker could not be written; the coordinator's broker is then
    SIGKILLed. Restarted, it writes the markers its log says are due: every record of
    the transaction becomes visible, none twice."""
    tid = "acme.decided"
    coordinator_id, _ = coordinator_of(cluster[0].address, tid)
    coordinator = next(b for b in cluster if b.broker_id == coordinator_id)
    create(cluster[0].address, "acme.decided")
    frozen = next(
        leader_of(cluster, "acme.decided", p)
        for p in range(3)
        if leader_of(cluster, "acme.decided", p).broker_id != coordinator_id
    )
    reachable = next(b for b in cluster if b not in (coordinator, frozen)).address
    producer = Producer([b.address for b in cluster], transactional_id=tid, linger_ms=1)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        sent = [f"d{i}".encode() for i in range(30)]
        for i, value in enumerate(sent):
            producer.send("acme.decided", value, partition=i % 3)
        producer.flush()
        pause(frozen)
        producer.commit_transaction()  # durable at the coordinator; one marker cannot land
        coordinator.kill()
    finally:
        producer.close(0)
    resume(frozen)
    coordinator.start()
    assert wait_for(lambda: stable(reachable, "acme.decided"), 60)
    assert values(read_topic(reachable, "acme.decided", 3, committed=True)) == sorted(sent)


def test_a_killed_producers_transaction_is_aborted_by_its_successor_or_its_timeout(
    cluster: list[BrokerProcess], tmp_path: Path
) -> None:
    bootstrap = cluster[0].address
    create(bootstrap, "acme.orphaned")
    # the successor: a new producer of the id aborts the dead one's transaction at once
    worker = Worker(
        tmp_path / "a.log", "open-txn", bootstrap, "acme.dead", "acme.orphaned", "9", "600000"
    )
    worker.wait_for("ready")
    worker.kill()
    assert not stable(bootstrap, "acme.orphaned"), "the open transaction holds the LSO"
    successor = Producer(bootstrap, transactional_id="acme.dead", linger_ms=1)
    try:
        successor.init_transactions()
        successor.begin_transaction()
        successor.send("acme.orphaned", b"successor", partition=0)
        successor.commit_transaction()
    finally:
        successor.close()
    # the timeout: nobody comes back, the coordinator aborts it
    worker = Worker(
        tmp_path / "b.log", "open-txn", bootstrap, "acme.gone", "acme.orphaned", "9", "2000"
    )
    worker.wait_for("ready")
    worker.kill()
    assert wait_for(lambda: stable(bootstrap, "acme.orphaned"), 60)
    assert values(read_topic(bootstrap, "acme.orphaned", 3, committed=True)) == [b"successor"]
    assert len(read_topic(bootstrap, "acme.orphaned", 3, committed=False)) == 19


def test_consume_transform_produce_is_exactly_once_through_a_worker_sigkill(
    cluster: list[BrokerProcess], tmp_path: Path
) -> None:
    bootstrap = cluster[0].address
    create(bootstrap, "acme.eos-in", 4)
    create(bootstrap, "acme.eos-out", 4)
    count = 3000
    with Producer(bootstrap, linger_ms=5) as producer:
        producer.send_batch("acme.eos-in", [b"x"] * count).result()
    args = (bootstrap, "acme.eos", "acme.eos-in", "acme.eos-out")
    # The first worker alone holds every partition, so it surely makes progress (two
    # started together could leave it nothing to do); the second joins, the first dies.
    first = Worker(tmp_path / "w1.log", "eos", *args, "acme.eos-1")
    second = None
    try:
        first.wait_for("progress")
        second = Worker(tmp_path / "w2.log", "eos", *args, "acme.eos-2")
        first.kill()  # most likely in the middle of a transaction
        input_tps = [TopicPartition("acme.eos-in", p) for p in range(4)]
        with Admin(bootstrap) as admin:

            def consumed() -> bool:
                lag = admin.group_lag("acme.eos")
                return sum(p.committed or 0 for p in lag.values()) == count

            assert wait_for(consumed, 120), "the survivor did not finish the input"
        assert sum(ends(bootstrap, input_tps, committed=False).values()) == count
    finally:
        if second is not None:
            second.kill()
        if first.process.poll() is None:
            first.kill()
    assert wait_for(lambda: stable(bootstrap, "acme.eos-out", 4), 60)
    out = read_topic(bootstrap, "acme.eos-out", 4, committed=True)
    tags = collections.Counter(r.value for r in out)
    assert len(tags) == count, f"{count - len(tags)} input records never came out"
    assert max(tags.values()) == 1, "some input record came out twice"
    assert set(tags) == {
        f"{r.partition}:{r.offset}".encode()
        for r in read_topic(bootstrap, "acme.eos-in", 4, committed=True)
    }


def test_a_half_message_of_a_killed_producer_is_resolved_by_check_back(
    cluster: list[BrokerProcess], tmp_path: Path
) -> None:
    bootstrap = cluster[0].address
    create(bootstrap, "acme.half-kill", 1)
    state = tmp_path / "local-transactions"
    state.touch()
    committed = Worker(
        tmp_path / "h1.log", "half", bootstrap, "acme.shop", "acme.half-kill", "paid", str(state)
    )
    committed.wait_for("ready")
    committed.kill()
    asked: list[HalfMessage] = []

    def check_back(message: HalfMessage) -> HalfOutcome:
        asked.append(message)
        paid = (message.key or b"").decode() in state.read_text().split()
        return HalfOutcome.COMMIT if paid else HalfOutcome.ROLLBACK

    with Producer(
        bootstrap, producer_group="acme.shop", check_back=check_back, half_check_interval_ms=500
    ) as survivor:
        unpaid = survivor.send_half("acme.half-kill", b"half unpaid", key=b"unpaid", partition=0)
        assert unpaid.offset >= 0
        assert wait_for(lambda: {m.key for m in asked} >= {b"paid", b"unpaid"}, 60)
        assert wait_for(lambda: stable(bootstrap, "acme.half-kill", 1), 30)
        for level in (True, False):
            assert values(read_topic(bootstrap, "acme.half-kill", 1, committed=level)) == [
                b"half paid"
            ]


def test_a_new_leader_serves_the_same_stable_offset_and_aborted_transactions(
    tmp_path: Path, cluster: list[BrokerProcess]
) -> None:
    topic = "acme.txn-failover"
    controller = TestController(cluster).start()
    try:
        controller.create_topic(topic, [1, 2, 3], min_isr=2)
        bootstrap = [b.address for b in cluster]
        producer = Producer(bootstrap, transactional_id="acme.failover", linger_ms=1)
        opened = Producer(bootstrap, transactional_id="acme.failover-open", linger_ms=1)
        try:
            producer.init_transactions()
            opened.init_transactions()
            for commit in (True, False, True):
                producer.begin_transaction()
                producer.send(topic, b"commit" if commit else b"abort", partition=0)
                producer.flush()
                (producer.commit_transaction if commit else producer.abort_transaction)()
            opened.begin_transaction()
            opened.send(topic, b"open", partition=0).result(30)
            tp = [TopicPartition(topic, 0)]
            assert wait_for(
                lambda: len(read_topic(bootstrap[1], topic, 1, committed=False)) == 4, 30
            )
            # The last commit's marker is written after commit_transaction returns.
            assert wait_for(
                lambda: (
                    values(read_topic(bootstrap[1], topic, 1, committed=True))
                    == [b"commit", b"commit"]
                ),
                30,
            )
            stable_before = ends(bootstrap[1], tp, committed=True)
            old_leader = leader_of(cluster, topic, 0)
            old_leader.kill()
            others = [b for b in cluster if b is not old_leader]
            controller.elect(
                topic, 0, leader=others[0].broker_id, isr=[b.broker_id for b in others]
            )
            reachable = others[1].address
            assert wait_for(lambda: leader_of(others, topic, 0) is others[0], 30)
            # Until the other follower fetches from it, the new leader's high watermark
            # may be the one it knew as a follower, below the record of the open
            # transaction: it lists no offsets until then (it would answer an LSO that a
            # marker cannot move past that HW).
            assert wait_for(lambda: lists_offsets(reachable, tp), 30)
            assert values(read_topic(reachable, topic, 1, committed=True)) == [
                b"commit",
                b"commit",
            ]
            assert ends(reachable, tp, committed=True) == stable_before
            opened.commit_transaction()  # its marker goes to the new leader
            assert wait_for(lambda: stable(reachable, topic, 1), 60)
            assert values(read_topic(reachable, topic, 1, committed=True)) == [
                b"commit",
                b"commit",
                b"open",
            ]
        finally:
            producer.close(5)
            opened.close(5)
    finally:
        controller.stop()

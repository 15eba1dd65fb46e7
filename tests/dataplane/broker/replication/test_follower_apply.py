"""A follower applying ReplicaFetch answers to a real partition log, and the leader's
high watermark and ISR bookkeeping (``ReplicaState``), without broker processes."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dataplane._gen.meridian.v1 import admin_pb2, replication_pb2
from dataplane.broker.partitions import Partition
from dataplane.broker.producers import ProducerStateTable
from dataplane.broker.replication.follower import _apply
from dataplane.broker.replication.leader import ReplicaFetchHandler
from dataplane.broker.replication.manager import ReplicaManager
from dataplane.broker.replication.state import ReplicaState, Role
from dataplane.errors import ErrorCode
from dataplane.records import build_batch
from dataplane.storage.leader_epoch import LeaderEpochCache
from dataplane.storage.log import PartitionLog
from dataplane.storage.manager import TopicPartition


@pytest.fixture
def follower(tmp_path: Path) -> Iterator[Partition]:
    log = PartitionLog.open(tmp_path / "t-0", replicated=True)
    executor = ThreadPoolExecutor(1)
    part = Partition(TopicPartition("t", 0), log, ProducerStateTable(), executor)
    part.replica = ReplicaState(
        2, LeaderEpochCache(log.directory), role=Role.FOLLOWER, leader_id=1, leader_epoch=5
    )
    try:
        yield part
    finally:
        log.close()
        executor.shutdown()


def _leader_batches(base: int, epoch: int, count: int, producer_id: int = -1) -> bytes:
    """A batch as a leader stored it: its offsets and leader epoch set."""
    kwargs = {"producer_id": producer_id, "producer_epoch": 0, "base_sequence": base}
    return build_batch(
        [b"v%d" % i for i in range(count)],
        base_offset=base,
        partition_leader_epoch=epoch,
        **(kwargs if producer_id >= 0 else {}),
    )


def _answer(**fields: object) -> replication_pb2.ReplicaFetchResult:
    return replication_pb2.ReplicaFetchResult(topic="t", partition=0, **fields)  # type: ignore[arg-type]


def test_copied_batches_record_epochs_producers_and_the_leaders_hw(follower: Partition) -> None:
    records = _leader_batches(0, 3, 2, producer_id=77) + _leader_batches(2, 5, 3, producer_id=77)
    _apply(follower, 5, 0, _answer(records=records, high_watermark=4, log_end_offset=5))
    log = follower.log
    assert (log.log_end_offset, log.high_watermark) == (5, 4)
    assert follower.replica is not None
    assert follower.replica.epochs.entries == [(3, 0), (5, 2)]
    entry = follower.producers.get(77)
    assert entry is not None
    assert [(b.first_seq, b.base_offset) for b in entry.batches] == [(0, 0), (2, 2)]
    # The leader's HW beyond this log's end is capped at it.
    _apply(follower, 5, 5, _answer(high_watermark=9, log_end_offset=9))
    assert log.high_watermark == 5


def test_a_diverging_epoch_truncates_to_where_it_ended(follower: Partition) -> None:
    records = _leader_batches(0, 3, 2, producer_id=8) + _leader_batches(2, 4, 3, producer_id=8)
    _apply(follower, 5, 0, _answer(records=records, high_watermark=2, log_end_offset=5))
    answer = _answer(high_watermark=2, log_end_offset=3)
    answer.diverging_epoch.epoch, answer.diverging_epoch.end_offset = 3, 2
    _apply(follower, 5, 5, answer)
    assert follower.log.log_end_offset == 2
    assert follower.replica is not None
    assert follower.replica.epochs.entries == [(3, 0)]
    entry = follower.producers.get(8)  # rebuilt from what is left
    assert entry is not None
    assert [b.base_offset for b in entry.batches] == [0]


def test_a_fetch_below_the_leaders_log_start_restarts_the_log_there(follower: Partition) -> None:
    _apply(follower, 5, 0, _answer(records=_leader_batches(0, 3, 2), high_watermark=2))
    answer = _answer(error=ErrorCode.OFFSET_OUT_OF_RANGE, log_start_offset=40, log_end_offset=60)
    _apply(follower, 5, 2, answer)
    log = follower.log
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (40, 40, 40)
    assert follower.replica is not None
    assert follower.replica.epochs.entries == []


def test_an_answer_for_an_older_epoch_or_position_is_ignored(follower: Partition) -> None:
    records = _leader_batches(0, 3, 2)
    _apply(follower, 4, 0, _answer(records=records, high_watermark=2))  # epoch moved on
    _apply(follower, 5, 7, _answer(records=records, high_watermark=2))  # log moved on
    assert follower.log.log_end_offset == 0


def test_the_hw_is_the_lowest_leo_of_the_maximal_isr(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", replicated=True)
    try:
        log.append(build_batch([b"x"] * 10))
        state = ReplicaState(
            1,
            LeaderEpochCache(log.directory),
            role=Role.LEADER,
            leader_id=1,
            leader_epoch=1,
            replicas=[1, 2, 3],
            isr=[1, 2],
        )
        state.start_leading(now_s=100.0)
        assert state.high_watermark(log) == -1  # broker 2 has not fetched yet
        state.follower_fetched(2, 6, log.log_end_offset)
        state.follower_fetched(3, 2, log.log_end_offset)
        assert state.high_watermark(log) == 6  # broker 3 is not in the ISR
        state.proposal = [1, 2, 3]  # a proposed addition counts at once
        assert state.high_watermark(log) == 2
        state.proposal = [1]  # a proposed removal: broker 2 still bounds the HW
        assert state.high_watermark(log) == 6
        assert state.committed_isr_size() == 2
    finally:
        log.close()


def test_isr_shrinks_for_lagging_members_and_grows_for_fetching_caught_up_ones(
    tmp_path: Path,
) -> None:
    log = PartitionLog.open(tmp_path / "t-0", replicated=True)
    try:
        log.append(build_batch([b"x"] * 4))
        log.update_high_watermark(4)
        state = ReplicaState(
            1,
            LeaderEpochCache(log.directory),
            role=Role.LEADER,
            leader_id=1,
            leader_epoch=1,
            replicas=[1, 2, 3],
            isr=[1, 2],
        )
        state.epochs.assign(1, 0)
        state.start_leading(now_s=0.0)  # long ago: broker 2 has not caught up since
        assert state.desired_isr(log, lag_s=10) == [1]
        state.follower_fetched(2, 4, 4)  # caught up now
        state.follower_fetched(3, 4, 4)  # fetching and at the HW: may join
        assert state.desired_isr(log, lag_s=10) == [1, 2, 3]
        assert state.update_proposal([1, 2, 3])
        assert state.proposal == [1, 2, 3]
        assert state.update_proposal([1, 2])  # back to the committed ISR: nothing to ask
        assert state.proposal is None
    finally:
        log.close()


def test_a_reported_addition_is_never_withdrawn_before_the_controller_answers(
    tmp_path: Path,
) -> None:
    """The controller may commit a proposal it was sent whatever the leader thinks later:
    a replica proposed for the ISR that falls behind keeps bounding the HW (and stays in
    the proposal) until a push with a newer isr_version answers."""
    log = PartitionLog.open(tmp_path / "t-0", replicated=True)
    try:
        log.append(build_batch([b"x"] * 10))
        log.update_high_watermark(10)
        state = ReplicaState(
            1,
            LeaderEpochCache(log.directory),
            role=Role.LEADER,
            leader_id=1,
            leader_epoch=5,
            replicas=[1, 2, 3],
            isr=[1, 2],
            isr_version=7,
        )
        state.epochs.assign(5, 0)
        state.start_leading(now_s=0.0)
        state.follower_fetched(2, 10, 10)
        state.follower_fetched(3, 10, 10)
        assert state.update_proposal(state.desired_isr(log, lag_s=1.0))
        assert state.proposal == [1, 2, 3]
        state.mark_reported()  # sent in a heartbeat
        log.append(build_batch([b"y"] * 10))
        state.follower_fetched(2, 20, 20)  # broker 3 stops fetching
        quiet = state.desired_isr(log, lag_s=1.0, now_s=state.followers[3].last_fetch_s + 0.6)
        assert quiet == [1, 2]
        state.update_proposal(quiet)
        assert state.proposal == [1, 2, 3]  # still asked: it may be committed anyway
        assert state.high_watermark(log) == 10  # broker 3 has only 10 records
        # A push answering with a newer ISR version ends it.
        state.isr_version = 8
        state.forget_proposal()
        assert state.update_proposal(quiet) is False
        assert state.proposal is None
        assert state.high_watermark(log) == 20
    finally:
        log.close()


def test_no_append_interleaves_with_becoming_leader(tmp_path: Path) -> None:
    """An append in flight when a push makes this broker leader at a new epoch lands
    before the new epoch's entry: the epoch starts after it (no batch stamped with the
    old epoch past the new epoch's start offset)."""
    log = PartitionLog.open(tmp_path / "t-0", replicated=True)
    executor = ThreadPoolExecutor(2)
    part = Partition(TopicPartition("t", 0), log, ProducerStateTable(), executor)
    state = ReplicaState(
        1,
        LeaderEpochCache(log.directory),
        role=Role.LEADER,
        leader_id=1,
        leader_epoch=5,
        replicas=[1, 2],
        isr=[1, 2],
    )
    state.epochs.assign(5, 0)
    part.replica = state
    manager = ReplicaManager(1, None, executor, replica_lag_time_max_ms=1000)  # type: ignore[arg-type]
    writing, release = threading.Event(), threading.Event()

    def held(base_offset: int, headers: object) -> None:
        writing.set()
        release.wait(10)

    meta = admin_pb2.MetadataPartition(
        partition=0, leader_id=1, leader_epoch=6, replicas=[1, 2], isr=[1, 2], isr_version=1
    )
    try:
        append = executor.submit(log.append, build_batch([b"x"]), leader_epoch=5, before_write=held)
        assert writing.wait(10)
        change = executor.submit(manager._change_role, part, state, meta, Role.LEADER)
        with contextlib.suppress(TimeoutError):
            change.result(timeout=0.5)  # it must wait for the append under way
        release.set()
        append.result(timeout=10)
        change.result(timeout=10)
        assert state.epochs.entries == [(5, 0), (6, 1)]
        assert (state.role, state.leader_epoch) == (Role.LEADER, 6)
    finally:
        release.set()
        log.close()
        executor.shutdown()


def test_a_client_append_just_after_becoming_leader_is_stamped(tmp_path: Path) -> None:
    """A partition no push has named yet has no replica state: its appends carry no
    epoch. The push making this broker its leader installs the state under the append
    lock, with the epoch starting at the log end: a client append right after the role
    change is stamped with the new epoch. (Were the state installed after the lock was
    released, that append would land unstamped at the epoch's start offset, and every
    follower would truncate it and fetch it again, for ever.)"""
    log = PartitionLog.open(tmp_path / "t-0", replicated=True)
    executor = ThreadPoolExecutor(1)
    part = Partition(TopicPartition("t", 0), log, ProducerStateTable(), executor)
    manager = ReplicaManager(1, None, executor, replica_lag_time_max_ms=1000)  # type: ignore[arg-type]
    meta = admin_pb2.MetadataPartition(
        partition=0, leader_id=1, leader_epoch=0, replicas=[1, 2], isr=[1, 2], isr_version=0
    )
    try:
        state = ReplicaState(1, LeaderEpochCache(log.directory))
        manager._change_role(part, state, meta, Role.LEADER)
        part.append(build_batch([b"first"]))  # a produce arriving at once
        assert state.epochs.entries == [(0, 0)]
        assert [h.partition_leader_epoch for _, h in log.batch_headers(0)] == [0]
    finally:
        log.close()
        executor.shutdown()


def test_records_of_no_epoch_are_not_kept_by_a_follower(tmp_path: Path) -> None:
    """Before any push every replica accepted produce without an epoch: such records
    cannot be compared with the leader's. A follower knowing no epoch drops them when it
    starts following, and a leader tells one fetching past the start of its first epoch
    to truncate to its log start."""
    executor = ThreadPoolExecutor(2)
    logs = [PartitionLog.open(tmp_path / f"b{i}" / "t-0", replicated=True) for i in (1, 2)]
    leader, follower = (
        Partition(TopicPartition("t", 0), log, ProducerStateTable(), executor) for log in logs
    )
    try:
        leader.log.append(build_batch([b"leader"] * 2))  # unstamped, before any push
        follower.log.append(build_batch([b"own"] * 5))  # the follower's own, unstamped
        manager = ReplicaManager(1, None, executor, replica_lag_time_max_ms=1000)  # type: ignore[arg-type]
        lead = admin_pb2.MetadataPartition(
            partition=0, leader_id=1, leader_epoch=1, replicas=[1, 2], isr=[1], isr_version=1
        )
        leader.replica = ReplicaState(1, LeaderEpochCache(leader.log.directory))
        manager._change_role(leader, leader.replica, lead, Role.LEADER)
        leader.log.append(build_batch([b"stamped"]), leader_epoch=1)
        assert leader.replica.epochs.entries == [(1, 2)]

        handler = ReplicaFetchHandler(_One(leader), manager, executor, 1 << 20)  # type: ignore[arg-type]

        def ask(fetch_offset: int) -> replication_pb2.ReplicaFetchResult:
            item = replication_pb2.ReplicaFetchPartition(
                topic="t",
                partition=0,
                current_leader_epoch=1,
                fetch_offset=fetch_offset,
                last_fetched_epoch=-1,
            )
            found = handler._check(2, item)[1]
            return found if found is not None else _answer()

        assert ask(3).diverging_epoch.epoch == -1  # past the leader's first epoch start
        assert ask(3).diverging_epoch.end_offset == 0
        assert not ask(2).HasField("diverging_epoch")  # copying the unstamped prefix

        follower.replica = ReplicaState(2, LeaderEpochCache(follower.log.directory))
        follow = admin_pb2.MetadataPartition(
            partition=0, leader_id=1, leader_epoch=1, replicas=[1, 2], isr=[1], isr_version=1
        )
        manager._change_role(follower, follower.replica, follow, Role.FOLLOWER)
        assert follower.log.log_end_offset == 0  # its own records are gone
    finally:
        for log in logs:
            log.close()
        executor.shutdown()


class _One:
    """A registry of one partition (``get``), for the leader's fetch checks."""

    def __init__(self, part: Partition) -> None:
        self.part = part
        self.closing = False

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.part if (topic, partition) == (self.part.topic, self.part.index) else None

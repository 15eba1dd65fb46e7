"""The producer table's transactions: verification guards, markers, the last stable offset,
the aborted index, half messages, and rebuilding all of it from a real log."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from dataplane.broker.partitions import Partition
from dataplane.broker.producers import (
    HALF_PRODUCER_BIT,
    ProducerStateTable,
)
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import build_batch, read_header
from dataplane.records.control import Marker, build_marker
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.log import PartitionLog
from dataplane.storage.manager import TopicPartition
from dataplane.storage.txn_index import AbortedTxn, AbortedTxnIndex

PID = 42


def txn_header(seq, count=1, *, pid=PID, epoch=0, transactional=True):
    return read_header(
        build_batch(
            [b"v"] * count,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=transactional,
        )
    )


def code_of(call):
    with pytest.raises(MeridianError) as caught:
        call()
    return caught.value.code


def test_a_transaction_opens_only_once_the_coordinator_verified_it(tmp_path):
    table = ProducerStateTable(AbortedTxnIndex(tmp_path))
    assert code_of(lambda: table.check_and_record(0, [txn_header(0)])) == (
        ErrorCode.INVALID_TXN_STATE
    )
    assert not table.in_transaction(PID, 0)
    table.verified(PID, 0)
    table.check_and_record(10, [txn_header(0, 2)])
    table.check_and_record(12, [txn_header(2)])  # joins the open transaction
    assert table.open_transactions() == {PID: 10}
    assert table.last_stable_offset(high_watermark=13) == 10
    assert table.in_transaction(PID, 0)


def test_a_producer_in_a_transaction_writes_only_transactional_batches(tmp_path):
    table = ProducerStateTable(AbortedTxnIndex(tmp_path))
    table.verified(PID, 0)
    table.check_and_record(0, [txn_header(0)])
    plain = txn_header(1, transactional=False)
    assert code_of(lambda: table.check_and_record(1, [plain])) == ErrorCode.INVALID_TXN_STATE
    # a newer epoch waits for the older epoch's marker
    newer = txn_header(0, epoch=1)
    assert code_of(lambda: table.check_and_record(1, [newer])) == (
        ErrorCode.CONCURRENT_TRANSACTIONS
    )


def test_markers_close_transactions_and_index_aborts_with_the_stable_offset(tmp_path):
    index = AbortedTxnIndex(tmp_path)
    table = ProducerStateTable(index)
    for pid, at in ((1, 0), (2, 1), (3, 2)):
        table.verified(pid, 0)
        table.check_and_record(at, [txn_header(0, pid=pid)])
    assert table.last_stable_offset(high_watermark=3) == 0
    assert table.apply_marker(3, Marker(2, 0, False, 0)) == AbortedTxn(2, 1, 3, 0)
    assert table.apply_marker(4, Marker(1, 0, True, 0)) is None  # a commit is not indexed
    assert table.last_stable_offset(high_watermark=5) == 2
    assert table.apply_marker(5, Marker(3, 0, False, 0)) == AbortedTxn(3, 2, 5, 6)
    assert table.last_stable_offset(high_watermark=6) == 6
    assert index.entries == [AbortedTxn(2, 1, 3, 0), AbortedTxn(3, 2, 5, 6)]


def test_fenced_markers_are_refused_and_change_nothing(tmp_path):
    table = ProducerStateTable(AbortedTxnIndex(tmp_path))
    table.verified(PID, 3)
    table.check_and_record(0, [txn_header(0, epoch=3)])
    table.apply_marker(1, Marker(PID, 3, True, 5))
    table.verified(PID, 3)
    table.check_and_record(2, [txn_header(1, epoch=3)])
    old_epoch = Marker(PID, 2, False, 5)
    old_coordinator = Marker(PID, 3, False, 4)
    assert code_of(lambda: table.apply_marker(3, old_epoch)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert code_of(lambda: table.apply_marker(3, old_coordinator)) == (
        ErrorCode.TRANSACTION_COORDINATOR_FENCED
    )
    assert table.open_transactions() == {PID: 2}


def test_a_marker_of_a_newer_epoch_fences_and_restarts_sequences(tmp_path):
    table = ProducerStateTable(AbortedTxnIndex(tmp_path))
    table.verified(PID, 0)
    table.check_and_record(0, [txn_header(0, 3)])
    table.apply_marker(3, Marker(PID, 1, False, 0))  # the coordinator fenced epoch 0
    stale = txn_header(3, epoch=0)
    assert code_of(lambda: table.check_and_record(4, [stale])) == ErrorCode.INVALID_PRODUCER_EPOCH
    table.verified(PID, 1)
    table.check_and_record(4, [txn_header(0, epoch=1)])  # epoch 1 starts at 0


def test_a_marker_drops_a_verification_no_batch_used(tmp_path):
    """The coordinator aborted (a timeout) between verifying and the first append: the
    late batch must not open a transaction no marker would ever close."""
    table = ProducerStateTable(AbortedTxnIndex(tmp_path))
    table.verified(PID, 0)
    table.apply_marker(0, Marker(PID, 0, False, 0))
    assert code_of(lambda: table.check_and_record(1, [txn_header(0)])) == (
        ErrorCode.INVALID_TXN_STATE
    )
    assert table.open_transactions() == {}


def test_half_messages_bound_uncommitted_readers_and_leave_no_entry(tmp_path):
    table = ProducerStateTable(AbortedTxnIndex(tmp_path))
    half = HALF_PRODUCER_BIT | 7
    table.verified(PID, 0)
    table.check_and_record(0, [txn_header(0)])
    table.verified(half, 0)
    table.check_and_record(1, [txn_header(0, pid=half)])
    assert table.first_unstable_half_offset() == 1
    assert table.first_unstable_offset() == 0
    table.apply_marker(2, Marker(half, 0, False, 0))
    assert table.first_unstable_half_offset() is None
    assert table.get(half) is None, "a half message's producer id writes once"


# -- rebuilding from a log -------------------------------------------------------------
@pytest.fixture
def log(tmp_path):
    opened = PartitionLog.open(tmp_path / "acme.t-0", LogConfig(durability=Durability.NEVER))
    yield opened
    opened.close()


def write(log, table, pid, seq, *, epoch=0):
    table.verified(pid, epoch)
    batch = build_batch(
        [b"v"], producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True
    )
    return log.append(
        batch, before_write=lambda base, headers: table.check_and_record(base, headers)
    ).base_offset


def end(log, table, pid, commit, *, epoch=0):
    marker = Marker(pid, epoch, commit, 0)
    data = build_marker(pid, epoch, commit=commit, coordinator_epoch=0)
    return log.append(
        data, before_write=lambda base, _: table.apply_marker(base, marker)
    ).base_offset


def build_history(log):
    table = ProducerStateTable.rebuild(log)
    write(log, table, 1, 0)  # 0
    write(log, table, 2, 0)  # 1
    end(log, table, 1, False)  # 2: aborts 1's
    write(log, table, 3, 0)  # 3
    end(log, table, 2, True)  # 4
    write(log, table, 1, 1)  # 5: 1's next transaction, left open
    end(log, table, 3, False)  # 6
    return table


def test_a_rebuild_restores_open_transactions_and_the_index(log):
    built = build_history(log)
    rebuilt = ProducerStateTable.rebuild(log)
    assert rebuilt.open_transactions() == built.open_transactions() == {1: 5}
    assert (
        rebuilt.aborted.entries
        == built.aborted.entries
        == [
            AbortedTxn(1, 0, 2, 1),
            AbortedTxn(3, 3, 6, 5),
        ]
    )


def test_a_lost_index_is_derived_again_from_the_markers_in_the_log(log):
    build_history(log)
    index = log.directory / "aborted-transactions"
    index.unlink()
    rebuilt = ProducerStateTable.rebuild(log)
    assert rebuilt.aborted.entries == [AbortedTxn(1, 0, 2, 1), AbortedTxn(3, 3, 6, 5)]


def test_a_snapshot_keeps_open_transactions_and_the_scan_after_it_indexes_aborts(log):
    table = build_history(log)
    table.snapshot(log.directory, log.log_end_offset)
    end(log, table, 1, False)  # 7: aborts 1's second transaction after the snapshot
    (log.directory / "aborted-transactions").unlink()
    rebuilt = ProducerStateTable.rebuild(log)
    assert rebuilt.open_transactions() == {}
    # entries before the snapshot are not read again from the log; the one after is
    assert rebuilt.aborted.entries == [AbortedTxn(1, 5, 7, 8)]


def test_a_truncation_cuts_index_entries_and_reopens_transactions(log):
    build_history(log)
    log.truncate_to(5)  # the abort at 6 is gone: 3's transaction is open again
    rebuilt = ProducerStateTable.rebuild(log)
    assert rebuilt.open_transactions() == {3: 3}
    assert rebuilt.aborted.entries == [AbortedTxn(1, 0, 2, 1)]
    assert AbortedTxnIndex.load(log.directory).entries == [AbortedTxn(1, 0, 2, 1)]


class _FailingIndex(AbortedTxnIndex):
    def append(self, entry):
        raise OSError("disk gone")


def test_an_abort_is_indexed_before_the_last_stable_offset_passes_it(tmp_path):
    """The index entry comes before the transaction leaves the open ones: a reader never
    finds the last stable offset past an aborted transaction's records without the entry
    telling it to skip them. An index that cannot be written fails the marker and leaves
    the transaction open (its records still held back)."""
    table = ProducerStateTable(_FailingIndex(tmp_path))
    table.verified(PID, 0)
    table.check_and_record(0, [txn_header(0, 3)])
    with pytest.raises(OSError, match="disk gone"):
        table.apply_marker(3, Marker(PID, 0, False, 0))
    assert table.open_transactions() == {PID: 0}
    assert table.last_stable_offset(high_watermark=4) == 0


def test_the_last_stable_offset_is_never_below_the_log_start(log):
    """An open transaction whose first records were deleted (DeleteRecords, retention)
    holds back nothing below the log start: the latest offset a read_committed reader
    lists is one it can fetch from (below it, OFFSET_OUT_OF_RANGE, for ever)."""
    table = ProducerStateTable.rebuild(log)
    write(log, table, 1, 0)  # 0: left open
    for value in (b"a", b"b", b"c"):
        log.append(build_batch([value]))
    with ThreadPoolExecutor(1) as pool:
        part = Partition(TopicPartition("acme.t", 0), log, table, pool)
        assert part.last_stable_offset() == 0
        log.advance_log_start_offset(3)
        assert part.last_stable_offset() == 3
        assert part.visible_end(read_committed=True) == 3
        assert part.visible_end(read_committed=False) == 4


def test_a_snapshot_never_covers_an_abort_its_index_sync_missed(tmp_path):
    """An abort marker applied while a snapshot syncs the index may miss that sync: the
    snapshot must not cover its offset then, or a crash would lose the entry for good
    (a rebuild scans only past the snapshot)."""
    late: list[object] = []

    class _Index(AbortedTxnIndex):
        def flush(self):
            super().flush()
            while late:
                late.pop()()  # a marker applied just after the sync

    table = ProducerStateTable(_Index(tmp_path))
    table.verified(PID, 0)
    table.check_and_record(0, [txn_header(0)])
    late.append(lambda: table.apply_marker(1, Marker(PID, 0, False, 0)))
    table.snapshot(tmp_path)
    covered = json.loads((tmp_path / "producer-state.json").read_bytes())["offset"]
    assert covered <= 1, "the snapshot covers the abort at 1, whose entry was not synced"


def test_a_fenced_epochs_verification_never_displaces_the_live_ones(tmp_path):
    """A zombie (epoch 3) verifying after the live producer (epoch 4) asked: the live
    producer's answer still opens its transaction; the zombie's does not."""
    table = ProducerStateTable(AbortedTxnIndex(tmp_path))
    live = table.verifying(PID, 4)
    zombie = table.verifying(PID, 3)
    assert not table.verified(PID, 3, zombie)
    assert table.verified(PID, 4, live)

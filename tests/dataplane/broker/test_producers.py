"""The producer-state table: sequence rules, and rebuilding it from snapshots and logs."""

from __future__ import annotations

import json

import pytest

from dataplane.broker.producers import (
    SNAPSHOT_FILE,
    DuplicateBatch,
    ProducerStateTable,
    next_sequence,
)
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import build_batch, read_header
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.filecache import MIN_OPEN_FILES, SEGMENT_FILES
from dataplane.storage.log import PartitionLog

PID = 42
INT32_MAX = 2**31 - 1


def header(seq, count=1, *, pid=PID, epoch=0):
    return read_header(
        build_batch([b"v"] * count, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    )


def code_of(call):
    with pytest.raises(MeridianError) as caught:
        call()
    return caught.value.code


def test_sequences_wrap_around_int32():
    assert next_sequence(INT32_MAX) == 0
    table = ProducerStateTable()
    table.replay(0, header(INT32_MAX - 1, 2))  # a batch ending at the largest sequence
    table.check_and_record(2, [header(0, 2)])
    assert table.get(PID).last_seq == 1


def test_epochs_fence_older_producers_and_restart_sequences():
    table = ProducerStateTable()
    table.check_and_record(0, [header(0, 3)])
    assert code_of(lambda: table.check_and_record(3, [header(5, epoch=1)])) == (
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    )
    table.check_and_record(3, [header(0, epoch=1)])
    assert code_of(lambda: table.check_and_record(4, [header(3, epoch=0)])) == (
        ErrorCode.INVALID_PRODUCER_EPOCH
    )


def test_only_the_last_five_batches_are_recognised_as_duplicates():
    table = ProducerStateTable()
    for i in range(7):
        table.check_and_record(i, [header(i)])
    with pytest.raises(DuplicateBatch) as caught:
        table.check_and_record(7, [header(2)])
    assert caught.value.base_offset == 2
    assert code_of(lambda: table.check_and_record(7, [header(1)])) == (
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    )


def test_a_refused_append_leaves_the_table_unchanged():
    table = ProducerStateTable()
    table.check_and_record(0, [header(0)])
    code_of(lambda: table.check_and_record(1, [header(1), header(9)]))
    table.check_and_record(1, [header(1)])
    assert table.get(PID).last_seq == 1


@pytest.fixture
def log(tmp_path):
    opened = PartitionLog.open(tmp_path / "acme.s-0", LogConfig(durability=Durability.NEVER))
    yield opened
    opened.close()


def append(log, seq, count=1, pid=PID):
    batch = build_batch([b"v"] * count, producer_id=pid, producer_epoch=0, base_sequence=seq)
    return log.append(batch).base_offset


def test_a_rebuild_scans_the_whole_log_without_a_snapshot(log):
    for seq in range(0, 20, 4):
        append(log, seq, 4)
    append(log, 0, pid=7)
    table = ProducerStateTable.rebuild(log)
    assert table.get(PID).last_seq == 19
    assert table.get(7).last_seq == 0
    assert table.covered_offset == log.log_end_offset == 21


def test_a_rebuild_reads_every_segment_through_the_descriptor_budget(tmp_path):
    """The header scan opens each segment through the process's segment file cache
    (counted, and evicting others to stay within the budget), not behind its back."""
    config = LogConfig(max_segment_bytes=1024, durability=Durability.NEVER)
    log = PartitionLog.open(tmp_path / "acme.s-0", config)
    try:
        for seq in range(300):
            append(log, seq)
        assert len(log.segments) > MIN_OPEN_FILES
        SEGMENT_FILES.close_idle(0)
        opened = SEGMENT_FILES.opened
        assert ProducerStateTable.rebuild(log).get(PID).last_seq == 299
        assert SEGMENT_FILES.opened - opened >= len(log.segments)
        assert SEGMENT_FILES.open_files <= SEGMENT_FILES.max_open_files
    finally:
        log.close()


def test_a_rebuild_starts_from_the_snapshot_and_scans_only_what_follows(log):
    append(log, 0, 2)
    ProducerStateTable.rebuild(log).snapshot(log.directory, log.log_end_offset)
    data = json.loads((log.directory / SNAPSHOT_FILE).read_text())
    data["producers"]["99"] = {"epoch": 3, "batches": [[0, 4, 0, 1]]}  # only the snapshot knows
    (log.directory / SNAPSHOT_FILE).write_text(json.dumps(data))
    append(log, 2, 2)
    table = ProducerStateTable.rebuild(log)
    assert table.get(99).epoch == 3, "the snapshot was used"
    assert table.get(PID).last_seq == 3, "the tail after it was scanned"


@pytest.mark.parametrize("damage", ["not json", '{"version": 1}', "beyond"])
def test_an_unusable_snapshot_means_a_full_scan(log, damage):
    append(log, 0, 2)
    path = log.directory / SNAPSHOT_FILE
    if damage == "beyond":  # written for a longer log than the one recovered
        path.write_text(json.dumps({"version": 1, "offset": 50, "producers": {"99": {}}}))
    else:
        path.write_text(damage)
    table = ProducerStateTable.rebuild(log)
    assert table.get(PID).last_seq == 1
    assert table.get(99) is None


def test_a_snapshot_beyond_a_truncation_is_never_used_again(log):
    """Truncated below a snapshot, then grown past it: the snapshot describes batches
    that are gone, so the next rebuild must not take it."""
    append(log, 0, 4)
    append(log, 4, 4)
    ProducerStateTable.rebuild(log).snapshot(log.directory, log.log_end_offset)  # at 8
    log.truncate_to(4)
    assert ProducerStateTable.rebuild(log).get(PID).last_seq == 3
    append(log, 4, 2, pid=7)  # another producer's batch where PID's second one was
    append(log, 0, 4, pid=7)
    assert log.log_end_offset >= 8
    table = ProducerStateTable.rebuild(log)
    assert table.get(PID).last_seq == 3, "PID's truncated batch is not remembered"

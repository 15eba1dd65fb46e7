"""Recovery after unclean stops, and detection of corrupt batches and indexes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dataplane.records import iter_batches
from dataplane.records.errors import CorruptBatchError, CrcMismatchError
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.log import PartitionLog

from .support import ManualClock, crash_copy, make_batch, read_all

CONFIG = LogConfig(
    max_segment_bytes=8 * 1024,
    index_interval_bytes=256,
    durability=Durability.NEVER,
    retention_ms=-1,
)


def build(path: Path, batches: int = 40, clock: ManualClock | None = None) -> PartitionLog:
    log = PartitionLog.open(path, CONFIG, clock_ms=clock or ManualClock())
    for b in range(batches):
        values = [f"{b}-{i}".encode() * 20 for i in range(5)]
        log.append(make_batch(values, timestamps=[50_000 + b * 10 + i for i in range(5)]))
    return log


def batch_positions(log_file: Path) -> list[tuple[int, int, int]]:
    """(position, base offset, size) of every batch in a .log file."""
    data = log_file.read_bytes()
    return [(p, h.base_offset, h.size) for p, h in iter_batches(data)]


def flip(path: Path, position: int, mask: int = 0xFF) -> None:
    with path.open("r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ mask]))


@pytest.fixture
def crashed(tmp_path: Path):
    """A 40-batch log (8 segments) as a crash leaves it, plus the records it held."""
    live = build(tmp_path / "live-0")
    expected = read_all(live)
    path = crash_copy(live, tmp_path / "crashed-0")
    live.close()
    return path, expected


def last_log_file(path: Path) -> Path:
    return sorted(path.glob("*.log"))[-1]


def test_unclean_reopen_revalidates_and_keeps_every_batch(crashed):
    path, expected = crashed
    log = PartitionLog.open(path)
    report = log.recovery
    assert not report.clean_shutdown
    assert report.segments_recovered >= 1
    assert report.batches_scanned >= 1
    assert report.truncated_bytes == 0
    assert read_all(log) == expected
    log.close()


def test_torn_tail_is_truncated_and_offsets_continue(crashed):
    path, expected = crashed
    tail = last_log_file(path)
    position, base, size = batch_positions(tail)[-1]
    os.truncate(tail, position + size - 7)
    log = PartitionLog.open(path)
    assert log.recovery.truncated_bytes == size - 7
    assert "batch length" in (log.recovery.truncated_reason or "")
    assert log.log_end_offset == base
    assert read_all(log) == [r for r in expected if r.offset < base]
    assert log.append(make_batch([b"after"])).base_offset == base
    log.close()


def test_torn_header_and_zero_filled_tail_are_truncated(crashed):
    path, expected = crashed
    tail = last_log_file(path)
    with tail.open("ab") as f:
        f.write(make_batch([b"partial"])[:30])
    with tail.open("ab") as f:
        f.write(bytes(4096))
    log = PartitionLog.open(path)
    assert log.recovery.truncated_bytes == 30 + 4096
    assert read_all(log) == expected
    log.close()


def test_corrupt_last_batch_is_truncated(crashed):
    path, _ = crashed
    tail = last_log_file(path)
    position, base, size = batch_positions(tail)[-1]
    flip(tail, position + size - 3)
    log = PartitionLog.open(path)
    assert log.recovery.truncated_bytes == size
    assert "CRC" in (log.recovery.truncated_reason or "")
    assert log.log_end_offset == base
    log.close()


def test_corrupt_batch_in_the_middle_is_reported_not_skipped(crashed):
    path, expected = crashed
    tail = last_log_file(path)
    batches = batch_positions(tail)
    assert len(batches) >= 3
    position, base, size = batches[1]
    flip(tail, position + 100)
    log = PartitionLog.open(path)
    report = log.recovery
    assert report.truncated_bytes == 0
    assert len(report.corrupt) == 1
    region = report.corrupt[0]
    assert (region.position, region.length, region.first_offset) == (position, size, base)
    assert "CRC" in region.reason
    assert "CORRUPT" in str(report)
    assert log.log_end_offset == expected[-1].offset + 1
    with pytest.raises(CrcMismatchError) as excinfo:
        log.read(base + 2, 1 << 20)
    assert excinfo.value.offset == base
    before = log.read(batches[0][1], 1 << 20)
    assert before.next_offset == base  # stops before the corrupt batch
    after = read_all(log, start=base + 5)
    assert after == [r for r in expected if r.offset >= base + 5]
    log.close()


def test_corrupt_length_field_in_the_middle_resyncs_to_the_next_batch(crashed):
    path, expected = crashed
    tail = last_log_file(path)
    batches = batch_positions(tail)
    position, base, size = batches[1]
    flip(tail, position + 9, 0x7F)  # the batch length field
    log = PartitionLog.open(path)
    assert [(r.position, r.length) for r in log.recovery.corrupt] == [(position, size)]
    assert read_all(log, start=base + 5) == [r for r in expected if r.offset >= base + 5]
    with pytest.raises(CorruptBatchError):
        log.read(base, 100)
    log.close()


def test_corrupt_sealed_segment_is_detected_on_read_and_by_verify(tmp_path):
    log = build(tmp_path / "t-0")
    expected = read_all(log)
    log.close()
    sealed = sorted((tmp_path / "t-0").glob("*.log"))[2]
    position, base, _ = batch_positions(sealed)[1]
    flip(sealed, position + 80)
    reopened = PartitionLog.open(tmp_path / "t-0")
    assert reopened.recovery.clean_shutdown  # sealed, flushed segments are trusted at open
    with pytest.raises(CrcMismatchError):
        reopened.read(base, 100)
    found = reopened.verify()
    assert [(r.segment_base_offset, r.position, r.first_offset) for r in found] == [
        (int(sealed.stem), position, base)
    ]
    assert read_all(reopened, start=base + 5) == [r for r in expected if r.offset >= base + 5]
    reopened.close()


def test_corrupt_sealed_segment_found_by_full_recovery_keeps_later_segments(tmp_path):
    log = build(tmp_path / "t-0")
    expected = read_all(log)
    log.close()
    (tmp_path / "t-0" / "partition.json").unlink()  # no checkpoint: recover everything
    sealed = sorted((tmp_path / "t-0").glob("*.log"))[1]
    position, base, _ = batch_positions(sealed)[-1]
    flip(sealed, position + 70)
    reopened = PartitionLog.open(tmp_path / "t-0", CONFIG)
    report = reopened.recovery
    assert not report.clean_shutdown
    assert report.truncated_bytes == 0
    assert [r.first_offset for r in report.corrupt] == [base]
    assert reopened.log_end_offset == expected[-1].offset + 1
    assert read_all(reopened, start=base + 5) == [r for r in expected if r.offset >= base + 5]
    reopened.close()


def test_flipped_index_bytes_never_produce_wrong_reads(tmp_path):
    log = build(tmp_path / "t-0")
    expected = {r.offset: r for r in read_all(log)}
    log.close()
    index = sorted((tmp_path / "t-0").glob("*.index"))[1]
    for byte in range(index.stat().st_size):
        original = index.read_bytes()
        flip(index, byte, 0x5A)
        reopened = PartitionLog.open(tmp_path / "t-0")
        for offset in range(reopened.log_start_offset, reopened.log_end_offset, 3):
            got = [r for r in read_all(reopened, start=offset)][:1]
            assert got == [expected[offset]], (byte, offset)
        reopened.close()
        index.write_bytes(original)


def test_flipped_index_entry_triggers_a_rebuild(tmp_path):
    log = build(tmp_path / "t-0")
    log.close()
    index = sorted((tmp_path / "t-0").glob("*.index"))[1]
    flip(index, 8 + 7, 0x10)  # position of the second entry
    reopened = PartitionLog.open(tmp_path / "t-0")
    segment = reopened.segments[1]
    for offset in range(segment.base_offset, segment.next_offset):
        reopened.read(offset, 1)
    assert segment.index_rebuilds == 1
    reopened.close()


def test_flipped_time_index_bytes_never_produce_wrong_lookups(tmp_path):
    log = build(tmp_path / "t-0")
    records = read_all(log)
    log.close()
    targets = [49_000, 50_000, 50_013, 50_101, 50_205, 50_394, 50_395]

    def oracle(target: int) -> int | None:
        return next((r.offset for r in records if r.timestamp >= target), None)

    timeindex = sorted((tmp_path / "t-0").glob("*.timeindex"))[2]
    for byte in range(timeindex.stat().st_size):
        original = timeindex.read_bytes()
        flip(timeindex, byte, 0x21)
        reopened = PartitionLog.open(tmp_path / "t-0")
        assert [reopened.offset_for_timestamp(t) for t in targets] == [
            oracle(t) for t in targets
        ], byte
        reopened.close()
        timeindex.write_bytes(original)


@pytest.mark.parametrize("suffixes", [(".index",), (".timeindex",), (".index", ".timeindex")])
def test_deleted_indexes_are_rebuilt(tmp_path, suffixes):
    log = build(tmp_path / "t-0")
    records = read_all(log)
    log.close()
    victims = sorted((tmp_path / "t-0").glob("*.log"))[1:3]
    for victim in victims:
        for suffix in suffixes:
            victim.with_suffix(suffix).unlink()
    reopened = PartitionLog.open(tmp_path / "t-0")
    assert reopened.recovery.indexes_rebuilt == [int(v.stem) for v in victims]
    assert all(v.with_suffix(s).exists() for v in victims for s in suffixes)
    assert read_all(reopened) == records
    assert reopened.offset_for_timestamp(50_101) == 51
    reopened.close()


def test_index_of_impossible_size_is_rebuilt(tmp_path):
    log = build(tmp_path / "t-0")
    records = read_all(log)
    log.close()
    index = sorted((tmp_path / "t-0").glob("*.index"))[0]
    with index.open("ab") as f:
        f.write(b"\x01\x02\x03")
    reopened = PartitionLog.open(tmp_path / "t-0")
    assert reopened.recovery.indexes_rebuilt == [0]
    assert read_all(reopened) == records
    reopened.close()


def test_missing_checkpoint_recovers_the_whole_log(tmp_path):
    log = build(tmp_path / "t-0")
    records = read_all(log)
    log.close()
    (tmp_path / "t-0" / "partition.json").unlink()
    reopened = PartitionLog.open(tmp_path / "t-0", CONFIG)
    assert not reopened.recovery.clean_shutdown
    assert reopened.recovery.segments_recovered == len(reopened.segments)
    assert read_all(reopened) == records
    reopened.close()


def test_leftover_temporary_and_orphan_files_are_removed(tmp_path):
    log = build(tmp_path / "t-0", batches=3)
    log.close()
    directory = tmp_path / "t-0"
    (directory / "partition.json.tmp").write_text("{")
    (directory / "00000000000000009999.index").write_bytes(bytes(16))
    reopened = PartitionLog.open(directory)
    assert not (directory / "partition.json.tmp").exists()
    assert not (directory / "00000000000000009999.index").exists()
    assert reopened.log_end_offset == 15
    reopened.close()


def test_recovery_report_is_readable(crashed):
    path, _ = crashed
    tail = last_log_file(path)
    with tail.open("ab") as f:
        f.write(b"\x00" * 10)
    log = PartitionLog.open(path)
    text = str(log.recovery)
    assert "unclean shutdown" in text
    assert "truncated a torn tail of 10 bytes" in text
    log.close()


@pytest.mark.parametrize("damage", ['{"version": 1, "clean_shut', '{"version": 99}', "[]"])
def test_unusable_checkpoint_means_full_recovery_and_is_reported(tmp_path, damage):
    log = build(tmp_path / "t-0")
    records = read_all(log)
    log.close()
    (tmp_path / "t-0" / "partition.json").write_text(damage)
    reopened = PartitionLog.open(tmp_path / "t-0", CONFIG)
    report = reopened.recovery
    assert not report.clean_shutdown
    assert report.checkpoint_problem
    assert report.segments_recovered == len(reopened.segments)
    assert "checkpoint unusable" in str(report)
    assert read_all(reopened) == records
    reopened.close()


def test_flipped_base_offset_in_the_middle_is_reported_at_recovery(crashed):
    """The base offset lies outside the CRC; density is what exposes its damage."""
    path, expected = crashed
    tail = last_log_file(path)
    position, base, _ = batch_positions(tail)[1]
    flip(tail, position + 6, 0x01)  # base offset += 256
    log = PartitionLog.open(path)
    assert [r.first_offset for r in log.recovery.corrupt] == [base]
    assert "expected" in log.recovery.corrupt[0].reason
    with pytest.raises(CorruptBatchError):
        log.read(base, 1 << 20)
    assert read_all(log, start=base + 5) == [r for r in expected if r.offset >= base + 5]
    log.close()


def test_flipped_base_offset_in_a_sealed_segment_fails_reads_instead_of_lying(tmp_path):
    log = build(tmp_path / "t-0")
    expected = read_all(log)
    log.close()
    sealed = sorted((tmp_path / "t-0").glob("*.log"))[0]
    batches = batch_positions(sealed)
    position, base, _ = batches[2]
    flip(sealed, position + 7, 0x40)  # base offset += 64
    reopened = PartitionLog.open(tmp_path / "t-0")
    with pytest.raises(CorruptBatchError):
        reopened.read(base, 1 << 20)
    before = reopened.read(0, 1 << 20)
    assert before.next_offset == base  # a read from earlier stops before the damage
    assert [r.offset for r in read_all(reopened, start=base + 5)][:1] == [base + 5]
    assert expected[base + 5].offset == base + 5
    assert [(r.segment_base_offset, r.first_offset) for r in reopened.verify()] == [(0, base)]
    reopened.close()


def test_a_read_that_meets_corruption_logs_it_once(tmp_path, caplog):
    log = build(tmp_path / "t-0")
    log.close()
    sealed = sorted((tmp_path / "t-0").glob("*.log"))[0]
    position, base, _ = batch_positions(sealed)[1]
    flip(sealed, position + 90)
    reopened = PartitionLog.open(tmp_path / "t-0")
    for _ in range(3):
        with pytest.raises(CrcMismatchError):
            reopened.read(base, 100)
    logged = [r for r in caplog.records if "corrupt data in" in r.getMessage()]
    assert len(logged) == 1
    assert f"position {position}" in logged[0].getMessage()
    reopened.close()

"""PartitionLog: appends, reads, lookups, rolls, retention and truncation."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import crc32c
import pytest

from dataplane import records
from dataplane.records import Compression, TimestampType, decode_batches
from dataplane.records.errors import (
    CrcMismatchError,
    InvalidMagicError,
    InvalidRecordCountError,
    OversizeBatchError,
)
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.errors import InvalidOffsetError, OffsetOutOfRangeError
from dataplane.storage.log import PartitionLog

from .support import ManualClock, make_batch, read_all, wait_for


def fill(log: PartitionLog, batches: int, per_batch: int = 5, size: int = 100) -> None:
    for b in range(batches):
        values = [bytes([b % 256]) * size for _ in range(per_batch)]
        log.append(make_batch(values, timestamps=[10_000 + b * 10 + i for i in range(per_batch)]))


def test_append_assigns_dense_offsets_across_batches(open_log, small_config):
    log = open_log(small_config)
    first = log.append(make_batch([b"a", b"b", b"c"]))
    second = log.append(make_batch([b"d"]) + make_batch([b"e", b"f"]))
    assert (first.base_offset, first.last_offset, first.record_count) == (0, 2, 3)
    assert (second.base_offset, second.last_offset, second.batch_count) == (3, 5, 2)
    assert log.log_end_offset == 6
    assert [r.offset for r in read_all(log)] == list(range(6))
    assert [r.value for r in read_all(log)] == [b"a", b"b", b"c", b"d", b"e", b"f"]


def test_stored_batch_keeps_a_valid_crc_with_its_new_base_offset(open_log, small_config):
    log = open_log(small_config)
    log.append(make_batch([b"x"] * 3))
    log.append(make_batch([b"y"] * 2))
    data = log.read(3, 1 << 20).data
    header = records.validate_batch(data, 0)
    assert header.base_offset == 3


def test_read_starts_at_the_batch_holding_the_offset_and_returns_whole_batches(
    open_log, small_config
):
    log = open_log(small_config)
    fill(log, 40)
    for offset in (0, 1, 4, 5, 77, 199):
        result = log.read(offset, 300)
        batches = list(records.iter_batches(result.data))
        assert batches, offset
        first = batches[0][1]
        assert first.base_offset <= offset <= first.last_offset
        assert result.next_offset == batches[-1][1].next_offset


def test_read_respects_max_bytes_but_always_returns_one_batch(open_log, small_config):
    log = open_log(small_config)
    fill(log, 10, per_batch=5, size=100)
    one = log.read(0, 1)
    assert len(list(records.iter_batches(one.data))) == 1
    batch_size = len(one.data)
    some = log.read(0, 2 * batch_size + 100)
    assert len(some.data) == 2 * batch_size
    assert len(list(records.iter_batches(some.data))) == 2
    assert log.read(0, 2 * batch_size - 1).data == one.data


def test_read_spans_segments(open_log, small_config):
    log = open_log(small_config)
    fill(log, 60)
    assert len(log.segments) > 3
    result = log.read(0, 1 << 20)
    offsets = [r.offset for r in decode_batches(result.data)]
    assert offsets == list(range(log.log_end_offset))


def test_read_below_start_or_above_end_is_out_of_range(open_log, small_config):
    log = open_log(small_config)
    fill(log, 3)
    with pytest.raises(OffsetOutOfRangeError) as excinfo:
        log.read(16, 100)
    assert (excinfo.value.offset, excinfo.value.log_end_offset) == (16, 15)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    empty = log.read(15, 100)
    assert (empty.data, empty.next_offset) == (b"", 15)


def test_read_stops_at_max_offset(open_log, small_config):
    log = open_log(small_config)
    fill(log, 4)  # batches [0,5) [5,10) [10,15) [15,20)
    result = log.read(0, 1 << 20, max_offset=10)
    assert [r.offset for r in decode_batches(result.data)] == list(range(10))
    assert result.next_offset == 10
    assert log.read(10, 1 << 20, max_offset=10).data == b""


def test_segments_roll_by_size_and_every_offset_stays_readable(open_log, small_config):
    log = open_log(small_config)
    fill(log, 100)
    assert len(log.segments) >= 5
    assert all(s.size_bytes <= small_config.max_segment_bytes for s in log.segments)
    bases = [s.base_offset for s in log.segments]
    assert bases == sorted(bases)
    assert bases[0] == 0
    for prev, nxt in zip(log.segments, log.segments[1:], strict=False):
        assert prev.next_offset == nxt.base_offset
    assert [r.offset for r in read_all(log)] == list(range(500))


def test_segment_rolls_by_age(open_log, clock: ManualClock):
    log = open_log(LogConfig(segment_ms=60_000, durability=Durability.NEVER))
    fill(log, 2)
    clock.advance(59_000)
    fill(log, 1)
    assert len(log.segments) == 1
    clock.advance(2_000)
    fill(log, 1)
    assert [s.base_offset for s in log.segments] == [0, 15]


def test_segment_rolls_when_its_index_is_full(open_log):
    log = open_log(
        LogConfig(max_index_bytes=64, index_interval_bytes=0, durability=Durability.NEVER)
    )
    fill(log, 30, per_batch=1)
    assert len(log.segments) > 1
    assert [r.offset for r in read_all(log)] == list(range(30))


def test_offset_for_timestamp_finds_first_record_at_or_after(open_log, small_config):
    log = open_log(small_config)
    fill(log, 50)  # record o of batch b has timestamp 10_000 + b*10 + i
    expected = {r.timestamp: r.offset for r in reversed(read_all(log))}
    for target in (0, 10_000, 10_003, 10_005, 10_006, 10_250, 10_494):
        found = log.offset_for_timestamp(target)
        best = min(o for t, o in expected.items() if t >= target)
        assert found == best, target
    assert log.offset_for_timestamp(10_495) is None


def test_offset_for_timestamp_with_out_of_order_timestamps(open_log, small_config):
    log = open_log(small_config)
    log.append(make_batch([b"a", b"b", b"c"], timestamps=[500, 100, 900]))
    log.append(make_batch([b"d", b"e"], timestamps=[200, 950]))
    assert log.offset_for_timestamp(150) == 0
    assert log.offset_for_timestamp(600) == 2
    assert log.offset_for_timestamp(920) == 4
    assert log.offset_for_timestamp(951) is None


@pytest.mark.parametrize("codec", list(Compression))
def test_timestamp_lookup_inside_compressed_batches(open_log, small_config, codec):
    log = open_log(small_config)
    for b in range(5):
        ts = [b * 100 + i * 10 for i in range(8)]
        log.append(make_batch([b"v" * 50] * 8, timestamps=ts, compression=codec))
    assert log.offset_for_timestamp(215) == 18
    assert [r.value for r in read_all(log)] == [b"v" * 50] * 40


def test_retention_by_time_deletes_whole_expired_segments(open_log, small_config, clock):
    config = small_config.with_changes(retention_ms=1_000)
    log = open_log(config)
    for b in range(60):
        log.append(make_batch([b"x" * 100] * 5, timestamps=[clock.now_ms + b] * 5))
    old_segments = len(log.segments)
    clock.advance(1_030)  # batches with timestamp < now - 1000 expired: b < 30
    deleted = log.delete_retained_segments()
    assert deleted
    assert len(log.segments) < old_segments
    assert log.log_start_offset == log.segments[0].base_offset > 0
    assert all(s.max_timestamp >= clock.now_ms - 1_000 for s in log.segments[:1])
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert [r.offset for r in read_all(log)] == list(range(log.log_start_offset, 300))


def test_retention_rolls_and_empties_the_log_when_everything_expired(open_log, small_config, clock):
    log = open_log(small_config.with_changes(retention_ms=10))
    fill(log, 3)
    clock.advance(10**12)
    log.delete_retained_segments()
    assert (log.log_start_offset, log.log_end_offset) == (15, 15)
    assert log.append(make_batch([b"z"])).base_offset == 15


def test_retention_by_size_keeps_at_most_the_limit(open_log, small_config):
    log = open_log(small_config.with_changes(retention_bytes=20_000))
    fill(log, 100)
    log.delete_retained_segments()
    assert log.size_bytes <= 20_000 + small_config.max_segment_bytes
    assert log.size_bytes - log.segments[0].size_bytes < 20_000
    assert [r.offset for r in read_all(log)] == list(range(log.log_start_offset, 500))


def test_advance_log_start_offset_hides_earlier_offsets(open_log, small_config):
    log = open_log(small_config)
    fill(log, 40)
    assert log.advance_log_start_offset(123) == 123
    with pytest.raises(OffsetOutOfRangeError):
        log.read(122, 10)
    assert read_all(log)[0].offset == 123
    assert log.segments[0].base_offset <= 123 < log.segments[0].next_offset


def test_truncate_to_a_batch_boundary_then_append_continues_densely(open_log, small_config):
    log = open_log(small_config)
    fill(log, 60)
    assert log.truncate_to(100) == 100
    assert log.log_end_offset == 100
    assert log.append(make_batch([b"new"])).base_offset == 100
    values = read_all(log)
    assert [r.offset for r in values] == list(range(101))
    assert values[-1].value == b"new"


def test_truncate_inside_a_batch_removes_the_whole_batch(open_log, small_config):
    log = open_log(small_config)
    fill(log, 10)
    assert log.truncate_to(12) == 10
    assert [r.offset for r in read_all(log)] == list(range(10))


def test_truncate_below_log_start_restarts_the_log_there(open_log, small_config):
    log = open_log(small_config)
    fill(log, 10)
    log.advance_log_start_offset(20)
    assert log.truncate_to(7) == 7
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (7, 7, 1)
    assert log.append(make_batch([b"a"])).base_offset == 7


def test_truncating_into_a_batch_that_began_below_log_start_restarts_at_log_start(
    open_log, small_config
):
    log = open_log(small_config)
    log.append(make_batch([b"v"] * 10))
    log.advance_log_start_offset(7)
    assert log.truncate_to(9) == 7
    assert (log.log_start_offset, log.log_end_offset) == (7, 7)
    assert log.append(make_batch([b"w"])).base_offset == 7


def test_truncation_survives_reopen(tmp_path, small_config, clock):
    log = PartitionLog.open(tmp_path / "t-0", small_config, clock_ms=clock)
    fill(log, 30)
    log.truncate_to(42)
    log.close()
    reopened = PartitionLog.open(tmp_path / "t-0", clock_ms=clock)
    assert reopened.log_end_offset == 40
    assert [r.offset for r in read_all(reopened)] == list(range(40))
    reopened.close()


def test_follower_append_keeps_offsets_and_refuses_a_gap(open_log, small_config):
    log = open_log(small_config)
    batch = bytearray(make_batch([b"a", b"b"]))
    records.set_base_offset(batch, 0, 0)
    assert log.append(bytes(batch), assign_offsets=False).last_offset == 1
    records.set_base_offset(batch, 0, 5)
    with pytest.raises(InvalidOffsetError, match="expected 2"):
        log.append(bytes(batch), assign_offsets=False)
    assert log.log_end_offset == 2


def _log_bytes(log: PartitionLog) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.directory.glob("*.log"))}


@pytest.mark.parametrize(
    ("corrupt", "error"),
    [
        (lambda b: b[:16] + b"\x07" + b[17:], InvalidMagicError),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), CrcMismatchError),
    ],
)
def test_bad_batch_is_refused_and_the_log_is_unchanged(open_log, small_config, corrupt, error):
    log = open_log(small_config)
    fill(log, 3)
    before = _log_bytes(log)
    good = make_batch([b"ok"])
    with pytest.raises(error):
        log.append(good + corrupt(make_batch([b"bad"])))
    assert _log_bytes(log) == before
    assert log.log_end_offset == 15


def test_oversize_batch_is_refused(open_log, small_config):
    log = open_log(small_config.with_changes(max_batch_bytes=1_000))
    with pytest.raises(OversizeBatchError) as excinfo:
        log.append(make_batch([b"x" * 2_000]))
    assert excinfo.value.max_bytes == 1_000
    assert log.log_end_offset == 0


def test_log_append_time_stamps_every_record(open_log, small_config, clock):
    log = open_log(small_config.with_changes(timestamp_type=TimestampType.LOG_APPEND_TIME))
    info = log.append(make_batch([b"a", b"b"], timestamps=[5, 6]))
    assert info.log_append_time == clock.now_ms
    stored = read_all(log)
    assert [r.timestamp for r in stored] == [clock.now_ms, clock.now_ms]
    records.validate_batch(log.read(0, 1000).data)


def test_leader_epoch_is_stamped_into_batches(open_log, small_config):
    log = open_log(small_config)
    log.append(make_batch([b"a"]), leader_epoch=7)
    header = records.validate_batch(log.read(0, 1000).data)
    assert header.partition_leader_epoch == 7


def test_leader_epoch_is_stamped_into_every_batch_without_touching_the_callers_bytes(
    open_log, small_config
):
    log = open_log(small_config)
    log.append(make_batch([b"first"]))
    request = make_batch([b"a", b"b"]) + make_batch([b"c"]) + make_batch([b"d", b"e", b"f"])
    sent = bytes(request)
    info = log.append(request, leader_epoch=9)
    assert (info.base_offset, info.last_offset, info.batch_count) == (1, 6, 3)
    assert request == sent
    data = log.read(1, 1 << 20).data
    epochs, position = [], 0
    while position < len(data):
        header = records.validate_batch(data, position)  # the CRC still holds
        epochs.append((header.base_offset, header.partition_leader_epoch))
        position += header.size
    assert epochs == [(1, 9), (3, 9), (4, 9)]
    assert [r.value for r in records.decode_batches(data)] == [b"a", b"b", b"c", b"d", b"e", b"f"]


def test_reopen_after_clean_close_restores_everything(tmp_path, small_config, clock):
    log = PartitionLog.open(tmp_path / "t-0", small_config, clock_ms=clock)
    fill(log, 50)
    log.advance_log_start_offset(33)
    expected = read_all(log)
    log.close()
    reopened = PartitionLog.open(tmp_path / "t-0", clock_ms=clock)
    assert reopened.recovery.clean_shutdown
    assert reopened.recovery.segments_recovered == 0
    assert reopened.config == small_config
    assert (reopened.log_start_offset, reopened.log_end_offset) == (33, 250)
    assert read_all(reopened) == expected
    assert reopened.append(make_batch([b"more"])).base_offset == 250
    reopened.close()


def test_always_durability_returns_only_after_the_bytes_are_synced(open_log, small_config):
    log = open_log(small_config.with_changes(durability=Durability.ALWAYS))
    for _ in range(5):
        info = log.append(make_batch([b"a"] * 3))
        assert log.recovery_point >= info.last_offset + 1


def test_group_commit_shares_one_fsync_among_waiting_appenders(open_log, small_config, monkeypatch):
    """Appenders that arrive while an fsync runs are written and synced as one group.

    The first fdatasync is held (a slow disk) until the other 15 appenders are queued
    behind it; the real fsync still runs. Every append returns only once the recovery
    point covers it, and the 15 need a single further fsync.
    """
    config = small_config.with_changes(durability=Durability.ALWAYS, max_segment_bytes=1 << 20)
    log = open_log(config)
    real, calls, release = os.fdatasync, [], threading.Event()

    def slow_fdatasync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            release.wait(10)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    acked: list[tuple[int, int]] = []  # (last offset, recovery point when append returned)

    def appender() -> None:
        info = log.append(make_batch([b"x" * 50]))
        acked.append((info.last_offset, log.recovery_point))

    threads = [threading.Thread(target=appender) for _ in range(16)]
    for t in threads:
        t.start()

    def queued() -> int:  # appends waiting for the next group (the list is swapped per group)
        return len(log._group_writer._queue)

    assert wait_for(lambda: queued() == 15)
    assert log.log_end_offset == 1  # only the first append is written so far
    assert not acked  # nobody returned while the first fsync was held
    release.set()
    for t in threads:
        t.join(10)
    assert len(acked) == 16
    assert all(recovery_point > last for last, recovery_point in acked)
    assert 1 <= len(calls) <= 2, f"{len(calls)} fsyncs for 16 concurrent appends"
    assert [r.offset for r in read_all(log)] == list(range(16))


def test_interval_durability_flushes_once_the_interval_passed(open_log, small_config, clock):
    log = open_log(small_config.with_changes(durability=Durability.INTERVAL, flush_interval_ms=500))
    fill(log, 2)
    assert log.recovery_point == 0
    clock.advance(499)
    assert not log.maybe_flush()
    clock.advance(1)
    fill(log, 1)
    assert wait_for(lambda: log.recovery_point == 15)


def test_interval_flush_runs_in_the_background_not_in_the_appender(
    open_log, small_config, clock, monkeypatch
):
    """While a due flush is stuck in a slow fdatasync, appends still return."""
    log = open_log(small_config.with_changes(durability=Durability.INTERVAL, flush_interval_ms=10))
    fill(log, 1)
    entered, release, real = threading.Event(), threading.Event(), os.fdatasync

    def stuck_fdatasync(fd: int) -> None:  # a slow disk: the real fsync runs once released
        entered.set()
        release.wait(10)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", stuck_fdatasync)
    clock.advance(10)
    fill(log, 1)  # due: hands the flush to the background thread
    assert entered.wait(10)
    fill(log, 3)  # returns although the flush is still in fdatasync
    assert log.log_end_offset == 25
    assert log.recovery_point == 0
    release.set()
    assert wait_for(lambda: log.recovery_point >= 10)


def test_never_durability_leaves_flushing_to_seal_and_close(open_log, small_config, clock):
    log = open_log(small_config)
    fill(log, 3)
    clock.advance(10**9)
    assert not log.maybe_flush()
    assert log.recovery_point == 0
    fill(log, 40)  # rolls: sealed segments are flushed by the next housekeeping pass
    assert log.maybe_flush()
    assert log.recovery_point == log.log_end_offset


def test_concurrent_reads_during_appends_see_only_whole_batches(open_log, small_config):
    log = open_log(small_config)
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                end = log.log_end_offset
                if end:
                    got = [r.offset for r in decode_batches(log.read(0, 1 << 20).data)]
                    assert got[:end] == list(range(min(end, len(got))))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    fill(log, 200, per_batch=3)
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert log.log_end_offset == 600


def test_reads_survive_retention_deleting_their_segment(open_log, small_config, clock):
    log = open_log(small_config.with_changes(retention_bytes=10_000))
    fill(log, 40)
    segment = log.segments[0]
    with segment.pin():
        log.delete_retained_segments()
        assert not segment.log_path.exists()
        data, _ = segment.read(0, 1000, 10**9)
        assert decode_batches(data)[0].offset == 0
    assert log.log_start_offset > 0


def test_log_directory_is_one_partition_with_kafka_file_names(open_log, small_config):
    log = open_log(small_config)
    fill(log, 30)
    names = sorted(p.name for p in Path(log.directory).iterdir())
    assert "00000000000000000000.log" in names
    assert "00000000000000000000.index" in names
    assert "00000000000000000000.timeindex" in names
    assert "partition.json" in names


def test_a_read_whose_budget_ends_just_past_a_segment_does_not_skip_offsets(open_log):
    log = open_log(LogConfig(max_segment_bytes=1024, durability=Durability.NEVER))
    for _ in range(12):
        log.append(make_batch([b"x" * 300]))
    first = log.segments[0]
    result = log.read(0, first.size_bytes + 1)
    assert result.next_offset == first.next_offset
    assert [r.offset for r in decode_batches(result.data)] == list(range(first.next_offset))


def test_a_read_bounded_inside_a_later_segment_stops_before_the_bound(tmp_path, clock):
    config = LogConfig(max_segment_bytes=1024, durability=Durability.NEVER)
    log = PartitionLog.open(tmp_path / "t-0", config, replicated=True, clock_ms=clock)
    for _ in range(6):
        log.append(make_batch([b"x" * 150, b"y" * 150]))
    assert [s.base_offset for s in log.segments] == [0, 4, 8]
    assert log.update_high_watermark(5) == 5
    result = log.read(0, 1 << 20, max_offset=log.high_watermark)
    assert result.next_offset == 4
    assert [r.offset for r in decode_batches(result.data)] == [0, 1, 2, 3]
    log.close()


def test_batch_headers_are_those_of_the_batches_from_an_offset_to_the_end(open_log):
    """Against an oracle of (base offset, last offset) per batch, from several offsets
    (batch starts, batch middles, segment boundaries), across many segments."""
    log = open_log(LogConfig(max_segment_bytes=1024, durability=Durability.NEVER))
    rng = random.Random(5)
    batches = []
    for _ in range(60):
        info = log.append(make_batch([b"x" * rng.randint(1, 120)] * rng.randint(1, 4)))
        batches.append((info.base_offset, info.last_offset))
    assert len(log.segments) > 3
    starts = [0, 1, log.segments[2].base_offset, log.log_end_offset - 1, log.log_end_offset]
    for start in starts + [rng.randrange(log.log_end_offset) for _ in range(10)]:
        expected = [(base, last) for base, last in batches if last >= start]
        found = [(base, h.last_offset) for base, h in log.batch_headers(start)]
        assert found == expected, start


def test_batch_headers_skip_segments_deleted_while_they_are_read(open_log):
    """A truncation deletes the segments a scan has not reached yet: the scan ends with
    what is left, without an error."""
    log = open_log(LogConfig(max_segment_bytes=1024, durability=Durability.NEVER))
    for _ in range(12):
        log.append(make_batch([b"x" * 300]))
    assert len(log.segments) >= 3
    second = log.segments[1].base_offset
    headers = log.batch_headers(0)
    assert next(headers)[0] == 0
    log.truncate_to(second)
    assert [base for base, _ in headers] == list(range(1, second))


def test_a_batch_claiming_more_offsets_than_records_is_refused(open_log, small_config):
    log = open_log(small_config)
    batch = bytearray(make_batch([b"one"]))
    batch[23:27] = (1_000_000).to_bytes(4, "big")  # lastOffsetDelta
    batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    with pytest.raises(InvalidRecordCountError, match="dense"):
        log.append(bytes(batch))
    assert log.log_end_offset == 0


def test_timestamp_lookup_and_reads_stop_at_the_high_watermark(tmp_path, clock):
    config = LogConfig(durability=Durability.NEVER)
    log = PartitionLog.open(tmp_path / "t-0", config, replicated=True, clock_ms=clock)
    for n in range(10):
        log.append(make_batch([b"x"], timestamps=[1_000 + n]))
    assert log.high_watermark == 0
    assert log.update_high_watermark(5) == 5
    assert log.offset_for_timestamp(1_003) == 3
    assert log.offset_for_timestamp(1_008) is None
    assert [r.offset for r in decode_batches(log.read(0, 1 << 20).data)] == list(range(5))
    everything = log.read(0, 1 << 20, max_offset=log.log_end_offset)
    assert len(decode_batches(everything.data)) == 10
    assert log.update_high_watermark(2) == 5  # never moves back
    log.close()


def test_small_reads_of_small_batches_fill_their_budget(open_log):
    """With batches far smaller than the index interval, a read still packs its budget."""
    log = open_log(LogConfig(index_interval_bytes=4096, durability=Durability.NEVER))
    for n in range(200):
        log.append(make_batch([b"%03d" % n]))
    size = len(log.read(0, 1).data)
    result = log.read(0, 10 * size + size // 2)
    assert len(result.data) == 10 * size
    assert result.next_offset == 10

"""PartitionLog under concurrency: group commit, truncation, close, rolls and reads."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from dataplane.records import decode_batches
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.errors import (
    AppendTruncatedError,
    InvalidOffsetError,
    LogClosedError,
    LogDirOfflineError,
    StorageError,
)
from dataplane.storage.log import PartitionLog

from .support import make_batch, read_all, wait_for

ALWAYS = LogConfig(max_segment_bytes=4096, index_interval_bytes=128, durability=Durability.ALWAYS)


class SlowDisk:
    """Counts fdatasync calls and can hold the next one until released.

    This models a slow device so that interleavings that real disks make rare happen
    every time; it changes timing only, and the real fsync still runs.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self._hold = False
        self._real = os.fdatasync
        monkeypatch.setattr(os, "fdatasync", self)

    def hold_next(self) -> None:
        self._hold = True
        self.entered.clear()
        self.release.clear()

    def append_held(self, log: PartitionLog, batch: bytes) -> tuple[threading.Thread, list[object]]:
        """Start ``log.append(batch)`` in a thread; return once its fsync is being held."""
        self.hold_next()
        started = in_thread(log.append, batch)
        assert self.entered.wait(10), "the append never reached its fsync"
        return started

    def __call__(self, fd: int) -> None:
        self.calls += 1
        if self._hold:
            self._hold = False
            self.entered.set()
            assert self.release.wait(10), "the held fsync was never released"
        self._real(fd)


def in_thread(target, *args) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(target(*args))
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_truncation_during_a_group_commit_never_overstates_the_recovery_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    log = PartitionLog.open(tmp_path / "t-0", ALWAYS, replicated=True)
    for _ in range(3):
        log.append(make_batch([b"a"] * 2))
    disk = SlowDisk(monkeypatch)
    # offsets 6..10: its flush snapshot (LEO 11) is taken, its fsync held
    thread, outcome = disk.append_held(log, make_batch([b"b"] * 5))
    assert log.truncate_to(4) == 4
    disk.release.set()
    thread.join(10)
    assert isinstance(outcome[0], AppendTruncatedError)
    assert log.recovery_point <= log.log_end_offset == 4
    calls = disk.calls
    for _ in range(5):
        info = log.append(make_batch([b"c"]))
        assert log.recovery_point > info.last_offset
    assert disk.calls > calls, "appends after the truncation were acknowledged without fsync"
    log.close()
    reopened = PartitionLog.open(tmp_path / "t-0")
    assert [r.value for r in read_all(reopened)] == [b"a"] * 4 + [b"c"] * 5
    reopened.close()


def test_close_while_always_appenders_run_neither_deadlocks_nor_loses_acks(tmp_path: Path):
    for attempt in range(20):
        log = PartitionLog.open(tmp_path / f"t-{attempt}", ALWAYS)
        acked: list[int] = []
        stop = threading.Event()

        def appender(
            log: PartitionLog = log, acked: list[int] = acked, stop: threading.Event = stop
        ) -> None:
            while not stop.is_set():
                try:
                    acked.append(log.append(make_batch([b"x" * 30])).base_offset)
                except LogClosedError:
                    return

        threads = [threading.Thread(target=appender) for _ in range(4)]
        for t in threads:
            t.start()
        assert wait_for(lambda acked=acked: len(acked) >= 5), "the appenders made no progress"
        closer, outcome = in_thread(log.close)
        closer.join(10)
        assert not closer.is_alive(), f"close deadlocked on attempt {attempt}"
        stop.set()
        for t in threads:
            t.join(10)
        assert outcome == [None]
        reopened = PartitionLog.open(tmp_path / f"t-{attempt}")
        assert reopened.recovery.clean_shutdown
        assert set(acked) <= {r.offset for r in read_all(reopened)}
        reopened.close()


def test_always_log_hides_records_until_they_are_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    log = PartitionLog.open(tmp_path / "t-0", ALWAYS)
    log.append(make_batch([b"synced"]))
    disk = SlowDisk(monkeypatch)
    thread, _ = disk.append_held(log, make_batch([b"pending"]))
    assert log.log_end_offset == 2
    assert log.high_watermark == 1
    assert [r.value for r in decode_batches(log.read(0, 1 << 20).data)] == [b"synced"]
    disk.release.set()
    thread.join(10)
    assert log.high_watermark == 2
    log.close()


def test_reads_racing_rolls_and_index_rebuilds_raise_nothing_untyped(tmp_path: Path):
    config = LogConfig(
        max_segment_bytes=2048,
        index_interval_bytes=0,
        max_index_bytes=96,
        durability=Durability.NEVER,
    )
    log = PartitionLog.open(tmp_path / "t-0", config)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            end = log.log_end_offset
            for offset in range(0, end, max(1, end // 20)):
                try:
                    got = decode_batches(log.read(offset, 300).data)
                    assert got[0].offset <= offset <= got[-1].offset
                    log.offset_for_timestamp(1_000 + offset)
                except BaseException as exc:  # handed to the test thread
                    errors.append(exc)
                    return

    readers = [threading.Thread(target=reader) for _ in range(3)]
    for t in readers:
        t.start()
    for n in range(1_500):
        log.append(make_batch([b"r" * 60], timestamps=[1_000 + n]))
    stop.set()
    for t in readers:
        t.join(10)
    assert not errors, repr(errors[0])
    assert len(log.segments) > 20
    log.close()


def test_one_append_of_more_batches_than_iov_max_is_written_whole(tmp_path: Path):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(durability=Durability.NEVER))
    count = os.sysconf("SC_IOV_MAX")  # two buffers per batch: twice the limit
    info = log.append(b"".join(make_batch([b"%d" % n]) for n in range(count)))
    assert (info.batch_count, info.last_offset) == (count, count - 1)
    assert not log.is_offline
    assert [r.value for r in read_all(log)] == [b"%d" % n for n in range(count)]
    log.close()


def test_multi_batch_append_larger_than_the_free_index_rolls_first(tmp_path: Path):
    config = LogConfig(index_interval_bytes=0, max_index_bytes=96, durability=Durability.NEVER)
    log = PartitionLog.open(tmp_path / "t-0", config)
    for n in range(6):
        log.append(make_batch([b"ok%d" % n]))
    log.append(b"".join(make_batch([b"many%d" % n]) for n in range(6)))
    log.append(make_batch([b"after"]))
    expected = [r.value for r in read_all(log)]
    assert expected[-1] == b"after"
    assert len(expected) == 13
    log.close()
    smaller = PartitionLog.open(tmp_path / "t-0", config.with_changes(max_index_bytes=64))
    assert [r.value for r in read_all(smaller)] == expected
    for n in range(10):
        smaller.append(make_batch([b"more%d" % n]))
    assert read_all(smaller)[-1].value == b"more9"
    smaller.close()


def test_a_closed_log_refuses_reads_and_appends_with_a_typed_error(tmp_path: Path):
    log = PartitionLog.open(tmp_path / "t-0", ALWAYS)
    log.append(make_batch([b"x"]))
    log.close()
    with pytest.raises(LogClosedError):
        log.read(0, 100)
    with pytest.raises(LogClosedError):
        log.append(make_batch([b"y"]))


def test_every_error_a_concurrent_reader_sees_is_a_storage_error(tmp_path: Path):
    """Retention and truncation racing reads give out-of-range errors, never garbage."""
    config = LogConfig(max_segment_bytes=1024, retention_bytes=3_000, durability=Durability.NEVER)
    log = PartitionLog.open(tmp_path / "t-0", config)
    failures: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            offset = max(0, log.log_end_offset - 30)
            try:
                data = log.read(offset, 2_000).data
                for record in decode_batches(data):
                    assert record.value == b"%d" % record.offset
            except StorageError:
                continue
            except BaseException as exc:  # handed to the test thread
                failures.append(exc)
                return

    thread = threading.Thread(target=reader)
    thread.start()
    for n in range(600):
        log.append(make_batch([b"%d" % n]))
        if n % 25 == 0:
            log.delete_retained_segments()
    stop.set()
    thread.join(10)
    assert not failures, repr(failures[0])
    log.close()


def test_one_bad_append_in_a_group_fails_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A group written together still answers each append on its own."""
    log = PartitionLog.open(tmp_path / "t-0", ALWAYS)
    log.append(make_batch([b"first"]))
    disk = SlowDisk(monkeypatch)
    holder, _ = disk.append_held(log, make_batch([b"held"]))
    good = [in_thread(log.append, make_batch([b"ok%d" % n])) for n in range(6)]
    stale = bytearray(make_batch([b"stale"]))  # a follower append at the wrong offset
    bad = in_thread(lambda: log.append(bytes(stale), assign_offsets=False))
    assert wait_for(lambda: len(log._group_writer._queue) == 7)  # all queued behind it
    disk.release.set()
    for thread, _ in [*good, bad, (holder, None)]:
        thread.join(10)
    assert [type(outcome[0]).__name__ for _, outcome in good] == ["AppendInfo"] * 6
    assert isinstance(bad[1][0], InvalidOffsetError)
    values = sorted(r.value for r in read_all(log))
    assert values == sorted([b"first", b"held", *(b"ok%d" % n for n in range(6))])
    log.close()


def test_a_failed_fsync_fails_the_whole_group_and_takes_the_log_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    log = PartitionLog.open(tmp_path / "t-0", ALWAYS)
    log.append(make_batch([b"synced"]))

    def broken_fdatasync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", broken_fdatasync)
    outcomes = [in_thread(log.append, make_batch([b"lost%d" % n])) for n in range(5)]
    for thread, _ in outcomes:
        thread.join(10)
    assert all(isinstance(outcome[0], LogDirOfflineError) for _, outcome in outcomes)
    assert log.is_offline
    assert log.high_watermark == 1  # nothing unsynced was ever exposed
    with pytest.raises(LogDirOfflineError):
        log.append(make_batch([b"after"]))


def test_a_flush_finishing_while_truncation_cuts_files_acknowledges_nothing_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The append's fsync completes after the truncation began deleting, before it ended.

    Timing only: the round's fdatasync waits until the truncation is inside its own
    fdatasync, which waits until the append has been answered.
    """
    log = PartitionLog.open(tmp_path / "t-0", ALWAYS, replicated=True)
    for _ in range(5):
        log.append(make_batch([b"a"]))
    log.roll()
    log.flush()  # the sealed segment is synced: the next round syncs only the new one
    real = os.fdatasync
    round_in_fsync, truncation_in_fsync = threading.Event(), threading.Event()
    calls: list[int] = []

    def ordered_fdatasync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 1:  # the append's flush round
            round_in_fsync.set()
            truncation_in_fsync.wait(10)
        elif len(calls) == 2:  # the truncation syncing the segment it cut
            truncation_in_fsync.set()
            appender.join(2)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", ordered_fdatasync)
    appender, outcome = in_thread(log.append, make_batch([b"doomed"]))
    assert round_in_fsync.wait(10)
    assert log.truncate_to(4) == 4
    appender.join(10)
    assert isinstance(outcome[0], AppendTruncatedError)
    assert log.recovery_point <= log.log_end_offset == 4
    assert log.high_watermark <= 4

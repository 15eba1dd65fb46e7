"""Many partitions in one process: a small budget of open files, lazy opening, idle logs.

Every test here runs its logs within a budget of open segment files far below the number
of segments, counts the process's descriptors in ``/proc/self/fd`` after each step, and
compares what the logs return with an oracle (offset -> value per partition).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dataplane.records import decode_batches
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.errors import LogClosedError
from dataplane.storage.filecache import SEGMENT_FILES
from dataplane.storage.log import PartitionLog
from dataplane.storage.manager import LogManager, TopicPartition

from .support import ManualClock, make_batch, read_all

BUDGET = 64
SMALL = LogConfig(
    max_segment_bytes=2048,
    index_interval_bytes=128,
    durability=Durability.NEVER,
    retention_ms=-1,
)
Oracle = dict[TopicPartition, dict[int, bytes]]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def budget() -> Iterator[int]:
    """The process-wide budget is set by the managers below; restored afterwards."""
    before = SEGMENT_FILES.max_open_files
    yield BUDGET
    SEGMENT_FILES.set_max_open_files(before)


class FdWatch:
    """Asserts, step after step, that open segment files stay within the budget."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.baseline = open_fds() - SEGMENT_FILES.open_files
        self.peak = 0

    def check(self) -> None:
        in_use = open_fds() - self.baseline
        self.peak = max(self.peak, in_use)
        assert SEGMENT_FILES.open_files <= self.budget
        assert in_use <= self.budget, f"{in_use} descriptors over a budget of {self.budget}"


def value(tp: TopicPartition, offset: int) -> bytes:
    return f"{tp}@{offset}:".encode() * 3


def append_round(manager: LogManager, oracle: Oracle, rng: random.Random, watch: FdWatch) -> None:
    """One batch of 1-4 records to every partition, in random order."""
    tps = list(oracle)
    rng.shuffle(tps)
    for tp in tps:
        log = manager.get_or_create_log(tp.topic, tp.partition)
        start = log.log_end_offset
        values = [value(tp, start + i) for i in range(rng.randint(1, 4))]
        info = log.append(make_batch(values))
        assert info.base_offset == start
        oracle[tp].update((start + i, v) for i, v in enumerate(values))
        watch.check()


def check_against_oracle(manager: LogManager, oracle: Oracle, watch: FdWatch) -> None:
    tps = list(oracle)
    random.Random(7).shuffle(tps)
    for tp in tps:
        log = manager.get_log(tp.topic, tp.partition)
        assert log is not None, tp
        got = {r.offset: r.value for r in read_all(log)}
        expected = {o: v for o, v in oracle[tp].items() if o >= log.log_start_offset}
        assert got == expected, tp
        watch.check()


def make_manager(data_dir: Path, *, opened: bool = True, **kwargs: object) -> LogManager:
    manager = LogManager(data_dir, default_config=SMALL, max_open_files=BUDGET, **kwargs)  # type: ignore[arg-type]
    if opened:
        manager.open()
    return manager


@pytest.mark.slow
def test_500_logs_within_64_descriptors_match_the_oracle(tmp_path: Path, budget: int):
    """Appends, rolls, reads, retention, truncation, clean reopen and crash recovery."""
    rng = random.Random(500)
    manager = make_manager(tmp_path / "data")
    watch = FdWatch(budget)
    oracle: Oracle = {TopicPartition("t", p): {} for p in range(500)}
    with ThreadPoolExecutor(8) as pool:  # creation is fsync-bound: create them together
        list(pool.map(lambda tp: manager.get_or_create_log(tp.topic, tp.partition), oracle))
    watch.check()
    for _ in range(6):
        append_round(manager, oracle, rng, watch)
    logs = manager.logs()
    assert sum(len(log.segments) for log in logs.values()) > 2 * budget
    check_against_oracle(manager, oracle, watch)

    for tp in rng.sample(list(oracle), 40):  # truncation inside the log
        log = logs[tp]
        new_end = log.truncate_to(rng.randrange(log.log_start_offset, log.log_end_offset + 1))
        oracle[tp] = {o: v for o, v in oracle[tp].items() if o < new_end}
        watch.check()
    for tp in rng.sample(list(oracle), 40):  # retention by size
        log = logs[tp]
        log.update_config(SMALL.with_changes(retention_bytes=2048))
        log.delete_retained_segments()
        oracle[tp] = {o: v for o, v in oracle[tp].items() if o >= log.log_start_offset}
        watch.check()
    append_round(manager, oracle, rng, watch)
    check_against_oracle(manager, oracle, watch)

    crash = tmp_path / "crash"
    shutil.copytree(tmp_path / "data", crash, ignore=shutil.ignore_patterns(".lock"))
    manager.close()
    assert SEGMENT_FILES.open_files == 0

    reopened = make_manager(tmp_path / "data")
    assert all(r.clean_shutdown and not r.segments_recovered for r in reopened.recovery_reports)
    assert SEGMENT_FILES.open_files == 0, "a clean open reads no segment"
    check_against_oracle(reopened, oracle, watch)
    reopened.close()

    recovered = make_manager(crash, recovery_threads=4)
    assert all(not r.truncated_bytes and not r.corrupt for r in recovered.recovery_reports)
    assert sum(not r.clean_shutdown for r in recovered.recovery_reports) == 500
    watch.check()
    check_against_oracle(recovered, oracle, watch)
    recovered.close()
    assert watch.peak >= BUDGET // 2, "the test never filled the budget"


def fill(log: PartitionLog, batches: int, tag: str = "v") -> None:
    for n in range(batches):
        log.append(make_batch([f"{tag}{n}-{i}".encode() * 4 for i in range(3)]))


def everything(log: PartitionLog) -> bytes:
    return log.read(log.log_start_offset, 1 << 30).data


def test_an_evicted_segment_reads_back_byte_identically(tmp_path: Path, budget: int):
    log = PartitionLog.open(tmp_path / "t-0", SMALL)
    fill(log, 40)
    before = [log.read(offset, 1).data for offset in range(log.log_end_offset)]
    whole = everything(log)
    assert any(s.is_open for s in log.segments)
    assert SEGMENT_FILES.close_idle(0) > 0
    assert not any(s.is_open for s in log.segments)
    assert everything(log) == whole
    assert [log.read(offset, 1).data for offset in range(log.log_end_offset)] == before
    assert [r.offset for r in decode_batches(whole)] == list(range(log.log_end_offset))
    log.close()


def test_an_idle_active_segment_is_trimmed_when_closed_and_appends_continue(
    tmp_path: Path, budget: int
):
    config = SMALL.with_changes(max_segment_bytes=1 << 20, max_index_bytes=4096)
    log = PartitionLog.open(tmp_path / "t-0", config)
    fill(log, 30)
    active = log.segments[-1]
    index_path = active.offset_index.path
    entries = active.offset_index.entries
    assert entries > 5
    assert index_path.stat().st_size == 4096  # preallocated while in use
    SEGMENT_FILES.close_idle(0)
    assert not active.is_open
    assert index_path.stat().st_size == entries * 8  # trimmed to its entries
    fill(log, 30, tag="w")
    assert active.offset_index.entries > entries
    assert index_path.stat().st_size == 4096
    values = [r.value for r in read_all(log)]
    assert values[:90] == [f"v{n}-{i}".encode() * 4 for n in range(30) for i in range(3)]
    assert values[90:] == [f"w{n}-{i}".encode() * 4 for n in range(30) for i in range(3)]
    for offset in range(0, log.log_end_offset, 7):  # through the index kept while closed
        assert decode_batches(log.read(offset, 1).data)[-1].offset >= offset
    log.close()


def test_a_clean_restart_opens_no_segment_file_and_writes_nothing(tmp_path: Path, budget: int):
    with make_manager(tmp_path, opened=False) as manager:
        for p in range(50):
            fill(manager.get_or_create_log("t", p), 12)
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.glob("*/partition.json")}
    watch = FdWatch(budget)
    manager = make_manager(tmp_path)
    assert SEGMENT_FILES.open_files == 0
    assert open_fds() - watch.baseline <= 1  # the directory lock
    manager.close()
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("*/partition.json")} == stamps


def test_an_unclean_restart_recovers_only_the_logs_that_changed(tmp_path: Path, budget: int):
    with make_manager(tmp_path, opened=False) as manager:
        for p in range(40):
            fill(manager.get_or_create_log("t", p), 5)
    manager = make_manager(tmp_path)
    for p in (3, 17, 29):
        fill(manager.get_or_create_log("t", p), 2, tag="late")
    shutil.copytree(tmp_path, tmp_path.parent / "crash", ignore=shutil.ignore_patterns(".lock"))
    manager.close()
    crashed = make_manager(tmp_path.parent / "crash")
    unclean = {r.path.name for r in crashed.recovery_reports if not r.clean_shutdown}
    assert unclean == {"t-3", "t-17", "t-29"}
    late = crashed.get_log("t", 17)
    assert late is not None
    assert [r.value for r in read_all(late)][-1] == b"late1-2" * 4
    crashed.close()


def test_housekeeping_looks_only_at_logs_that_changed(tmp_path: Path, budget: int):
    clock = ManualClock()  # no flush is due until the test moves it
    manager = make_manager(tmp_path, clock_ms=clock)
    config = SMALL.with_changes(durability=Durability.INTERVAL, flush_interval_ms=1_000)
    logs = [manager.get_or_create_log("t", p, config) for p in range(100)]
    manager.checkpoint_all()
    assert manager.active_logs() == []
    for log in logs[10:13]:
        log.append(make_batch([b"x"]))
    assert sorted(log.directory.name for log in manager.active_logs()) == ["t-10", "t-11", "t-12"]
    assert manager.flush_due_logs() == 0
    manager.checkpoint_all()  # still behind: they stay active
    assert len(manager.active_logs()) == 3
    clock.advance(1_000)
    assert manager.flush_due_logs() == 3
    manager.checkpoint_all()
    assert manager.active_logs() == []
    assert all(log.recovery_point == 1 for log in logs[10:13])
    stored = json.loads((logs[11].directory / "partition.json").read_text())
    assert stored["recovery_point"] == 1
    manager.close()


def test_retention_after_a_clean_restart_reads_timestamps_it_never_loaded(
    tmp_path: Path, budget: int
):
    clock = ManualClock()
    config = SMALL.with_changes(retention_ms=60_000)
    with LogManager(tmp_path, clock_ms=clock, max_open_files=BUDGET) as manager:
        log = manager.get_or_create_log("t", 0, config)
        for n in range(30):
            log.append(make_batch([b"r" * 200], timestamps=[clock.now_ms + n]))
        segments = len(log.segments)
    clock.advance(120_000)
    with LogManager(tmp_path, clock_ms=clock, max_open_files=BUDGET) as manager:
        log = manager.get_log("t", 0)
        assert log is not None
        assert not any(s.is_open for s in log.segments)
        assert manager.enforce_retention() == segments
        assert (log.log_start_offset, log.log_end_offset) == (30, 30)


def test_an_older_checkpoint_without_the_last_segment_still_opens_cleanly(tmp_path: Path):
    log = PartitionLog.open(tmp_path / "t-0", SMALL)
    fill(log, 20)
    expected = read_all(log)
    log.close()
    path = tmp_path / "t-0" / "partition.json"
    data = json.loads(path.read_text())
    del data["last_segment"]
    path.write_text(json.dumps(data))
    reopened = PartitionLog.open(tmp_path / "t-0")
    assert reopened.recovery.clean_shutdown
    assert not reopened.recovery.segments_recovered
    assert read_all(reopened) == expected
    fill(reopened, 2, tag="more")
    assert read_all(reopened)[-1].value == b"more1-2" * 4
    reopened.close()


def test_bytes_added_after_a_clean_close_are_recovered_not_trusted(tmp_path: Path):
    log = PartitionLog.open(tmp_path / "t-0", SMALL)
    fill(log, 20)
    expected = read_all(log)
    log.close()
    tail = max((tmp_path / "t-0").glob("*.log"))
    with tail.open("ab") as f:
        f.write(make_batch([b"torn"])[:40])
    reopened = PartitionLog.open(tmp_path / "t-0")
    assert not reopened.recovery.clean_shutdown
    assert reopened.recovery.truncated_bytes == 40
    assert read_all(reopened) == expected
    reopened.close()


def test_readers_pinning_more_segments_than_the_budget_neither_block_nor_leak(
    tmp_path: Path, budget: int
):
    SEGMENT_FILES.set_max_open_files(16)
    logs = [PartitionLog.open(tmp_path / f"t-{p}", SMALL) for p in range(24)]
    for log in logs:
        fill(log, 12)
    expected = [everything(log) for log in logs]
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        try:
            for _ in range(300):
                n = rng.randrange(len(logs))
                log = logs[n]
                offset = rng.randrange(log.log_end_offset)
                data = log.read(offset, 1 << 20).data
                assert expected[n].endswith(data)
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, repr(errors[0])
    assert SEGMENT_FILES.open_files <= 16
    for log in logs:
        log.close()
    assert SEGMENT_FILES.open_files == 0


def test_logs_are_created_concurrently_and_each_once(tmp_path: Path, budget: int):
    """Threads creating partitions do not wait for each other; one partition is made once."""
    manager = make_manager(tmp_path)
    made: list[list[PartitionLog]] = [[] for _ in range(8)]
    start = threading.Barrier(8)

    def create(n: int) -> None:
        start.wait()
        made[n] = [manager.get_or_create_log("t", p % 40) for p in range(n, n + 80)]

    threads = [threading.Thread(target=create, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    logs = manager.logs()
    assert len(logs) == 40
    for created in made:
        assert all(log is logs[TopicPartition("t", int(log.directory.name[2:]))] for log in created)
    assert manager.delete_log("t", 3)
    manager.close()
    with pytest.raises(LogClosedError):
        manager.get_or_create_log("t", 99)


def test_a_refused_trim_still_releases_the_segment_files(
    tmp_path: Path, budget: int, monkeypatch: pytest.MonkeyPatch
):
    """Closing an idle active segment whose index cannot be trimmed frees its descriptors."""
    log = PartitionLog.open(tmp_path / "t-0", SMALL.with_changes(max_segment_bytes=1 << 20))
    fill(log, 20)
    whole = everything(log)
    watch = FdWatch(budget)

    def refuse(fd: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "ftruncate", refuse)
    assert SEGMENT_FILES.close_idle(0) == 1
    monkeypatch.undo()
    assert SEGMENT_FILES.open_files == 0
    assert open_fds() - watch.baseline == 0
    assert everything(log) == whole
    fill(log, 2, tag="after")
    assert read_all(log)[-1].value == b"after1-2" * 4
    log.close()

"""LogManager: many logs in one data directory, housekeeping and clean shutdown."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.errors import LogClosedError, StorageError
from dataplane.storage.manager import LogManager, ManagerSchedule, TopicPartition

from .support import ManualClock, make_batch, read_all, wait_for


def test_logs_and_their_configs_survive_a_restart(tmp_path: Path):
    config = LogConfig(retention_ms=3_600_000, durability=Durability.ALWAYS)
    with LogManager(tmp_path) as manager:
        for partition in range(3):
            log = manager.get_or_create_log("acme.orders", partition, config)
            log.append(make_batch([f"p{partition}".encode()] * (partition + 1)))
        manager.get_or_create_log("acme.events~ppe", 0).append(make_batch([b"lane"]))
    reopened = LogManager(tmp_path)
    reports = reopened.open()
    try:
        assert all(r.clean_shutdown for r in reports)
        assert sorted(reopened.logs()) == [
            TopicPartition("acme.events~ppe", 0),
            TopicPartition("acme.orders", 0),
            TopicPartition("acme.orders", 1),
            TopicPartition("acme.orders", 2),
        ]
        orders_2 = reopened.get_log("acme.orders", 2)
        assert orders_2 is not None
        assert orders_2.config == config
        assert [r.value for r in read_all(orders_2)] == [b"p2"] * 3
    finally:
        reopened.close()


def test_a_data_directory_is_opened_by_one_manager_at_a_time(tmp_path: Path):
    with LogManager(tmp_path), pytest.raises(StorageError, match="in use"):
        LogManager(tmp_path).open()


def test_deleting_a_log_removes_its_directory(tmp_path: Path):
    with LogManager(tmp_path) as manager:
        log = manager.get_or_create_log("t", 0)
        log.append(make_batch([b"x"]))
        assert manager.delete_log("t", 0)
        assert not (tmp_path / "t-0").exists()
        assert not list(tmp_path.glob("*.deleted"))
        assert manager.get_log("t", 0) is None
        assert not manager.delete_log("t", 0)
        assert manager.get_or_create_log("t", 0).log_end_offset == 0


def test_leftover_deleted_directories_are_removed_at_open(tmp_path: Path):
    (tmp_path / "t-0.1234abcd.deleted").mkdir()
    with LogManager(tmp_path) as manager:
        assert not manager.logs()
    assert not (tmp_path / "t-0.1234abcd.deleted").exists()


@pytest.mark.parametrize("name", ["", "a/b", "..", "x" * 250, "sp ace"])
def test_invalid_topic_names_are_refused(tmp_path: Path, name: str):
    with LogManager(tmp_path) as manager, pytest.raises(StorageError):
        manager.get_or_create_log(name, 0)


def test_housekeeping_flushes_interval_logs_and_sealed_segments(tmp_path: Path):
    schedule = ManagerSchedule(flush_check_ms=10, retention_check_ms=60_000)
    manager = LogManager(tmp_path, schedule=schedule)
    manager.open()
    manager.start()
    try:
        interval = manager.get_or_create_log(
            "a", 0, LogConfig(durability=Durability.INTERVAL, flush_interval_ms=50)
        )
        never = manager.get_or_create_log(
            "b", 0, LogConfig(durability=Durability.NEVER, max_segment_bytes=4096)
        )
        interval.append(make_batch([b"x" * 100] * 3))
        for _ in range(20):
            never.append(make_batch([b"y" * 400]))
        assert wait_for(lambda: interval.recovery_point == 3)
        assert wait_for(lambda: never.recovery_point >= never.segments[-1].base_offset)
    finally:
        manager.close()


def test_housekeeping_applies_retention(tmp_path: Path):
    clock = ManualClock()
    schedule = ManagerSchedule(flush_check_ms=10, retention_check_ms=20)
    manager = LogManager(tmp_path, schedule=schedule, clock_ms=clock)
    manager.open()
    config = LogConfig(retention_ms=1_000, max_segment_bytes=4096, durability=Durability.NEVER)
    log = manager.get_or_create_log("t", 0, config)
    for b in range(30):
        log.append(make_batch([b"z" * 300], timestamps=[clock.now_ms + b]))
    clock.advance(5_000)
    manager.start()
    try:
        assert wait_for(lambda: log.log_start_offset == 30)
        assert log.log_end_offset == 30
    finally:
        manager.close()


def test_enforce_retention_counts_deleted_segments(tmp_path: Path):
    clock = ManualClock()
    with LogManager(tmp_path, clock_ms=clock) as manager:
        config = LogConfig(retention_bytes=8_192, max_segment_bytes=4096)
        log = manager.get_or_create_log("t", 0, config)
        for _ in range(40):
            log.append(make_batch([b"q" * 400], timestamps=[clock.now_ms]))
        before = len(log.segments)
        deleted = manager.enforce_retention()
        assert deleted > 0
        assert deleted == before - len(log.segments)
        assert log.size_bytes - log.segments[0].size_bytes < 8_192


def test_closed_manager_refuses_new_logs(tmp_path: Path):
    manager = LogManager(tmp_path)
    manager.open()
    manager.close()
    with pytest.raises(LogClosedError):
        manager.get_or_create_log("t", 0)


def test_unclean_stop_is_recovered_on_next_open(tmp_path: Path):
    manager = LogManager(tmp_path)
    manager.open()
    log = manager.get_or_create_log("t", 0, LogConfig(durability=Durability.NEVER))
    log.append(make_batch([b"kept"] * 4))
    # Simulate a crash: copy the directory as it is now, before any clean close.
    shutil.copytree(tmp_path / "t-0", tmp_path.parent / "copy" / "t-0")
    manager.close()
    crashed = LogManager(tmp_path.parent / "copy")
    reports = crashed.open()
    try:
        assert [r.clean_shutdown for r in reports] == [False]
        recovered = crashed.get_log("t", 0)
        assert recovered is not None
        assert [r.value for r in read_all(recovered)] == [b"kept"] * 4
    finally:
        crashed.close()


def test_a_failing_log_does_not_stop_housekeeping_of_the_others(tmp_path: Path, monkeypatch):
    """An unlink refused by the file system takes that one log offline; the rest go on."""
    clock = ManualClock()
    schedule = ManagerSchedule(flush_check_ms=10, retention_check_ms=20)
    manager = LogManager(tmp_path, schedule=schedule, clock_ms=clock)
    manager.open()
    doomed_config = LogConfig(retention_ms=1_000, max_segment_bytes=4096)
    bad = manager.get_or_create_log("bad", 0, doomed_config)
    for _ in range(20):
        bad.append(make_batch([b"z" * 300], timestamps=[clock.now_ms]))
    good = manager.get_or_create_log(
        "good", 0, LogConfig(durability=Durability.NEVER, max_segment_bytes=4096)
    )
    real_unlink = Path.unlink

    def refuse_in_bad(path: Path, missing_ok: bool = False) -> None:
        if path.parent.name == "bad-0" and path.suffix == ".log":
            raise OSError(30, "Read-only file system", str(path))
        real_unlink(path, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", refuse_in_bad)
    clock.advance(5_000)
    manager.start()
    try:
        assert wait_for(lambda: bad.is_offline)
        for _ in range(20):  # rolls; only housekeeping flushes a `never` log's sealed segments
            good.append(make_batch([b"g" * 400], timestamps=[clock.now_ms]))
        assert good.recovery_point == 0
        assert wait_for(lambda: good.recovery_point >= good.segments[-1].base_offset > 0)
    finally:
        monkeypatch.undo()
        manager.close()


def test_verify_all_finds_damage_at_rest_in_sealed_segments(tmp_path: Path, caplog):
    """A flipped byte in a trusted sealed segment is found by a scrub and logged."""
    with LogManager(tmp_path) as manager:
        for name in ("clean", "damaged"):
            log = manager.get_or_create_log(name, 0, LogConfig(max_segment_bytes=2048))
            for _ in range(20):
                log.append(make_batch([b"s" * 300]))
    sealed = sorted((tmp_path / "damaged-0").glob("*.log"))[0]
    data = bytearray(sealed.read_bytes())
    data[500] ^= 0x40
    sealed.write_bytes(bytes(data))
    with LogManager(tmp_path) as manager:
        assert all(report.clean_shutdown for report in manager.recovery_reports)
        damaged = manager.verify_all()
        assert list(damaged) == [TopicPartition("damaged", 0)]
        (region,) = damaged[TopicPartition("damaged", 0)]
        assert region.segment_base_offset == 0
        assert region.position <= 500 < region.position + region.length
        assert "corrupt data in damaged-0" in caplog.text

"""Lag in time on a real log: the age of the record at a committed offset, checked
against an oracle (offset -> timestamp) for every offset, across segments, compressed
batches and a moved log start."""

from __future__ import annotations

from pathlib import Path

from dataplane.broker.lag import CAUGHT_UP, RecordAge, record_age
from dataplane.records import Compression, Record, build_batch
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.log import PartitionLog

NOW_MS = 1_000_000
BATCHES, PER_BATCH = 20, 5
CODECS = (Compression.NONE, Compression.GZIP)


def _filled_log(directory: Path) -> tuple[PartitionLog, dict[int, int]]:
    """Small segments and a dense index; timestamps out of offset order within a batch."""
    config = LogConfig(max_segment_bytes=1024, index_interval_bytes=64, durability=Durability.NEVER)
    log = PartitionLog.open(directory, config)
    oracle: dict[int, int] = {}
    for b in range(BATCHES):
        base = b * PER_BATCH
        stamps = [500_000 + base * 10 + (PER_BATCH - i) for i in range(PER_BATCH)]
        batch = [Record(base + i, t, None, b"v%d" % (base + i)) for i, t in enumerate(stamps)]
        log.append(build_batch(batch, compression=CODECS[b % 2]))
        oracle.update((base + i, t) for i, t in enumerate(stamps))
    return log, oracle


def test_the_age_is_the_record_at_the_committed_offset(tmp_path: Path) -> None:
    log, oracle = _filled_log(tmp_path / "t-0")
    try:
        assert len(log.segments) > 1
        for committed in range(BATCHES * PER_BATCH + 2):
            expected = (
                RecordAge(oracle[committed], NOW_MS - oracle[committed])
                if committed in oracle
                else CAUGHT_UP
            )
            assert record_age(log, committed, NOW_MS) == expected, committed
    finally:
        log.close()


def test_below_the_log_start_it_is_the_record_at_the_log_start(tmp_path: Path) -> None:
    log, oracle = _filled_log(tmp_path / "t-0")
    try:
        start = log.advance_log_start_offset(37)
        assert record_age(log, 3, NOW_MS).timestamp == oracle[start]
    finally:
        log.close()


def test_a_future_record_is_zero_seconds_old(tmp_path: Path) -> None:
    log, oracle = _filled_log(tmp_path / "t-0")
    try:
        assert record_age(log, 0, now_ms=0) == RecordAge(oracle[0], 0)
    finally:
        log.close()

"""OffsetIndex and TimeIndex: fixed-width, memory-mapped, sparse."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataplane.storage.index import IndexCorruptError, OffsetIndex, TimeIndex


def test_offset_index_lookup_returns_the_last_entry_at_or_below(tmp_path: Path):
    index = OffsetIndex(tmp_path / "a.index", 100, max_index_bytes=1024)
    for offset, position in [(110, 500), (120, 1000), (135, 1700)]:
        index.append(offset, position)
    assert index.lookup(99) == (100, 0)
    assert index.lookup(109) == (100, 0)
    assert index.lookup(110) == (110, 500)
    assert index.lookup(134) == (120, 1000)
    assert index.lookup(10**6) == (135, 1700)
    index.close()


def test_offset_index_entries_are_eight_bytes_relative_to_the_base(tmp_path: Path):
    index = OffsetIndex(tmp_path / "a.index", 1_000, max_index_bytes=1024)
    index.append(1_005, 4_096)
    index.close()
    assert (tmp_path / "a.index").read_bytes() == (5).to_bytes(4, "big") + (4096).to_bytes(4, "big")


def test_offset_index_refuses_entries_that_do_not_increase(tmp_path: Path):
    index = OffsetIndex(tmp_path / "a.index", 0, max_index_bytes=1024)
    index.append(10, 100)
    with pytest.raises(IndexCorruptError):
        index.append(10, 200)
    with pytest.raises(IndexCorruptError):
        index.append(11, 100)
    index.close()


def test_active_index_is_preallocated_and_trimmed_on_close(tmp_path: Path):
    path = tmp_path / "a.index"
    index = OffsetIndex(path, 0, max_index_bytes=800)
    index.append(1, 10)
    assert path.stat().st_size == 800
    index.close()
    assert path.stat().st_size == 8
    reopened = OffsetIndex(path, 0, max_index_bytes=800)
    assert reopened.entries == 1
    assert reopened.lookup(5) == (1, 10)
    reopened.close()


def test_offset_index_truncate_drops_entries_at_or_above(tmp_path: Path):
    index = OffsetIndex(tmp_path / "a.index", 0, max_index_bytes=1024)
    for n in range(1, 6):
        index.append(n * 10, n * 100)
    index.truncate_to(30)
    assert index.entries == 2
    assert index.lookup(1000) == (20, 200)
    index.append(25, 250)
    assert index.lookup(1000) == (25, 250)
    index.close()


def test_index_reports_full_keeping_one_slot_for_sealing(tmp_path: Path):
    index = OffsetIndex(tmp_path / "a.index", 0, max_index_bytes=32)  # 4 entries
    for n in range(3):
        assert not index.is_full
        index.append(n + 1, n + 1)
    assert index.is_full
    index.close()


def test_index_of_impossible_size_is_refused(tmp_path: Path):
    path = tmp_path / "a.index"
    path.write_bytes(b"\x00" * 13)
    with pytest.raises(IndexCorruptError, match="not a multiple"):
        OffsetIndex(path, 0, max_index_bytes=1024)


def test_time_index_keeps_only_increasing_timestamps(tmp_path: Path):
    index = TimeIndex(tmp_path / "a.timeindex", 50, max_index_bytes=1200)
    index.maybe_append(1_000, 50)
    index.maybe_append(1_000, 60)
    index.maybe_append(900, 70)
    index.maybe_append(2_000, 80)
    assert index.entries == 2
    assert index.last_entry == (2_000, 80)
    index.close()


def test_time_index_lookup_before_is_strict(tmp_path: Path):
    index = TimeIndex(tmp_path / "a.timeindex", 0, max_index_bytes=1200)
    for ts, offset in [(100, 0), (200, 10), (300, 20)]:
        index.maybe_append(ts, offset)
    assert index.lookup_before(100) is None
    assert index.lookup_before(101) == (100, 0)
    assert index.lookup_before(300) == (200, 10)
    assert index.lookup_before(10**9) == (300, 20)
    index.truncate_to(20)
    assert index.last_entry == (200, 10)
    index.close()


def test_check_finds_entries_out_of_order(tmp_path: Path):
    path = tmp_path / "a.index"
    index = OffsetIndex(path, 0, max_index_bytes=1024)
    index.append(1, 10)
    index.append(2, 20)
    index.close()
    data = bytearray(path.read_bytes())
    data[8:16] = data[0:8]
    path.write_bytes(bytes(data))
    broken = OffsetIndex(path, 0, max_index_bytes=1024)
    with pytest.raises(IndexCorruptError, match="out of order"):
        broken.check(log_size=100)
    broken.close()

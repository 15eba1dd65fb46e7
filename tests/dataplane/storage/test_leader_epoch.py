"""The leader-epoch cache: lookups, truncation, persistence and rebuilding."""

from __future__ import annotations

from pathlib import Path

from dataplane.records import build_batch, read_header
from dataplane.storage.leader_epoch import CHECKPOINT_FILE, LeaderEpochCache


def test_end_offsets_follow_the_next_epochs_start(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    assert cache.end_offset_for(0, 10) == (-1, -1)
    assert cache.assign(2, 0)
    assert cache.assign(4, 5)
    assert not cache.assign(3, 7)  # older than the latest: ignored
    assert cache.end_offset_for(1, 9) == (-1, -1)
    assert cache.end_offset_for(2, 9) == (2, 5)
    assert cache.end_offset_for(3, 9) == (2, 5)
    assert cache.end_offset_for(4, 9) == (4, 9)
    assert cache.end_offset_for(7, 9) == (4, 9)
    assert cache.start_offset_of(4) == 5
    assert cache.latest_epoch() == 4


def test_truncation_and_a_new_epoch_at_a_lower_offset_drop_later_entries(
    tmp_path: Path,
) -> None:
    cache = LeaderEpochCache(tmp_path, [(1, 0), (2, 4), (3, 8)])
    cache.truncate_from_end(5)
    assert cache.entries == [(1, 0), (2, 4)]
    cache.assign(5, 3)
    assert cache.entries == [(1, 0), (5, 3)]
    cache.clear()
    assert cache.entries == []


def test_the_cache_is_persisted_and_rebuilt_from_batch_headers(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    cache.assign(1, 0)
    cache.assign(3, 6)
    assert LeaderEpochCache.load(tmp_path).entries == [(1, 0), (3, 6)]
    (tmp_path / CHECKPOINT_FILE).write_text("garbage")
    batches = []
    for base, epoch in ((0, 1), (2, 1), (6, 3), (8, 3)):
        header = read_header(build_batch([b"x", b"y"], partition_leader_epoch=epoch))
        batches.append((base, header))
    rebuilt = LeaderEpochCache.load(tmp_path, batches)
    assert rebuilt.entries == [(1, 0), (3, 6)]
    assert LeaderEpochCache.load(tmp_path).entries == [(1, 0), (3, 6)]

"""The file cache keeps its own record of each segment (its ``Pin``) and drives the
segment only through the segment's hooks: real segments on a real file system, each test
with a cache of its own so the process-wide one is left alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataplane.storage.config import LogConfig
from dataplane.storage.filecache import MIN_OPEN_FILES, SegmentFileCache
from dataplane.storage.segment import LogSegment


def cached_segment(directory: Path, cache: SegmentFileCache) -> LogSegment:
    """An empty segment on disk, opened through ``cache``."""
    LogSegment.create(directory, 0, LogConfig()).close()
    return LogSegment(directory, 0, LogConfig(), cache=cache)


def test_the_pin_records_what_the_cache_counts(tmp_path: Path) -> None:
    cache = SegmentFileCache(MIN_OPEN_FILES)
    segment = cached_segment(tmp_path, cache)
    pin = segment.pin()
    assert not segment.is_open, "constructing opens nothing"
    assert pin.pins == 0
    with pin:
        with pin:
            assert pin.pins == 2
        assert segment.is_open
        assert pin.open_fds == cache.open_files >= 1
    assert pin.pins == 0
    assert segment.is_open, "unpinned, it stays open until the cache needs the room"
    assert cache.close_idle(0) == 1
    assert not segment.is_open
    assert pin.open_fds == cache.open_files == 0


def test_a_segment_deleted_while_pinned_closes_at_the_last_unpin(tmp_path: Path) -> None:
    cache = SegmentFileCache(MIN_OPEN_FILES)
    segment = cached_segment(tmp_path, cache)
    with segment.pin():
        segment.delete()
        assert segment.pin().closed_for_good
        assert segment.pin().deleted
        assert segment.is_open, "a read holding the pin keeps its descriptors"
        assert not segment.log_path.exists()
    assert not segment.is_open, "the last unpin closes it"
    assert cache.open_files == 0
    with pytest.raises(FileNotFoundError), segment.pin():
        pass


def test_a_closed_segment_is_retired_not_deleted(tmp_path: Path) -> None:
    cache = SegmentFileCache(MIN_OPEN_FILES)
    segment = cached_segment(tmp_path, cache)
    with segment.pin():
        pass
    segment.close()
    pin = segment.pin()
    assert pin.closed_for_good
    assert not pin.deleted
    assert not segment.is_open
    assert cache.open_files == 0
    assert segment.log_path.exists()
    assert segment.offset_index.path.exists()
    with pytest.raises(FileNotFoundError), pin:
        pass

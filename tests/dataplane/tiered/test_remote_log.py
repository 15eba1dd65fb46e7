"""RemoteLogReader: reads below the local log, from segments in a folder and on S3,
checked against the records appended (the oracle)."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

from dataplane import records
from dataplane.records import Record
from dataplane.storage.errors import OffsetOutOfRangeError
from dataplane.tiered.errors import RemoteSegmentCorruptError, RemoteSegmentMissingError
from dataplane.tiered.layout import Manifest, RemoteSegment
from dataplane.tiered.remote_log import RemoteLogReader
from dataplane.tiered.store import ObjectStore

from .support import (
    PARTITION,
    TOPIC,
    TOPIC_ID,
    batch_bounds,
    decode,
    make_batches,
    mixed_manifest,
    tiered_partition,
)

APPENDED = make_batches(160)


@pytest.fixture
def manifest(store: ObjectStore, tmp_path: Path) -> Manifest:
    return tiered_partition(store, tmp_path / "log", APPENDED)


def read_all(reader: RemoteLogReader, manifest: Manifest, max_bytes: int) -> list[Record]:
    """Every record from the log start on, read after read; each read within one segment."""
    offset, out = manifest.log_start_offset, []
    while offset < manifest.end_offset:
        segment = manifest.segment_for(offset)
        assert segment is not None
        result = reader.read(manifest, offset, max_bytes)
        for base, last, _ in batch_bounds(result.data):
            assert last >= segment.start_offset
            assert base < segment.end_offset
        assert result.next_offset > offset
        out += [r for r in decode(result.data) if r.offset >= offset]
        offset = result.next_offset
    return out


def log_key(segment: RemoteSegment, kind: str = "log") -> str:
    return segment.key(TOPIC, TOPIC_ID, PARTITION, kind)


def test_reads_the_whole_partition_across_segments(store: ObjectStore, manifest: Manifest) -> None:
    assert len(manifest.segments) > 20
    reader = RemoteLogReader(store, cache_bytes=1 << 20, chunk_bytes=1024)
    assert read_all(reader, manifest, 1500) == APPENDED.between(0, manifest.end_offset)
    assert manifest.end_offset == len(APPENDED.records)


def test_a_read_at_every_offset_starts_with_the_batch_holding_it(
    store: ObjectStore, manifest: Manifest
) -> None:
    reader = RemoteLogReader(store, cache_bytes=1 << 20, chunk_bytes=700)
    for offset in range(manifest.log_start_offset, manifest.end_offset):
        result = reader.read(manifest, offset, 1)
        [(base, last, _)] = batch_bounds(result.data)
        assert base <= offset <= last
        assert result.next_offset == last + 1
        assert decode(result.data) == APPENDED.between(base, last + 1)


@pytest.mark.parametrize("max_bytes", [0, 150, 700, 2500, 1 << 20])
def test_a_read_returns_whole_batches_within_max_bytes(
    store: ObjectStore, manifest: Manifest, max_bytes: int
) -> None:
    """The first batch comes whole whatever the budget; more come while they fit, up to
    the end of the segment."""
    reader = RemoteLogReader(store, cache_bytes=1 << 20, chunk_bytes=1024)
    sizes = _sizes_by_offset(reader, manifest)
    offset = 0
    while offset < manifest.end_offset:
        segment = manifest.segment_for(offset)
        assert segment is not None
        result = reader.read(manifest, offset, max_bytes)
        bounds = batch_bounds(result.data)
        assert len(result.data) <= max(max_bytes, bounds[0][2])
        if result.next_offset < segment.end_offset:  # the budget stopped it
            assert len(result.data) + sizes[result.next_offset] > max_bytes
        offset = result.next_offset


def _sizes_by_offset(reader: RemoteLogReader, manifest: Manifest) -> dict[int, int]:
    """Each batch's size by its base offset."""
    sizes, offset = {}, 0
    while offset < manifest.end_offset:
        result = reader.read(manifest, offset, 1)
        [(base, last, size)] = batch_bounds(result.data)
        sizes[base], offset = size, last + 1
    return sizes


def test_out_of_range_offsets(store: ObjectStore, manifest: Manifest) -> None:
    start = manifest.segments[0].end_offset + 1
    trimmed = dataclasses.replace(manifest, log_start_offset=start, segments=manifest.segments[1:])
    reader = RemoteLogReader(store, cache_bytes=1 << 20)
    with pytest.raises(OffsetOutOfRangeError) as raised:
        reader.read(trimmed, start - 1, 100)
    assert (raised.value.log_start_offset, raised.value.log_end_offset) == (
        start,
        manifest.end_offset,
    )
    with pytest.raises(OffsetOutOfRangeError):
        reader.read(manifest, manifest.end_offset + 1, 100)
    at_end = reader.read(manifest, manifest.end_offset, 100)
    assert (at_end.data, at_end.next_offset) == (b"", manifest.end_offset)


def test_segments_cut_at_other_offsets_and_gaps(store: ObjectStore, tmp_path: Path) -> None:
    manifest, gap = mixed_manifest(store, tmp_path, APPENDED)
    joined = next(s for s in manifest.segments if s.start_offset > s.base_offset)
    reader = RemoteLogReader(store, cache_bytes=1 << 20, chunk_bytes=1024)
    expected = [r for r in APPENDED.between(0, manifest.end_offset) if r.offset not in gap]
    assert read_all(reader, manifest, 3000) == expected
    # Each offset has one source: the joined segment's batches below its start never come.
    result = reader.read(manifest, joined.start_offset, 1 << 20)
    assert batch_bounds(result.data)[0][0] == joined.start_offset
    assert result.next_offset == joined.end_offset
    # An offset in the gap reads from the next segment's start.
    result = reader.read(manifest, gap.start + 1, 1)
    assert batch_bounds(result.data)[0][0] == gap.stop


def test_the_cache_is_bounded_and_counts_hits(store: ObjectStore, manifest: Manifest) -> None:
    reader = RemoteLogReader(store, cache_bytes=8 * 1024, chunk_bytes=1024)
    assert read_all(reader, manifest, 1500) == APPENDED.between(0, manifest.end_offset)
    stats = reader.stats()
    assert stats.size_bytes <= 8 * 1024
    assert stats.capacity_bytes == 8 * 1024
    assert stats.misses > 0
    assert stats.evictions > 0
    assert stats.hits > 0
    first = reader.read(manifest, 100, 500)
    before = reader.stats()
    again = reader.read(manifest, 100, 500)
    after = reader.stats()
    assert again == first
    assert after.misses == before.misses
    assert after.hits > before.hits
    assert 0 < after.hit_rate < 1


def test_without_a_cache_reads_still_work(store: ObjectStore, manifest: Manifest) -> None:
    reader = RemoteLogReader(store, cache_bytes=0, chunk_bytes=512)
    assert read_all(reader, manifest, 2000) == APPENDED.between(0, manifest.end_offset)
    assert reader.stats().entries == 0


def test_concurrent_readers_share_one_reader(store: ObjectStore, manifest: Manifest) -> None:
    reader = RemoteLogReader(store, cache_bytes=16 * 1024, chunk_bytes=1024)
    results: list[list[Record]] = []
    failures: list[BaseException] = []

    def run(max_bytes: int) -> None:
        try:
            results.append(read_all(reader, manifest, max_bytes))
        except BaseException as exc:  # reported by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(500 * (n + 1),)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert results == [APPENDED.between(0, manifest.end_offset)] * 4


def _batch_positions(data: bytes) -> list[tuple[int, records.BatchHeader]]:
    return list(records.iter_batches(data))


def _damage(store: ObjectStore, key: str, position: int) -> None:
    data = bytearray(store.get(key))
    data[position] ^= 0x40
    store.put_bytes(key, bytes(data))


def test_a_damaged_record_byte_raises_corrupt_never_data(
    store: ObjectStore, manifest: Manifest
) -> None:
    segment = manifest.segments[3]
    key = log_key(segment)
    batches = _batch_positions(store.get(key))
    assert len(batches) >= 3
    position, damaged = batches[1]
    _damage(store, key, position + damaged.size - 2)
    reader = RemoteLogReader(store, cache_bytes=1 << 20, chunk_bytes=1024)
    for offset in range(damaged.base_offset, damaged.next_offset):
        with pytest.raises(RemoteSegmentCorruptError) as raised:
            reader.read(manifest, offset, 1 << 20)
        assert (raised.value.topic, raised.value.partition, raised.value.key) == (
            TOPIC,
            PARTITION,
            key,
        )
        assert raised.value.offset == damaged.base_offset
    # A read that reaches the damaged batch ends before it.
    before = reader.read(manifest, segment.base_offset, 1 << 20)
    assert before.next_offset == damaged.base_offset
    assert decode(before.data) == APPENDED.between(segment.base_offset, damaged.base_offset)


def test_a_damaged_base_offset_raises_corrupt(store: ObjectStore, manifest: Manifest) -> None:
    """The base offset lies outside the batch CRC: the walk's offset check catches it."""
    segment = manifest.segments[5]
    key = log_key(segment)
    position, damaged = _batch_positions(store.get(key))[2]
    _damage(store, key, position + 7)
    reader = RemoteLogReader(store, cache_bytes=1 << 20)
    with pytest.raises(RemoteSegmentCorruptError):
        reader.read(manifest, damaged.base_offset, 1)
    with pytest.raises(RemoteSegmentCorruptError):
        reader.read(manifest, damaged.last_offset, 1)


def test_a_damaged_index_raises_corrupt(store: ObjectStore, manifest: Manifest) -> None:
    segment = next(s for s in manifest.segments if s.files["index"][0] >= 16)
    _damage(store, log_key(segment, "index"), 5)
    reader = RemoteLogReader(store, cache_bytes=1 << 20)
    with pytest.raises(RemoteSegmentCorruptError) as raised:
        reader.read(manifest, segment.end_offset - 1, 1)
    assert raised.value.key == log_key(segment, "index")


def test_a_log_object_shorter_than_listed_raises_corrupt(
    store: ObjectStore, manifest: Manifest
) -> None:
    segment = manifest.segments[2]
    key = log_key(segment)
    store.put_bytes(key, store.get(key)[:-30])
    reader = RemoteLogReader(store, cache_bytes=1 << 20, chunk_bytes=1 << 20)
    with pytest.raises(RemoteSegmentCorruptError):
        reader.read(manifest, segment.end_offset - 1, 1)


def test_deleted_objects_raise_missing(store: ObjectStore, manifest: Manifest) -> None:
    reader = RemoteLogReader(store, cache_bytes=1 << 20)
    for kind, segment in (("log", manifest.segments[2]), ("index", manifest.segments[4])):
        store.delete([log_key(segment, kind)])
        with pytest.raises(RemoteSegmentMissingError) as raised:
            reader.read(manifest, segment.start_offset + 1, 100)
        assert raised.value.key == log_key(segment, kind)
        assert raised.value.offset == segment.start_offset + 1
    store.delete([log_key(manifest.segments[6], "timeindex")])
    with pytest.raises(RemoteSegmentMissingError):
        reader.offset_for_timestamp(manifest, manifest.segments[6].max_timestamp)


def test_offset_for_timestamp_matches_the_oracle(store: ObjectStore, manifest: Manifest) -> None:
    reader = RemoteLogReader(store, cache_bytes=1 << 20, chunk_bytes=1024)
    stamps = sorted({r.timestamp for r in APPENDED.records.values()})
    probes = [stamps[0] - 1, *stamps[::7], stamps[-1], stamps[-1] + 1]
    for timestamp in probes:
        assert reader.offset_for_timestamp(manifest, timestamp) == APPENDED.first_at_or_after(
            timestamp, 0
        ), timestamp
    start = manifest.segments[2].start_offset + 3
    trimmed = dataclasses.replace(manifest, log_start_offset=start, segments=manifest.segments[2:])
    for timestamp in probes:
        assert reader.offset_for_timestamp(trimmed, timestamp) == APPENDED.first_at_or_after(
            timestamp, start
        ), timestamp


def test_a_segment_ending_inside_a_batch_is_corrupt(store: ObjectStore, manifest: Manifest) -> None:
    """No batch holding offsets at or past a segment's end is returned."""
    last = manifest.segments[-1]
    batches = _batch_positions(store.get(log_key(last)))
    crossing = next(h for _, h in batches[1:] if h.record_count > 1)
    cut = dataclasses.replace(last, end_offset=crossing.base_offset + 1)
    shortened = dataclasses.replace(
        manifest, end_offset=cut.end_offset, segments=(*manifest.segments[:-1], cut)
    )
    reader = RemoteLogReader(store, cache_bytes=1 << 20)
    with pytest.raises(RemoteSegmentCorruptError):
        reader.read(shortened, crossing.base_offset, 1 << 20)
    before = reader.read(shortened, last.start_offset, 1 << 20)
    assert before.next_offset == crossing.base_offset

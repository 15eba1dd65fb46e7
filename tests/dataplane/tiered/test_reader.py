"""TopicStoreReader: topics, partitions, manifests and records read from the store alone
(a folder and S3), checked against the records appended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dataplane.tiered import layout
from dataplane.tiered.errors import RemoteSegmentCorruptError, RemoteSegmentMissingError
from dataplane.tiered.layout import Manifest
from dataplane.tiered.reader import TopicNotInStoreError, TopicStoreReader
from dataplane.tiered.store import ObjectStore

from .support import PARTITION, TOPIC, TOPIC_ID, make_batches, mixed_manifest, tiered_partition

APPENDED = make_batches(120)
OTHER = make_batches(40, seed=11)


@pytest.fixture
def manifest(store: ObjectStore, tmp_path: Path) -> Manifest:
    return tiered_partition(store, tmp_path / "log", APPENDED)


@pytest.fixture
def reader(store_location: tuple[str, dict[str, Any]], manifest: Manifest) -> TopicStoreReader:
    uri, options = store_location
    return TopicStoreReader(uri, options)


def test_lists_live_topics_and_their_partitions(
    store: ObjectStore, tmp_path: Path, reader: TopicStoreReader
) -> None:
    tiered_partition(store, tmp_path / "p1", OTHER, partition=1)
    tiered_partition(store, tmp_path / "audit", OTHER, topic="acme.audit", topic_id="")
    tiered_partition(store, tmp_path / "gone", OTHER, topic="acme.gone", topic_id="7")
    store.put_bytes(f"{layout.topic_prefix('acme.gone', '7')}/{layout.DELETED_MARKER}", b"")
    assert reader.topics() == ["acme.audit", TOPIC]
    assert reader.partitions(TOPIC) == [0, 1]
    assert reader.partitions("acme.audit") == [0]
    assert reader.topic_id("acme.audit") == ""
    assert list(reader.records("acme.audit", 0)) == OTHER.between(0, len(OTHER.records))
    with pytest.raises(TopicNotInStoreError):
        reader.partitions("acme.gone")


def test_manifest_and_segments_are_the_committed_ones(
    reader: TopicStoreReader, manifest: Manifest
) -> None:
    assert reader.manifest(TOPIC, PARTITION) == manifest
    assert reader.segments(TOPIC, PARTITION) == manifest.segments
    assert reader.manifest(TOPIC, 9).is_empty
    assert list(reader.records(TOPIC, 9)) == []


def test_reads_every_record_exactly(reader: TopicStoreReader, manifest: Manifest) -> None:
    assert list(reader.records(TOPIC, PARTITION)) == APPENDED.between(0, manifest.end_offset)


@pytest.mark.parametrize(("start", "end"), [(0, 1), (37, 412), (5, None), (None, 100), (300, 300)])
def test_reads_a_range_of_offsets(
    reader: TopicStoreReader, manifest: Manifest, start: int | None, end: int | None
) -> None:
    expected = APPENDED.between(start or 0, manifest.end_offset if end is None else end)
    assert list(reader.records(TOPIC, PARTITION, start, end)) == expected


def test_each_offset_comes_once_from_segments_cut_at_other_offsets(
    store: ObjectStore, tmp_path: Path, store_location: tuple[str, dict[str, Any]]
) -> None:
    manifest, gap = mixed_manifest(store, tmp_path, APPENDED)
    reader = TopicStoreReader(*store_location)
    expected = [r for r in APPENDED.between(0, manifest.end_offset) if r.offset not in gap]
    assert list(reader.records(TOPIC, PARTITION)) == expected
    assert list(reader.records(TOPIC, PARTITION, gap.start + 1, gap.stop + 2)) == (
        APPENDED.between(gap.stop, gap.stop + 2)
    )


def test_a_damaged_log_object_raises_corrupt(
    store: ObjectStore, reader: TopicStoreReader, manifest: Manifest
) -> None:
    segment = manifest.segments[4]
    key = segment.key(TOPIC, TOPIC_ID, PARTITION, "log")
    data = bytearray(store.get(key))
    data[-3] ^= 0x01  # in the last batch's records
    store.put_bytes(key, bytes(data))
    with pytest.raises(RemoteSegmentCorruptError) as raised:
        list(reader.records(TOPIC, PARTITION))  # read whole: the manifest's CRC-32C fails
    assert raised.value.key == key
    read = list(reader.records(TOPIC, PARTITION, 0, segment.start_offset))
    assert read == APPENDED.between(0, segment.start_offset)
    with pytest.raises(RemoteSegmentCorruptError):  # read from inside: the batch CRC fails
        list(reader.records(TOPIC, PARTITION, segment.start_offset + 1, segment.end_offset))


def test_a_deleted_log_object_raises_missing(
    store: ObjectStore, reader: TopicStoreReader, manifest: Manifest
) -> None:
    segment = manifest.segments[2]
    store.delete([segment.key(TOPIC, TOPIC_ID, PARTITION, "log")])
    with pytest.raises(RemoteSegmentMissingError):
        list(reader.records(TOPIC, PARTITION))

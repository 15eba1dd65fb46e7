"""A manifest of 10,000 segments: committed, read back whole, and ``segment_for``
answers for offsets across it (an oracle walks the segments in order)."""

from __future__ import annotations

from dataplane.tiered import manifests
from dataplane.tiered.layout import Manifest, RemoteSegment
from dataplane.tiered.store import ObjectStore

from .support import PARTITION, TOPIC, TOPIC_ID

SEGMENTS = 10_000


def synthetic_manifest() -> Manifest:
    """Segments of about 100 offsets, some starting above their base, every 50th after
    a gap."""
    segments, end = [], 1_000
    for n in range(SEGMENTS):
        base = end + (25 if n % 50 == 49 else 0)
        end = base + 100 + n % 7
        segments.append(
            RemoteSegment(
                id=f"{n:016x}",
                base_offset=base - n % 3,
                start_offset=base,
                end_offset=end,
                size_bytes=1 << 20,
                first_timestamp=n * 1000,
                max_timestamp=n * 1000 + 999,
                leader_epoch=n // 1000,
                uploaded_at_ms=n,
                files={"log": (1 << 20, n), "index": (800, n + 1), "timeindex": (1200, n + 2)},
            )
        )
    return Manifest(TOPIC, PARTITION, TOPIC_ID).next_version(
        segments, broker_id=1, leader_epoch=9, now_ms=1
    )


def test_a_manifest_of_ten_thousand_segments(store: ObjectStore) -> None:
    manifest = synthetic_manifest()
    assert manifests.commit(store, manifest)
    read = manifests.latest(store, TOPIC, TOPIC_ID, PARTITION)
    assert read == manifest
    assert len(read.segments) == SEGMENTS
    at = 0  # the oracle: the first segment ending after the offset
    for offset in range(read.log_start_offset, read.end_offset, 7):
        while read.segments[at].end_offset <= offset:
            at += 1
        assert read.segment_for(offset) == read.segments[at]
    assert read.segment_for(read.log_start_offset - 1) is None
    assert read.segment_for(read.end_offset) is None

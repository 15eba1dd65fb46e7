"""What a job reads: the sealed segments in the store past what its manifest covers, cut
into chunks; one home for the export's and the index's planning.

A chunk is an offset range ``[start, end)`` of one partition of one topic inside one
remote segment, its bounds the segment's bounds and the multiples of ``CHUNK_OFFSETS``
between them. The plan is a pure function of the store's partition manifests and the
covered ends, so a run planned again over the same store (after a crash) cuts the same
chunks, and the files named after them are the same files.

Only sealed segments are read (the store holds nothing else): the unsealed tail of a
partition waits for the next run. Offsets in no listed segment (removed by retention
before a run read them, or a hole in the remote log) are passed over and counted as
``skipped``.

Thread safety: pure functions; chunks are immutable and picklable (they travel to
Spark's workers).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa

from dataplane.tiered.layout import Manifest, RemoteSegment
from dataplane.tiered.reader import TopicNotInStoreError, TopicStoreReader
from lanes.names import split_topic
from spark.columns import SCHEMA, segment_batches

CHUNK_OFFSETS: Final = 262_144


@dataclass(frozen=True)
class Chunk:
    topic: str
    partition: int
    start: int
    end: int
    topic_id: str
    log_start_offset: int
    segment: dict[str, Any]  # the RemoteSegment's JSON, so a task reads without a manifest

    @property
    def key(self) -> str:
        return partition_key(self.topic, self.partition)

    @property
    def name(self) -> str:
        """The stem of the files made from this chunk: ``<topic>-<partition>-<start>-<end>``."""
        return f"{self.topic}-{self.partition}-{self.start:020d}-{self.end:020d}"

    def remote_segment(self) -> RemoteSegment:
        return RemoteSegment.from_json(self.segment)

    def manifest(self) -> Manifest:
        """A manifest listing just this chunk's segment (what the reader needs)."""
        segment = self.remote_segment()
        return Manifest(
            topic=self.topic,
            partition=self.partition,
            topic_id=self.topic_id,
            log_start_offset=self.log_start_offset,
            end_offset=segment.end_offset,
            segments=(segment,),
        )


@dataclass(frozen=True)
class Plan:
    chunks: list[Chunk]
    covered: dict[str, int]  # the covered ends once every chunk is done
    skipped: dict[str, int] = field(default_factory=dict)


def partition_key(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


def source_topics(reader: TopicStoreReader, topic: str, include_lanes: bool) -> list[str]:
    """``topic`` and, with ``include_lanes``, its lane topics the store holds."""
    if not include_lanes:
        return [topic]
    lanes = [name for name in reader.topics() if name != topic and split_topic(name)[0] == topic]
    return [topic, *sorted(lanes)]


def plan(
    reader: TopicStoreReader,
    topics: list[str],
    covered: dict[str, int],
    chunk_offsets: int = CHUNK_OFFSETS,
) -> Plan:
    """The chunks past ``covered`` of every partition of ``topics`` (a topic the store
    does not hold yet has none)."""
    chunks: list[Chunk] = []
    ends: dict[str, int] = {}
    skipped: dict[str, int] = {}
    for topic in topics:
        try:
            partitions = reader.partitions(topic)
        except TopicNotInStoreError:
            continue
        for partition in sorted(partitions):
            manifest = reader.manifest(topic, partition)
            key = partition_key(topic, partition)
            found, end, gap = _partition_chunks(manifest, covered.get(key, 0), chunk_offsets)
            chunks.extend(found)
            if end != covered.get(key, 0) or key not in covered:
                ends[key] = end
            if gap:
                skipped[key] = gap
    return Plan(chunks, ends, skipped)


def _partition_chunks(
    manifest: Manifest, position: int, chunk_offsets: int
) -> tuple[list[Chunk], int, int]:
    """(chunks past ``position``, the new covered end, offsets passed over)."""
    chunks, skipped = [], 0
    for segment in manifest.segments:
        start = max(segment.start_offset, manifest.log_start_offset, position)
        if segment.end_offset <= start:
            continue
        skipped += start - position
        for low, high in _cuts(start, segment.end_offset, chunk_offsets):
            chunks.append(
                Chunk(
                    topic=manifest.topic,
                    partition=manifest.partition,
                    start=low,
                    end=high,
                    topic_id=manifest.topic_id,
                    log_start_offset=manifest.log_start_offset,
                    segment=segment.to_json(),
                )
            )
        position = segment.end_offset
    return chunks, position, skipped


def _cuts(start: int, end: int, every: int) -> Iterator[tuple[int, int]]:
    """``[start, end)`` cut at the multiples of ``every`` inside it."""
    low = start
    while low < end:
        high = min(end, (low // every + 1) * every)
        yield low, high
        low = high


def chunk_table(reader: TopicStoreReader, chunk: Chunk) -> pa.Table:
    """The chunk's user records (control batches skipped), as a table of ``SCHEMA``."""
    manifest = chunk.manifest()
    batches = list(
        segment_batches(
            reader,
            chunk.topic,
            chunk.partition,
            manifest,
            manifest.segments[0],
            chunk.start,
            chunk.end,
        )
    )
    return pa.Table.from_batches(batches, schema=SCHEMA)

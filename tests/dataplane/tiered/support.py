"""Helpers for tiered-storage tests: partition logs with many sealed segments, their
segments uploaded and listed in a manifest, and the oracle of what was appended."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from pathlib import Path

from dataplane import records
from dataplane.records import BatchBuilder, Compression, Header, Record
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.log import PartitionLog
from dataplane.tiered import manifests
from dataplane.tiered.layout import Manifest, RemoteSegment
from dataplane.tiered.store import ObjectStore
from dataplane.tiered.upload import upload_segment

TOPIC = "acme.orders"
TOPIC_ID = "42"
PARTITION = 0


def log_config(max_segment_bytes: int = 4096) -> LogConfig:
    """Small segments and dense indexes, so a few hundred batches make many segments."""
    return LogConfig(
        max_segment_bytes=max_segment_bytes,
        index_interval_bytes=256,
        durability=Durability.NEVER,
        retention_ms=-1,
    )


@dataclass
class Appended:
    """What was appended: every record by offset, and every batch's bytes."""

    records: dict[int, Record] = field(default_factory=dict)
    batches: list[bytes] = field(default_factory=list)

    def between(self, start: int, end: int) -> list[Record]:
        return [self.records[o] for o in range(start, end) if o in self.records]

    def first_at_or_after(self, timestamp: int, start: int) -> int | None:
        hits = [o for o, r in self.records.items() if o >= start and r.timestamp >= timestamp]
        return min(hits) if hits else None


def make_batches(count: int, seed: int = 7) -> Appended:
    """``count`` batches of 1-6 records: keys, values of 0-300 bytes (some null), a few
    headers, timestamps rising with some jitter inside a batch, every 5th batch gzip."""
    rng = random.Random(seed)
    appended = Appended()
    offset, clock = 0, 1_700_000_000_000
    for n in range(count):
        compression = Compression.GZIP if n % 5 == 4 else Compression.NONE
        builder = BatchBuilder(compression=compression)
        for _ in range(rng.randint(1, 6)):
            clock += rng.randint(0, 40)
            timestamp = clock - rng.randint(0, 30)
            key = f"key-{offset}".encode() if rng.random() < 0.8 else None
            value = rng.randbytes(rng.randint(0, 300)) if rng.random() < 0.95 else None
            headers = (Header("trace", f"t{offset}".encode()),) if rng.random() < 0.3 else ()
            builder.append(value, key=key, timestamp=timestamp, headers=headers)
            appended.records[offset] = Record(offset, timestamp, key, value, headers)
            offset += 1
        appended.batches.append(builder.build())
    return appended


def fill_log(directory: Path, appended: Appended, max_segment_bytes: int = 4096) -> PartitionLog:
    """A log of ``appended``'s batches, rolled so every segment is sealed."""
    log = PartitionLog.open(directory, log_config(max_segment_bytes))
    for batch in appended.batches:
        log.append(batch)
    log.roll()
    return log


def upload_log(
    store: ObjectStore,
    log: PartitionLog,
    *,
    topic: str = TOPIC,
    topic_id: str = TOPIC_ID,
    partition: int = PARTITION,
) -> list[RemoteSegment]:
    """Every sealed segment of ``log``, uploaded (``dataplane.tiered.upload``)."""
    return [
        upload_segment(
            store,
            topic,
            topic_id,
            partition,
            segment,
            start_offset=segment.base_offset,
            sidecars={},
            now_ms=1_700_000_000_000,
        )
        for segment in log.segments
        if segment.sealed and not segment.is_empty
    ]


def commit(
    store: ObjectStore,
    segments: list[RemoteSegment],
    *,
    topic: str = TOPIC,
    topic_id: str = TOPIC_ID,
    partition: int = PARTITION,
) -> Manifest:
    """Commit the next manifest version listing ``segments``."""
    latest = manifests.latest(store, topic, topic_id, partition)
    manifest = latest.next_version(segments, broker_id=1, leader_epoch=0, now_ms=1_700_000_000_000)
    assert manifests.commit(store, manifest)
    return manifest


def tiered_partition(
    store: ObjectStore, directory: Path, appended: Appended, **where: str | int
) -> Manifest:
    """``appended`` written to a log in ``directory``, every segment uploaded, committed."""
    log = fill_log(directory, appended)
    try:
        return commit(store, upload_log(store, log, **where), **where)  # type: ignore[arg-type]
    finally:
        log.close()


def mixed_manifest(
    store: ObjectStore, tmp_path: Path, appended: Appended
) -> tuple[Manifest, range]:
    """A manifest as two replicas that cut segments at other offsets leave it, with a gap.

    Replica A's segments serve the offsets up to one of its boundaries X; replica B's
    segment holding X (based below it) serves from X, so its batches below X are not its
    to serve; then B's segments follow, one of them missing (a gap). Returns the
    manifest and the offsets of the gap.
    """
    log_a = fill_log(tmp_path / "a", appended, max_segment_bytes=4096)
    log_b = fill_log(tmp_path / "b", appended, max_segment_bytes=6100)
    try:
        ours, theirs = upload_log(store, log_a), upload_log(store, log_b)
    finally:
        log_a.close()
        log_b.close()
    k, j = next(
        (k, j)
        for k in range(5, len(ours))
        for j, b in enumerate(theirs)
        if b.base_offset < ours[k].base_offset < b.end_offset
    )
    joined = dataclasses.replace(theirs[j], start_offset=ours[k].base_offset)
    gap = theirs[j + 3]
    listed = [*ours[:k], joined, *theirs[j + 1 : j + 3], *theirs[j + 4 :]]
    return commit(store, listed), range(gap.start_offset, gap.end_offset)


def decode(data: bytes) -> list[Record]:
    return records.decode_batches(data)


def batch_bounds(data: bytes) -> list[tuple[int, int, int]]:
    """(base offset, last offset, size) of each batch in ``data``."""
    return [
        (header.base_offset, header.last_offset, header.size)
        for _, header in records.iter_batches(data)
    ]

"""Reading a topic from the object store alone: no broker, no control plane.

``TopicStoreReader(uri, options)`` opens the store a cluster tiers to (the URI and the
filesystem options it is configured with) and reads what ``layout.py`` specifies:
``topics()`` (names with a live incarnation), ``partitions(topic)``, the latest
``manifest`` of a partition, its ``segments``, and its decoded ``records`` (offset,
timestamp, key, value, headers: ``dataplane.records.Record``) in offset order. A batch
reader such as a Spark data source builds on it, one task per segment
(``segment_records``, or ``segment_columns``: the same records as columns in Arrow's
buffer layout, ``records.decode_columns``, with no object per record).

Records are decoded by the project's decoder (``records.decode_batch``) from batches
that passed the checks of ``segment_objects``: a segment read from its start is fetched
whole and must match the size and CRC-32C its manifest lists; one read from an offset
inside it is fetched from the position its ``.index`` gives; either way every batch is
validated (CRC included) and its offsets continue densely. Each segment contributes the
records of ``[start_offset, end_offset)`` it serves, so no offset comes twice. Records
of aborted transactions (and rolled-back half messages) are left out, as a
read_committed consumer leaves them out (the segment's list of them,
``segment_objects.aborted_transactions``); control batches reach ``segment_batches``'
caller, which skips them as consumers do, and never ``records`` nor
``segment_columns``. Failures:
``TopicNotInStoreError``, ``RemoteSegmentMissingError``, ``RemoteSegmentCorruptError``,
``layout.ManifestError`` and the store's ``RemoteStoreUnavailableError``.

The topic's incarnation and the manifest are read afresh on every call (the store is
the truth and changes under a running cluster); a caller wanting one consistent view
takes a ``manifest`` once and reads its segments with ``segment_records``.

Memory: one segment's ``.log`` object (or its tail) at a time.
Thread safety: any number of threads may call any method.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dataplane import records
from dataplane.records import Columns, Record
from dataplane.records.errors import CorruptBatchError
from dataplane.records.header import BatchHeader
from dataplane.tiered import manifests, segment_objects
from dataplane.tiered.layout import Manifest, RemoteSegment
from dataplane.tiered.segment_objects import SegmentObjects
from dataplane.tiered.store import ObjectStore


class TopicNotInStoreError(LookupError):
    """The store holds no live incarnation of the topic."""

    def __init__(self, topic: str, uri: str) -> None:
        super().__init__(f"{uri} holds no topic {topic!r}")
        self.topic = topic


class TopicStoreReader:
    """See the module docstring."""

    def __init__(self, uri: str, options: dict[str, Any] | None = None) -> None:
        self.store = ObjectStore.open(uri, options)

    # -- what the store holds -----------------------------------------------------------
    def topics(self) -> list[str]:
        """The topics with a live incarnation, sorted."""
        return [
            name
            for name in self.store.children("")
            if manifests.live_incarnation(self.store, name) is not None
        ]

    def topic_id(self, topic: str) -> str:
        """The id of the topic's live incarnation ("" for a topic tiered without one)."""
        topic_id = manifests.live_incarnation(self.store, topic)
        if topic_id is None:
            raise TopicNotInStoreError(topic, self.store.uri)
        return topic_id

    def partitions(self, topic: str) -> list[int]:
        return manifests.partitions(self.store, topic, self.topic_id(topic))

    def manifest(self, topic: str, partition: int) -> Manifest:
        """The partition's latest manifest (an empty one when none is committed)."""
        return manifests.latest(self.store, topic, self.topic_id(topic), partition)

    def segments(self, topic: str, partition: int) -> tuple[RemoteSegment, ...]:
        return self.manifest(topic, partition).segments

    # -- records ------------------------------------------------------------------------
    def records(
        self,
        topic: str,
        partition: int,
        start_offset: int | None = None,
        end_offset: int | None = None,
    ) -> Iterator[Record]:
        """The records of ``[start_offset, end_offset)`` (default: all the manifest
        lists; bounds are clipped to its ``[log_start_offset, end_offset)``)."""
        manifest = self.manifest(topic, partition)
        start = manifest.log_start_offset if start_offset is None else start_offset
        end = manifest.end_offset if end_offset is None else end_offset
        for segment in manifest.segments:
            if segment.end_offset <= start:
                continue
            if segment.start_offset >= end:
                return
            yield from self.segment_records(manifest, segment, start, end)

    def segment_records(
        self,
        manifest: Manifest,
        segment: RemoteSegment,
        start_offset: int | None = None,
        end_offset: int | None = None,
    ) -> Iterator[Record]:
        """The records ``segment`` serves within ``[start_offset, end_offset)`` (control
        batches' left out)."""
        for header, batch in self.segment_batches(manifest, segment, start_offset, end_offset):
            if not header.is_control:
                yield from batch

    def segment_batches(
        self,
        manifest: Manifest,
        segment: RemoteSegment,
        start_offset: int | None = None,
        end_offset: int | None = None,
    ) -> Iterator[tuple[BatchHeader, list[Record]]]:
        """Batch by batch, the records ``segment`` serves within ``[start_offset,
        end_offset)``, each list with the header of the batch it came from (a reader
        skipping control batches, as consumers do, looks at ``header.is_control``)."""
        for walk, at, header in self._walk(manifest, segment, start_offset, end_offset):
            decoded = _decode(walk.view, at - walk.position, at, walk.objects)
            if header.base_offset < walk.low or header.last_offset >= walk.high:
                decoded = [r for r in decoded if walk.low <= r.offset < walk.high]
            yield header, decoded

    def segment_columns(
        self,
        manifest: Manifest,
        segment: RemoteSegment,
        start_offset: int | None = None,
        end_offset: int | None = None,
        *,
        max_records: int = 65_536,
        pick_header: str | None = None,
    ) -> Iterator[Columns]:
        """The user records ``segment`` serves within ``[start_offset, end_offset)``
        (control batches skipped), as ``records.Columns`` (``decode_columns``) of runs of
        consecutive batches holding at most ``max_records`` records together (a batch
        holding more comes alone); runs of control batches alone yield nothing."""
        run: list[tuple[int, BatchHeader]] = []
        walk: _Walk | None = None
        held = 0
        for walk, at, header in self._walk(manifest, segment, start_offset, end_offset):
            after_a_gap = run and at != run[-1][0] + run[-1][1].size  # a batch left out
            if run and (after_a_gap or held + header.record_count > max_records):
                yield from _columns(walk, run, pick_header)
                run, held = [], 0
            run.append((at, header))
            held += header.record_count
        if run and walk is not None:
            yield from _columns(walk, run, pick_header)

    def _walk(
        self,
        manifest: Manifest,
        segment: RemoteSegment,
        start_offset: int | None,
        end_offset: int | None,
    ) -> Iterator[tuple[_Walk, int, BatchHeader]]:
        """The batches of ``segment`` holding offsets of ``[start_offset, end_offset)``
        (clipped to what it serves) as ``segment_objects.batches`` walks and checks them:
        each at its position in the ``.log`` object, with the bytes it lies in."""
        low = max(segment.start_offset, manifest.log_start_offset, start_offset or 0)
        high = segment.end_offset if end_offset is None else min(end_offset, segment.end_offset)
        if low >= high:
            return
        objects = SegmentObjects.of(manifest, segment)
        aborted = segment_objects.aborted_transactions(self.store, objects, low)
        data, position, expected = self._log_bytes(objects, low)
        walk = _Walk(memoryview(data), position, objects, low, high)
        view = walk.view
        walked = segment_objects.batches(
            lambda s, e: view[s - position : e - position], position, expected, objects
        )
        for at, header in segment_objects.skip_aborted(walked, aborted):
            if header.last_offset < low:
                continue
            if header.base_offset >= high:
                return
            yield walk, at, header

    def _log_bytes(self, objects: SegmentObjects, offset: int) -> tuple[bytes, int, int]:
        """The ``.log`` bytes to read ``offset`` from, the position they start at and the
        base offset of the batch there: the whole object (checked against the manifest)
        when ``offset`` is the segment's first, else its tail from the index's entry."""
        segment = objects.segment
        if offset <= segment.start_offset:
            data = segment_objects.fetch(self.store, objects, "log", offset)
            return data, 0, segment.base_offset
        index = segment_objects.load_index(self.store, objects, "index", offset)
        expected, position = segment_objects.walk_start(index, objects, offset)
        data = segment_objects.fetch_range(
            self.store, objects, "log", position, segment.size_bytes, offset
        )
        return data, position, expected


@dataclass(frozen=True, slots=True)
class _Walk:
    """One walk over a segment's ``.log`` bytes: ``view`` holds the object from
    ``position`` on; the records served are those of ``[low, high)``."""

    view: memoryview
    position: int
    objects: SegmentObjects
    low: int
    high: int


def _columns(
    walk: _Walk, run: list[tuple[int, BatchHeader]], pick_header: str | None
) -> Iterator[Columns]:
    """The records of the consecutive (validated) batches ``run``, as columns."""
    first, last = run[0][0], run[-1][0] + run[-1][1].size
    start = first - walk.position
    try:
        columns = records.decode_columns(
            walk.view, start, last - walk.position, low=walk.low, high=walk.high,
            verify_crc=False, pick_header=pick_header,
        )  # fmt: skip
    except CorruptBatchError as exc:
        at = first if exc.position is None else exc.position + walk.position
        raise segment_objects.batch_error(walk.objects, exc, at) from exc
    if columns.count:
        yield columns


def _decode(view: memoryview, at: int, position: int, objects: SegmentObjects) -> list[Record]:
    """The records of the (validated) batch at ``at`` of ``view``."""
    try:
        return records.decode_batch(view, at, verify_crc=False)[1]
    except CorruptBatchError as exc:
        raise segment_objects.batch_error(objects, exc, position) from exc

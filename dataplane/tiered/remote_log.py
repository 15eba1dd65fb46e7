"""The broker's read path below its local log: batches served from remote segments.

``RemoteLogReader.read(manifest, offset, max_bytes)`` answers as ``PartitionLog.read``
does (``dataplane/storage/log.py``): whole batches from the one holding ``offset``, the
first one whole even when larger than ``max_bytes``, with the offset after the last. It
reads from the one segment serving ``offset`` (``Manifest.segment_for``; an offset in a
gap between segments reads from the next segment's ``start_offset``) and returns no
batch ending below that segment's ``start_offset`` (another segment served those
offsets) nor holding offsets at or after its ``end_offset`` (segments end on a batch
boundary: a batch across it is corrupt). A read that reaches the end of a
segment stops there; the caller's next read goes on with the next segment (or the
local log).

How a read finds its bytes: the segment's ``.index`` object (fetched whole, checked
against the manifest, cached) gives the position of the last indexed batch at or below
the offset; the ``.log`` object is read from there in aligned chunks of ``chunk_bytes``
(``get_range``), each fetched once into a cache bounded by ``cache_bytes``
(``cache.ByteCache``, least recently used first out; ``stats()`` for metrics). Batch
headers are walked to the batch holding the offset, then the batches that fit are
returned.

No wrong byte is ever returned (checks in ``segment_objects``): each returned batch
passes the produce path's validator (CRC included), the batches walked continue the
offsets densely from the index entry, the index entry's own batch has the offset it
names, and whole objects match the manifest's sizes and CRCs. As in the local log, a
damaged first batch raises and a later one ends the read before it. Failures:
``OffsetOutOfRangeError`` (``dataplane.storage``) for an offset outside the manifest's
``[log_start_offset, end_offset]``; ``RemoteSegmentMissingError`` for an object the
manifest lists that the store lacks; ``RemoteSegmentCorruptError`` for bytes that fail a
check; the store's ``RemoteStoreUnavailableError`` when it does not answer. Nothing is
retried here: the broker answers the fetch with the matching error code.

``offset_for_timestamp(manifest, timestamp)``: the first offset whose record timestamp
is at or after ``timestamp``, as ``LogSegment.find_offset_by_timestamp`` finds it
locally: the first segment whose max timestamp reaches it, its ``.timeindex`` to skip
older batches, then a scan of the batch headers and of the records of the first batch
whose max timestamp reaches it.

Blocking: every method may wait on the store (the broker calls it from its I/O pool).
Thread safety: any number of threads may call any method; the cache is the only state.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from dataplane import records
from dataplane.records import BatchHeader
from dataplane.records.errors import CorruptBatchError
from dataplane.storage.errors import OffsetOutOfRangeError
from dataplane.tiered import segment_objects
from dataplane.tiered.cache import ByteCache, CacheStats
from dataplane.tiered.errors import RemoteSegmentCorruptError
from dataplane.tiered.layout import Manifest, RemoteSegment
from dataplane.tiered.segment_objects import ByteReader, SegmentObjects
from dataplane.tiered.store import ObjectStore

DEFAULT_CHUNK_BYTES = 1024 * 1024
_WHOLE = -1  # the cache key's chunk number for an object cached whole (an index)


@dataclass(frozen=True, slots=True)
class RemoteRead:
    """Whole batches read from a remote segment; the next read starts at ``next_offset``
    (the offset asked for when ``data`` is empty)."""

    data: bytes
    next_offset: int


class RemoteLogReader:
    """Reads a partition's remote segments; see the module docstring."""

    def __init__(
        self, store: ObjectStore, cache_bytes: int, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES
    ) -> None:
        if chunk_bytes <= 0:
            raise ValueError(f"chunks of {chunk_bytes} bytes")
        self.store = store
        self.chunk_bytes = chunk_bytes
        self._cache = ByteCache(cache_bytes)

    def stats(self) -> CacheStats:
        """The cache's counters (hits, misses, evictions) and occupancy."""
        return self._cache.stats()

    # -- reading ------------------------------------------------------------------------
    def read(self, manifest: Manifest, offset: int, max_bytes: int) -> RemoteRead:
        """Whole batches from the batch holding ``offset`` (see the module docstring)."""
        if not manifest.log_start_offset <= offset <= manifest.end_offset:
            raise OffsetOutOfRangeError(offset, manifest.log_start_offset, manifest.end_offset)
        segment = manifest.segment_for(offset)
        if segment is None:  # offset == end_offset: nothing more is remote
            return RemoteRead(b"", offset)
        objects = SegmentObjects.of(manifest, segment)
        target = max(offset, segment.start_offset)
        read = self._log_reader(objects, target)
        found = self._locate(objects, read, target)
        first_position, first = next(found)
        if first.last_offset >= segment.end_offset:
            reason = f"the batch at position {first_position} crosses the segment's end offset"
            raise objects.corrupt("log", reason, target)
        stop = first_position + first.size
        try:
            for position, header in found:
                end = position + header.size
                if header.last_offset >= segment.end_offset or end - first_position > max_bytes:
                    break
                stop = end
        except RemoteSegmentCorruptError:
            pass  # a damaged batch ends the read before it; the read that starts there raises
        return self._verified(objects, bytes(read(first_position, stop)), first_position, first)

    @staticmethod
    def _verified(
        objects: SegmentObjects, data: bytes, position: int, first: BatchHeader
    ) -> RemoteRead:
        """The batches of ``data`` (read at ``position``) up to the first that fails its
        checks, which raises only when it is the first."""
        good, next_offset = position, first.base_offset
        walk = segment_objects.batches(
            _in_memory(data, position),
            position,
            first.base_offset,
            objects,
            end=position + len(data),
        )
        try:
            for at, header in walk:
                good, next_offset = at + header.size, header.next_offset
        except RemoteSegmentCorruptError:
            if good == position:
                raise
        return RemoteRead(data[: good - position], next_offset)

    def offset_for_timestamp(self, manifest: Manifest, timestamp: int) -> int | None:
        """The first offset at or above the manifest's log start whose record timestamp
        is >= ``timestamp``; None when no remote record is that recent."""
        for segment in manifest.segments:
            if segment.max_timestamp < timestamp or segment.end_offset <= manifest.log_start_offset:
                continue
            found = self._offset_in_segment(manifest, segment, timestamp)
            if found is not None:
                return found
        return None

    def _offset_in_segment(
        self, manifest: Manifest, segment: RemoteSegment, timestamp: int
    ) -> int | None:
        objects = SegmentObjects.of(manifest, segment)
        min_offset = max(segment.start_offset, manifest.log_start_offset)
        timeindex = self._index(objects, "timeindex", min_offset)
        entry = segment_objects.time_index_before(timeindex, segment.base_offset, timestamp)
        start = segment.base_offset if entry is None else entry[1]
        read = self._log_reader(objects, min_offset)
        found = self._locate(objects, read, start)
        if entry is not None:
            _, header = next(found)
            if (header.base_offset, header.max_timestamp) != (entry[1], entry[0]):
                reason = f"time index entry {entry} disagrees with the batch at that offset"
                raise objects.corrupt("timeindex", reason, start)
        if min_offset > start:
            found = self._locate(objects, read, min_offset)
        for position, header in found:
            if header.base_offset >= segment.end_offset:
                return None
            if header.max_timestamp >= timestamp:
                hit = self._first_record_at(objects, read, position, header, timestamp, min_offset)
                if hit is not None:
                    return hit if hit < segment.end_offset else None
        return None

    def _first_record_at(
        self,
        objects: SegmentObjects,
        read: ByteReader,
        position: int,
        header: BatchHeader,
        timestamp: int,
        min_offset: int,
    ) -> int | None:
        batch = read(position, position + header.size)
        segment_objects.check_batch(batch, 0, position, objects)
        try:
            return records.first_offset_at_or_after(batch, 0, timestamp, min_offset)
        except CorruptBatchError as exc:
            raise segment_objects.batch_error(objects, exc, position) from exc

    # -- finding bytes ------------------------------------------------------------------
    def _locate(
        self, objects: SegmentObjects, read: ByteReader, offset: int
    ) -> Iterator[tuple[int, BatchHeader]]:
        """The batch holding ``offset`` and every one after it to the object's end, as
        headers (not yet verified), walked from the offset index's entry."""
        index = self._index(objects, "index", offset)
        entry_offset, position = segment_objects.walk_start(index, objects, offset)
        walk = segment_objects.batches(read, position, entry_offset, objects, verify=False)
        for position, header in walk:
            if header.last_offset >= offset:
                yield position, header
                yield from walk
                return
        raise objects.corrupt("log", f"no batch holds offset {offset}", offset)

    def aborted(self, manifest: Manifest, offset: int) -> list[tuple[int, int, int]]:
        """The aborted transactions with a record in the segment serving ``offset``
        (``segment_objects.aborted_transactions``: (producer id, first offset, last
        offset)), its ``producers`` object cached whole."""
        segment = manifest.segment_for(offset)
        if segment is None or "producers" not in segment.files:
            return []
        objects = SegmentObjects.of(manifest, segment)
        data = self._cache.get(
            (objects.key("producers"), _WHOLE),
            lambda: segment_objects.fetch(self.store, objects, "producers", offset),
        )
        return segment_objects.parse_aborted(objects, data, offset)

    def _index(self, objects: SegmentObjects, kind: str, offset: int) -> bytes:
        return self._cache.get(
            (objects.key(kind), _WHOLE),
            lambda: segment_objects.load_index(self.store, objects, kind, offset),
        )

    def _log_reader(self, objects: SegmentObjects, offset: int) -> ByteReader:
        """``read(start, end)`` over the ``.log`` object, chunk by cached chunk (failures
        name ``offset``, the one being read)."""
        size, size_of_chunk = objects.segment.size_bytes, self.chunk_bytes
        key = objects.key("log")

        def chunk(number: int) -> bytes:
            start = number * size_of_chunk
            end = min(start + size_of_chunk, size)
            return self._cache.get(
                (key, number),
                lambda: segment_objects.fetch_range(self.store, objects, "log", start, end, offset),
            )

        def read(start: int, end: int) -> bytes:
            end = min(end, size)
            if start >= end:
                return b""
            first, last = start // size_of_chunk, (end - 1) // size_of_chunk
            parts = [chunk(number) for number in range(first, last + 1)]
            whole = parts[0] if len(parts) == 1 else b"".join(parts)
            origin = first * size_of_chunk
            return whole[start - origin : end - origin]

        return read


def _in_memory(data: bytes, origin: int) -> ByteReader:
    """``read(start, end)`` over ``data``, which was read at ``origin`` of the object."""
    view = memoryview(data)
    return lambda start, end: view[start - origin : end - origin]

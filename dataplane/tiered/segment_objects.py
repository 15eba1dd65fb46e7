"""Reading and checking one remote segment's objects: the code every reader shares.

A remote segment is the objects ``layout.py`` names (``.log``, ``.index``,
``.timeindex``: the local segment's files byte for byte). Readers (the broker's
``remote_log.RemoteLogReader``, the standalone ``reader.TopicStoreReader``) fetch the
bytes their own way (through a cache of chunks, or whole) and check them here, so no
wrong byte is ever returned as data:

- an object read whole has the size and CRC-32C the manifest lists for it
  (``check_whole``);
- an index has whole entries (``load_index``), and lookups in it are the local index's
  own binary search over the same entry layout (``dataplane.storage.index``);
- the aborted transactions of a segment (``aborted_transactions``) come from its
  ``.producers`` object, which the uploader writes with every aborted transaction having
  a record in the segment (segments are uploaded only once below the last stable offset,
  so every transaction in them has ended); ``skip_aborted`` leaves their batches out, as
  a read_committed consumer does;
- walking the ``.log`` (``batches``): every batch header is a RecordBatch v2 one whose
  length fits the object, and batches continue the offsets densely from the one the
  index or the segment's base offset names; with ``verify`` every batch passes the
  validator a broker runs on produce (``records.validate_batch``: length, magic, CRC,
  codec, counts); an object that ends below the manifest's ``end_offset`` lacks offsets
  it should serve.

Any disagreement raises ``RemoteSegmentCorruptError``; an object not in the store
raises ``RemoteSegmentMissingError``; the store's ``RemoteStoreUnavailableError`` passes
through.

Thread safety: pure functions over their arguments, and a frozen ``SegmentObjects``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import crc32c

from dataplane import records
from dataplane.records import HEADER_SIZE, MAGIC, MIN_BATCH_LENGTH, BatchHeader, ReadableBuffer
from dataplane.records.errors import CorruptBatchError
from dataplane.storage.index import OffsetIndex, TimeIndex, last_entry_at_most
from dataplane.tiered.errors import RemoteSegmentCorruptError, RemoteSegmentMissingError
from dataplane.tiered.layout import Manifest, RemoteSegment
from dataplane.tiered.store import ObjectStore, RemoteObjectMissingError

ByteReader = Callable[[int, int], ReadableBuffer]
"""``read(start, end)``: bytes ``[start, end)`` of the ``.log`` object (fewer at its end)."""


@dataclass(frozen=True, slots=True)
class SegmentObjects:
    """One manifest's segment: its objects' keys, and its failures named after them."""

    topic: str
    topic_id: str
    partition: int
    segment: RemoteSegment

    @classmethod
    def of(cls, manifest: Manifest, segment: RemoteSegment) -> SegmentObjects:
        return cls(manifest.topic, manifest.topic_id, manifest.partition, segment)

    def key(self, kind: str) -> str:
        return self.segment.key(self.topic, self.topic_id, self.partition, kind)

    def missing(self, kind: str, offset: int) -> RemoteSegmentMissingError:
        return RemoteSegmentMissingError(
            "the manifest lists it, the store does not have it",
            topic=self.topic,
            partition=self.partition,
            key=self.key(kind),
            offset=offset,
        )

    def corrupt(self, kind: str, reason: str, offset: int) -> RemoteSegmentCorruptError:
        return RemoteSegmentCorruptError(
            reason, topic=self.topic, partition=self.partition, key=self.key(kind), offset=offset
        )


# -- fetching ---------------------------------------------------------------------------
def fetch(store: ObjectStore, objects: SegmentObjects, kind: str, offset: int) -> bytes:
    """The whole object, checked against the manifest (``check_whole``)."""
    try:
        data = store.get(objects.key(kind))
    except RemoteObjectMissingError:
        raise objects.missing(kind, offset) from None
    check_whole(objects, kind, data, offset)
    return data


def fetch_range(
    store: ObjectStore, objects: SegmentObjects, kind: str, start: int, end: int, offset: int
) -> bytes:
    """Bytes ``[start, end)`` of the object, which must all be there."""
    try:
        data = store.get_range(objects.key(kind), start, end)
    except RemoteObjectMissingError:
        raise objects.missing(kind, offset) from None
    if len(data) != end - start:
        reason = f"{len(data)} bytes at position {start}, {end - start} expected"
        raise objects.corrupt(kind, reason, offset)
    return data


def check_whole(objects: SegmentObjects, kind: str, data: bytes, offset: int) -> None:
    """The size and CRC-32C the manifest lists for the object (when it lists them)."""
    listed: tuple[int, int | None] | None = objects.segment.files.get(kind)
    if kind == "log" and listed is None:
        listed = (objects.segment.size_bytes, None)
    if listed is None:
        return
    size, crc = listed
    if len(data) != size:
        raise objects.corrupt(kind, f"{len(data)} bytes, the manifest lists {size}", offset)
    if crc is not None and (computed := crc32c.crc32c(data)) != crc:
        reason = f"CRC-32C 0x{computed:08x}, the manifest lists 0x{crc:08x}"
        raise objects.corrupt(kind, reason, offset)


def aborted_transactions(
    store: ObjectStore, objects: SegmentObjects, offset: int
) -> list[tuple[int, int, int]]:
    """The aborted transactions with a record in the segment, ``(producer id, first
    offset, last offset)`` from its ``producers`` object (its ``"aborted"`` list; a
    segment uploaded before transactions existed lists none)."""
    if "producers" not in objects.segment.files:
        return []
    return parse_aborted(objects, fetch(store, objects, "producers", offset), offset)


def parse_aborted(objects: SegmentObjects, data: bytes, offset: int) -> list[tuple[int, int, int]]:
    """The ``"aborted"`` list of a (checked) ``producers`` object."""
    try:
        listed = json.loads(data).get("aborted", [])
        return [(int(pid), int(first), int(last)) for pid, first, last in listed]
    except (ValueError, TypeError, AttributeError) as exc:
        raise objects.corrupt(
            "producers", f"unreadable aborted transactions: {exc}", offset
        ) from exc


def skip_aborted(
    headers: Iterable[tuple[int, BatchHeader]], aborted: Iterable[tuple[int, int, int]]
) -> Iterator[tuple[int, BatchHeader]]:
    """``(position, header)`` of the batches, less those of aborted transactions (Kafka's
    read_committed rule: a producer's transaction counts as aborted from its first
    offset on, until its next control batch, which is kept)."""
    pending = sorted(((first, pid) for pid, first, _ in aborted), reverse=True)
    skipping: set[int] = set()
    for position, header in headers:
        while pending and pending[-1][0] <= header.last_offset:
            skipping.add(pending.pop()[1])
        if header.is_control:
            skipping.discard(header.producer_id)
        elif header.is_transactional and header.producer_id in skipping:
            continue
        yield position, header


# -- indexes ----------------------------------------------------------------------------
INDEX_ENTRIES = {"index": OffsetIndex.entry, "timeindex": TimeIndex.entry}


def load_index(store: ObjectStore, objects: SegmentObjects, kind: str, offset: int) -> bytes:
    """The ``index`` or ``timeindex`` object, fetched whole and checked."""
    data = fetch(store, objects, kind, offset)
    width = INDEX_ENTRIES[kind].size
    if len(data) % width:
        raise objects.corrupt(kind, f"{len(data)} bytes is no whole number of entries", offset)
    return data


def offset_index_lookup(index: bytes, base_offset: int, offset: int) -> tuple[int, int]:
    """(offset, position) of the last ``.index`` entry at or below ``offset``, or
    ``(base_offset, 0)``: where a walk to ``offset`` may start (``OffsetIndex.lookup``)."""
    entry = OffsetIndex.entry
    n = last_entry_at_most(index, len(index) // entry.size, entry, offset - base_offset, 0)
    if n < 0:
        return base_offset, 0
    relative, position = entry.unpack_from(index, n * entry.size)
    return base_offset + relative, position


def walk_start(index: bytes, objects: SegmentObjects, offset: int) -> tuple[int, int]:
    """(base offset, position) of the batch a walk to ``offset`` starts at: the offset
    index's entry (``offset_index_lookup``), which must lie inside the ``.log`` object."""
    expected, position = offset_index_lookup(index, objects.segment.base_offset, offset)
    if position >= objects.segment.size_bytes:
        reason = f"index entry ({expected}, {position}) is past the end of the .log object"
        raise objects.corrupt("index", reason, offset)
    return expected, position


def time_index_before(timeindex: bytes, base_offset: int, timestamp: int) -> tuple[int, int] | None:
    """(timestamp, offset) of the last ``.timeindex`` entry strictly before ``timestamp``:
    every batch up to that offset is older, so a search may start there; None: start at
    the segment's beginning (``TimeIndex.lookup_before``)."""
    entry = TimeIndex.entry
    n = last_entry_at_most(timeindex, len(timeindex) // entry.size, entry, timestamp - 1, 0)
    if n < 0:
        return None
    found, relative = entry.unpack_from(timeindex, n * entry.size)
    return found, base_offset + relative


# -- batches ----------------------------------------------------------------------------
def batches(
    read: ByteReader,
    position: int,
    expected: int,
    objects: SegmentObjects,
    *,
    end: int | None = None,
    verify: bool = True,
) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch of the ``.log`` object from ``position`` to
    ``end`` (default: the object's end), checked as the module docstring says.

    ``expected`` is the base offset the batch at ``position`` must have (an index
    entry's, or the segment's base offset at position 0). With ``verify`` each batch is
    read whole and validated, CRC included; without, only its header is read (locating
    a batch), and whoever returns the batch verifies it.
    """
    size = objects.segment.size_bytes
    end = size if end is None else end
    while position < end:
        header = _header_at(read, position, end, objects, expected)
        if header.base_offset != expected:
            reason = f"the batch at position {position} starts at offset {header.base_offset}"
            raise objects.corrupt("log", f"{reason}, {expected} expected", expected)
        if verify:
            check_batch(read(position, position + header.size), 0, position, objects)
        yield position, header
        position += header.size
        expected = header.next_offset
    if end == size and expected < objects.segment.end_offset:
        reason = f"its batches end at offset {expected}"
        raise objects.corrupt(
            "log", f"{reason}, the manifest says {objects.segment.end_offset}", expected
        )


def _header_at(
    read: ByteReader, position: int, end: int, objects: SegmentObjects, expected: int
) -> BatchHeader:
    raw = read(position, position + HEADER_SIZE)
    if len(raw) < HEADER_SIZE or position + HEADER_SIZE > end:
        raise objects.corrupt("log", f"a batch header is cut off at position {position}", expected)
    header = records.read_header(raw, 0)
    if header.magic != MAGIC or header.batch_length < MIN_BATCH_LENGTH:
        reason = f"no batch header at position {position} (magic {header.magic})"
        raise objects.corrupt("log", reason, expected)
    if position + header.size > end:
        reason = f"the batch at position {position} ({header.size} bytes) overruns the object"
        raise objects.corrupt("log", reason, expected)
    return header


def check_batch(buf: ReadableBuffer, at: int, position: int, objects: SegmentObjects) -> None:
    """The batch at ``at`` of ``buf`` (``position`` of the object) passes the produce
    path's validator (``records.validate_batch``)."""
    try:
        records.validate_batch(buf, at)
    except CorruptBatchError as exc:
        raise batch_error(objects, exc, position) from exc


def batch_error(
    objects: SegmentObjects, exc: CorruptBatchError, position: int
) -> RemoteSegmentCorruptError:
    """The codec's failure on the batch at ``position`` of the ``.log`` object, as the
    segment's corrupt error."""
    offset = exc.offset if exc.offset is not None else objects.segment.base_offset
    return objects.corrupt("log", f"{exc.reason} at position {position}", offset)

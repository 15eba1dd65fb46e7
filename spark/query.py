"""Index Query: the records whose field has a value, from an index and the topic itself.

``query_index(spec, field=..., value=...)`` answers *completely*: the records of the
index files the latest manifest lists (offsets below each partition's covered end), plus
a scan of what the index does not cover yet — the store's sealed segments past the
covered end (``TopicStoreReader``), then, when ``tail`` is given, the brokers' part past
both (``tail(topic, partition, max(covered_end, store_end))``). The partitions answered
for are ``partitions`` (per topic name: the index's topic and its lane topics, as the
caller knows them, so a partition with nothing in the store yet is read from its tail)
or, when it is None, those the store holds. A record matches when its field
(``spark.fields``) equals ``value`` parsed as the field's type, and its timestamp is in
``[from_ms, to_ms)`` when they are given.

Order and pages: records in ``(timestamp, partition, offset, topic)`` order, ``limit``
per page; ``next_cursor`` (opaque, or None on the last page) resumes strictly after the
last record returned, so pages never repeat or skip a record of the order (a record
produced later with an older timestamp than the cursor's lands before it and is not
seen by later pages). A cursor belongs to its query: another field, value or time range
refuses it. ``from_index``/``from_scan`` count the page's records by source;
``covered``: the manifest's covered ends.

Bad input — an unknown field, a value not of the field's type, a bad limit, a cursor
that is damaged or of another query — raises ``IndexQueryError`` saying why. More than
``max_scan_bytes`` of store segments past the covered ends (summed over the partitions)
raises ``UncoveredTooLargeError`` before any is read: the index should be built further
first.

No Spark here (the control plane imports this module): pyarrow reads the index files
(``pyarrow.dataset`` prunes row groups by their min/max statistics of
``indexed_value``). Every query reads the uncovered part in full, so its cost grows with
the index's lag, up to the byte limit. Thread safety: pure function; any number of
concurrent queries.
"""

from __future__ import annotations

import base64
import bisect
import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from dataplane import records
from dataplane.tiered.layout import Manifest, RemoteSegment
from dataplane.tiered.reader import TopicNotInStoreError, TopicStoreReader
from dataplane.tiered.store import ObjectStore
from spark import chunks, manifests
from spark.columns import SCHEMA, record_batches, segment_batches
from spark.fields import ARROW_TYPES, WrongTypeError, extract, parse_value
from spark.index import VALUE_COLUMN, definition
from spark.jobs.spec import Field, IndexSpec
from spark.manifests import OutputFile, OutputManifest, OutputManifestError

TailReader = Callable[[str, int, int], Iterable[records.Record]]
MAX_LIMIT: Final = 10_000
SCAN_MAX_BYTES: Final = 64 * 1024 * 1024
FOOTER_CACHE_FILES: Final = 4096
READ_THREADS: Final = 8
_COLUMNS: Final = [VALUE_COLUMN, *SCHEMA.names]
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_ORDER: Final = [
    ("timestamp", "ascending"),
    ("partition", "ascending"),
    ("offset", "ascending"),
    ("topic", "ascending"),
]


class IndexQueryError(ValueError):
    """A query that cannot be answered as asked; the message says why."""


class UncoveredTooLargeError(Exception):
    """More than ``limit_bytes`` of the store lie past what the index covers: the index
    should be built further before it is queried. Not bad input (no ``ValueError``)."""

    def __init__(self, uncovered_bytes: int, limit_bytes: int) -> None:
        super().__init__(
            f"{uncovered_bytes} bytes of stored segments lie past what the index covers, "
            f"more than the {limit_bytes} a query scans: build the index further first"
        )
        self.uncovered_bytes = uncovered_bytes
        self.limit_bytes = limit_bytes


@dataclass(frozen=True)
class IndexedRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int  # epoch ms
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    lane: str | None


@dataclass(frozen=True)
class QueryAnswer:
    records: list[IndexedRecord]
    from_index: int
    from_scan: int
    next_cursor: str | None
    covered: dict[str, int]


def query_index(
    spec: IndexSpec,
    *,
    field: str,
    value: str,
    from_ms: int | None = None,
    to_ms: int | None = None,
    limit: int = 100,
    cursor: str | None = None,
    tail: TailReader | None = None,
    partitions: Mapping[str, Sequence[int]] | None = None,
    max_scan_bytes: int = SCAN_MAX_BYTES,
) -> QueryAnswer:
    """See the module docstring."""
    declared = _field(spec, field)
    try:
        wanted = parse_value(declared, value)
    except WrongTypeError as exc:
        raise IndexQueryError(str(exc)) from exc
    if not 1 <= limit <= MAX_LIMIT:
        raise IndexQueryError(f"limit {limit}: from 1 to {MAX_LIMIT}")
    query_id = _query_id(spec, field, value, from_ms, to_ms)
    after = _decode_cursor(cursor, query_id) if cursor else None
    manifest = _manifest(spec)
    covered = dict(manifest.covered) if manifest else {}
    bounds = _Bounds(from_ms, to_ms, after)
    indexed = _from_index(spec, manifest, declared, wanted, bounds, limit + 1)
    reader = TopicStoreReader(spec.store_uri, spec.store_options)
    ranges = _uncovered(reader, spec, covered, partitions, max_scan_bytes)
    scanned = _from_scan(reader, ranges, declared, wanted, bounds, tail)
    merged = pa.concat_tables(
        [
            indexed.append_column("scanned", pa.repeat(False, indexed.num_rows)),
            scanned.append_column("scanned", pa.repeat(True, scanned.num_rows)),
        ]
    ).sort_by(_ORDER)
    page = merged.slice(0, limit)
    found = _records(page)
    more = merged.num_rows > limit
    from_scan = pc.sum(page.column("scanned")).as_py() or 0
    next_cursor = _encode_cursor(found[-1], query_id) if more and found else None
    return QueryAnswer(found, len(found) - from_scan, from_scan, next_cursor, covered)


@dataclass(frozen=True)
class _Bounds:
    from_ms: int | None
    to_ms: int | None
    after: tuple[int, int, int, str] | None  # (timestamp ms, partition, offset, topic)

    def admits(self, first_ms: int, last_ms: int) -> bool:
        """Whether records stamped within ``[first_ms, last_ms]`` may be in range."""
        if self.from_ms is not None and last_ms < self.from_ms:
            return False
        if self.to_ms is not None and first_ms >= self.to_ms:
            return False
        return self.after is None or last_ms >= self.after[0]

    def expression(self) -> ds.Expression:
        """The filter on the record columns (timestamps as ``SCHEMA``'s microseconds)."""
        ts = pc.field("timestamp")
        clauses = []
        if self.from_ms is not None:
            clauses.append(ts >= _ts(self.from_ms))
        if self.to_ms is not None:
            clauses.append(ts < _ts(self.to_ms))
        if self.after is not None:
            t, p, o, topic = self.after
            part, off = pc.field("partition"), pc.field("offset")
            clauses.append(
                (ts > _ts(t))
                | (
                    (ts == _ts(t))
                    & (
                        (part > p)
                        | ((part == p) & ((off > o) | ((off == o) & (pc.field("topic") > topic))))
                    )
                )
            )
        expression = pc.scalar(True)
        for clause in clauses:
            expression = expression & clause
        return expression


def _ts(ms: int) -> pa.Scalar:
    return pa.scalar(ms * 1000, pa.int64()).cast(SCHEMA.field("timestamp").type)


def _field(spec: IndexSpec, name: str) -> Field:
    for declared in spec.fields:
        if declared.name == name:
            return declared
    names = ", ".join(f.name for f in spec.fields)
    raise IndexQueryError(f"the index has no field {name!r} (its fields: {names})")


def _manifest(spec: IndexSpec) -> OutputManifest | None:
    """The index's latest manifest, or None when none (of this definition) is committed:
    then everything is scanned."""
    store = ObjectStore.open(spec.target_uri, spec.target_options)
    try:
        manifest = manifests.latest(store, "index", definition(spec))
    except OutputManifestError:
        return None
    return manifest if manifest.version else None


def _from_index(
    spec: IndexSpec,
    manifest: OutputManifest | None,
    declared: Field,
    wanted: Any,
    bounds: _Bounds,
    limit: int,
) -> pa.Table:
    """The first ``limit`` matches in the index files of ``declared``, in order: only the
    row groups whose statistics admit ``wanted`` (and the time range) are read."""
    if manifest is None:
        return SCHEMA.empty_table()
    store = ObjectStore.open(spec.target_uri, spec.target_options)
    value_type = ARROW_TYPES[declared.type]
    condition = (pc.field(VALUE_COLUMN) == pa.scalar(wanted, value_type)) & bounds.expression()
    listed = [f for f in manifest.files if f.kind == "index" and f.field == declared.name]
    # Files are read side by side: an object store answers each read in a round trip.
    with ThreadPoolExecutor(READ_THREADS) as pool:
        parts = pool.map(lambda f: _read_matching(store, f, wanted, bounds, condition), listed)
        found = [SCHEMA.empty_table(), *(table for part in parts for table in part)]
    return pa.concat_tables(found).sort_by(_ORDER).slice(0, limit)


def _read_matching(
    store: ObjectStore, entry: OutputFile, wanted: Any, bounds: _Bounds, condition: ds.Expression
) -> list[pa.Table]:
    path = store.path(entry.path)
    footer = _footer(store, path, entry.bytes)
    groups = footer.row_groups(_comparable(wanted), bounds)
    if not groups:
        return []
    with store.fs.open(path, "rb") as handle:
        parquet = pq.ParquetFile(handle, metadata=footer.metadata)
        table = parquet.read_row_groups(groups, columns=_COLUMNS, use_threads=False)
    return [table.filter(condition).select(SCHEMA.names)]


@dataclass(frozen=True)
class _Footer:
    """A file's Parquet footer and its row groups' statistics: for the groups that have
    them (``groups``), value bounds (ascending, the file being sorted by value) and time
    bounds (ms); ``unknown``, the groups without (Parquet drops the statistics of a
    column chunk holding a very long value), which every lookup reads."""

    metadata: pq.FileMetaData
    groups: list[int]
    lows: list[Any]
    highs: list[Any]
    first_ms: list[int]
    last_ms: list[int]
    unknown: list[int]

    def row_groups(self, wanted: Any, bounds: _Bounds) -> list[int]:
        """The row groups whose statistics leave room for a match."""
        found = list(self.unknown)
        at = bisect.bisect_left(self.highs, wanted)
        while at < len(self.lows) and self.lows[at] <= wanted:
            if bounds.admits(self.first_ms[at], self.last_ms[at]):
                found.append(self.groups[at])
            at += 1
        return sorted(found)


@functools.lru_cache(maxsize=FOOTER_CACHE_FILES)
def _cached_footer(fs: Any, path: str, size: int) -> _Footer:
    with fs.open(path, "rb") as handle:
        metadata = pq.ParquetFile(handle).metadata
    groups, lows, highs, first, last, unknown = [], [], [], [], [], []
    at = _COLUMNS.index("timestamp")
    for number in range(metadata.num_row_groups):
        group = metadata.row_group(number)
        values, times = group.column(0).statistics, group.column(at).statistics
        if not _has_bounds(values) or not _has_bounds(times):
            unknown.append(number)
            continue
        groups.append(number)
        lows.append(_comparable(values.min))
        highs.append(_comparable(values.max))
        first.append(_ms_of(times.min))
        last.append(_ms_of(times.max))
    return _Footer(metadata, groups, lows, highs, first, last, unknown)


def _has_bounds(statistics: Any) -> bool:
    return (
        statistics is not None
        and statistics.has_min_max
        and statistics.min is not None
        and statistics.max is not None
    )


def _footer(store: ObjectStore, path: str, size: int) -> _Footer:
    """A file's footer; kept, since a listed file never changes (a re-run writes the same
    rows under the same name)."""
    return _cached_footer(store.fs, path, size)


def _ms_of(moment: Any) -> int:
    """Milliseconds of a timestamp statistic (a datetime, or microseconds)."""
    if isinstance(moment, datetime):
        aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
        return (aware - _EPOCH) // timedelta(milliseconds=1)
    return int(moment) // 1000


def _comparable(value: Any) -> Any:
    """Statistics and the wanted value on one footing (datetimes as microseconds)."""
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=UTC)
        return (aware - _EPOCH) // timedelta(microseconds=1)
    return value


@dataclass(frozen=True)
class _Uncovered:
    """One partition's part past the covered end: the store's ``[start, store_end)``
    (``manifest``: None when the store holds nothing of it), then the tail."""

    topic: str
    partition: int
    start: int
    store_end: int
    manifest: Manifest | None

    def segments(self) -> list[RemoteSegment]:
        """The store's segments serving offsets of ``[start, store_end)``."""
        if self.manifest is None:
            return []
        return [
            s
            for s in self.manifest.segments
            if s.end_offset > self.start and s.start_offset < self.store_end
        ]


def _uncovered(
    reader: TopicStoreReader,
    spec: IndexSpec,
    covered: dict[str, int],
    partitions: Mapping[str, Sequence[int]] | None,
    max_scan_bytes: int,
) -> list[_Uncovered]:
    """Every partition's uncovered part; ``UncoveredTooLargeError`` past the limit."""
    if partitions is None:
        partitions = _stored_partitions(reader, spec)
    found = []
    for topic, numbers in partitions.items():
        for partition in numbers:
            start = covered.get(chunks.partition_key(topic, partition), 0)
            manifest = _partition_manifest(reader, topic, partition)
            store_end = max(start, manifest.end_offset if manifest else 0)
            found.append(_Uncovered(topic, partition, start, store_end, manifest))
    uncovered_bytes = sum(s.size_bytes for part in found for s in part.segments())
    if uncovered_bytes > max_scan_bytes:
        raise UncoveredTooLargeError(uncovered_bytes, max_scan_bytes)
    return found


def _stored_partitions(reader: TopicStoreReader, spec: IndexSpec) -> dict[str, list[int]]:
    """The partitions the store holds of the index's topic (and lane topics)."""
    found = {}
    for topic in chunks.source_topics(reader, spec.topic, spec.include_lanes):
        try:
            found[topic] = reader.partitions(topic)
        except TopicNotInStoreError:
            found[topic] = []
    return found


def _partition_manifest(reader: TopicStoreReader, topic: str, partition: int) -> Manifest | None:
    try:
        return reader.manifest(topic, partition)
    except TopicNotInStoreError:
        return None


def _from_scan(
    reader: TopicStoreReader,
    ranges: list[_Uncovered],
    declared: Field,
    wanted: Any,
    bounds: _Bounds,
    tail: TailReader | None,
) -> pa.Table:
    """The matches past the covered ends: the store's sealed segments, then the tail."""
    found = [SCHEMA.empty_table()]
    for part in ranges:
        found.extend(_matches(_stored_batches(reader, part), declared, wanted, bounds))
        if tail is not None:
            rows = tail(part.topic, part.partition, part.store_end)
            batches = record_batches(part.topic, part.partition, rows)
            found.extend(_matches(batches, declared, wanted, bounds))
    return pa.concat_tables(found)


def _stored_batches(reader: TopicStoreReader, part: _Uncovered) -> Iterator[pa.RecordBatch]:
    for segment in part.segments():
        assert part.manifest is not None  # it lists the segment
        yield from segment_batches(
            reader, part.topic, part.partition, part.manifest, segment, part.start, part.store_end
        )


def _matches(
    batches: Iterable[pa.RecordBatch],
    declared: Field,
    wanted: Any,
    bounds: _Bounds,
) -> list[pa.Table]:
    tables = []
    for batch in batches:
        values = extract(batch.column("value").to_pylist(), (declared,)).columns[declared.name]
        table = pa.Table.from_batches([batch])
        hits = table.filter(pc.fill_null(pc.equal(values, pa.scalar(wanted, values.type)), False))
        tables.append(ds.dataset(hits).to_table(filter=bounds.expression()))
    return tables


def _records(table: pa.Table) -> list[IndexedRecord]:
    millis = pc.divide(table.column("timestamp").cast(pa.int64()), 1000).to_pylist()
    found = []
    for row, ms in zip(table.select(SCHEMA.names).to_pylist(), millis, strict=True):
        found.append(
            IndexedRecord(
                topic=row["topic"],
                partition=row["partition"],
                offset=row["offset"],
                timestamp=ms,
                key=row["key"],
                value=row["value"],
                headers=tuple((h["key"], h["value"]) for h in row["headers"] or ()),
                lane=row["lane"],
            )
        )
    return found


def _query_id(
    spec: IndexSpec, field: str, value: str, from_ms: int | None, to_ms: int | None
) -> str:
    text = json.dumps([spec.index_id, field, value, from_ms, to_ms])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _encode_cursor(last: IndexedRecord, query_id: str) -> str:
    data = [query_id, last.timestamp, last.partition, last.offset, last.topic]
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def _decode_cursor(cursor: str, query_id: str) -> tuple[int, int, int, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        owner, timestamp, partition, offset, topic = json.loads(raw)
        position = (int(timestamp), int(partition), int(offset), str(topic))
    except (ValueError, TypeError) as exc:
        raise IndexQueryError("the cursor is damaged") from exc
    if owner != query_id:
        raise IndexQueryError("the cursor belongs to another query (field, value or time range)")
    return position

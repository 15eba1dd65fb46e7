"""The topic schema and the columnar decode of records into Arrow record batches.

One schema for every Spark surface (the data source's rows, the export's raw columns,
the index's record columns), the same as Spark's own Kafka source plus ``lane``:

=========  ==========================================  ==============================
column     Arrow type                                  Spark type
=========  ==========================================  ==============================
topic      string                                      string
partition  int32                                       int
offset     int64                                       bigint
timestamp  timestamp[us, UTC] (null: out of its range)  timestamp
key        binary (null: no key)                       binary
value      binary (null: a tombstone)                  binary
headers    list<struct<key: string, value: binary>>    array<struct<key,value>>
lane       string (null: the trunk)                    string
=========  ==========================================  ==============================

``headers`` is a list, not a map: keys may repeat and their order is kept. ``lane`` is
the lane of a lane topic (``<tenant>.<topic>~<lane>``), else the ``x-lane`` header a
trunk record carries, else null. ``timestamp`` is null for a record whose timestamp (ms,
any int64 a producer set) is past what microseconds since the epoch hold (beyond about
292,000 years either way: a timestamp in ns or µs sent as ms), so that record still reads.

Control batches (transaction markers) carry no user records: consumers skip them, and
so does everything here.

Two ways in, one result: ``record_batch``/``record_batches`` build a batch of decoded
``Record`` objects (what a Fetch through the SDK gives); ``segment_batches`` decodes a
remote segment's batches straight into Arrow's buffers (``records.decode_columns``,
compiled where built) and wraps them without copying (``columns_batch``), several
times faster, which an export of millions of records needs.

Thread safety: pure functions over their arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from dataplane.records import BinaryColumn, Columns, Record
from dataplane.tiered.layout import Manifest, RemoteSegment
from dataplane.tiered.reader import TopicStoreReader
from lanes.names import LANE_HEADER, lane_of_headers, split_topic

_BINARY: Final = pa.binary()
HEADER_TYPE: Final = pa.struct([("key", pa.string()), ("value", pa.binary())])
SCHEMA: Final = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", pa.list_(HEADER_TYPE)),
        ("lane", pa.string()),
    ]
)
DDL: Final = (
    "topic string, partition int, offset bigint, timestamp timestamp, key binary, "
    "value binary, headers array<struct<key:string,value:binary>>, lane string"
)
BATCH_ROWS: Final = 65_536


def record_batch(topic: str, partition: int, rows: list[Record]) -> pa.RecordBatch:
    """``rows`` (records of one partition of ``topic``) as one batch of ``SCHEMA``."""
    count = len(rows)
    topic_lane = split_topic(topic)[1]
    headers = [r.headers for r in rows]
    if topic_lane is not None:
        lanes: list[str | None] = [topic_lane] * count
    else:
        lanes = [lane_of_headers(h) if h else None for h in headers]
    columns = [
        pa.repeat(pa.scalar(topic, pa.string()), count) if count else pa.array([], pa.string()),
        pa.array([partition] * count, pa.int32()),
        pa.array([r.offset for r in rows], pa.int64()),
        pa.array([r.timestamp * 1000 for r in rows], pa.int64()).cast(SCHEMA.field(3).type),
        pa.array([r.key for r in rows], pa.binary()),
        pa.array([r.value for r in rows], pa.binary()),
        pa.array([[(h.key, h.value) for h in hs] for hs in headers], pa.list_(HEADER_TYPE)),
        pa.array(lanes, pa.string()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def record_batches(
    topic: str, partition: int, rows: Iterable[Record], batch_rows: int = BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """``rows`` in batches of at most ``batch_rows`` (none for no rows)."""
    pending: list[Record] = []
    for row in rows:
        pending.append(row)
        if len(pending) >= batch_rows:
            yield record_batch(topic, partition, pending)
            pending = []
    if pending:
        yield record_batch(topic, partition, pending)


def segment_batches(
    reader: TopicStoreReader,
    topic: str,
    partition: int,
    manifest: Manifest,
    segment: RemoteSegment,
    start_offset: int | None = None,
    end_offset: int | None = None,
    batch_rows: int = BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """The user records ``segment`` serves within ``[start_offset, end_offset)``, as
    Arrow batches of ``SCHEMA`` of at most ``batch_rows`` rows (control batches skipped).

    Decoded straight into Arrow's buffers (``TopicStoreReader.segment_columns``), with
    no object per record; the same rows ``record_batches`` makes of the records."""
    pick = None if split_topic(topic)[1] is not None else LANE_HEADER
    for columns in reader.segment_columns(
        manifest, segment, start_offset, end_offset, max_records=batch_rows, pick_header=pick
    ):
        batch = columns_batch(topic, partition, columns)
        for start in range(0, batch.num_rows, batch_rows):
            yield batch.slice(start, batch_rows)


def columns_batch(topic: str, partition: int, columns: Columns) -> pa.RecordBatch:
    """``columns`` (records of one partition of ``topic``, decoded with ``pick_header``
    ``x-lane`` unless ``topic`` is a lane topic) as one batch of ``SCHEMA``, wrapping
    their buffers without copying them (the timestamps alone are converted to µs)."""
    count = columns.count
    millis = pa.Array.from_buffers(_MILLIS, count, [None, pa.py_buffer(columns.timestamps)])
    entries = pa.StructArray.from_arrays(
        [_binary(columns.header_keys, pa.string()), _binary(columns.header_values)],
        fields=list(HEADER_TYPE),
    )
    headers = pa.Array.from_buffers(
        SCHEMA.field("headers").type,
        count,
        [None, pa.py_buffer(columns.header_offsets)],
        children=[entries],
    )
    arrays = [
        pa.repeat(pa.scalar(topic, pa.string()), count),
        pa.repeat(pa.scalar(partition, pa.int32()), count),
        pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(columns.offsets)]),
        _micros(millis),
        _binary(columns.keys),
        _binary(columns.values),
        headers,
        _lanes(topic, columns),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


_MILLIS: Final = pa.timestamp("ms", tz="UTC")


def _binary(column: BinaryColumn, kind: pa.DataType = _BINARY) -> pa.Array:
    validity = None if column.validity is None else pa.py_buffer(column.validity)
    buffers = [validity, pa.py_buffer(column.offsets), pa.py_buffer(column.data)]
    return pa.Array.from_buffers(kind, len(column), buffers, null_count=column.null_count)


def _lanes(topic: str, columns: Columns) -> pa.Array:
    """The lane of each record: the lane topic's, else its ``x-lane`` header's (checked
    as ``lane_of_headers`` checks it, once per distinct value), else null."""
    lane = split_topic(topic)[1]
    if lane is not None:
        return pa.repeat(pa.scalar(lane, pa.string()), columns.count)
    if columns.picked is None:
        raise ValueError("columns of a trunk topic are decoded with pick_header x-lane")
    named = _binary(columns.picked)
    if named.null_count == len(named):
        return pa.nulls(len(named), pa.string())
    for value in named.unique().to_pylist():
        if value is not None:
            lane_of_headers([(LANE_HEADER, value)])
    return named.view(pa.string())


# Timestamps (ms) whose microseconds fit int64.
_MAX_MILLIS: Final = (2**63 - 1) // 1000


def _micros(millis: pa.Array) -> pa.Array:
    """``millis`` as ``SCHEMA``'s timestamps; null where microseconds would overflow."""
    raw = millis.cast(pa.int64())
    fits = pc.and_(pc.greater_equal(raw, -_MAX_MILLIS), pc.less_equal(raw, _MAX_MILLIS))
    return pc.if_else(fits, millis, pa.scalar(None, millis.type)).cast(
        SCHEMA.field("timestamp").type
    )

"""The topic schema and the columnar decode of records into Arrow record batches.

One schema for every Spark surface (the data source's rows, the export's raw columns,
the index's record columns), the same as Spark's own Kafka source plus ``lane``:

=========  ==========================================  ==============================
column     Arrow type                                  Spark type
=========  ==========================================  ==============================
topic      string                                      string
partition  int32                                       int
offset     int64                                       bigint
timestamp  timestamp[us, UTC]                          timestamp
key        binary (null: no key)                       binary
value      binary (null: a tombstone)                  binary
headers    list<struct<key: string, value: binary>>    array<struct<key,value>>
lane       string (null: the trunk)                    string
=========  ==========================================  ==============================

``headers`` is a list, not a map: keys may repeat and their order is kept. ``lane`` is
the lane of a lane topic (``<tenant>.<topic>~<lane>``), else the ``x-lane`` header a
trunk record carries, else null.

Control batches (transaction markers) carry no user records: consumers skip them, and
so does everything here.

Thread safety: pure functions over their arguments.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final

import pyarrow as pa

from dataplane.records import Record
from dataplane.tiered.layout import Manifest, RemoteSegment
from dataplane.tiered.reader import TopicStoreReader
from lanes.names import lane_of_headers, split_topic

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
    Arrow batches of ``SCHEMA`` (control batches skipped)."""
    rows = (
        record
        for header, batch in reader.segment_batches(manifest, segment, start_offset, end_offset)
        if not header.is_control
        for record in batch
    )
    yield from record_batches(topic, partition, rows, batch_rows)

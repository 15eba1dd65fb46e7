"""The topic schema's two ways in agree: ``segment_batches`` (a remote segment decoded
straight into Arrow buffers) gives the rows ``record_batches`` makes of the decoded
records, on random batches with null keys and values, headers (repeated keys, null
values), lanes (lane topics, ``x-lane`` headers), every codec, control batches and
clipped ranges. Pure pyarrow over a folder store: no Spark session."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from dataplane.records import BatchBuilder, Compression, TimestampType, columns, decode_columns
from dataplane.records.header import set_log_append_time
from dataplane.tiered.errors import RemoteSegmentCorruptError
from dataplane.tiered.layout import Manifest
from dataplane.tiered.reader import TopicStoreReader
from dataplane.tiered.store import ObjectStore
from lanes.names import InvalidLaneNameError
from spark.columns import SCHEMA, columns_batch, record_batches, segment_batches
from tests.dataplane.tiered.support import Appended, commit, fill_log, upload_log

TRUNK = "acme.orders"
LANE_TOPIC = "acme.orders~blue"
HEADER_KEYS = ["x-lane", "trace", "trace", "é", ""]


def _batch(rng: random.Random, offset: int, clock: int) -> tuple[bytes, int]:
    """A batch of 1-40 records at ``offset``: some keys and values null, some headers
    (repeated keys, null values, ``x-lane`` naming a lane), any codec, some batches
    log-append-time or control."""
    count = rng.randint(1, 40)
    kind = TimestampType.LOG_APPEND_TIME if rng.random() < 0.1 else TimestampType.CREATE_TIME
    builder = BatchBuilder(
        base_offset=offset,
        compression=rng.choice(list(Compression)),
        timestamp_type=kind,
        is_control=rng.random() < 0.08,
    )
    for _ in range(count):
        headers = []
        for _ in range(rng.choice([0, 0, 0, 1, 2, 4])):
            key = rng.choice(HEADER_KEYS)
            value = rng.choice([b"red", b"blue"]) if key == "x-lane" else rng.randbytes(3)
            headers.append((key, None if rng.random() < 0.1 and key != "x-lane" else value))
        key = rng.randbytes(rng.randint(0, 12)) if rng.random() < 0.7 else None
        value = rng.randbytes(rng.randint(0, 200)) if rng.random() < 0.9 else None
        builder.append(value, key=key, timestamp=clock + rng.randint(0, 50), headers=headers)
    return builder.build(), count


def _appended(seed: int, batches: int = 120) -> Appended:
    rng = random.Random(seed)
    appended, offset = Appended(), 0
    for n in range(batches):
        batch, count = _batch(rng, offset, 1_700_000_000_000 + 1000 * n)
        appended.batches.append(batch)
        offset += count
    return appended


def _partition(tmp_path: Path, topic: str, appended: Appended) -> tuple[TopicStoreReader, Manifest]:
    """``appended`` in sealed segments uploaded to a folder store and committed."""
    store = ObjectStore.open(str(tmp_path / "store"), {})
    log = fill_log(tmp_path / topic, appended, max_segment_bytes=16_384)
    try:
        manifest = commit(store, upload_log(store, log, topic=topic), topic=topic)
    finally:
        log.close()
    return TopicStoreReader(str(tmp_path / "store"), {}), manifest


def _today(
    reader: TopicStoreReader,
    topic: str,
    manifest: Manifest,
    start: int | None,
    end: int | None,
    batch_rows: int,
) -> Iterator[pa.RecordBatch]:
    """The path through ``Record`` objects, which the columnar one must equal."""
    for segment in manifest.segments:
        rows = (
            record
            for header, batch in reader.segment_batches(manifest, segment, start, end)
            if not header.is_control
            for record in batch
        )
        yield from record_batches(topic, 0, rows, batch_rows)


def _columnar(
    reader: TopicStoreReader,
    topic: str,
    manifest: Manifest,
    start: int | None,
    end: int | None,
    batch_rows: int,
) -> Iterator[pa.RecordBatch]:
    for segment in manifest.segments:
        yield from segment_batches(reader, topic, 0, manifest, segment, start, end, batch_rows)


def _table(batches: list[pa.RecordBatch]) -> pa.Table:
    return pa.Table.from_batches(batches, schema=SCHEMA).combine_chunks()


@pytest.fixture(params=[True, False], ids=["compiled", "reference"])
def compiled(request: pytest.FixtureRequest) -> Iterator[bool]:
    """``decode_columns`` compiled (where built) or through its Python reference."""
    if request.param and not columns.COMPILED:
        pytest.skip("the compiled codec is not built")
    saved = columns.COMPILED
    columns.COMPILED = request.param
    yield request.param
    columns.COMPILED = saved


@pytest.mark.parametrize("topic", [TRUNK, LANE_TOPIC])
@pytest.mark.parametrize(("start", "end"), [(None, None), (37, 1500), (900, 901), (5000, None)])
def test_segment_batches_equal_the_record_path(
    tmp_path: Path, compiled: bool, topic: str, start: int | None, end: int | None
) -> None:
    reader, manifest = _partition(tmp_path, topic, _appended(seed=3))
    assert len(manifest.segments) > 3
    expected = _table(list(_today(reader, topic, manifest, start, end, 500)))
    batches = list(_columnar(reader, topic, manifest, start, end, 500))
    for batch in batches:
        batch.validate(full=True)
        assert batch.schema == SCHEMA
        assert 0 < batch.num_rows <= 500
    got = _table(batches)
    assert got.equals(expected)
    if start is None and end is None:
        assert got.num_rows > 1000
        assert got.column("key").null_count > 0
        assert got.column("value").null_count > 0
        if topic == TRUNK:
            assert set(got.column("lane").to_pylist()) == {None, "red", "blue"}
        else:
            assert set(got.column("lane").to_pylist()) == {"blue"}


def test_batches_never_pass_batch_rows(tmp_path: Path, compiled: bool) -> None:
    """A batch of more records than ``batch_rows`` is cut; runs of smaller ones are not."""
    reader, manifest = _partition(tmp_path, TRUNK, _appended(seed=5, batches=30))
    batches = list(_columnar(reader, TRUNK, manifest, None, None, 16))
    assert max(b.num_rows for b in batches) == 16
    assert _table(batches).equals(_table(list(_today(reader, TRUNK, manifest, None, None, 16))))


def test_an_x_lane_header_naming_no_valid_lane_fails_both_ways(
    tmp_path: Path, compiled: bool
) -> None:
    builder = BatchBuilder()
    builder.append(b"v", headers=[("x-lane", b"blue")])
    builder.append(b"v", headers=[("x-lane", b"not a lane!")])
    reader, manifest = _partition(tmp_path, TRUNK, Appended(batches=[builder.build()]))
    with pytest.raises(InvalidLaneNameError):
        list(_today(reader, TRUNK, manifest, None, None, 100))
    with pytest.raises(InvalidLaneNameError):
        list(_columnar(reader, TRUNK, manifest, None, None, 100))


def test_a_damaged_record_is_the_same_corrupt_segment_both_ways(
    tmp_path: Path, compiled: bool
) -> None:
    """A stored record overrunning its batch behind a valid batch CRC (read from inside
    the segment, where the object's own CRC-32C is not checked): the same error, naming
    the object and the batch's position in it."""
    first, second = BatchBuilder(), BatchBuilder(base_offset=1)
    first.append(b"first")
    second.append(b"second", key=b"k")
    appended = Appended(batches=[first.build(), second.build()])
    reader, manifest = _partition(tmp_path, TRUNK, appended)
    segment = manifest.segments[0]
    key = segment.key(TRUNK, manifest.topic_id, 0, "log")
    data = bytearray(reader.store.get(key))
    at = len(first.build())
    data[at + 61 + 4] = 0x7E  # the second record's key length: past the record
    set_log_append_time(data, at, 1_700_000_000_000)  # and its batch CRC made right again
    reader.store.put_bytes(key, bytes(data))
    with pytest.raises(RemoteSegmentCorruptError) as today:
        list(_today(reader, TRUNK, manifest, 1, None, 100))
    with pytest.raises(RemoteSegmentCorruptError) as columnar:
        list(_columnar(reader, TRUNK, manifest, 1, None, 100))
    assert str(columnar.value) == str(today.value)
    assert f"position {at}" in str(columnar.value)


def test_control_batches_alone_yield_no_batch(tmp_path: Path, compiled: bool) -> None:
    marker = BatchBuilder(is_control=True)
    marker.append(b"\x00\x00\x00\x00", key=b"\x00\x00\x00\x00")
    reader, manifest = _partition(tmp_path, TRUNK, Appended(batches=[marker.build()]))
    assert list(_columnar(reader, TRUNK, manifest, None, None, 100)) == []


def test_no_records_make_an_empty_batch_of_the_schema() -> None:
    batch = columns_batch(TRUNK, 0, decode_columns(b"", pick_header="x-lane"))
    batch.validate(full=True)
    assert batch.schema == SCHEMA
    assert batch.num_rows == 0


def test_a_timestamp_past_what_microseconds_hold_reads_as_null() -> None:
    """A producer's timestamp in ns sent as ms (any int64 is accepted) still reads."""
    import pyarrow as pa

    from spark.columns import _MILLIS, _micros

    millis = pa.array([1, -5, 2**62, -(2**63), (2**63 - 1) // 1000], pa.int64()).cast(_MILLIS)
    got = _micros(millis).cast(pa.int64()).to_pylist()
    assert got == [1000, -5000, None, None, (2**63 - 1) // 1000 * 1000]

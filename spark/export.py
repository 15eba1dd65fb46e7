"""The Parquet export's transforms and its per-chunk task (pyarrow; no Spark here).

A chunk's records become rows of these columns, in offset order:

    topic, partition, offset, timestamp, key, lane, headers,
    then the fields (``json``: one typed column per declared or inferred field)
    or ``value`` (``raw``: the bytes as they are)

A ``json`` record that does not fit (a tombstone, not JSON, not an object, a field of
the wrong type: ``spark.fields``) is not a row: it goes, with its raw value and the
reason, to the chunk's dead-letter file and is counted. A field that is absent or null
is a null, not a dead letter. Rows are grouped into folders by their timestamp (UTC):
``date=YYYY-MM-DD/hour=HH/`` as ``partition_by`` asks, one file per folder per chunk.

Files (names: ``chunks.Chunk.name``)::

    <target>/<date=…/hour=…/><topic>-<p>-<start>-<end>.parquet
    <target>/_dead_letters/<topic>-<p>-<start>-<end>.deadletter.parquet

Thread safety: pure functions.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from dataplane.tiered.reader import TopicStoreReader
from dataplane.tiered.store import ObjectStore
from spark.chunks import Chunk, chunk_table
from spark.fields import extract
from spark.jobs.spec import FIELD_TYPES, PARTITION_COLUMNS, VALUE_FORMATS, ExportSpec, Field
from spark.manifests import OutputFile
from spark.output import ChunkResult, write_parquet

RECORD_COLUMNS: Final = ("topic", "partition", "offset", "timestamp", "key", "lane", "headers")
RESERVED: Final = frozenset({*RECORD_COLUMNS, "value", *PARTITION_COLUMNS, "reason"})
DEAD_LETTER_FOLDER: Final = "_dead_letters"
_US_PER = {"hour": 3_600_000_000, "date": 86_400_000_000}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Hive's folder for a partition value that is null (here: a timestamp no date holds).
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"


class InvalidSpecError(ValueError):
    """A specification no job can run; the message says why."""


def definition(spec: ExportSpec) -> dict[str, Any]:
    """What the output depends on (the manifest's ``definition``), the export itself
    included: an export re-created on the target of a deleted one (a new id) must not
    take the old one's coverage for its own."""
    return {
        "export_id": spec.export_id,
        "topic": spec.topic,
        "value_format": spec.value_format,
        "fields": [asdict(f) for f in spec.fields],
        "partition_by": list(spec.partition_by),
        "include_lanes": spec.include_lanes,
    }


def check_spec(spec: ExportSpec) -> None:
    """``InvalidSpecError`` unless ``spec`` describes a runnable export."""
    if spec.value_format not in VALUE_FORMATS:
        raise InvalidSpecError(f"value_format {spec.value_format!r}: one of {VALUE_FORMATS}")
    if spec.value_format == "raw" and spec.fields:
        raise InvalidSpecError("a raw export has no fields")
    if list(spec.partition_by) != [c for c in PARTITION_COLUMNS if c in spec.partition_by]:
        raise InvalidSpecError(f"partition_by {list(spec.partition_by)}: from {PARTITION_COLUMNS}")
    check_fields(spec.fields, RESERVED)


def check_fields(fields: tuple[Field, ...], reserved: frozenset[str]) -> None:
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise InvalidSpecError(f"field names repeat: {names}")
    for f in fields:
        if f.type not in FIELD_TYPES:
            raise InvalidSpecError(f"field {f.name}: type {f.type!r} is not one of {FIELD_TYPES}")
        if not f.name or f.name in reserved:
            raise InvalidSpecError(f"field name {f.name!r} is empty or taken by a column")
        if not f.path or any(not step for step in f.path.split(".")):
            raise InvalidSpecError(f"field {f.name}: path {f.path!r} has an empty step")


def export_tables(
    table: pa.Table, value_format: str, fields: tuple[Field, ...]
) -> tuple[pa.Table, pa.Table]:
    """(the rows, the dead letters: record columns, ``value`` and ``reason``)."""
    records = table.select(list(RECORD_COLUMNS))
    if value_format == "raw":
        raw = records.append_column("value", table.column("value"))
        return raw, _dead_letters(table.slice(0, 0), [])
    extraction = extract(table.column("value").to_pylist(), fields)
    mask = extraction.fits()
    rows = records
    for f in fields:
        rows = rows.append_column(f.name, extraction.columns[f.name])
    if extraction.clean:
        return rows, _dead_letters(table.slice(0, 0), [])
    reasons = [extraction.reason(row) for row, ok in enumerate(mask.to_pylist()) if not ok]
    return rows.filter(mask), _dead_letters(table.filter(pc.invert(mask)), reasons)


def _dead_letters(table: pa.Table, reasons: list[str | None]) -> pa.Table:
    kept = table.select([*RECORD_COLUMNS, "value"])
    return kept.append_column("reason", pa.array(reasons, pa.string()))


def time_folders(table: pa.Table, partition_by: tuple[str, ...]) -> list[tuple[str, pa.Table]]:
    """``table``'s rows by folder (``date=…/hour=…/``, or ``""`` for no partitioning),
    folders in time order, rows in their order. A row whose timestamp is null or past the
    years 1 to 9999 goes to Hive's default partition (``date=__HIVE_DEFAULT_PARTITION__/``)."""
    if not partition_by or table.num_rows == 0:
        return [("", table)] if table.num_rows else []
    unit = _US_PER["hour" if "hour" in partition_by else "date"]
    micros = table.column("timestamp").cast(pa.int64())
    truncated = pc.divide(micros, unit)  # integer division: towards zero
    below = pc.and_(pc.less(micros, 0), pc.not_equal(pc.multiply(truncated, unit), micros))
    buckets = pc.subtract(truncated, pc.cast(below, pa.int64()))
    found = []
    for bucket in sorted(pc.unique(buckets).drop_null().to_pylist()):
        rows = table.filter(pc.equal(buckets, bucket))
        found.append((_folder(bucket * unit, partition_by), rows))
    missing = table.filter(pc.is_null(buckets))
    if missing.num_rows:
        found.append((_folder(None, partition_by), missing))
    return _merged(found)


def _folder(micros: int | None, partition_by: tuple[str, ...]) -> str:
    try:
        moment = None if micros is None else _EPOCH + timedelta(microseconds=micros)
    except OverflowError:
        moment = None
    if moment is None:
        return "/".join(f"{c}={DEFAULT_PARTITION}" for c in partition_by) + "/"
    named = {"date": f"date={moment:%Y-%m-%d}", "hour": f"hour={moment:%H}"}
    return "/".join(named[c] for c in partition_by) + "/"


def _merged(found: list[tuple[str, pa.Table]]) -> list[tuple[str, pa.Table]]:
    """One table per folder (buckets out of range share the default partition, which
    comes last), the others in the order they first appear, rows in offset order."""
    folders: dict[str, list[pa.Table]] = {}
    for folder, rows in found:
        folders.setdefault(folder, []).append(rows)
    ordered = sorted(folders.items(), key=lambda item: DEFAULT_PARTITION in item[0])
    return [
        (folder, parts[0] if len(parts) == 1 else pa.concat_tables(parts).sort_by("offset"))
        for folder, parts in ordered
    ]


def export_chunk(spec: ExportSpec, fields: tuple[Field, ...], chunk: Chunk) -> ChunkResult:
    """The task: read ``chunk`` from the store, write its files to the target."""
    reader = TopicStoreReader(spec.store_uri, spec.store_options)
    target = ObjectStore.open(spec.target_uri, spec.target_options)
    rows, dead = export_tables(chunk_table(reader, chunk), spec.value_format, fields)
    files = []
    for folder, part in time_folders(rows, spec.partition_by):
        path = f"{folder}{chunk.name}.parquet"
        size = write_parquet(target, path, part)
        files.append(_entry(chunk, path, part.num_rows, size, "data"))
    if dead.num_rows:
        path = f"{DEAD_LETTER_FOLDER}/{chunk.name}.deadletter.parquet"
        size = write_parquet(target, path, dead)
        files.append(_entry(chunk, path, dead.num_rows, size, "dead_letter"))
    counts = {
        "rows": rows.num_rows,
        "dead_letter_rows": dead.num_rows,
        "bytes": sum(f.bytes for f in files),
        "files": len(files),
    }
    return ChunkResult(chunk.key, chunk.end, files, counts)


def _entry(chunk: Chunk, path: str, rows: int, size: int, kind: str) -> OutputFile:
    return OutputFile(path, chunk.topic, chunk.partition, chunk.start, chunk.end, rows, size, kind)

"""The secondary index's files and its per-chunk task (pyarrow; no Spark here).

For each field of an ``IndexSpec`` and each chunk, one file::

    <target>/<field>/<topic>-<p>-<start>-<end>.parquet

holding a row per record of the chunk whose field has a value of the field's type
(``spark.fields``), sorted by ``(indexed_value, timestamp, partition, offset)``, in row
groups of ``ROW_GROUP_ROWS`` (so a lookup of one value reads the few row groups whose
min/max statistics include it). Columns: ``indexed_value`` (the field's Arrow type),
then the whole record, so a query never goes back to the topic: ``topic``, ``partition``,
``offset``, ``timestamp``, ``key``, ``value``, ``headers``, ``lane`` (``spark.columns``).

Records not indexed are counted per field in the manifest: ``missing.<field>`` (absent
or null), ``wrong_type.<field>``; and once per record ``tombstones`` and
``not_objects`` (not JSON or not a JSON object). ``indexed.<field>`` counts the rows.

Thread safety: pure functions.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from dataplane.tiered.reader import TopicStoreReader
from dataplane.tiered.store import ObjectStore
from spark.chunks import Chunk, chunk_table
from spark.columns import SCHEMA
from spark.export import InvalidSpecError, check_fields
from spark.fields import TOMBSTONE, Extraction, extract
from spark.jobs.spec import Field, IndexSpec
from spark.manifests import OutputFile
from spark.output import ChunkResult, write_parquet

ROW_GROUP_ROWS: Final = 4096
# Index files are read far more often than written, from object stores too: smaller wins.
COMPRESSION: Final = "zstd"
VALUE_COLUMN: Final = "indexed_value"
SORT_KEYS: Final = [
    (VALUE_COLUMN, "ascending"),
    ("timestamp", "ascending"),
    ("partition", "ascending"),
    ("offset", "ascending"),
]


def definition(spec: IndexSpec) -> dict[str, Any]:
    """What the index depends on (the manifest's ``definition``)."""
    return {
        "topic": spec.topic,
        "value_format": spec.value_format,
        "fields": [asdict(f) for f in spec.fields],
        "include_lanes": spec.include_lanes,
    }


def check_spec(spec: IndexSpec) -> None:
    """``InvalidSpecError`` unless ``spec`` describes a buildable index."""
    if spec.value_format != "json":
        raise InvalidSpecError("an index reads JSON values (value_format json)")
    if not spec.fields:
        raise InvalidSpecError("an index declares at least one field")
    check_fields(spec.fields, frozenset())
    if any("/" in f.name or f.name.startswith(("_", ".")) for f in spec.fields):
        raise InvalidSpecError("an index field's name is its folder: no '/', no leading '_' or '.'")


def index_table(table: pa.Table, extraction: Extraction, field: Field) -> pa.Table:
    """The index rows of ``field`` for the records of ``table``, sorted."""
    values = extraction.columns[field.name]
    keep = pc.is_valid(values)
    rows = table.filter(keep).select(SCHEMA.names)
    rows = rows.add_column(0, VALUE_COLUMN, values.filter(keep))
    return rows.sort_by(SORT_KEYS)


def counts(extraction: Extraction, fields: tuple[Field, ...]) -> dict[str, int]:
    """What was indexed and what was not, by reason (see the module docstring)."""
    unparsed = sum(1 for e in extraction.record_errors if e is not None)
    found = {
        "tombstones": sum(1 for e in extraction.record_errors if e == TOMBSTONE),
        "not_objects": sum(1 for e in extraction.record_errors if e and e != TOMBSTONE),
    }
    for f in fields:
        wrong = sum(1 for e in extraction.field_errors[f.name] if e is not None)
        indexed = len(extraction.columns[f.name]) - extraction.columns[f.name].null_count
        found[f"indexed.{f.name}"] = indexed
        found[f"wrong_type.{f.name}"] = wrong
        found[f"missing.{f.name}"] = len(extraction.record_errors) - unparsed - indexed - wrong
    return found


def index_chunk(spec: IndexSpec, chunk: Chunk) -> ChunkResult:
    """The task: read ``chunk`` from the store, write one index file per field."""
    reader = TopicStoreReader(spec.store_uri, spec.store_options)
    target = ObjectStore.open(spec.target_uri, spec.target_options)
    table = chunk_table(reader, chunk)
    extraction = extract(table.column("value").to_pylist(), spec.fields)
    files = []
    for f in spec.fields:
        rows = index_table(table, extraction, f)
        if rows.num_rows == 0:
            continue
        path = f"{f.name}/{chunk.name}.parquet"
        size = write_parquet(target, path, rows, ROW_GROUP_ROWS, COMPRESSION)
        files.append(
            OutputFile(
                path,
                chunk.topic,
                chunk.partition,
                chunk.start,
                chunk.end,
                rows.num_rows,
                size,
                "index",
                f.name,
            )
        )
    found = counts(extraction, spec.fields)
    found.update(rows=table.num_rows, bytes=sum(f.bytes for f in files), files=len(files))
    return ChunkResult(chunk.key, chunk.end, files, found)


__all__ = ["InvalidSpecError", "check_spec", "definition", "index_chunk"]

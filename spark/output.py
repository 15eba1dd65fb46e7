"""Writing a job's Parquet files to its target, and what a chunk's task reports back.

A file is written whole or not at all, under a name that is a pure function of its
chunk (``chunks.Chunk.name``): through ``ObjectStore.put_bytes`` (a local folder writes a
temporary file, fsyncs and renames it; an object store takes one PUT). Writing a name
again (a re-run) replaces the file with the same rows.

Thread safety: pure functions; the store is thread-safe.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from dataplane.tiered.store import ObjectStore
from spark.manifests import OutputFile


@dataclass(frozen=True)
class ChunkResult:
    """What a task wrote for one chunk: its files and its counts (``rows``,
    ``dead_letter_rows``, ``missing.<field>``...)."""

    key: str  # <topic>/<partition>
    end: int
    files: list[OutputFile] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


def write_parquet(
    store: ObjectStore,
    key: str,
    table: pa.Table,
    row_group_rows: int | None = None,
    compression: str = "snappy",
) -> int:
    """Write ``table`` as a Parquet file under ``key``; its size in bytes."""
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=row_group_rows, compression=compression)
    data = buffer.getvalue()
    store.put_bytes(key, data)
    return len(data)

"""Running the jobs in-process on the shared session, and reading their output back
through the latest manifest, as a reader without Meridian would."""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dataplane.tiered.store import ObjectStore
from spark import manifests
from spark.jobs.spec import ExportSpec, IndexSpec, JobResult
from spark.manifests import OutputManifest
from tests.spark.jobs.topics import Row, TieredTopic, order, orders


@dataclass
class Source:
    """The store of the tests' topic: ``acme.orders`` (2 partitions) and its lane ``eu``."""

    uri: str
    parts: dict[str, list[TieredTopic]]

    def good(self, topic: str = "acme.orders") -> set[tuple[str, int, int]]:
        """(topic, partition, offset) of the sealed records that fit ``FIELDS``."""
        return {
            (topic, p.partition, r.offset)
            for p in self.parts[topic]
            for r in p.records(0, p.store_end)
            if _fits(r.value)
        }


def _fits(value: bytes | None) -> bool:
    try:
        body = json.loads(value) if value is not None else None
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("amount"), int | float)


def bad_rows(start: int) -> list[Row]:
    """Records that do not fit, and one that lacks a field (which fits)."""
    return [
        Row(b"not json", timestamp=start),
        Row(b"[1, 2]", timestamp=start),
        Row(None, key=b"gone", timestamp=start),
        Row(order(start, amount="12.5"), timestamp=start),  # a field changed type
        Row(b'{"country": "fr", "amount": 1}', timestamp=start),  # no user: a null
    ]


def build_source(root: Path) -> Source:
    store = ObjectStore.open(str(root / "store"))
    parts: dict[str, list[TieredTopic]] = {"acme.orders": [], "acme.orders~eu": []}
    for partition in (0, 1):
        part = TieredTopic(store, root / "logs", "acme.orders", partition)
        rows = orders(partition * 1500, 1500)
        if partition == 0:  # a field most records lack
            rows = [
                Row(order(n, coupon=f"c{n % 3}"), r.key, r.timestamp, r.headers)
                if n % 50 == 0
                else r
                for n, r in enumerate(rows)
            ]
        if partition == 1:
            rows[700:700] = bad_rows(rows[700].timestamp)
            # the type of ``amount`` changes for the last records
            rows[-40:] = [
                Row(order(n, amount=str(n)), timestamp=r.timestamp)
                for n, r in enumerate(rows[-40:])
            ]
        part.produce(rows, control_every=6)
        part.seal()
        part.produce(orders(9000, 30))  # unsealed: the brokers' tail
        parts["acme.orders"].append(part)
    lane = TieredTopic(store, root / "logs", "acme.orders~eu", 0)
    lane.produce(orders(5000, 300))
    lane.seal()
    parts["acme.orders~eu"].append(lane)
    return Source(store.uri, parts)


def run_job(
    module: Any, spec: ExportSpec | IndexSpec, folder: Path, spark: Any
) -> tuple[int, JobResult]:
    """``module.main`` on ``spec`` (written to a file in ``folder``): (exit status, the
    last line it printed)."""
    path = folder / f"spec-{uuid.uuid4().hex}.json"
    path.write_text(spec.to_json())
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = module.main(["--spec", str(path)], spark)
    return code, JobResult.from_json(printed.getvalue().strip().splitlines()[-1])


def latest(uri: str, options: dict[str, Any] | None = None) -> OutputManifest:
    found = manifests.read_latest(ObjectStore.open(uri, options))
    assert found is not None
    return found


def read_files(
    uri: str, kind: str, options: dict[str, Any] | None = None
) -> Iterator[tuple[str, pa.Table]]:
    store = ObjectStore.open(uri, options)
    for entry in latest(uri, options).files:
        if entry.kind == kind:
            with store.fs.open(store.path(entry.path), "rb") as f:
                yield entry.path, pq.ParquetFile(f).read()


def rows_of(
    uri: str, kind: str = "data", options: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Every row of the listed files of ``kind``, in (topic, partition, offset) order."""
    tables = [t for _, t in read_files(uri, kind, options)]
    rows = [row for t in tables for row in t.to_pylist()]
    return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"]))

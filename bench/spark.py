"""The Spark jobs' speed: Parquet export and index build from the object store, and Index
Query latency.

Run ``.venv/bin/python bench/spark.py [--records N] [--index-records M] [--quick]``.

- The input: ``--records`` (1 M) JSON values of 200 bytes (``user.id``, ``country``,
  ``amount``, ``paid``, padding) in two partitions, appended to partition logs and their
  sealed segments uploaded to a local-folder store with tiered storage's own code.
- export: ``spark.jobs.export`` (a run of the job, in this process's local session,
  workers warmed by a run on a small topic first): three typed fields and the record
  columns, by date and hour, to Parquet in a local folder; records/s from the store to
  committed Parquet files. Beside it, on the same values as one NDJSON file on local disk,
  Spark's own ``spark.read.json(...).write.parquet(...)``, with the schema given and with
  it inferred.
- index build: ``spark.jobs.index`` on two fields (long, string) of the same records.
- index query: ``spark.query.query_index`` for one user id among 100 k (about a 100-row
  answer) over an index of ``--index-records`` (10 M) records; p50/p99 of 200 queries.
  That index's files are written **synthetically** with pyarrow (the layout, sorting,
  row groups and manifest the index job writes; the values are not produced through a
  topic), to save the time of building 10 M records through the job.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa
import pyarrow.compute as pc

from bench.benchkit import num, print_table, progress, ratio
from dataplane.records import BatchBuilder
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.log import PartitionLog
from dataplane.tiered import manifests as tiered_manifests
from dataplane.tiered.layout import Manifest
from dataplane.tiered.store import ObjectStore
from dataplane.tiered.upload import upload_segment
from spark import index as index_files
from spark import manifests
from spark.chunks import CHUNK_OFFSETS
from spark.columns import SCHEMA
from spark.jobs import export as export_job
from spark.jobs import index as index_job
from spark.jobs.run import run_once
from spark.jobs.spec import ExportSpec, Field, IndexSpec
from spark.manifests import OutputFile, OutputManifest
from spark.output import write_parquet
from spark.query import query_index

AIM_EXPORT_RECORDS_S = 300_000
AIM_QUERY_P99_MS = 200.0
VALUE_BYTES = 200
USERS = 100_000
TOPIC = "acme.orders"
BASE_MS = 1_764_300_000_000
FIELDS = (
    Field("user_id", "user.id", "long"),
    Field("country", "country", "string"),
    Field("amount", "amount", "double"),
)


def value(n: int) -> bytes:
    body = {"user": {"id": n % USERS}, "country": ("fr", "de", "us")[n % 3], "amount": n * 0.25}
    body["paid"] = n % 2 == 0
    text = json.dumps(body)
    return (text[:-1] + ', "note": "' + "x" * (VALUE_BYTES - len(text) - 13) + '"}').encode()


def build_store(root: Path, records: int) -> tuple[str, list[bytes]]:
    """``records`` values in two partitions of a tiered topic; (store URI, the values)."""
    store = ObjectStore.open(str(root / "store"))
    values = [value(n) for n in range(records)]
    config = LogConfig(max_segment_bytes=64 * 1024 * 1024, durability=Durability.NEVER)
    for partition in (0, 1):
        log = PartitionLog.open(root / f"log-{partition}", config)
        mine = values[partition::2]
        for start in range(0, len(mine), 500):
            builder = BatchBuilder()
            for k, v in enumerate(mine[start : start + 500]):
                builder.append(v, key=None, timestamp=BASE_MS + (start + k) * 5)
            log.append(builder.build())
        log.roll()
        manifest = Manifest(topic=TOPIC, partition=partition, topic_id="1")
        remote = [
            upload_segment(
                store, TOPIC, "1", partition, s, start_offset=s.base_offset, sidecars={}, now_ms=0
            )
            for s in log.segments
            if s.sealed and not s.is_empty
        ]
        assert tiered_manifests.commit(
            store, manifest.next_version(remote, broker_id=1, leader_epoch=0, now_ms=0)
        )
        log.close()
    return store.uri, values


def timed_job(spark: object, job: object, spec: object) -> tuple[float, int]:
    started = time.perf_counter()
    result = run_once(spark, job, spec)  # type: ignore[arg-type]
    return time.perf_counter() - started, result.rows


def spark_json(spark: object, root: Path, values: list[bytes], infer: bool) -> float:
    source = root / "values.ndjson"
    if not source.exists():
        source.write_bytes(b"\n".join(values) + b"\n")
    out = root / f"spark-json-{infer}"
    shutil.rmtree(out, ignore_errors=True)
    ddl = "user struct<id: bigint>, country string, amount double, paid boolean, note string"
    started = time.perf_counter()
    reader = spark.read if infer else spark.read.schema(ddl)  # type: ignore[attr-defined]
    reader.json(str(source)).write.parquet(str(out))
    return time.perf_counter() - started


def synthetic_index(root: Path, records: int) -> IndexSpec:
    """An index of ``records`` records on ``user_id`` written as the index job writes it."""
    spec = IndexSpec(
        index_id="bench",
        topic=TOPIC,
        store_uri=str(root / "empty-store"),
        target_uri=str(root / "big-index"),
        fields=(FIELDS[0],),
    )
    store = ObjectStore.open(spec.target_uri)
    rng = random.Random(7)
    files, covered = [], {}
    pad = "x" * (VALUE_BYTES - 30)
    for number, start in enumerate(range(0, records, CHUNK_OFFSETS)):
        partition, end = number % 2, min(records, start + CHUNK_OFFSETS)
        count = end - start
        users = pa.array([rng.randrange(USERS) for _ in range(count)], pa.int64())
        offsets = pa.array(range(start, end), pa.int64())
        values = pc.binary_join_element_wise(
            '{"user": {"id": ', users.cast(pa.string()), '}, "note": "' + pad + '"}', ""
        ).cast(pa.binary())
        table = pa.table(
            {
                "indexed_value": users,
                "topic": pa.array([TOPIC] * count, pa.string()),
                "partition": pa.array([partition] * count, pa.int32()),
                "offset": offsets,
                "timestamp": pc.multiply(pc.add(offsets, BASE_MS), 1000).cast(
                    SCHEMA.field("timestamp").type
                ),
                "key": pa.nulls(count, pa.binary()),
                "value": values,
                "headers": pa.array([[]] * count, SCHEMA.field("headers").type),
                "lane": pa.nulls(count, pa.string()),
            }
        ).sort_by(index_files.SORT_KEYS)
        path = f"user_id/{TOPIC}-{partition}-{start:020d}-{end:020d}.parquet"
        size = write_parquet(
            store, path, table, index_files.ROW_GROUP_ROWS, index_files.COMPRESSION
        )
        files.append(
            OutputFile(path, TOPIC, partition, start, end, count, size, "index", "user_id")
        )
        covered[f"{TOPIC}/{partition}"] = end
    empty = OutputManifest("index", index_files.definition(spec))
    manifests.commit(store, empty.next_version(files, covered, {}, {}, now_ms=0))
    return spec


def query_latencies(spec: IndexSpec, queries: int) -> tuple[list[float], float]:
    rng = random.Random(11)
    for _ in range(5):  # warm the file cache and the imports
        query_index(spec, field="user_id", value=str(rng.randrange(USERS)))
    latencies, rows = [], 0
    for _ in range(queries):
        started = time.perf_counter()
        answer = query_index(spec, field="user_id", value=str(rng.randrange(USERS)), limit=100)
        latencies.append((time.perf_counter() - started) * 1000)
        rows += len(answer.records)
    return sorted(latencies), rows / queries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--index-records", type=int, default=10_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="200 k records, a 2 M index")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.index_records = 200_000, 2_000_000
    root = Path(tempfile.mkdtemp(prefix="meridian-bench-spark-", dir=args.dir))
    try:
        run(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def run(root: Path, args: argparse.Namespace) -> None:
    from spark.session import local_session

    progress(f"building a tiered topic of {args.records:,} records")
    uri, values = build_store(root, args.records)
    warm_uri, warm_values = build_store(root / "warm", 2_000)
    spark = local_session("meridian-bench")
    spark.sparkContext.setLogLevel("ERROR")
    with contextlib.redirect_stdout(sys.stderr):
        warm = ExportSpec("w", TOPIC, warm_uri, str(root / "warm-out"), fields=FIELDS)
        run_once(spark, export_job.JOB, warm)
        spark_json(spark, root / "warm", warm_values, infer=False)
        progress("export")
        spec = ExportSpec(
            "e", TOPIC, uri, str(root / "export"), fields=FIELDS, partition_by=("date", "hour")
        )
        export_s, rows = timed_job(spark, export_job.JOB, spec)
        assert rows == args.records, rows
        progress("index build")
        ispec = IndexSpec("i", TOPIC, uri, str(root / "index"), fields=FIELDS[:2])
        index_s, _ = timed_job(spark, index_job.JOB, ispec)
        progress("Spark's own JSON to Parquet")
        given_s = spark_json(spark, root, values, infer=False)
        inferred_s = spark_json(spark, root, values, infer=True)
    progress(f"a synthetic index of {args.index_records:,} records")
    big = synthetic_index(root, args.index_records)
    latencies, per_answer = query_latencies(big, args.queries)
    spark.stop()
    n = args.records
    export_rate = n / export_s
    print(
        f"\nbench/spark.py on {platform.node()}: {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {n:,} JSON records of {VALUE_BYTES} bytes "
        "in 2 partitions (local-folder store and target)"
    )
    print_table(
        "Store to Parquet",
        ["case", "records/s", "seconds", "vs aim 300k"],
        [
            [
                "export (spark.jobs.export, 3 typed fields, date/hour folders)",
                num(export_rate),
                f"{export_s:.1f}",
                ratio(export_rate, AIM_EXPORT_RECORDS_S),
            ],
            [
                "Spark's own read.json(schema given).write.parquet",
                num(n / given_s),
                f"{given_s:.1f}",
                ratio(n / given_s, AIM_EXPORT_RECORDS_S),
            ],
            [
                "Spark's own read.json(schema inferred).write.parquet",
                num(n / inferred_s),
                f"{inferred_s:.1f}",
                ratio(n / inferred_s, AIM_EXPORT_RECORDS_S),
            ],
            ["index build (spark.jobs.index, 2 fields)", num(n / index_s), f"{index_s:.1f}", "-"],
        ],
    )
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    print_table(
        f"Index Query over {args.index_records:,} records "
        "(index files written synthetically with pyarrow, as the index job lays them out)",
        ["queries", "rows/answer", "p50 ms", "p99 ms", "aim p99 ms"],
        [
            [
                str(len(latencies)),
                f"{per_answer:.0f}",
                f"{p50:.1f}",
                f"{p99:.1f}",
                f"{AIM_QUERY_P99_MS:.0f}",
            ]
        ],
    )
    return None


if __name__ == "__main__":
    sys.exit(main())

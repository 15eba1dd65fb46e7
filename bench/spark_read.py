"""DataFrame read throughput of the ``meridian`` Spark data source, from the object store.

A topic of ``--records`` records (200-byte values, in 64 KiB batches, 16 MiB segments) is
written with the storage engine and uploaded to a local-folder store as a leader does
(``bench/tiered.py``'s ``upload_all``); a local SparkSession (``spark.session``) then reads
it with ``spark.read.format("meridian")``, one split per segment:

- ``count()``: every segment fetched and decoded into Arrow batches, Spark counts rows;
- ``write.format("noop")``: the same plus every column materialised in Spark's rows.

Each is run ``--runs`` times after a warm-up read; the best and the median records/s.

``.venv/bin/python bench/spark_read.py`` (``--quick``: 100 k records). Progress goes to
stderr, the report to stdout.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchkit import MiB, num, print_table, progress
from brokerload import batch_records, build_batches
from tiered import upload_all

from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.log import PartitionLog
from dataplane.tiered.store import ObjectStore
from spark.session import local_session

TOPIC = "bench.events"
VALUE_BYTES = 200
BATCH_BYTES = 64 * 1024
SEGMENT_BYTES = 16 * MiB


def write_store(root: Path, records: int) -> tuple[str, int, int]:
    """The store URI, the records and segments it holds."""
    batches = build_batches(VALUE_BYTES, BATCH_BYTES)
    per_batch = batch_records(batches[0])
    config = LogConfig(max_segment_bytes=SEGMENT_BYTES, durability=Durability.NEVER)
    log = PartitionLog.open(root / "log" / f"{TOPIC}-0", config)
    written = 0
    while written < records:
        log.append(batches[(written // per_batch) % len(batches)])
        written += per_batch
    log.flush()
    log.roll()
    uri = str(root / "objects")
    upload_all(ObjectStore.open(uri), log, TOPIC)
    segments = len(log.segments) - 1
    log.close()
    return uri, written, segments


def timed(action: object, runs: int) -> list[float]:
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        action()  # type: ignore[operator]
        seconds.append(time.perf_counter() - started)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (100 k records)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, help="where to put data (default: a temp dir)")
    args = parser.parse_args(argv)
    records = 100_000 if args.quick else args.records
    root = Path(tempfile.mkdtemp(prefix="spark-read-bench-", dir=args.dir))
    try:
        progress(f"writing and uploading {records} records")
        uri, written, segments = write_store(root, records)
        spark = local_session("meridian-bench", memory="2g")
        reader = spark.read.format("meridian").option("topic", TOPIC).option("store", uri)
        assert reader.load().count() == written  # also the warm-up
        progress("count()")
        counts = timed(lambda: reader.load().count(), args.runs)
        progress("write.format('noop')")
        noops = timed(
            lambda: reader.load().write.format("noop").mode("overwrite").save(), args.runs
        )
        spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = [
        [what, num(written / min(s)), num(written / statistics.median(s))]
        for what, s in (("load().count()", counts), ("write.format('noop')", noops))
    ]
    cores = os.cpu_count()
    print(
        f"# Spark DataFrame reads ({cores} CPUs, local[{cores}]; {written} records of "
        f"{VALUE_BYTES} B, {segments} segments of {SEGMENT_BYTES // MiB} MiB, folder store)"
    )
    print_table("Read throughput (records/s)", ["query", "best", "median"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

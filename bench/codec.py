"""The record codec's speed: encode, decode and validate records/s, kafka-python beside it.

Run ``.venv/bin/python bench/codec.py [--records N] [--repeat R]`` (or ``./dev bench
codec``). One thread, no I/O: records of ``--value-bytes`` (100 by default) with no key
and no header, in batches of about ``--batch-bytes`` (16 KiB, Kafka's default
``batch.size``), uncompressed and lz4. Each figure is the best of ``--repeat`` runs over
the same ``--records`` records.

- encode: ``BatchBuilder.append`` per record, then ``build`` per batch (what storage,
  the broker and tests build with; the SDK's ``send`` writes the same bytes inline), and
  ``BatchBuilder.extend`` with a batch's records in one call (the compiled encoder the
  SDK's ``send_batch`` uses; once more with its pure-Python reference), against
  kafka-python's ``DefaultRecordBatchBuilder.append`` and ``build``;
- decode: ``decode_batches`` (every ``Record`` built, headers decoded: storage and the
  broker; the list of records is freed inside the timing, as a reader frees it) and the
  SDK consumer's ``split_batches`` + ``decode_records`` (lazy headers, the dense fast
  path); both run the one record loop, compiled when built, then once more in Python,
  against kafka-python's ``MemoryRecords`` read record by record (key, value, headers
  and offset touched);
- validate: ``validate_batch`` + ``validate_records`` per batch (what a leader runs on a
  client's batches), against kafka-python's ``validate_crc`` plus reading every record
  (kafka-python has no record-level validator; reading is the closest it does); with
  the compiled scan built (``native/``), once more with the pure-Python scan.

The aim (issue: one record codec) is 3 M records/s for encode and decode each; the last
column says how far each figure is from it.

A second table, segment -> Arrow (``--only arrow``): ``--arrow-records`` records of
~200-byte JSON values with keys (every 4th with an ``x-lane`` header), written to a
partition log, its sealed segments uploaded to a folder object store and committed,
then read back as Arrow record batches of the topic schema (``spark.columns.SCHEMA``)
through ``TopicStoreReader`` (the batch walk with its checks, CRC included, is in every
figure): ``segment_batches`` (batches decoded into Arrow buffers, compiled where built),
once more with the Python builder, its reference, and the path through ``Record``
objects (``reader.segment_batches`` + ``record_batches``) it replaced. The Spark export
aims at 300 k records/s end to end, Spark and Parquet included, so this step must be
several times faster than that.
"""

from __future__ import annotations

import argparse
import gc
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from bench.benchkit import num, print_table, progress, ratio
from dataplane.client.decoder import decode_records, split_batches
from dataplane.client.types import RecordSource
from dataplane.records import (
    BatchBuilder,
    Compression,
    builder,
    columns,
    decode_batches,
    decoder,
    iter_batches,
    validate_records,
    validation,
)
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.log import PartitionLog
from dataplane.tiered import manifests
from dataplane.tiered.layout import Manifest
from dataplane.tiered.reader import TopicStoreReader
from dataplane.tiered.store import ObjectStore
from dataplane.tiered.upload import upload_segment
from spark.columns import record_batches, segment_batches

AIM_RECORDS_S = 3_000_000
T0_MS = 1_700_000_000_000
KAFKA_CODECS = {Compression.NONE: 0, Compression.LZ4: 3}


def best_rate(run: Callable[[], int], repeat: int) -> float:
    """Records/s of the fastest of ``repeat`` runs; ``run`` returns the records it did."""
    best = float("inf")
    count = 0
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        count = run()
        best = min(best, time.perf_counter() - start)
    return count / best


def batch_sizes(records: int, per_batch: int) -> list[int]:
    full, rest = divmod(records, per_batch)
    return [per_batch] * full + ([rest] if rest else [])


def encode_ours(sizes: list[int], value: bytes, codec: Compression) -> bytes:
    parts = []
    for size in sizes:
        builder = BatchBuilder(compression=codec, base_timestamp=T0_MS)
        append = builder.append
        for n in range(size):
            append(value, timestamp=T0_MS + n)
        parts.append(builder.build())
    return b"".join(parts)


def extend_ours(sizes: list[int], value: bytes, codec: Compression) -> bytes:
    """``BatchBuilder.extend``: a batch's records in one call (compiled where built)."""
    parts = []
    for size in sizes:
        builder = BatchBuilder(compression=codec, base_timestamp=T0_MS)
        builder.extend([value] * size, now=T0_MS)
        parts.append(builder.build())
    return b"".join(parts)


def extend_python(sizes: list[int], value: bytes, codec: Compression) -> bytes:
    """``extend_ours`` with the pure-Python encoder, the compiled one's reference."""
    compiled, builder.encode_records = builder.encode_records, builder._encode_records
    try:
        return extend_ours(sizes, value, codec)
    finally:
        builder.encode_records = compiled


def encode_kafka(sizes: list[int], value: bytes, codec: Compression) -> bytes:
    parts = []
    for size in sizes:
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=KAFKA_CODECS[codec],
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 30,
        )
        append = builder.append
        for n in range(size):
            append(n, timestamp=T0_MS + n, key=None, value=value, headers=[])
        parts.append(bytes(builder.build()))
    return b"".join(parts)


def decode_sdk(data: bytes) -> int:
    source = RecordSource("t", 0, 0, -1)
    count = 0
    for batch in split_batches(data, 0, ("t", 0)):
        count += len(decode_records(batch, source))
    return count


def in_python(run: Callable[[bytes], int]) -> Callable[[bytes], int]:
    """``run`` with the pure-Python record loop, the compiled one's reference."""

    def python_loop(data: bytes) -> int:
        decoder.COMPILED = False
        try:
            return run(data)
        finally:
            decoder.COMPILED = True

    return python_loop


def decode_eager(data: bytes) -> int:
    return len(decode_batches(data))


def read_kafka(data: bytes) -> int:
    records = MemoryRecords(data)
    count = 0
    while (batch := records.next_batch()) is not None:
        for record in batch:
            _ = (record.offset, record.key, record.value, record.headers)
            count += 1
    return count


def validate_ours(data: bytes) -> int:
    count = 0
    for position, header in iter_batches(data):
        validate_records(data, position, header, check_max_timestamp=True)
        count += header.record_count
    return count


def validate_python(data: bytes) -> int:
    """``validate_ours`` with the pure-Python record scan, the compiled one's reference."""
    compiled, validation.SCAN = validation.SCAN, validation._scan
    try:
        return validate_ours(data)
    finally:
        validation.SCAN = compiled


def validate_kafka(data: bytes) -> int:
    records = MemoryRecords(data)
    count = 0
    while (batch := records.next_batch()) is not None:
        if not batch.validate_crc():
            raise ValueError("kafka-python finds a bad CRC")
        for record in batch:
            _ = (record.offset, record.key, record.value, record.headers)
            count += 1
    return count


def extend_cases(sizes: list[int], value: bytes, codec: Compression, records: int) -> list[Any]:
    """The rows of ``BatchBuilder.extend``: compiled (where built) and pure Python."""
    assert extend_ours(sizes, value, codec) == extend_python(sizes, value, codec)

    def kafka() -> int:
        return len(encode_kafka(sizes, value, codec)) and records

    rows = [
        (
            "encode",
            "BatchBuilder.extend",
            lambda: len(extend_ours(sizes, value, codec)) and records,
            kafka,
        )
    ]
    if builder.COMPILED_ENCODE:
        rows.append(
            (
                "encode",
                "... Python encoder",
                lambda: len(extend_python(sizes, value, codec)) and records,
                kafka,
            )
        )
    return rows  # fmt: skip


def measure(codec: Compression, args: argparse.Namespace) -> list[list[str]]:
    value = b"v" * args.value_bytes
    per_batch = max(1, args.batch_bytes // (args.value_bytes + 8))
    sizes = batch_sizes(args.records, per_batch)
    ours = encode_ours(sizes, value, codec)
    theirs = encode_kafka(sizes, value, codec)
    assert len(decode_batches(ours)) == args.records == read_kafka(theirs) == read_kafka(ours)
    cases = [
        (
            "encode",
            "BatchBuilder",
            lambda: len(encode_ours(sizes, value, codec)) and args.records,
            lambda: len(encode_kafka(sizes, value, codec)) and args.records,
        ),
    ]
    for how, run in (("decode_batches (Record)", decode_eager),
                     ("SDK decode_records (lazy)", decode_sdk)):  # fmt: skip
        cases.append(("decode", how, partial(run, ours), partial(read_kafka, theirs)))
        if decoder.COMPILED:
            cases.append(("decode", "... Python loop", partial(in_python(run), ours),
                          partial(read_kafka, theirs)))  # fmt: skip
    cases.append(("validate", "validate_batch + records", lambda: validate_ours(ours),
                  lambda: validate_kafka(theirs)))  # fmt: skip
    if validation.SCAN is not validation._scan:
        cases.append(("validate", "... Python scan", lambda: validate_python(ours),
                      lambda: validate_kafka(theirs)))  # fmt: skip
    cases[1:1] = extend_cases(sizes, value, codec, args.records)
    rows = []
    for what, how, ours_run, kafka_run in cases:
        progress(f"{codec.name.lower()}: {what} ({how})")
        mine, reference = best_rate(ours_run, args.repeat), best_rate(kafka_run, args.repeat)
        aim = ratio(mine, AIM_RECORDS_S) if what != "validate" else "-"
        rows.append(
            [what, codec.name.lower(), how, num(mine), num(reference), ratio(mine, reference), aim]
        )
    return rows


# --- segment -> Arrow ------------------------------------------------------------------

ARROW_TOPIC = "acme.events"
ARROW_AIM_RECORDS_S = 300_000


def json_value(n: int) -> bytes:
    """A ~200-byte JSON event, as the export's aim is stated for."""
    event = (
        f'{{"user_id":{n % 9973},"event":"page_view","page":"/products/{n % 5000}",'
        f'"session":"s-{n * 2654435761 % 10**12:012d}","ts":"2026-11-28T08:{n % 60:02d}:00Z",'
        f'"referrer":"https://example.com/search?q=item-{n % 777}","ok":true}}'
    )
    return event.encode().ljust(200)


def tiered_store(root: Path, records: int, codec: Compression, batch_bytes: int) -> Manifest:
    """``records`` in a partition log of 8 MiB segments, every one uploaded to a folder
    store under ``root`` and committed in a manifest."""
    config = LogConfig(max_segment_bytes=8 << 20, durability=Durability.NEVER, retention_ms=-1)
    log = PartitionLog.open(root / "log", config)
    try:
        per_batch, n = max(1, batch_bytes // 230), 0
        while n < records:
            batch = BatchBuilder(compression=codec, base_timestamp=T0_MS + n)
            for m in range(n, min(records, n + per_batch)):
                headers = [("x-lane", b"blue")] if m % 4 == 0 else []
                batch.append(json_value(m), key=b"user-%d" % (m % 9973), headers=headers)
            n = min(records, n + per_batch)
            log.append(batch.build())
        log.roll()
        store = ObjectStore.open(str(root / "store"))
        segments = [
            upload_segment(store, ARROW_TOPIC, "1", 0, segment, start_offset=segment.base_offset,
                           sidecars={}, now_ms=T0_MS)
            for segment in log.segments
            if segment.sealed and not segment.is_empty
        ]  # fmt: skip
    finally:
        log.close()
    manifest = manifests.latest(store, ARROW_TOPIC, "1", 0).next_version(
        segments, broker_id=1, leader_epoch=0, now_ms=T0_MS
    )
    assert manifests.commit(store, manifest)
    return manifest


def arrow_columnar(reader: TopicStoreReader, manifest: Manifest) -> int:
    return sum(
        batch.num_rows
        for segment in manifest.segments
        for batch in segment_batches(reader, ARROW_TOPIC, 0, manifest, segment)
    )


def arrow_reference(reader: TopicStoreReader, manifest: Manifest) -> int:
    """``arrow_columnar`` with the Python builder, the compiled one's reference."""
    compiled, columns.COMPILED = columns.COMPILED, False
    try:
        return arrow_columnar(reader, manifest)
    finally:
        columns.COMPILED = compiled


def arrow_records(reader: TopicStoreReader, manifest: Manifest) -> int:
    """The path through ``Record`` objects: ``reader.segment_batches`` + ``record_batches``."""
    count = 0
    for segment in manifest.segments:
        rows = (
            record
            for header, batch in reader.segment_batches(manifest, segment)
            if not header.is_control
            for record in batch
        )
        count += sum(batch.num_rows for batch in record_batches(ARROW_TOPIC, 0, rows))
    return count


def measure_arrow(codec: Compression, args: argparse.Namespace) -> list[list[str]]:
    with tempfile.TemporaryDirectory(prefix="meridian-arrow-bench-") as root:
        manifest = tiered_store(Path(root), args.arrow_records, codec, args.batch_bytes)
        reader = TopicStoreReader(str(Path(root) / "store"))
        cases = [("segment_batches (columns)", arrow_columnar)]
        if columns.COMPILED:
            cases.append(("... Python builder", arrow_reference))
        cases.append(("Records + record_batches", arrow_records))
        rates = {}
        for how, run in cases:
            progress(f"segment -> Arrow, {codec.name.lower()}: {how}")
            assert run(reader, manifest) == args.arrow_records
            rates[how] = best_rate(partial(run, reader, manifest), args.repeat)
    today = rates["Records + record_batches"]
    return [
        [codec.name.lower(), how, num(rate), ratio(rate, today), ratio(rate, ARROW_AIM_RECORDS_S)]
        for how, rate in rates.items()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batch-bytes", type=int, default=16 * 1024)
    parser.add_argument("--arrow-records", type=int, default=200_000)
    parser.add_argument("--only", choices=["codec", "arrow"], default=None)
    args = parser.parse_args(argv)
    if args.only != "arrow":
        print_codec(args)
    if args.only != "codec":
        print_arrow(args)
    return 0


def print_arrow(args: argparse.Namespace) -> None:
    builder_kind = "compiled" if columns.COMPILED else "pure Python"
    print(
        f"segment -> Arrow: {args.arrow_records:,} records of ~200 B JSON with keys, every "
        f"4th with an x-lane header, batches of ~{args.batch_bytes // 1024} KiB, 8 MiB "
        f"segments in a folder store, best of {args.repeat}; column builder: {builder_kind}"
    )
    rows = []
    for codec in (Compression.NONE, Compression.LZ4):
        rows += measure_arrow(codec, args)
    headers = ["codec", "path", "records/s", "vs Records path", "vs 300 k/s"]
    print_table("Segment -> Arrow record batches, one thread (records/s)", headers, rows)


def print_codec(args: argparse.Namespace) -> None:
    scan = "pure Python" if validation.SCAN is validation._scan else "compiled"
    scan += ", record loop: " + ("compiled" if decoder.COMPILED else "pure Python")
    scan += ", encoder: " + ("compiled" if builder.COMPILED_ENCODE else "pure Python")
    print(
        f"codec benchmark: {args.records:,} records of {args.value_bytes} B in batches of "
        f"~{args.batch_bytes // 1024} KiB, best of {args.repeat}; Python "
        f"{platform.python_version()}, {platform.machine()}; record scan: {scan}"
    )
    rows = []
    for codec in (Compression.NONE, Compression.LZ4):
        rows += measure(codec, args)
    headers = ["what", "codec", "Meridian", "records/s", "kafka-python/s", "vs kafka", "vs aim"]
    print_table("Record codec, one thread (records/s)", headers, rows)


if __name__ == "__main__":
    sys.exit(main())

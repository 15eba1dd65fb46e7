"""A short tour of the storage engine: ``./dev run``.

Creates a data directory, appends batches of records to a few partition logs through the
log manager (with every durability mode), reads them back, looks records up by offset
and by time, stops without closing (as a crash would), recovers, and prints what each
step did.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

from dataplane.records import BatchBuilder, Compression, decode_batches
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.log import PartitionLog
from dataplane.storage.manager import LogManager

TOPIC = "demo.orders"


def _batch(first: int, count: int, compression: Compression, now_ms: int) -> bytes:
    builder = BatchBuilder(compression=compression)
    for n in range(first, first + count):
        order = {"order": n, "item": f"sku-{n % 17}", "qty": 1 + n % 5}
        builder.append(
            json.dumps(order).encode(),
            key=f"customer-{n % 23}".encode(),
            timestamp=now_ms + n,
            headers=[("x-trace-id", f"{n:08x}".encode())],
        )
    return builder.build()


def _write(manager: LogManager, now_ms: int) -> None:
    codecs = list(Compression)
    for partition, durability in enumerate(Durability):
        config = LogConfig(durability=durability, max_segment_bytes=16 * 1024)
        log = manager.get_or_create_log(TOPIC, partition, config)
        started = time.perf_counter()
        for b in range(40):
            log.append(_batch(b * 25, 25, codecs[b % len(codecs)], now_ms))
        took = time.perf_counter() - started
        print(
            f"  {TOPIC}-{partition}: durability={durability.value:<8} appended 40 batches "
            f"(1,000 records, {log.size_bytes:,} bytes, {len(log.segments)} segments) "
            f"in {took * 1000:.1f} ms; offsets [{log.log_start_offset}, {log.log_end_offset})"
        )


def _read(log: PartitionLog, now_ms: int) -> None:
    result = log.read(0, 1024 * 1024)
    records = decode_batches(result.data)
    print(f"  read from offset 0: {len(records)} records, next offset {result.next_offset}")
    record = next(r for r in decode_batches(log.read(617, 1).data) if r.offset == 617)
    print(f"  offset 617 -> key={record.key!r} value={record.value!r}")
    found = log.offset_for_timestamp(now_ms + 333)
    print(f"  first record at or after timestamp now+333 ms -> offset {found}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, help="keep the data here (default: temp)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # recovery reports are printed below instead
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="meridian-demo-"))
    now_ms = time.time_ns() // 1_000_000
    print(f"Meridian storage demo, data directory {data_dir}\n")

    print("1. Append batches (codecs none/gzip/snappy/lz4/zstd) to three partitions:")
    with LogManager(data_dir) as manager:
        _write(manager, now_ms)
        print("\n2. Read back and look up:")
        log = manager.get_log(TOPIC, 0)
        assert log is not None
        _read(log, now_ms)

    print("\n3. Reopen after a clean shutdown:")
    with LogManager(data_dir) as manager:
        for report in manager.recovery_reports:
            print(f"  {report}")
        log = manager.get_log(TOPIC, 2)
        assert log is not None
        log.append(_batch(1000, 10, Compression.NONE, now_ms))
        crashed = data_dir.with_name(data_dir.name + "-crashed")
        shutil.copytree(data_dir, crashed, ignore=shutil.ignore_patterns(".lock"))
        with (crashed / f"{TOPIC}-2" / f"{log.segments[-1].base_offset:020d}.log").open("ab") as f:
            f.write(_batch(2000, 5, Compression.NONE, now_ms)[:40])  # a torn write

    print("\n4. Recover a copy taken while it was running, with a torn write at its end:")
    with LogManager(crashed) as manager:
        for report in manager.recovery_reports:
            print("  " + str(report).replace("\n", "\n  "))
    print(f"\nDone. Data kept in {data_dir} and {crashed}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

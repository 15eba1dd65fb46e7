"""``meridian-storage``: inspect a partition directory without a broker.

``dump PATH``     one line per segment and, with ``--batches``, per batch
``verify PATH``   CRC-check every batch; exit status 1 if anything is corrupt

Both open the log as a broker would at start: a log that was not closed cleanly is
recovered first, and the recovery report is printed. They refuse to touch a data
directory that a running broker has locked.
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import sys
from pathlib import Path

from dataplane import records
from dataplane.records.errors import CorruptBatchError
from dataplane.storage.errors import StorageError
from dataplane.storage.log import PartitionLog


def _dump(log: PartitionLog, batches: bool) -> None:
    print(
        f"{log.directory}: offsets [{log.log_start_offset}, {log.log_end_offset}), "
        f"{log.size_bytes:,} bytes, {len(log.segments)} segments"
    )
    for segment in log.segments:
        print(
            f"  segment {segment.base_offset:>12}  next {segment.next_offset:>12}  "
            f"{segment.size_bytes:>12,} bytes  max timestamp {segment.max_timestamp}"
        )
        if batches:
            _dump_batches(log, segment.base_offset, segment.next_offset)


def _dump_batches(log: PartitionLog, start: int, end: int) -> None:
    offset = max(start, log.log_start_offset)
    while offset < end:
        result = log.read(offset, 1 << 20, max_offset=end)
        if not result.data:
            return
        for position, header in records.iter_batches(result.data):
            print(
                f"    batch {header.base_offset}..{header.last_offset} "
                f"({header.record_count} records, {header.size} bytes, "
                f"{header.compression.name.lower()}, max ts {header.max_timestamp}, "
                f"producer {header.producer_id}/{header.producer_epoch}/"
                f"{header.base_sequence}) at +{position}"
            )
        offset = result.next_offset


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="meridian-storage", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    dump = commands.add_parser("dump", help="list segments (and batches) of a partition")
    dump.add_argument("path", type=Path)
    dump.add_argument("--batches", action="store_true", help="list every batch too")
    verify = commands.add_parser("verify", help="CRC-check every batch of a partition")
    verify.add_argument("path", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    if not args.path.is_dir() or not any(args.path.glob("*.log")):
        print(f"{args.path}: not a partition directory", file=sys.stderr)
        return 2
    try:
        lock = _lock_data_dir(args.path.resolve().parent)
        log = PartitionLog.open(args.path)
    except (StorageError, CorruptBatchError) as exc:
        print(f"{args.path}: {exc}", file=sys.stderr)
        return 2
    try:
        if not log.recovery.clean_shutdown or log.recovery.repaired:
            print(log.recovery)
        if args.command == "dump":
            _dump(log, args.batches)
            return 0
        corrupt = log.verify()
        for region in corrupt:
            print(f"CORRUPT {region}")
        print(f"{log.directory}: {'corrupt' if corrupt else 'ok'}")
        return 1 if corrupt else 0
    finally:
        log.close()
        if lock is not None:
            os.close(lock)


def _lock_data_dir(data_dir: Path) -> int | None:
    """Take the data directory's lock, as a broker does; refuse while one runs there."""
    lock_path = data_dir / ".lock"
    if not lock_path.exists():
        return None
    fd = os.open(lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StorageError(f"{data_dir} is in use by a running broker; stop it first") from None
    return fd


if __name__ == "__main__":
    raise SystemExit(main())

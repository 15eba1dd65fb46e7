"""Storage engine benchmark: append, group commit, sequential read, lookups, decoding.

Run ``.venv/bin/python bench/storage.py [--quick] [--decode-only] [--dir PATH]``. It
prints its figures;
it is never run as a test. Every engine figure is printed next to a ceiling measured in
the same run on the same file system, and as a ratio to it:

1. Ceilings. A plain Python loop ``os.write``-ing the same prebuilt batches to a new file
   (a) without fsync and (b) with an ``os.fdatasync`` after every write (the call the log
   makes); and a plain loop reading the log's own ``.log`` files (same bytes as (a)) with
   ``os.pread`` in 1 MiB chunks and a CRC-32C check per batch.
2. ``PartitionLog.append`` of prebuilt, uncompressed batches (100 B and 1 KiB values,
   16 KiB and 256 KiB batches), one appender, ``durability`` never / interval (1000 ms) /
   always. never and interval append a fixed volume (interval also runs long enough for
   several flushes); always is time-bound, since every append waits for an fdatasync.
3. ``always`` with 1, 8 and 64 appender threads (group commit), counting fdatasync calls
   by wrapping ``os.fdatasync`` in this process.
4. ``PartitionLog.read(offset, max_bytes=1 MiB)`` over the whole log written by (2) with
   ``never``, following ``ReadResult.next_offset``, from the page cache.
5. Lookup latency on a log of 10 million 100 B records: ``log.read(offset, max_bytes=1)``
   and ``log.offset_for_timestamp(ts)``, each timed call by call, then checked against
   decoded records.
6. Record decoding, what a consumer does with fetched bytes: ``records.decode_batches``
   over about 10,000 records in 16 KiB batches, for several record shapes and codecs
   (records/s of one thread); and, on the same bytes, the record validation a leader
   runs on a client's batches before appending them (``log_append.validate_batches``
   with the record scan of ``dataplane/records/validation.py``). ``--decode-only`` runs
   this section alone; it only uses ``decode_batches`` and ``BatchBuilder`` (and the
   validation where the code has it).

Throughput is in decimal MB/s (10**6 bytes); sizes in KiB/MiB. Where a measurement is
repeated, the median is printed with the min-max range; a ceiling and the engine figure
it is compared with are measured in alternation, so both see the same machine state, and
every page-cache write run starts right after freeing warm pages for it (``prefault``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import hashlib
import importlib
import importlib.util
import itertools
import math
import os
import platform
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crc32c import crc32c

from dataplane.records import BatchBuilder, Compression, decode_batch, decode_batches, read_header
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.log import PartitionLog

KiB = 1024
GROUPED_PER_CALL = 16
MiB = 1024 * KiB
MB = 1e6
READ_MAX_BYTES = 1 * MiB
FLUSH_INTERVAL_MS = 1000
T0_MS = 1_700_000_000_000
POOL_BATCHES = 32
CASES = ((100, 16 * KiB), (1024, 16 * KiB), (100, 256 * KiB), (1024, 256 * KiB))
CONCURRENT_THREADS = (1, 8, 64)

AIM_APPEND_RATIO = 0.80
AIM_GROUP_COMMIT_SPEEDUP = 5.0
AIM_READ_MB_S = 2000.0
AIM_LOOKUP_P99_US = 50.0
AIM_DECODE_RECORDS_S = 1_000_000.0
DECODE_BATCHES = 64
DECODE_RUN_S = 0.3
# label, value bytes, headers (none / same on every record / a unique trace id), codec
DECODE_SHAPES = (
    ("100 B, no headers", 100, "none", Compression.NONE),
    ("100 B, 2 headers, the same on each", 100, "same", Compression.NONE),
    ("100 B, 2 headers, unique trace id", 100, "unique", Compression.NONE),
    ("1 KiB, no headers", 1024, "none", Compression.NONE),
    ("100 B, no headers, gzip", 100, "none", Compression.GZIP),
    ("100 B, no headers, snappy", 100, "none", Compression.SNAPPY),
    ("100 B, no headers, lz4", 100, "none", Compression.LZ4),
    ("100 B, no headers, zstd", 100, "none", Compression.ZSTD),
)

# baseOffset, batchLength, then (skipping 45 bytes) recordCount; crc at byte 17.
_BATCH_FIELDS = struct.Struct(">qi45xi")
_CRC = struct.Struct(">I")
_TIMESTAMPS = struct.Struct(">qq")
_CRC_START = 21
_BASE_TIMESTAMP_AT = 27


@dataclass(frozen=True)
class Sizes:
    append_bytes: int  # per repetition of a never/interval case
    interval_min_s: float  # an interval repetition lasts at least this long
    reps: int
    fsync_s: float  # per repetition of an always case and of the fsync ceiling
    concurrent_s: float
    lookup_records: int
    lookup_segment_bytes: int
    lookups: int
    warmup_lookups: int
    verify_sample: int


FULL = Sizes(512 * MiB, 2.5, 3, 1.0, 1.5, 10_000_000, 128 * MiB, 10_000, 2_000, 500)
QUICK = Sizes(32 * MiB, 1.1, 2, 0.2, 0.3, 1_000_000, 16 * MiB, 2_000, 200, 100)


# -- measurements -------------------------------------------------------------------------
@dataclass
class Run:
    """One timed run: what it moved and how long it took."""

    seconds: float
    nbytes: int = 0
    records: int = 0
    ops: int = 0
    fsyncs: int = 0
    fsync_seconds: float = 0.0  # wall time spent inside os.fdatasync

    @property
    def mb_s(self) -> float:
        return self.nbytes / self.seconds / MB

    @property
    def records_s(self) -> float:
        return self.records / self.seconds

    @property
    def ops_s(self) -> float:
        return self.ops / self.seconds


@dataclass
class Series:
    """Repetitions of one measurement; figures are medians."""

    runs: list[Run] = field(default_factory=list)

    def median(self, attr: str) -> float:
        return float(statistics.median(getattr(r, attr) for r in self.runs))

    def spread(self, attr: str = "mb_s") -> str:
        values = [getattr(r, attr) for r in self.runs]
        return f"{min(values):,.0f}-{max(values):,.0f}"

    @property
    def fsyncs(self) -> int:
        return sum(r.fsyncs for r in self.runs)

    @property
    def fsync_share(self) -> float:
        """Share of the timed wall time spent inside fdatasync."""
        return sum(r.fsync_seconds for r in self.runs) / sum(r.seconds for r in self.runs)


@dataclass
class Pool:
    """Distinct prebuilt batches of one case, appended round-robin."""

    value_bytes: int
    batch_bytes: int
    batches: list[bytes]
    counts: list[int]

    @property
    def label(self) -> tuple[str, str]:
        return fmt_size(self.value_bytes), fmt_size(self.batch_bytes)

    @property
    def mean_batch(self) -> int:
        return sum(map(len, self.batches)) // len(self.batches)

    def cycle(self, n: int) -> Iterator[bytes]:
        return itertools.islice(itertools.cycle(self.batches), n)

    def records_in(self, n: int) -> int:
        full, rest = divmod(n, len(self.batches))
        return full * sum(self.counts) + sum(self.counts[:rest])

    def bytes_in(self, n: int) -> int:
        full, rest = divmod(n, len(self.batches))
        return full * sum(map(len, self.batches)) + sum(map(len, self.batches[:rest]))


@dataclass
class CaseResult:
    pool: Pool
    write_ceiling: Series = field(default_factory=Series)
    fsync_ceiling: Series = field(default_factory=Series)
    read_ceiling: Series = field(default_factory=Series)
    append: dict[Durability, Series] = field(default_factory=dict)
    grouped: Series = field(default_factory=Series)  # never, GROUPED_PER_CALL batches a call
    read: Series = field(default_factory=Series)


@dataclass
class SyncCount:
    calls: int = 0
    seconds: float = 0.0


@contextlib.contextmanager
def counting_fdatasync() -> Iterator[SyncCount]:
    """Count and time ``os.fdatasync`` calls in this process (the log syncs through it).

    The log makes one fdatasync at a time (group commit), so the counters need no lock.
    """
    real, clock = os.fdatasync, time.perf_counter
    count = SyncCount()

    def counted(fd: Any) -> None:
        started = clock()
        try:
            real(fd)
        finally:
            count.calls += 1
            count.seconds += clock() - started

    os.fdatasync = counted
    try:
        yield count
    finally:
        os.fdatasync = real


def prefault(path: Path, nbytes: int) -> None:
    """Write and delete ``nbytes``, so the next run reuses just-freed page-cache pages.

    On this VM memory freed for a few seconds goes back to the host (free page
    reporting), and the first touch of such a page costs a host fault: writing into it
    runs at a fraction of the speed of writing into a page freed a moment ago.
    """
    chunk = bytes(MiB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(nbytes // MiB):
            os.write(fd, chunk)
    finally:
        os.close(fd)
    path.unlink()


def build_pool(value_bytes: int, batch_bytes: int, seed: int) -> Pool:
    rng = random.Random(seed)
    batches, counts = [], []
    for _ in range(POOL_BATCHES):
        batch, count = build_batch(rng.randbytes(value_bytes), batch_bytes, T0_MS, 1)
        batches.append(batch)
        counts.append(count)
    return Pool(value_bytes, batch_bytes, batches, counts)


def build_batch(value: bytes, batch_bytes: int, base_ms: int, step_ms: int) -> tuple[bytes, int]:
    """As many records of ``value`` as fit ``batch_bytes``; record i at base + i * step."""
    builder = BatchBuilder(base_timestamp=base_ms)
    builder.append(value, timestamp=base_ms)
    record_bytes = builder.estimated_size()
    while builder.estimated_size() + record_bytes <= batch_bytes:
        builder.append(value, timestamp=base_ms + len(builder) * step_ms)
    batch = builder.build()
    assert len(batch) <= batch_bytes, (len(batch), batch_bytes)
    return batch, len(builder)


def open_log(path: Path, durability: Durability, **changes: int) -> PartitionLog:
    config = LogConfig(durability=durability, flush_interval_ms=FLUSH_INTERVAL_MS)
    return PartitionLog.open(path, config.with_changes(**changes))


def write_ceiling(path: Path, pool: Pool, nbytes: int) -> Run:
    n = nbytes // pool.mean_batch
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write = os.write
        gc.collect()
        started = time.perf_counter()
        for batch in pool.cycle(n):
            if write(fd, batch) != len(batch):
                raise OSError("short write")
        seconds = time.perf_counter() - started
    finally:
        os.close(fd)
    return Run(seconds, pool.bytes_in(n), pool.records_in(n), n)


def fsync_ceiling(path: Path, pool: Pool, seconds: float) -> Run:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        n, write, sync, clock = 0, os.write, os.fdatasync, time.perf_counter
        started = clock()
        deadline = started + seconds
        for batch in itertools.cycle(pool.batches):
            if write(fd, batch) != len(batch):
                raise OSError("short write")
            sync(fd)
            n += 1
            if clock() >= deadline:
                break
        elapsed = clock() - started
    finally:
        os.close(fd)
    path.unlink()
    return Run(elapsed, pool.bytes_in(n), pool.records_in(n), n)


def append_volume(log: PartitionLog, pool: Pool, nbytes: int, min_seconds: float) -> Run:
    """Append ``nbytes`` (and for at least ``min_seconds``); only the appends are timed."""
    append, clock = log.append, time.perf_counter
    per_round = len(pool.batches)
    n = 0
    with counting_fdatasync() as syncs:
        gc.collect()
        started = clock()
        while True:
            for batch in pool.batches:
                append(batch)
            n += per_round
            elapsed = clock() - started
            if pool.bytes_in(n) >= nbytes and elapsed >= min_seconds:
                break
    return Run(elapsed, pool.bytes_in(n), pool.records_in(n), n, syncs.calls, syncs.seconds)


def append_grouped(log: PartitionLog, pool: Pool, nbytes: int) -> Run:
    """Append ``nbytes`` as concatenations of ``GROUPED_PER_CALL`` pool batches per call.

    A broker hands the log a produce request's batches in one call; this measures what
    the per-call cost becomes when it is shared. The groups are joined before timing.
    """
    batches = pool.batches * GROUPED_PER_CALL
    groups = [
        b"".join(batches[i : i + GROUPED_PER_CALL])
        for i in range(0, len(pool.batches) * GROUPED_PER_CALL, GROUPED_PER_CALL)
    ]
    append, clock = log.append, time.perf_counter
    n = 0
    gc.collect()
    started = clock()
    while pool.bytes_in(n) < nbytes:
        for group in groups:
            append(group)
        n += len(groups) * GROUPED_PER_CALL
    elapsed = clock() - started
    return Run(elapsed, pool.bytes_in(n), pool.records_in(n), n)


def append_for(log: PartitionLog, pool: Pool, seconds: float) -> Run:
    append, clock = log.append, time.perf_counter
    n = 0
    with counting_fdatasync() as syncs:
        started = clock()
        deadline = started + seconds
        for batch in itertools.cycle(pool.batches):
            append(batch)
            n += 1
            if clock() >= deadline:
                break
        elapsed = clock() - started
    return Run(elapsed, pool.bytes_in(n), pool.records_in(n), n, syncs.calls, syncs.seconds)


def count_records(data: bytes) -> int:
    """Records in whole batches, from the header counts (no decoding)."""
    at, total, end, unpack = 0, 0, len(data), _BATCH_FIELDS.unpack_from
    while at < end:
        _, length, count = unpack(data, at)
        total += count
        at += length + 12
    return total


def read_log(log: PartitionLog) -> Run:
    offset, end = log.log_start_offset, log.log_end_offset
    read, nbytes, records, ops = log.read, 0, 0, 0
    gc.collect()
    started = time.perf_counter()
    while offset < end:
        result = read(offset, READ_MAX_BYTES)
        data = result.data
        nbytes += len(data)
        records += count_records(data)
        ops += 1
        offset = result.next_offset
    seconds = time.perf_counter() - started
    if records != end - log.log_start_offset:
        raise AssertionError(f"read {records} records, the log holds {end}")
    return Run(seconds, nbytes, records, ops)


def read_ceiling(paths: Sequence[Path]) -> Run:
    """Read files of batches (the log's ``.log`` files) with a plain loop."""
    total = Run(0.0)
    for path in paths:
        run = read_file_ceiling(path)
        total.seconds += run.seconds
        total.nbytes += run.nbytes
        total.records += run.records
        total.ops += run.ops
    return total


def read_file_ceiling(path: Path) -> Run:
    """pread 1 MiB chunks; per whole batch: parse its length and count, check its CRC."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size, position, records, ops = os.fstat(fd).st_size, 0, 0, 0
        unpack, crc_at = _BATCH_FIELDS.unpack_from, _CRC.unpack_from
        gc.collect()
        started = time.perf_counter()
        while position < size:
            chunk = os.pread(fd, READ_MAX_BYTES, position)
            view, at, end = memoryview(chunk), 0, len(chunk)
            while at + 61 <= end:
                _, length, count = unpack(chunk, at)
                stop = at + length + 12
                if stop > end:
                    break
                if crc32c(view[at + _CRC_START : stop]) != crc_at(chunk, at + 17)[0]:
                    raise AssertionError(f"CRC mismatch at {position + at}")
                records += count
                at = stop
            position += at
            ops += 1
        seconds = time.perf_counter() - started
    finally:
        os.close(fd)
    return Run(seconds, position, records, ops)


# -- section drivers ----------------------------------------------------------------------
def progress(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


def run_volume_case(base: Path, pool: Pool, sizes: Sizes, result: CaseResult) -> None:
    """Ceiling / never / interval in alternation, then reads of the last never log.

    Every write run starts right after ``prefault`` freed as many warm pages as it needs,
    and deleted files are never written back (their dirty pages are dropped).
    """
    tag = f"{pool.value_bytes}-{pool.batch_bytes}"
    scratch = base / f"prefault-{tag}"
    never_log: PartitionLog | None = None
    for rep in range(sizes.reps):
        if never_log is not None:
            never_log.delete()
        ceiling_file = base / f"ceiling-{tag}-{rep}"
        prefault(scratch, sizes.append_bytes)
        result.write_ceiling.runs.append(write_ceiling(ceiling_file, pool, sizes.append_bytes))
        ceiling_file.unlink()
        never_log = open_log(base / f"never-{tag}-{rep}", Durability.NEVER)
        prefault(scratch, sizes.append_bytes)
        run = append_volume(never_log, pool, sizes.append_bytes, 0.0)
        result.append.setdefault(Durability.NEVER, Series()).runs.append(run)
        grouped_log = open_log(base / f"grouped-{tag}-{rep}", Durability.NEVER)
        prefault(scratch, sizes.append_bytes)
        result.grouped.runs.append(append_grouped(grouped_log, pool, sizes.append_bytes))
        grouped_log.delete()
        interval_log = open_log(base / f"interval-{tag}-{rep}", Durability.INTERVAL)
        prefault(scratch, sizes.append_bytes)
        run = append_volume(interval_log, pool, sizes.append_bytes, sizes.interval_min_s)
        result.append.setdefault(Durability.INTERVAL, Series()).runs.append(run)
        interval_log.delete()
    assert never_log is not None
    segment_files = [segment.log_path for segment in never_log.segments]
    for _ in range(sizes.reps):
        result.read_ceiling.runs.append(read_ceiling(segment_files))
        result.read.runs.append(read_log(never_log))
    never_log.delete()


def run_always_case(base: Path, pool: Pool, sizes: Sizes, result: CaseResult) -> None:
    tag = f"{pool.value_bytes}-{pool.batch_bytes}"
    log = open_log(base / f"always-{tag}", Durability.ALWAYS)
    series = result.append.setdefault(Durability.ALWAYS, Series())
    for _ in range(sizes.reps):
        result.fsync_ceiling.runs.append(fsync_ceiling(base / f"fsync-{tag}", pool, sizes.fsync_s))
        series.runs.append(append_for(log, pool, sizes.fsync_s))
    log.delete()


@dataclass
class GroupCommitResult:
    """Section 3: the fdatasync ceiling and N-thread always runs, measured in rotation."""

    fsync_ceiling: Series = field(default_factory=Series)
    by_threads: dict[int, Series] = field(default_factory=dict)
    latencies_ns: dict[int, list[int]] = field(default_factory=dict)


def run_group_commit(base: Path, pool: Pool, sizes: Sizes) -> GroupCommitResult:
    result = GroupCommitResult()
    for rep in range(sizes.reps):
        ceiling = fsync_ceiling(base / "group-fsync", pool, sizes.concurrent_s)
        result.fsync_ceiling.runs.append(ceiling)
        for threads in CONCURRENT_THREADS:
            log = open_log(base / f"group-{threads}-{rep}", Durability.ALWAYS)
            run, latencies = run_concurrent(log, pool, threads, sizes.concurrent_s)
            log.delete()
            result.by_threads.setdefault(threads, Series()).runs.append(run)
            result.latencies_ns.setdefault(threads, []).extend(latencies)
    for latencies in result.latencies_ns.values():
        latencies.sort()
    return result


def run_concurrent(
    log: PartitionLog, pool: Pool, threads: int, seconds: float
) -> tuple[Run, list[int]]:
    """``threads`` appenders on one log for ``seconds``; fdatasyncs counted and timed."""
    stop = threading.Event()
    barrier = threading.Barrier(threads + 1)
    per_thread: list[list[int]] = [[] for _ in range(threads)]

    def appender(index: int) -> None:
        latencies, append, clock = per_thread[index], log.append, time.perf_counter_ns
        batches = itertools.cycle(pool.batches)
        barrier.wait()
        while not stop.is_set():
            started = clock()
            append(next(batches))
            latencies.append(clock() - started)

    workers = [threading.Thread(target=appender, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    with counting_fdatasync() as syncs:
        barrier.wait()
        started = time.perf_counter()
        time.sleep(seconds)
        stop.set()
        for worker in workers:
            worker.join()
        elapsed = time.perf_counter() - started
    latencies = list(itertools.chain.from_iterable(per_thread))
    n = len(latencies)
    records = pool.counts[0] * n  # every batch of the pool has the same record count
    run = Run(elapsed, pool.mean_batch * n, records, n, syncs.calls, syncs.seconds)
    return run, latencies


@dataclass
class LookupResult:
    records: int
    batches: int
    segments: int
    log_bytes: int
    build_seconds: float
    offset_ns: list[int]
    timestamp_ns: list[int]
    timer_ns: float
    noise_ns: list[int]
    checked: int
    failures: list[str]


def build_lookup_log(path: Path, sizes: Sizes) -> tuple[PartitionLog, int, int]:
    """10M-ish 100 B records, record j stamped T0 + 2j ms; returns (log, batches, per batch)."""
    template, per_batch = build_batch(bytes(100), 16 * KiB, T0_MS, 2)
    log = open_log(path, Durability.NEVER, max_segment_bytes=sizes.lookup_segment_bytes)
    batches = -(-sizes.lookup_records // per_batch)
    buf = bytearray(template)
    view = memoryview(buf)
    for k in range(batches):
        base_ms = T0_MS + 2 * k * per_batch
        _TIMESTAMPS.pack_into(buf, _BASE_TIMESTAMP_AT, base_ms, base_ms + 2 * (per_batch - 1))
        _CRC.pack_into(buf, 17, crc32c(view[_CRC_START:]))
        log.append(buf)
    return log, batches, per_batch


def time_calls(fn: Callable[[int], object], args: Sequence[int]) -> list[int]:
    clock = time.perf_counter_ns
    out = []
    for arg in args:
        started = clock()
        fn(arg)
        out.append(clock() - started)
    return out


def run_lookups(base: Path, sizes: Sizes) -> LookupResult:
    started = time.perf_counter()
    log, batches, _ = build_lookup_log(base / "lookup", sizes)
    build_seconds = time.perf_counter() - started
    records = log.log_end_offset
    rng = random.Random(20240611)
    n = sizes.warmup_lookups + sizes.lookups
    offsets = [rng.randrange(records) for _ in range(n)]
    stamps = [rng.randrange(T0_MS, T0_MS + 2 * records - 1) for _ in range(n)]
    warm = sizes.warmup_lookups

    def read_one(offset: int) -> object:
        return log.read(offset, max_bytes=1)

    gc.collect()
    time_calls(read_one, offsets[:warm])
    offset_ns = time_calls(read_one, offsets[warm:])
    time_calls(log.offset_for_timestamp, stamps[:warm])
    timestamp_ns = time_calls(log.offset_for_timestamp, stamps[warm:])
    timer_ns = statistics.median(time_calls(lambda _: None, range(10_000)))
    noise_ns = pread_noise(log, sizes.lookups)
    sample = sizes.verify_sample
    failures = verify_offsets(log, offsets[warm : warm + sample])
    failures += verify_timestamps(log, stamps[warm : warm + sample])
    result = LookupResult(
        records,
        batches,
        len(log.segments),
        log.size_bytes,
        build_seconds,
        offset_ns,
        timestamp_ns,
        timer_ns,
        noise_ns,
        2 * sample + 1,
        failures,
    )
    log.delete()
    return result


def pread_noise(log: PartitionLog, n: int) -> list[int]:
    """Latency of a 61-byte os.pread from the page cache: the machine's own jitter."""
    fd = os.open(log.segments[0].log_path, os.O_RDONLY)
    try:
        return time_calls(lambda i: os.pread(fd, 61, (i * 4096) % (64 * MiB)), range(n))
    finally:
        os.close(fd)


def verify_offsets(log: PartitionLog, offsets: Sequence[int]) -> list[str]:
    failures = []
    for offset in offsets:
        data = log.read(offset, max_bytes=1).data
        header = read_header(data)
        if not header.base_offset <= offset <= header.last_offset or header.size != len(data):
            failures.append(f"read({offset}) returned batch {header.base_offset}")
        elif offset not in {r.offset for r in decode_batch(data)[1]}:
            failures.append(f"read({offset}): offset not among the decoded records")
    return failures


def record_timestamp(log: PartitionLog, offset: int) -> int:
    records = decode_batch(log.read(offset, max_bytes=1).data)[1]
    return next(r.timestamp for r in records if r.offset == offset)


def verify_timestamps(log: PartitionLog, stamps: Sequence[int]) -> list[str]:
    failures = []
    for ts in stamps:
        found = log.offset_for_timestamp(ts)
        expected = -(-(ts - T0_MS) // 2)  # record j is stamped T0 + 2j
        if found is None or found != expected:
            failures.append(f"offset_for_timestamp({ts}) = {found}, expected {expected}")
            continue
        if record_timestamp(log, found) < ts:
            failures.append(f"offset_for_timestamp({ts}) = {found}: its record is earlier")
        if found > 0 and record_timestamp(log, found - 1) >= ts:
            failures.append(f"offset_for_timestamp({ts}) = {found}: the record before is not")
    last = T0_MS + 2 * (log.log_end_offset - 1)
    if log.offset_for_timestamp(last + 1) is not None:
        failures.append("offset_for_timestamp(after the last record) is not None")
    return failures


# -- output -------------------------------------------------------------------------------
def fmt_size(n: int) -> str:
    if n >= MiB and n % MiB == 0:
        return f"{n // MiB} MiB"
    if n >= KiB and n % KiB == 0:
        return f"{n // KiB} KiB"
    return f"{n} B"


def num(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def percentile(sorted_values: Sequence[int], p: float) -> int:
    """Nearest-rank percentile of an ascending sequence."""
    rank = math.ceil(p * len(sorted_values) - 1e-9)
    return sorted_values[min(max(rank, 1), len(sorted_values)) - 1]


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        first = f"{cells[0]:<{widths[0]}}"
        rest = (f"{cell:>{w}}" for cell, w in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    print(f"\n{title}")
    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))


def note(text: str) -> None:
    print(f"  {text}")


def machine_rows(bench_dir: Path) -> list[tuple[str, str]]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    meminfo = Path("/proc/meminfo").read_text().split()
    mem_gib = int(meminfo[meminfo.index("MemTotal:") + 1]) / MiB
    df = subprocess.run(["df", "-T", str(bench_dir)], capture_output=True, text=True, check=False)
    fs = df.stdout.splitlines()[-1].split() if df.returncode == 0 else ["?", "?"]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        ("date", datetime.datetime.now().astimezone().isoformat(timespec="seconds")),
        ("nproc", f"{len(os.sched_getaffinity(0))} (os.cpu_count() = {os.cpu_count()})"),
        ("cpu", cpu),
        ("memory", f"{mem_gib:.1f} GiB"),
        ("bench dir", f"{bench_dir} on {fs[0]} ({fs[1]})"),
        ("kernel", platform.release()),
        ("python", f"{platform.python_implementation()} {platform.python_version()}"),
        ("load average at start", load),
        ("storage sources", sources_digest()),
    ]


def sources_digest() -> str:
    """A digest of dataplane/storage/*.py, to tie the figures to the code measured."""
    digest = hashlib.sha256()
    for path in sorted((Path(__file__).resolve().parents[1] / "dataplane/storage").glob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    return f"sha256 {digest.hexdigest()[:16]} of dataplane/storage/*.py"


def report_ceilings(cases: list[CaseResult], sizes: Sizes) -> None:
    rows = []
    for c in cases:
        value, batch = c.pool.label
        for name, series in (
            ("os.write, no fsync", c.write_ceiling),
            ("os.write + fdatasync each", c.fsync_ceiling),
            ("os.pread 1 MiB + crc32c/batch", c.read_ceiling),
        ):
            rows.append(
                [
                    name,
                    value,
                    batch,
                    num(series.median("mb_s")),
                    series.spread(),
                    num(series.median("records_s")),
                    num(series.median("ops_s")),
                ]
            )
    headers = ["ceiling", "value", "batch", "MB/s", "range", "records/s", "calls/s"]
    print_table("1. Ceilings (plain Python loops, same file system)", headers, rows)
    note(f"median of {sizes.reps} runs; the writes cycle the prebuilt batches the log gets;")
    note(f"no-fsync: {fmt_size(sizes.append_bytes)} per run; fdatasync: {sizes.fsync_s} s per run;")
    note("read: the never log of section 2 (its .log files), read by a plain loop.")


def _append_row(label: str, c: CaseResult, s: Series, *, fsyncs: bool, aim: bool) -> list[str]:
    vs_write = s.median("mb_s") / c.write_ceiling.median("mb_s")
    vs_fsync = s.median("ops_s") / c.fsync_ceiling.median("ops_s")
    return [
        label,
        *c.pool.label,
        str(c.pool.counts[0]),
        num(s.median("mb_s")),
        s.spread(),
        num(s.median("records_s")),
        num(s.median("ops_s")),
        pct(vs_write),
        pct(vs_fsync) if fsyncs else "",
        num(s.fsyncs / len(s.runs), 1) if s.runs else "",
        f"{verdict(vs_write >= AIM_APPEND_RATIO)} (>= {pct(AIM_APPEND_RATIO)})" if aim else "",
    ]


def report_appends(cases: list[CaseResult], sizes: Sizes) -> None:
    rows = []
    for durability in (Durability.NEVER, Durability.INTERVAL, Durability.ALWAYS):
        for c in cases:
            fsyncs, aim = durability is Durability.ALWAYS, durability is Durability.NEVER
            rows.append(
                _append_row(durability.value, c, c.append[durability], fsyncs=fsyncs, aim=aim)
            )
    for c in cases:
        rows.append(_append_row(f"never x{GROUPED_PER_CALL}", c, c.grouped, fsyncs=False, aim=True))
    headers = [
        "durability",
        "value",
        "batch",
        "rec/batch",
        "MB/s",
        "range",
        "records/s",
        "appends/s",
        "vs write",
        "vs fsync",
        "fsyncs/run",
        "aim",
    ]
    print_table("2. Append throughput, one appender (PartitionLog.append)", headers, rows)
    note(f"never: {fmt_size(sizes.append_bytes)} per run; interval (flush_interval_ms=1000):")
    note(f"  the same, and at least {sizes.interval_min_s} s so that flushes happen;")
    note(f"  always: {sizes.fsync_s} s per run. Median of {sizes.reps} runs each.")
    note("vs write = MB/s / no-fsync write ceiling; vs fsync = appends/s / fdatasync-per-write")
    note("  ceiling; fsyncs/run = os.fdatasync calls, counted by wrapping it in this process.")
    note("  Only append calls are timed (not open/close); always waits for its fdatasync")
    note("  (group commit); interval flushes run on the background flusher thread, which")
    note("  shares the CPUs and the disk with the appender.")
    note(
        f"never x{GROUPED_PER_CALL}: {GROUPED_PER_CALL} batches concatenated per append call, as a"
    )
    note("  produce request brings them; appends/s counts batches.")


def report_concurrency(group: GroupCommitResult, cases: list[CaseResult]) -> bool:
    sequential = group.by_threads[1].median("ops_s")
    ceiling = group.fsync_ceiling.median("ops_s")
    section2 = cases[0].append[Durability.ALWAYS].median("ops_s")
    rows = []
    for threads, series in group.by_threads.items():
        lat = group.latencies_ns[threads]
        fsyncs = sum(r.fsyncs for r in series.runs)
        rows.append(
            [
                str(threads),
                num(series.median("mb_s"), 1),
                num(series.median("records_s")),
                num(series.median("ops_s")),
                series.spread("ops_s"),
                num(sum(r.ops for r in series.runs) / max(1, fsyncs), 1),
                pct(
                    sum(r.fsync_seconds for r in series.runs) / sum(r.seconds for r in series.runs)
                ),
                num(percentile(lat, 0.5) / 1000),
                num(percentile(lat, 0.99) / 1000),
                f"{series.median('ops_s') / sequential:.1f}x",
            ]
        )
    headers = [
        "threads",
        "MB/s",
        "records/s",
        "appends/s",
        "range",
        "appends/fsync",
        "in fsync",
        "p50 us",
        "p99 us",
        "vs 1 thread",
    ]
    print_table("3. Group commit: always, N appender threads, 100 B / 16 KiB", headers, rows)
    top = group.by_threads[CONCURRENT_THREADS[-1]].median("ops_s")
    speedup = top / sequential
    ok = speedup >= AIM_GROUP_COMMIT_SPEEDUP
    runs, seconds = len(group.fsync_ceiling.runs), group.fsync_ceiling.runs[0].seconds
    note(
        f"{runs} rotations of (fdatasync ceiling, 1, 8, 64 threads), {seconds:.1f} s each; medians."
    )
    note("os.fdatasync is wrapped by the bench to count calls (appends/fsync) and time them")
    note("  (in fsync = share of wall time inside fdatasync); p50/p99 = one append call.")
    note(
        f"64 concurrent vs 64 sequential fsynced appends (1 thread, {num(sequential)}/s): "
        f"{speedup:.1f}x [aim >= {AIM_GROUP_COMMIT_SPEEDUP:.0f}x: {verdict(ok)}]"
    )
    note(f"  vs 1-appender always of section 2 ({num(section2)}/s): {top / section2:.1f}x")
    note(f"  vs the fdatasync-per-write ceiling ({num(ceiling)} writes/s): {top / ceiling:.1f}x")
    return ok


def report_reads(cases: list[CaseResult], sizes: Sizes) -> list[bool]:
    rows, oks = [], []
    for c in cases:
        mb_s = c.read.median("mb_s")
        ceiling = c.read_ceiling.median("mb_s")
        ok = mb_s >= AIM_READ_MB_S
        oks.append(ok)
        rows.append(
            [
                *c.pool.label,
                num(c.read.runs[-1].nbytes / MiB),
                num(mb_s),
                c.read.spread(),
                num(c.read.median("records_s")),
                num(ceiling),
                pct(mb_s / ceiling),
                f"{verdict(ok)} (>= {AIM_READ_MB_S / 1000:.0f} GB/s)",
            ]
        )
    headers = ["value", "batch", "MiB", "MB/s", "range", "records/s", "ceiling", "ratio", "aim"]
    print_table("4. Sequential read from page cache (PartitionLog.read, 1 MiB)", headers, rows)
    note(f"the whole log of the last never run of section 2, {sizes.reps} passes, median;")
    note("  records/s from batch-header record counts (no decoding); ceiling = the plain")
    note("  pread + crc32c loop over the same .log files, passes alternated with the log's.")
    return oks


@dataclass
class DecodeResult:
    label: str
    records: int  # per decode_batches call
    payload_bytes: int  # the batches' bytes, as fetched
    runs: Series = field(default_factory=Series)
    validated: Series = field(default_factory=Series)  # empty in code without validation


def decode_input(value_bytes: int, headers: str, codec: Compression) -> tuple[bytes, int]:
    """``DECODE_BATCHES`` batches of up to 16 KiB (uncompressed) and their record count."""
    parts, count = [], 0
    for b in range(DECODE_BATCHES):
        builder = BatchBuilder(compression=codec, base_offset=count)
        while builder.estimated_size() + value_bytes + 60 <= 16 * KiB:
            n = len(builder)
            header_list: list[tuple[str, bytes | None]] = []
            if headers == "same":
                header_list = [("x-lane", b"ppe"), ("content-type", b"application/json")]
            elif headers == "unique":
                header_list = [("x-trace-id", b"%032x" % (b << 20 | n)), ("x-lane", b"ppe")]
            value = bytes([(b + n) % 251]) * value_bytes
            builder.append(value, key=b"key-%06d" % n, timestamp=T0_MS + n, headers=header_list)
        count += len(builder)
        parts.append(builder.build())
    return b"".join(parts), count


def client_validator() -> Callable[[bytes], object] | None:
    """What a leader runs on a client's batches before appending them, or None in code
    older than record validation (``--decode-only`` runs against older code too)."""
    homes = ("dataplane.records.validation", "dataplane.storage.validation")
    if not any(importlib.util.find_spec(home) for home in homes):
        return None
    validate_batches = importlib.import_module("dataplane.storage.log_append").validate_batches

    def validate(data: bytes) -> object:
        view = memoryview(data)
        return validate_batches(
            view, max_batch_bytes=len(data), client=True, check_max_timestamp=True
        )

    return validate


def run_decoding(reps: int) -> list[DecodeResult]:
    results, validate = [], client_validator()
    for label, value_bytes, headers, codec in DECODE_SHAPES:
        data, count = decode_input(value_bytes, headers, codec)
        assert len(decode_batches(data)) == count
        result = DecodeResult(label, count, len(data))
        for _ in range(reps):
            result.runs.runs.append(time_repeated(decode_batches, data, count))
            if validate is not None:
                result.validated.runs.append(time_repeated(validate, data, count))
        results.append(result)
    return results


def time_repeated(call: Callable[[bytes], object], data: bytes, count: int) -> Run:
    """``call(data)`` repeated for ``DECODE_RUN_S``; ``count`` records per call."""
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < DECODE_RUN_S:
        call(data)
        calls += 1
    elapsed = time.perf_counter() - started
    return Run(elapsed, calls * len(data), calls * count)


def report_decoding(results: list[DecodeResult]) -> bool:
    rows = []
    for r in results:
        rows.append(
            [
                r.label,
                num(r.records),
                num(r.runs.median("records_s")),
                r.runs.spread("records_s"),
                num(r.runs.median("mb_s")),
                num(r.validated.median("records_s")) if r.validated.runs else "-",
                r.validated.spread("records_s") if r.validated.runs else "-",
            ]
        )
    print_table(
        "6. Record decoding, one thread (records.decode_batches)",
        ["records", "per call", "records/s", "range", "MB/s in", "validated/s", "range"],
        rows,
    )
    note(f"{DECODE_BATCHES} batches of up to 16 KiB (before compression) per call, keys of")
    note("10 bytes; each run repeats the call for 0.3 s; MB/s in = batch bytes as fetched.")
    note("validated/s: the same bytes through log_append.validate_batches(client=True),")
    note("  the record scan a leader runs on a client's batches before appending them.")
    first = results[0].runs.median("records_s")
    return first >= AIM_DECODE_RECORDS_S


def report_lookups(r: LookupResult) -> list[bool]:
    rows, oks = [], []
    for name, timed, values in (
        ("offset", "log.read(offset, max_bytes=1)", r.offset_ns),
        ("timestamp", "log.offset_for_timestamp(ts)", r.timestamp_ns),
        ("(reference)", "os.pread(fd, 61 bytes)", r.noise_ns),
    ):
        lat = sorted(values)
        p99 = percentile(lat, 0.99) / 1000
        aim = f"{verdict(p99 < AIM_LOOKUP_P99_US)} (p99 < {AIM_LOOKUP_P99_US:.0f} us)"
        if name.startswith("("):
            aim = "machine jitter"
        else:
            oks.append(p99 < AIM_LOOKUP_P99_US)
        rows.append(
            [
                name,
                timed,
                f"{percentile(lat, 0.5) / 1000:.1f}",
                f"{p99:.1f}",
                f"{percentile(lat, 0.999) / 1000:.1f}",
                f"{lat[-1] / 1000:.1f}",
                f"{statistics.fmean(lat) / 1000:.1f}",
                aim,
            ]
        )
    headers = ["lookup", "timed call", "p50 us", "p99 us", "p99.9 us", "max us", "mean", "aim"]
    title = f"5. Lookup latency, {num(r.records)} records of 100 B, {len(r.offset_ns):,} lookups"
    print_table(title, headers, rows)
    note(
        f"log: {num(r.batches)} batches of 16 KiB, {r.segments} segments, "
        f"{r.log_bytes / MiB:,.0f} MiB, built in {r.build_seconds:.1f} s (durability never)"
    )
    note(f"each call timed alone with perf_counter_ns (timer overhead ~{r.timer_ns:.0f} ns),")
    note("  uniformly random offsets / timestamps, after a warm-up of the same calls.")
    if r.failures:
        note(f"VERIFICATION FAILED ({len(r.failures)} of {r.checked} checks):")
        for failure in r.failures[:10]:
            note(f"  {failure}")
    else:
        note(f"verification passed: {r.checked} results checked against decoded records")
        note("  (offset inside the one batch returned; the found record's ts >= target and")
        note("  the previous record's < target; no result for a ts after the last record)")
    return oks


# -- main ---------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run (< 1 min)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--decode-only", action="store_true", help="section 6 alone")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.decode_only:
        print("Meridian storage benchmark (record decoding only)")
        for key, value in machine_rows(args.dir):
            print(f"  {key + ':':<23}{value}")
        ok = report_decoding(run_decoding(sizes.reps + 2))
        print(f"\naim: 100 B records without headers >= 1,000,000 records/s: {verdict(ok)}")
        return 0
    args.dir.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="meridian-bench-storage-", dir=args.dir))
    try:
        return run_all(base, sizes, quick=args.quick)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def busy_cpu_seconds() -> tuple[float, float]:
    """(CPU seconds all processes spent busy, CPU seconds this process spent) so far."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    ticks = os.sysconf("SC_CLK_TCK")
    mine = os.times()
    return (user + nice + system + irq + softirq + steal) / ticks, mine.user + mine.system


def run_all(base: Path, sizes: Sizes, *, quick: bool) -> int:
    started = time.perf_counter()
    busy_at_start, mine_at_start = busy_cpu_seconds()
    print(f"Meridian storage benchmark ({'quick' if quick else 'full'} run)")
    for key, value in machine_rows(base):
        print(f"  {key + ':':<23}{value}")
    cases = [CaseResult(build_pool(v, b, seed=i)) for i, (v, b) in enumerate(CASES)]
    for c in cases:
        progress(f"append never/interval + read, {' / '.join(c.pool.label)}")
        run_volume_case(base, c.pool, sizes, c)
    for c in cases:
        progress(f"append always, {' / '.join(c.pool.label)}")
        run_always_case(base, c.pool, sizes, c)
    progress(f"group commit, {CONCURRENT_THREADS} threads")
    group = run_group_commit(base, cases[0].pool, sizes)
    progress(f"lookups: building a {num(sizes.lookup_records)}-record log")
    lookups = run_lookups(base, sizes)
    progress("record decoding")
    decoding = run_decoding(sizes.reps + 2)

    report_ceilings(cases, sizes)
    report_appends(cases, sizes)
    group_ok = report_concurrency(group, cases)
    read_oks = report_reads(cases, sizes)
    lookup_oks = report_lookups(lookups)
    decode_ok = report_decoding(decoding)
    report_aims(cases, group_ok, read_oks, lookup_oks, decode_ok)
    elapsed = time.perf_counter() - started
    busy, mine = busy_cpu_seconds()
    others = max(0.0, (busy - busy_at_start) - (mine - mine_at_start)) / elapsed
    print(f"\ntotal wall time {elapsed:.0f} s; CPU used outside this process (other processes,")
    print(f"  kernel threads) during the run: {others:.2f} of {os.cpu_count()} CPUs on average")
    return 1 if lookups.failures else 0


def report_aims(
    cases: list[CaseResult],
    group_ok: bool,
    read_oks: list[bool],
    lookup_oks: list[bool],
    decode_ok: bool,
) -> None:
    never = [
        c.append[Durability.NEVER].median("mb_s") / c.write_ceiling.median("mb_s") for c in cases
    ]
    grouped = [c.grouped.median("mb_s") / c.write_ceiling.median("mb_s") for c in cases]
    rows = [
        [
            f"append never >= {pct(AIM_APPEND_RATIO)} of write ceiling",
            ", ".join(pct(r) for r in never),
            verdict(all(r >= AIM_APPEND_RATIO for r in never)),
        ],
        [
            f"  the same, {GROUPED_PER_CALL} batches per append call",
            ", ".join(pct(r) for r in grouped),
            verdict(all(r >= AIM_APPEND_RATIO for r in grouped)),
        ],
        ["always, 64 appenders >= 5x 64 sequential", "see section 3", verdict(group_ok)],
        [
            "reads >= 2 GB/s from page cache",
            f"{sum(read_oks)}/{len(read_oks)} cases",
            verdict(all(read_oks)),
        ],
        [
            "lookups p99 < 50 us (offset, timestamp)",
            ", ".join(verdict(ok) for ok in lookup_oks),
            verdict(all(lookup_oks)),
        ],
        ["decoding >= 1 M records/s (100 B, no headers)", "see section 6", verdict(decode_ok)],
    ]
    print_table("Aims (reported, never enforced)", ["aim", "measured", "verdict"], rows)


if __name__ == "__main__":
    sys.exit(main())

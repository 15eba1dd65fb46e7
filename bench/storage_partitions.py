"""Many partitions in one storage process: 10,000 partition logs under one LogManager.

Run ``.venv/bin/python bench/storage_partitions.py [--quick] [--dir PATH]``. It prints its
figures; it is never run as a test. Every phase runs in a fresh Python process whose
limit on open files is 4,096 (soft and hard), as a broker's would be, and reports its
resident memory (VmRSS, and the peak VmHWM), its open descriptors (``/proc/self/fd``)
and the descriptors held by open segment files:

1. create: a ``LogManager`` creates 10,000 partitions from 8 threads (default
   ``LogConfig``: ``durability=interval``), appends one 1 KiB batch to each and, for
   every tenth, rolls twice more (three segments); then closes cleanly.
2. clean restart: ``LogManager.open`` of that directory; then one read of the first
   batch of every partition (which opens each log's segment files, within the budget);
   then close.
3. cold clean restart: the same open after dropping the partition files' pages from the
   page cache (``posix_fadvise(DONTNEED)`` on every file; directory entries and inodes
   stay cached, which only dropping all caches of the machine would undo).
4. produce: open, start housekeeping, append one batch to each of 1,000 partitions (the
   first append after a clean open records that the log is no longer clean: one
   checkpoint write each), then alternate three runs of appending a fixed volume of
   prebuilt 16 KiB batches (100 B records) to one partition and three runs of appending
   the same volume round-robin over the 1,000 partitions; medians. Then the process
   kills itself (SIGKILL), leaving those logs unclean.
5. unclean restart: ``LogManager.open`` of what the killed process left: every log it
   appended to is recovered (its active segment re-validated, CRC included), in
   parallel (``recovery_threads``, default 2).

Aims (issue 3): under 1 GB of resident memory and within the 4,096-descriptor limit,
restart under 30 s, and round-robin produce at least half the single-partition rate.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from storage import (
    T0_MS,
    build_batch,
    busy_cpu_seconds,
    machine_rows,
    num,
    print_table,
    progress,
    verdict,
)

from dataplane.records import BatchBuilder
from dataplane.storage.filecache import SEGMENT_FILES
from dataplane.storage.manager import LogManager

KiB = 1024
MiB = 1024 * KiB
MB = 1e6
FD_LIMIT = 4096
TOPIC = "bench.idle"
SINGLE_TOPIC = "bench.single"
RECORD_BYTES = 100
SMALL_BATCH_RECORDS = 10
BATCH_BYTES = 16 * KiB
POOL_BATCHES = 32
RUNS = 3
CREATE_THREADS = 8  # partitions are created many at a time (an admin request, a topic)
AIM_RSS_BYTES = 10**9
AIM_RESTART_S = 30.0
AIM_ROUND_ROBIN_RATIO = 0.5


# -- inside a phase process ---------------------------------------------------------------
def usage() -> dict[str, int]:
    """Resident memory (now and peak, bytes) and descriptors of this process."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return {
        "rss": int(status["VmRSS"].split()[0]) * KiB,
        "peak_rss": int(status["VmHWM"].split()[0]) * KiB,
        "fds": len(os.listdir("/proc/self/fd")),
        "segment_fds": SEGMENT_FILES.open_files,
        "open_segments": SEGMENT_FILES.open_segments,
    }


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def small_batch() -> bytes:
    builder = BatchBuilder()
    for i in range(SMALL_BATCH_RECORDS):
        builder.append(bytes([65 + i % 26]) * RECORD_BYTES, key=b"k%d" % i)
    return builder.build()


def batch_pool() -> list[bytes]:
    """Prebuilt 16 KiB batches of 100 B records (as bench/storage.py builds them)."""
    return [
        build_batch(bytes([n % 251]) * RECORD_BYTES, BATCH_BYTES, T0_MS, 1)[0]
        for n in range(POOL_BATCHES)
    ]


def phase_create(data: Path, partitions: int) -> dict[str, Any]:
    manager = LogManager(data)
    manager.open()
    manager.start()
    batch = small_batch()

    def create(p: int) -> int:
        log = manager.get_or_create_log(TOPIC, p)
        log.append(batch)
        if p % 10 == 0:
            for _ in range(2):
                log.roll()
                log.append(batch)
        if p % 2000 == 1999:
            progress(f"  created {p + 1:,} partitions")
        return len(log.segments)

    started = time.perf_counter()
    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        segments = sum(pool.map(create, range(partitions)))
    manager.get_or_create_log(SINGLE_TOPIC, 0).append(batch)
    result: dict[str, Any] = {"create_s": time.perf_counter() - started, "segments": segments}
    result.update(usage())
    result["close_s"] = timed(manager.close)
    return result


def phase_restart(data: Path, partitions: int, *, touch: bool) -> dict[str, Any]:
    manager = LogManager(data)
    result: dict[str, Any] = {"open_s": timed(manager.open)}
    result["unclean"] = sum(not r.clean_shutdown for r in manager.recovery_reports)
    result["recovered_segments"] = sum(r.segments_recovered for r in manager.recovery_reports)
    result["after_open"] = usage()
    if touch:

        def read_all_partitions() -> None:
            for log in manager.logs().values():
                assert log.read(log.log_start_offset, 64 * KiB).data

        result["touch_s"] = timed(read_all_partitions)
        result["after_touch"] = usage()
    result["close_s"] = timed(manager.close)
    return result


def phase_produce(data: Path, active: int, volume: int) -> dict[str, Any]:
    manager = LogManager(data)
    result: dict[str, Any] = {"open_s": timed(manager.open)}
    manager.start()
    logs = [manager.get_or_create_log(TOPIC, p) for p in range(active)]
    single = manager.get_or_create_log(SINGLE_TOPIC, 0)
    pool = batch_pool()
    first = small_batch()

    def first_appends() -> None:
        for log in logs:
            log.append(first)

    result["first_round_s"] = timed(first_appends)
    single.append(first)
    count = volume // len(pool[0])

    def run_single() -> float:
        append, started = single.append, time.perf_counter()
        for n in range(count):
            append(pool[n % POOL_BATCHES])
        return count * len(pool[0]) / (time.perf_counter() - started) / MB

    def run_round_robin() -> float:
        started = time.perf_counter()
        for n in range(count):
            logs[n % active].append(pool[n % POOL_BATCHES])
        return count * len(pool[0]) / (time.perf_counter() - started) / MB

    result["single_mb_s"], result["round_robin_mb_s"] = [], []
    for run in range(RUNS):
        progress(f"  run {run + 1}/{RUNS}: one partition, then {active:,} round-robin")
        result["single_mb_s"].append(run_single())
        result["round_robin_mb_s"].append(run_round_robin())
    result["batch_bytes"] = len(pool[0])
    result["after"] = usage()
    return result


def run_phase(args: argparse.Namespace) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))
    logging.basicConfig(level=logging.ERROR)  # one recovery report per log is too many lines
    data = Path(args.data)
    if args.phase == "create":
        result = phase_create(data, args.partitions)
    elif args.phase in ("restart", "restart-touch"):
        result = phase_restart(data, args.partitions, touch=args.phase == "restart-touch")
    elif args.phase == "produce":
        result = phase_produce(data, args.active, args.volume)
        print(json.dumps(result), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # a crash: no close, no flush
    else:
        raise SystemExit(f"unknown phase {args.phase}")
    print(json.dumps(result), flush=True)


# -- the orchestrating process ------------------------------------------------------------
def child(phase: str, data: Path, args: argparse.Namespace) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--phase",
        phase,
        "--data",
        str(data),
        "--partitions",
        str(args.partitions),
        "--active",
        str(args.active),
        "--volume",
        str(args.volume),
    ]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines or done.returncode not in (0, -signal.SIGKILL):
        raise SystemExit(f"phase {phase} failed with status {done.returncode}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def drop_page_cache(data: Path) -> int:
    """Ask the kernel to drop the cached pages of every file under ``data``."""
    files = 0
    for root, _, names in os.walk(data):
        for name in names:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            files += 1
    return files


def mib(n: int) -> str:
    return f"{n / MiB:,.0f} MiB"


def usage_row(label: str, seconds: float | None, u: dict[str, int]) -> list[str]:
    return [
        label,
        "" if seconds is None else f"{seconds:.2f}",
        mib(u["rss"]),
        mib(u["peak_rss"]),
        num(u["fds"]),
        num(u["segment_fds"]),
        num(u["open_segments"]),
    ]


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    create, clean, cold = results["create"], results["restart"], results["cold"]
    produce, unclean = results["produce"], results["unclean"]
    rows = [
        usage_row(f"create {num(args.partitions)} partitions", create["create_s"], create),
        ["  clean close", f"{create['close_s']:.2f}", "", "", "", "", ""],
        usage_row("clean restart (LogManager.open)", clean["open_s"], clean["after_open"]),
        usage_row("  then read every partition once", clean["touch_s"], clean["after_touch"]),
        ["  clean close", f"{clean['close_s']:.2f}", "", "", "", "", ""],
        usage_row("cold clean restart", cold["open_s"], cold["after_open"]),
        usage_row(
            f"produce (open + {num(args.active)} first appends + runs)",
            produce["open_s"],
            produce["after"],
        ),
        usage_row("unclean restart after SIGKILL", unclean["open_s"], unclean["after_open"]),
    ]
    headers = ["phase", "seconds", "RSS", "peak RSS", "fds", "segment fds", "open segments"]
    print_table(
        f"1. {num(args.partitions)} partitions, {num(create['segments'])} segments, "
        f"limit {FD_LIMIT} descriptors",
        headers,
        rows,
    )
    print(
        f"  RSS/fds are measured in the phase's own process at the end of the step; "
        f"segment fds = descriptors held by open segment files (budget "
        f"{FD_LIMIT - 1024} of {FD_LIMIT})."
    )
    print(
        f"  unclean restart recovered {num(unclean['unclean'])} logs "
        f"({num(unclean['recovered_segments'])} segments); the clean ones "
        f"{num(clean['recovered_segments'])} segments."
    )
    single = statistics.median(produce["single_mb_s"])
    rr = statistics.median(produce["round_robin_mb_s"])
    batch = produce["batch_bytes"]
    rows = [
        [
            "one partition",
            num(single),
            "-".join(num(x) for x in sorted(produce["single_mb_s"])[:: RUNS - 1]),
            num(single * MB / batch),
            "",
        ],
        [
            f"{num(args.active)} partitions round-robin",
            num(rr),
            "-".join(num(x) for x in sorted(produce["round_robin_mb_s"])[:: RUNS - 1]),
            num(rr * MB / batch),
            f"{rr / single:.0%}",
        ],
    ]
    print_table(
        f"2. Produce, {num(batch)}-byte batches of {RECORD_BYTES} B records, "
        f"durability=interval (1000 ms), {mib(args.volume)} per run",
        ["target", "MB/s", "range", "appends/s", "vs one"],
        rows,
    )
    print(
        f"  first append to each of {num(args.active)} partitions after the clean "
        f"restart: {produce['first_round_s']:.2f} s (each records the log unclean "
        f"first: one checkpoint write)."
    )
    peak = max(
        create["peak_rss"],
        clean["after_touch"]["peak_rss"],
        cold["after_open"]["peak_rss"],
        produce["after"]["peak_rss"],
        unclean["after_open"]["peak_rss"],
    )
    most_fds = max(
        create["fds"],
        clean["after_touch"]["fds"],
        produce["after"]["fds"],
        unclean["after_open"]["fds"],
    )
    restart = max(clean["open_s"], cold["open_s"], unclean["open_s"])
    aims = [
        ["peak RSS < 1 GB", mib(peak), verdict(peak < AIM_RSS_BYTES)],
        [f"within {FD_LIMIT} descriptors", num(most_fds), verdict(most_fds <= FD_LIMIT)],
        ["restart < 30 s (slowest)", f"{restart:.1f} s", verdict(restart < AIM_RESTART_S)],
        [
            "round-robin >= 50% of one partition",
            f"{rr / single:.0%}",
            verdict(rr / single >= AIM_ROUND_ROBIN_RATIO),
        ],
    ]
    print_table("Aims (reported, never enforced)", ["aim", "measured", "verdict"], aims)


def orchestrate(args: argparse.Namespace) -> int:
    args.dir.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="meridian-bench-partitions-", dir=args.dir))
    data = base / "data"
    started = time.perf_counter()
    busy_at_start, _ = busy_cpu_seconds()
    ours_at_start = own_cpu_seconds()
    print(f"Meridian many-partitions benchmark ({'quick' if args.quick else 'full'} run)")
    for key, value in machine_rows(base):
        print(f"  {key + ':':<23}{value}")
    try:
        results: dict[str, dict[str, Any]] = {}
        progress(f"create {args.partitions:,} partitions")
        results["create"] = child("create", data, args)
        progress("clean restart")
        results["restart"] = child("restart-touch", data, args)
        progress(f"cold clean restart (dropping the pages of {drop_page_cache(data):,} files)")
        results["cold"] = child("restart", data, args)
        progress(f"produce to 1 and {args.active:,} partitions, then SIGKILL")
        results["produce"] = child("produce", data, args)
        progress("unclean restart")
        results["unclean"] = child("restart", data, args)
        report(results, args)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    elapsed = time.perf_counter() - started
    busy, _ = busy_cpu_seconds()
    others = max(0.0, (busy - busy_at_start) - (own_cpu_seconds() - ours_at_start)) / elapsed
    print(f"\ntotal wall time {elapsed:.0f} s; CPU used outside this benchmark's processes")
    print(f"  (other processes, kernel threads) during the run: {others:.2f} of {os.cpu_count()}")
    return 0


def own_cpu_seconds() -> float:
    """CPU seconds of this process and of the phase processes it waited for."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 partitions, a smoke run")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--active", type=int, default=1_000)
    parser.add_argument("--volume", type=int, default=256 * MiB, help="bytes per produce run")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        run_phase(args)
        return 0
    if args.quick:
        args.partitions, args.active, args.volume = 1_000, 100, 32 * MiB
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())

"""Mirror benchmark: one link's copy rate against the SDK producer's own, replication
lag at a steady rate, and catch-up after an outage.

    .venv/bin/python bench/mirror.py                  # ~3 min here
    .venv/bin/python bench/mirror.py --outage-s 10    # a shorter outage
    ./dev bench mirror [flags]

Two regions on 127.0.0.1, ``east`` and ``west``, one broker process each
(``tests/support/brokers.py``, auth off), and one worker (``python -m mirror``,
``tests/support/mirror.py``) copying ``bench.orders`` (``--partitions``, 3) east -> west
with its default batching (5,000 records a poll, ``linger_ms`` 5).

1. **Throughput**: the SDK ``Producer`` (acks=all, idempotent, as the worker writes)
   sends ``--records`` 100-byte records (16-byte keys) with ``send_batch`` in prebuilt
   lists of 5,000 into east, from the first call to the end of ``flush``; then the same
   records as the worker writes them (two provenance headers, the source timestamp,
   ``route_lanes=False``) into another topic in west, for reference; then the
   worker copies them to west, from its ready file to the status saying every partition
   caught up (which includes its resume scan and client start-up). Records/s, MB/s (key
   and value bytes) and the ratio, in the same run.
2. **Lag**: a paced producer writes ``--rate`` records/s (5,000) into east for
   ``--lag-s`` seconds, each record stamped with its send time (its timestamp, which the
   copy keeps); a consumer in west reads the copies as they come. The lag of a record is
   the time from its send to the consumer receiving its copy; p50/p99/max after a
   warm-up of ``WARMUP_S``.
3. **Catch-up**: with the paced producer still writing, the worker is stopped (SIGTERM)
   for ``--outage-s`` seconds (60) and started again; the time from the new worker's
   start to its status showing every partition caught up with the (moving) source end,
   and the backlog it found.

The script never imports the ``mirror`` package (workers run as processes), so its name
shadows nothing it uses. Figures only; progress goes to stderr, the report to stdout.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dataplane.client import Admin, Consumer, Producer, TopicPartition
from tests.support.mirror import Region, WorkerProcess, link_config

TOPIC = "bench.orders"
STAMPED = "bench.stamped"
VALUE = b"v" * 100
WARMUP_S = 3.0
BATCH = 5_000


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def produce_rate(
    bootstrap: str, partitions: int, records: int, topic: str = TOPIC, stamped: bool = False
) -> float:
    """Seconds the SDK producer takes for ``records`` in prebuilt send_batch lists;
    ``stamped``: records as the worker writes them (provenance headers, timestamps)."""
    batches = [
        [
            (b"key-%012d" % (i + j), VALUE, {"x-origin-region": b"east",
             "x-origin-offset": b"%d" % (i + j)}, 1_700_000_000_000 + i + j)
            if stamped else (b"key-%012d" % (i + j), VALUE)
            for j in range(BATCH)
        ]
        for i in range(0, records, BATCH)
    ]  # fmt: skip
    # the copies' records go as the worker sends them: lane routing off
    with Producer(bootstrap, acks="all", linger_ms=5, route_lanes=not stamped) as producer:
        producer.partitions_for(topic)
        started = time.perf_counter()
        for n, batch in enumerate(batches):
            producer.send_batch(topic, batch, partition=n % partitions)
        producer.flush()
        return time.perf_counter() - started


def copy_rate(worker: WorkerProcess, records: int, ends: dict[int, int]) -> tuple[float, float]:
    """Seconds from starting the worker to every partition caught up with ``ends``, and
    from its status first showing copies (start-up and resume scan done) to caught up;
    the status is read every 0.1 s."""
    started = time.perf_counter()
    worker.start()
    worker.wait_for(lambda s: any(p["copied_records"] for p in s["partitions"]), 600)
    copying = time.perf_counter()
    worker.wait_caught_up(ends, timeout_s=600)
    done = time.perf_counter()
    copied = worker.copied()
    assert copied == records, f"copied {copied} of {records}"
    return done - started, done - copying


class Paced:
    """Writes ``rate`` records/s into east in 10 ms steps, each value stamped with its
    send time (``time.time_ns``), until stopped."""

    def __init__(self, bootstrap: str, rate: int) -> None:
        self.bootstrap, self.rate = bootstrap, rate
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        step = 0.01
        per_step = max(1, round(self.rate * step))
        with Producer(self.bootstrap, acks="all", linger_ms=1) as producer:
            next_at = time.perf_counter()
            while not self.stop.is_set():
                now_ns = time.time_ns()
                stamp = b"%020d" % now_ns
                producer.send_batch(TOPIC, [(None, stamp + VALUE[20:])] * per_step)
                self.sent += per_step
                next_at += step
                delay = next_at - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)


def measure_lag(west: Region, partitions: int, seconds: float) -> list[float]:
    """Per copy seen in west: ms from its send (in its value) to its arrival."""
    consumer = Consumer(west.bootstrap, auto_offset_reset="latest", enable_auto_commit=False,
                        fetch_max_wait_ms=50, max_poll_records=10_000)  # fmt: skip
    consumer.assign([TopicPartition(TOPIC, p) for p in range(partitions)])
    for p in range(partitions):
        consumer.position(TopicPartition(TOPIC, p))
    lags: list[float] = []
    started = time.monotonic()
    try:
        while time.monotonic() - started < seconds:
            for record in consumer.poll(100):
                now_ns = time.time_ns()
                if time.monotonic() - started >= WARMUP_S and record.value:
                    lags.append((now_ns - int(record.value[:20])) / 1e6)
    finally:
        consumer.close()
    return lags


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--rate", type=int, default=5_000)
    p.add_argument("--lag-s", type=float, default=30.0)
    p.add_argument("--outage-s", type=float, default=60.0)
    p.add_argument("--dir", default=None)
    args = p.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="mirror-bench-", dir=args.dir))
    east = Region.start(base / "east")
    west = Region.start(base / "west")
    worker = WorkerProcess(base / "worker", link_config(east, west, {TOPIC: args.partitions}))
    paced = None
    try:
        for region in (east, west):
            region.create_topic(TOPIC, args.partitions)
        progress(f"producing {args.records:,} records of 100 B into east")
        produce_s = produce_rate(east.bootstrap, args.partitions, args.records)
        progress("producing them again into west as the copies are written, to another topic")
        west.create_topic(STAMPED, args.partitions)
        stamped_s = produce_rate(west.bootstrap, args.partitions, args.records, STAMPED, True)
        progress("copying them to west")
        with Admin(east.bootstrap) as admin:
            tps = [TopicPartition(TOPIC, p) for p in range(args.partitions)]
            ends = {tp.partition: end for tp, (end, _) in admin.list_offsets(
                dict.fromkeys(tps, "latest")).items()}  # fmt: skip
        total_s, copy_s = copy_rate(worker, args.records, ends)
        size_mb = args.records * (len(VALUE) + 16) / 1e6
        progress(f"lag at {args.rate:,} records/s for {args.lag_s:.0f} s")
        paced = Paced(east.bootstrap, args.rate)
        paced.thread.start()
        lags = measure_lag(west, args.partitions, args.lag_s)
        progress(f"outage of {args.outage_s:.0f} s")
        assert worker.terminate() == 0
        time.sleep(args.outage_s)
        backlog_before = paced.sent
        restarted = time.perf_counter()
        worker.start()
        status = worker.wait_caught_up(timeout_s=600)
        catch_up_s = time.perf_counter() - restarted
        backlog = sum(p["copied_records"] for p in status["partitions"])
        paced.stop.set()
        paced.thread.join()
        times = (produce_s, stamped_s, total_s, copy_s)
        report(args, times, size_mb, lags, catch_up_s, backlog, backlog_before)
    finally:
        if paced is not None:
            paced.stop.set()
        worker.kill()
        east.stop()
        west.stop()
    return 0


def report(
    args: argparse.Namespace,
    times: tuple[float, float, float, float],
    size_mb: float,
    lags: list[float],
    catch_up_s: float,
    backlog: int,
    sent: int,
) -> None:
    n = args.records
    produce_s, stamped_s, total_s, copy_s = times
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    print(f"Mirror benchmark ({machine}), {args.partitions} partitions, one link east -> west")
    print()
    print("| what | records/s | MB/s | seconds |")
    print("|---|---:|---:|---:|")
    rate, mb = n / produce_s, size_mb / produce_s
    print(f"| SDK producer, send_batch, acks=all | {rate:,.0f} | {mb:.1f} | {produce_s:.1f} |")
    rate, mb = n / stamped_s, size_mb / stamped_s
    print(f"| SDK producer, the copies' records (provenance, timestamps) | {rate:,.0f} | {mb:.1f}"
          f" | {stamped_s:.1f} |")  # fmt: skip
    for what, seconds in (("mirror copy, first copy to caught up", copy_s),
                          ("mirror copy, process start to caught up", total_s)):  # fmt: skip
        print(f"| {what} | {n / seconds:,.0f} | {size_mb / seconds:.1f} | {seconds:.1f} |")
    print(f"\nCopy rate / producer rate: {produce_s / copy_s:.0%} (from the first copy),"
          f" {produce_s / total_s:.0%} (from the process start); / the producer writing the"
          f" copies' records: {stamped_s / copy_s:.0%}")  # fmt: skip
    if lags:
        print(f"\nLag at {args.rate:,} records/s ({len(lags):,} copies after a {WARMUP_S:.0f} s"
              f" warm-up): p50 {statistics.median(lags):.0f} ms, p99"
              f" {percentile(lags, 0.99):.0f} ms, max {max(lags):.0f} ms")  # fmt: skip
    print(
        f"\nCatch-up after a {args.outage_s:.0f} s outage: {catch_up_s:.1f} s from the"
        f" worker's start to caught up, {backlog:,} records copied ({sent:,} sent in all)"
    )


if __name__ == "__main__":
    raise SystemExit(main())

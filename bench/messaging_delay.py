"""Delayed delivery and retries benchmark (``bench/messaging.py`` joins it with the
transactions' part): what a delay costs and how well it keeps time.

1. **The delay check on the ordinary produce path**: a leader validates every record
   of a client's batch (``validation.validate_records``, the compiled scan) and now also
   looks for an ``x-deliver-at`` header; the same batches (100 B values, two headers a
   record, or none) scanned with and without the marker, in alternating rounds, the
   median of the rounds: ns per record and the difference.
2. **One broker process with a million pending** (a timer log ``__delay.bench`` of 3
   partitions, unreplicated): records scheduled with ``Producer.send_batch(...,
   deliver_at=...)`` due over the next 30 days, scheduled per second; the broker's
   resident memory before and after (per pending record); then the broker restarted:
   how long until its movers hold them all again (the index rebuilt from the log), and
   its memory then.
3. **Delivered per second with a million pending**: a burst of records all due at one
   instant, from its due time to the consumer holding the last (and that rate), and
   each record's lateness (received minus due, on this machine's one clock) p50/p99.
4. **Lateness spread**: records due over a window of seconds, arriving while more are
   scheduled, p50/p99/max.
5. **Retry round trip** (a retry policy pushed by a test-side controller): a consumer
   of the group retries each record with a 1 s delay; the time from ``retry_later``
   until the group holds it again, minus the delay, p50/p99.
6. **A long delay among short ones** (a second tenant's timer log, one partition, 16 MiB
   segments): one record due in 30 days, then a stream of records due a second later;
   once they are delivered, where the timer partition's log starts and ends (without
   carrying the long record forward, the log would start at it and hold everything
   after it), its size on disk, and the long record still pending under its id.

Kafka has no delayed delivery or retries (applications build them with extra topics and
their own schedulers), so there is no peer to run beside; RocketMQ has them but does not
run here. Run on a quiet machine: ``.venv/bin/python bench/messaging_delay.py``
(``--quick`` for a smoke run, ``--pending N`` to change the million). Progress goes to
stderr, the report to stdout.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchkit import Cleanup, num, percentile, print_table, proc_status_kib, progress
from brokerload import MeridianBroker

from dataplane._gen.meridian.v1 import delay_pb2
from dataplane.broker.delay.mover import CARRY_SPAN
from dataplane.client import Consumer, Producer, TopicPartition
from dataplane.delays import DELIVER_AT
from dataplane.errors import MeridianError
from dataplane.records import RECORDS_OFFSET, BatchBuilder, validation
from tests.support.replication import TestController

TENANT = "bench"
TOPIC = "bench.orders"
TIMER = f"__delay.{TENANT}"
GROUP = "bench.workers"
DAY_MS = 24 * 3600 * 1000
VALUE = b"x" * 100


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- 1. the check on the produce path ---------------------------------------------------------
def scan_cost(records: int, rounds: int) -> list[list[str]]:
    rows = []
    for label, headers in (
        ("2 headers a record", [("x-trace-id", b"0123456789abcdef"), ("content-type", b"json")]),
        ("no headers", []),
    ):
        builder = BatchBuilder(base_timestamp=0)
        for i in range(records):
            builder.append(VALUE, key=b"k%d" % (i % 100), timestamp=i, headers=headers)
        data = builder.build()[RECORDS_OFFSET:]
        plain: list[float] = []
        marked: list[float] = []
        passes = ((b"", plain), (DELIVER_AT.encode(), marked))
        for _ in range(3):  # warm up both
            for marker, _ in passes:
                validation.SCAN(data, 0, len(data), marker)
        for round_ in range(rounds):
            for marker, out in passes[:: 1 if round_ % 2 else -1]:
                started = time.perf_counter_ns()
                validation.SCAN(data, 0, len(data), marker)
                out.append((time.perf_counter_ns() - started) / records)
        base, with_marker = statistics.median(plain), statistics.median(marked)
        rows.append([label, f"{base:.1f}", f"{with_marker:.1f}",
                     f"{(with_marker - base) / base:+.1%}"])  # fmt: skip
    return rows


# -- 2. a million pending -------------------------------------------------------------------
def schedule_pending(broker: MeridianBroker, count: int) -> tuple[float, int, int]:
    """Schedule ``count`` records due 1 to 30 days ahead; (records/s, RSS before, after)."""
    before = proc_status_kib(broker.pid, "VmRSS")
    rng = random.Random(1)
    chunk = 5000
    started = time.perf_counter()
    with Producer(broker.address, acks=1, linger_ms=20, batch_bytes=1024 * 1024) as producer:
        pending = []
        for first in range(0, count, chunk):
            due = _now_ms() + DAY_MS + rng.randrange(29 * DAY_MS)
            size = min(chunk, count - first)
            records = [(b"k%d" % (first + i), VALUE) for i in range(size)]
            pending.append(producer.send_batch(TOPIC, records, deliver_at=due))
            if len(pending) > 20:
                pending.pop(0).wait()
            if first % 100_000 == 0:
                progress(f"scheduled {first:,}")
        producer.flush()
    elapsed = time.perf_counter() - started
    _wait_for_pending(broker, count)
    time.sleep(2)
    after = proc_status_kib(broker.pid, "VmRSS")
    return count / elapsed, before, after


def rebuild(broker: MeridianBroker, count: int) -> tuple[float, float, int]:
    """Stop and start the broker: (seconds to serve, seconds until its movers hold the
    ``count`` records again, rebuilt from the log, and its RSS then)."""
    broker.stop()
    started = time.perf_counter()
    serving = broker.start()
    _wait_for_pending(broker, count)
    return serving, time.perf_counter() - started, proc_status_kib(broker.pid, "VmRSS")


def _wait_for_pending(broker: MeridianBroker, count: int) -> None:
    from dataplane.client.connection import ConnectionPool
    from dataplane.client.delayed import DelayClient
    from dataplane.client.metadata import ClusterMetadata

    pool = ConnectionPool(broker.address)
    client = DelayClient(ClusterMetadata(pool))
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline:
            try:
                states = client.pending(TENANT)
            except MeridianError:  # starting: not every timer partition answers yet
                time.sleep(0.2)
                continue
            if sum(p.pending_records for p in states) >= count and all(p.ready for p in states):
                return
            time.sleep(0.5)
    finally:
        pool.close()
    raise TimeoutError("the pending records were not all indexed")


# -- 3 and 4. delivery ----------------------------------------------------------------------
class Arrivals:
    """A consumer of ``TOPIC`` from its end now, noting when each record arrived."""

    def __init__(self, bootstrap: str) -> None:
        self.times: list[tuple[int, bytes]] = []
        self._stop = threading.Event()
        self._consumer = Consumer(bootstrap, auto_offset_reset="latest", fetch_max_wait_ms=50,
                                  enable_auto_commit=False)  # fmt: skip
        tps = [TopicPartition(TOPIC, p) for p in range(3)]
        self._consumer.assign(tps)
        for tp in tps:
            self._consumer.position(tp)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            records = self._consumer.poll(100)
            now = _now_ms()
            self.times += [(now, r.value or b"") for r in records]

    def wait(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.times) < count and time.monotonic() < deadline:
            time.sleep(0.01)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


def burst(broker: MeridianBroker, count: int) -> tuple[float, list[int]]:
    """``count`` records due at one instant; (delivered/s, lateness ms sorted)."""
    arrivals = Arrivals(broker.address)
    due = _now_ms() + 15_000
    with Producer(broker.address, acks=1, linger_ms=20, batch_bytes=1024 * 1024) as producer:
        for first in range(0, count, 5000):
            size = min(5000, count - first)
            producer.send_batch(TOPIC, [(None, b"%d" % due)] * size, deliver_at=due)
        producer.flush()
    progress(f"burst of {count:,} scheduled, {(due - _now_ms()) / 1000:.1f} s ahead")
    arrivals.wait(count, 300)
    arrivals.close()
    late = sorted(at - int(value) for at, value in arrivals.times[:count])
    span = max(1, max(at for at, _ in arrivals.times[:count]) - due)
    return count / (span / 1000), late


def spread(broker: MeridianBroker, count: int, window_ms: int) -> list[int]:
    """``count`` records due over ``window_ms``, scheduled just before; lateness sorted."""
    arrivals = Arrivals(broker.address)
    start = _now_ms() + 3000
    rng = random.Random(2)
    with Producer(broker.address, acks=1, linger_ms=5) as producer:
        for _ in range(count // 10):
            due = start + rng.randrange(window_ms)
            producer.send_batch(TOPIC, [(None, b"%d" % due)] * 10, deliver_at=due)
        producer.flush()
    arrivals.wait(count, window_ms / 1000 + 120)
    arrivals.close()
    return sorted(at - int(value) for at, value in arrivals.times[:count])


# -- 5. retries -----------------------------------------------------------------------------
def retry_round_trip(broker: MeridianBroker, records: int) -> list[int]:
    controller = TestController({1: broker.local})  # type: ignore[dict-item]
    retry_topic, dead = f"{GROUP}.retry", f"{GROUP}.dlq"
    broker.create_topic(retry_topic, 1)
    broker.create_topic(dead, 1)
    controller.topics.clear()
    controller.delay = delay_pb2.DelayPush(
        policies_listed=True,
        retry_policies=[
            delay_pb2.RetryPolicy(
                group_id=GROUP, max_attempts=5, backoff_initial_ms=1000, backoff_multiplier=2,
                backoff_max_ms=60_000, retry_topic=retry_topic, dead_letter_topic=dead,
            )
        ],
    )  # fmt: skip
    controller.push()
    with Producer(broker.address, acks=1) as producer:
        for i in range(records):
            producer.send(TOPIC, b"job-%d" % i, key=b"%d" % i)
    asked: dict[bytes, int] = {}
    trips: list[int] = []
    with Consumer(broker.address, group_id=GROUP, auto_offset_reset="earliest",
                  fetch_max_wait_ms=20) as consumer:  # fmt: skip
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 120
        while len(trips) < records and time.monotonic() < deadline:
            for record in consumer.poll(50):
                value = record.value or b""
                if not value.startswith(b"job-"):
                    continue
                if record.attempt == 1:
                    asked[value] = _now_ms()
                    consumer.retry_later(record, 1)
                elif value in asked:
                    trips.append(_now_ms() - asked.pop(value) - 1000)
            consumer.commit()
    return sorted(trips)


# -- 6. a long delay among short ones --------------------------------------------------------
LONG_TENANT = "benchlong"
LONG_TOPIC = f"{LONG_TENANT}.orders"
LONG_TIMER = f"__delay.{LONG_TENANT}"


def long_among_short(broker: MeridianBroker, count: int) -> list[list[str]]:
    """One record due in 30 days, then ``count`` due at once; rows of what the timer
    partition holds once the short ones are delivered."""
    from dataplane.client.connection import ConnectionPool
    from dataplane.client.delayed import DelayClient
    from dataplane.client.metadata import ClusterMetadata

    broker.create_topic(LONG_TOPIC, 1)
    broker.create_topic(LONG_TIMER, 1, retention_ms=-1, retention_bytes=-1,
                        max_segment_bytes=16 << 20)  # fmt: skip
    started = time.perf_counter()
    with Producer(broker.address, acks=1, linger_ms=20, batch_bytes=1024 * 1024) as producer:
        long = producer.send(LONG_TOPIC, b"long", partition=0, deliver_after=30 * 86400)
        long_id = long.result(30).delayed_id
        pending = []
        for first in range(0, count, 5000):
            due = _now_ms() + 1000
            pending.append(producer.send_batch(LONG_TOPIC, [(None, VALUE)] * 5000,
                                               partition=0, deliver_at=due))  # fmt: skip
            if len(pending) > 20:
                pending.pop(0).wait()
            if first % 200_000 == 0:
                progress(f"long among short: {first:,} scheduled")
        producer.flush()
    pool = ConnectionPool(broker.address)
    client = DelayClient(ClusterMetadata(pool))
    try:
        while True:
            (state,) = client.pending(LONG_TENANT)
            if state.pending_records == 1 and broker.end_offset(LONG_TOPIC) >= count:
                break
            time.sleep(0.5)
        moved_s = time.perf_counter() - started
        # The mover carries and trims every few seconds: wait until the log start has
        # caught up with the end (when there is enough to carry), at most a minute.
        start, end = _start_offset(broker, LONG_TIMER), broker.end_offset(LONG_TIMER)
        while (count > CARRY_SPAN and end - start > 1000
               and time.perf_counter() - started < moved_s + 60):  # fmt: skip
            time.sleep(0.5)
            start, end = _start_offset(broker, LONG_TIMER), broker.end_offset(LONG_TIMER)
        listed = [r.id for r in client.scheduled(LONG_TENANT, topic=LONG_TOPIC)]
    finally:
        pool.close()
    # Blocks allocated: the active segment's index files are sparse, preallocated.
    disk = sum(f.stat().st_blocks * 512 for f in broker.data_dir.rglob("*")
               if LONG_TIMER in str(f) and f.is_file())  # fmt: skip
    return [
        ["records due at once after the long one", num(count)],
        ["s from the first send until all delivered", num(moved_s, 1)],
        ["timer log end offset", num(end)],
        ["timer log start offset", num(start)],
        ["offsets held (end - start)", num(end - start)],
        ["timer log on disk (MiB allocated)", num(disk / (1 << 20), 1)],
        ["the long record listed under its id", "yes" if listed == [long_id] else str(listed)],
    ]


def _start_offset(broker: MeridianBroker, topic: str) -> int:
    from dataplane._gen.meridian.v1 import broker_pb2

    request = broker_pb2.ListOffsetsRequest(
        partitions=[broker_pb2.ListOffsetsPartition(topic=topic, partition=0, timestamp=-2)]
    )
    return int(broker.broker.ListOffsets(request, timeout=30).results[0].offset)


def _long_table(broker: MeridianBroker, count: int) -> None:
    print_table(
        "6. One record due in 30 days, then records due at once (another tenant's "
        "timer log, 1 partition)",
        ["measure", "value"],
        long_among_short(broker, count),
    )


def _long_only(count: int) -> int:
    with Cleanup(Path(tempfile.gettempdir())) as cleanup:
        _long_table(MeridianBroker(cleanup, cleanup.mkdtemp("delay-bench")), count)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--pending", type=int, default=1_000_000, help="records kept pending")
    parser.add_argument("--long-only", action="store_true", help="part 6 alone")
    args = parser.parse_args(argv)
    if args.long_only:
        return _long_only(1_500_000)
    pending = 50_000 if args.quick else args.pending
    burst_count = 5_000 if args.quick else 50_000
    spread_count = 2_000 if args.quick else 20_000
    retries = 50 if args.quick else 300
    scan_rows = scan_cost(2_000 if args.quick else 20_000, 3 if args.quick else 15)
    print_table(
        "1. The x-deliver-at check in the leader's record scan (compiled), ns per record",
        ["records", "scan", "scan + check", "difference"],
        scan_rows,
    )
    with Cleanup(Path(tempfile.gettempdir())) as cleanup:
        broker = MeridianBroker(cleanup, cleanup.mkdtemp("delay-bench"))
        broker.create_topic(TOPIC, 3)
        broker.create_topic(TIMER, 3, retention_ms=-1, retention_bytes=-1)
        rate, before, after = schedule_pending(broker, pending)
        serving, rebuilt, restarted = rebuild(broker, pending)
        print_table(
            f"2. Scheduling {pending:,} records due over 30 days (one broker, 3 timer partitions)",
            ["measure", "value"],
            [
                ["scheduled/s (send_batch, 100 B values)", num(rate)],
                ["broker RSS before (MiB)", num(before / 1024)],
                ["broker RSS with them pending (MiB)", num(after / 1024)],
                ["RSS per pending record (bytes)", num((after - before) * 1024 / pending)],
                ["restarted: s until serving", num(serving, 1)],
                ["restarted: s until the movers hold them all (rebuilt)", num(rebuilt, 1)],
                ["restarted: RSS (MiB)", num(restarted / 1024)],
                ["restarted: RSS per pending record over the empty broker's (bytes)",
                 num((restarted - before) * 1024 / pending)],
            ],
        )  # fmt: skip
        delivered, late = burst(broker, burst_count)
        print_table(
            f"3. A burst of {burst_count:,} due at one instant, with {pending:,} pending",
            ["measure", "value"],
            [
                ["delivered/s (due time -> last one consumed)", num(delivered)],
                ["lateness p50 (ms)", num(percentile(late, 0.5))],
                ["lateness p99 (ms)", num(percentile(late, 0.99))],
            ],
        )
        late = spread(broker, spread_count, 20_000)
        print_table(
            f"4. {spread_count:,} records due over 20 s, with {pending:,} pending",
            ["measure", "ms"],
            [
                ["lateness p50", num(percentile(late, 0.5))],
                ["lateness p99", num(percentile(late, 0.99))],
                ["lateness max", num(late[-1])],
                ["early (received before due)", num(sum(1 for x in late if x < 0))],
            ],
        )
        trips = retry_round_trip(broker, retries)
        print_table(
            f"5. Retry round trip: retry_later(record, 1 s) until the group holds it again, "
            f"less the second ({len(trips)} records)",
            ["measure", "ms"],
            [["p50", num(percentile(trips, 0.5))], ["p99", num(percentile(trips, 0.99))]],
        )
        _long_table(broker, 100_000 if args.quick else 1_500_000)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

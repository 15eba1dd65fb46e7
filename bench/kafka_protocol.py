"""Kafka wire-protocol benchmark: Meridian's Kafka listener against Apache Kafka, both
driven by the same confluent-kafka (librdkafka) client, in the same run.

Run ``.venv/bin/python bench/kafka_protocol.py [--quick] [--only WORKLOADS]
[--partitions N] [--runs N]`` (or ``./dev bench kafka-protocol ...``). It prints its
figures and the Meridian/Kafka ratios; it is never run as a test.

The servers, started once for the whole run and both up throughout:

- **Meridian**: one broker process (``brokerload.BenchBroker``) with its Kafka listener on
  a free port (``--kafka-listen 127.0.0.1:0``; the ready file names the port), auth off,
  so clients connect with PLAINTEXT. Topics are made through the broker's gRPC Admin API
  (``CreatePartitions``, as ``bench/broker.py`` makes them) with ``durability=interval``
  on one broker, i.e. a replication factor of 1.
- **Apache Kafka**: one KRaft node from Maven Central's jars (``kafkapeer.KafkaServer``),
  topics made with the AdminClient, one replica, Kafka's default of no fsync per append.

Every topic has ``--partitions`` partitions on both (1 by default, as ``bench/broker.py``
compares). The client settings are ``kafkapeer``'s, unchanged, on both sides, so only the
server differs. Workloads (``--only``, comma-separated; all by default):

- ``produce``: ``produce()`` 1,000,000 records of 100 B, ``acks=all`` with idempotence
  (``kafkapeer.kafka_produce``), timed until the last is acked; records/s and MB/s.
- ``produce-1k``: the same with 200,000 records of 1 KiB.
- ``catch-up``: a consumer assigned every partition of the ``produce`` topic (loaded
  first, untimed, when ``produce`` is not selected) reads it from the start with
  ``consume(10,000)``; records/s.
- ``latency``: end to end at 5,000 records/s of 100 B for 20 s after a 2 s warm-up, a
  paced producer in a spawned process (``kafkapeer.kafka_paced_producer``: linger 0,
  acks=1) and a ``poll()``-ing consumer here; every value carries its due time on
  CLOCK_MONOTONIC (``benchkit.Pacer``); p50 and p99.

Before anything is timed each server moves 1/5 of the 100 B case's records through both
clients, and runs one unreported latency case before its first latency case (Kafka's JIT
compiler; the same for Meridian, for symmetry). ``--runs N`` repeats the workloads N
times, alternating which server goes first, and prints each run and the medians. Aims:
produce (both sizes) and catch-up at least 50% of Kafka's records/s, latency p99 at most
twice Kafka's; reported as PASS/MISS, never enforced.

Every process and temporary directory is removed at the end, also after an error, Ctrl-C
or SIGTERM (``benchkit.Cleanup``). Progress goes to stderr, the report to stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import broker
import confluent_kafka
import grpc
from benchkit import (
    Cleanup,
    Latency,
    LatencyCollector,
    Plan,
    Throughput,
    cpu_seconds,
    measure_latency,
    ms,
    note,
    num,
    print_table,
    progress,
    ratio,
    size_label,
    stopwatch,
    verdict,
    wait_until,
)
from brokerload import MERIDIAN, BenchBroker, MeridianBroker
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafkapeer import (
    CLIENT_NOTE,
    CONSUME_MODE,
    DEFAULT,
    KAFKA,
    KAFKA_FSYNC,
    LATENCY_MODE,
    LATENCY_SOCKETS,
    RPC_TIMEOUT_S,
    KafkaServer,
    _consumer_config,
    kafka_consume,
    kafka_paced_producer,
    kafka_produce,
    produce_mode,
    warm_up_plan,
)

from dataplane._gen.meridian.v1 import admin_pb2_grpc, broker_pb2_grpc
from dataplane.client.connection import CHANNEL_OPTIONS
from dataplane.local import free_ports

WORKLOADS = ("produce", "produce-1k", "catch-up", "latency")
MERIDIAN_SETTING = "interval"
SETTINGS = {MERIDIAN: MERIDIAN_SETTING, KAFKA: DEFAULT}
ACKS = "all"
AIM_THROUGHPUT_RATIO = 0.5
AIM_P99_RATIO = 2.0
LOG_TAIL_LINES = 40  # of a server's log, printed when one of its cases fails


@dataclass(frozen=True)
class Sizes:
    """One run's sizes: ``plan`` for the 100 B cases, the case time limit and the latency
    case (``plan.partitions``: partitions of every topic), ``kib_records`` for 1 KiB."""

    plan: Plan
    kib_records: int

    def records_for(self, value_bytes: int) -> int:
        return self.plan.records if value_bytes < 1024 else self.kib_records


def _plan(records: int, max_case_s: float, warmup_s: float, latency_s: float) -> Plan:
    return Plan(
        records=records,
        prebuilt_records=0,
        max_case_s=max_case_s,
        latency_rate=5_000,
        latency_warmup_s=warmup_s,
        latency_s=latency_s,
        partitions=1,
        active_partitions=1,
    )


# A case stops sending after max_case_s: a slow server moves fewer records, not forever.
FULL = Sizes(_plan(1_000_000, 60.0, 2.0, 20.0), kib_records=200_000)
QUICK = Sizes(_plan(100_000, 20.0, 1.0, 5.0), kib_records=20_000)


# -- the servers --------------------------------------------------------------------------
class ListenerBroker(MeridianBroker):
    """``brokerload.MeridianBroker`` with the Kafka listener on, at any free port: its
    ``__init__`` with ``kafka_port=0`` (``MeridianBroker`` takes no ``kafka_port``)."""

    def __init__(self, cleanup: Cleanup, root: Path) -> None:
        self.local = BenchBroker(1, free_ports(1)[0], root / "broker-1", kafka_port=0)
        cleanup.adopt(self.local)
        self.start()
        self.channel = grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        self.admin = admin_pb2_grpc.AdminStub(self.channel)
        self.broker = broker_pb2_grpc.BrokerStub(self.channel)


@dataclass
class Target:
    """One server as a Kafka client sees it: where to connect, how to make a topic of N
    partitions, and how to stop it."""

    system: str
    bootstrap: str
    make_topic: Callable[[str, int], object]
    shutdown: Callable[[], object]
    log_text: Callable[[], str]
    admin: AdminClient | None = None
    loaded: tuple[str, int] | None = None  # this run's 100 B topic and the records it holds
    latency_warm: bool = False

    def __post_init__(self) -> None:
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})

    @property
    def setting(self) -> str:
        return SETTINGS[self.system]

    def create_topic(self, name: str, partitions: int) -> str:
        """Makes ``name`` and returns it once the Kafka protocol's metadata shows every
        partition with a leader."""
        self.make_topic(name, partitions)
        what = f"{self.system}: leaders of {name}'s {partitions} partition(s)"
        wait_until(lambda: self._has_leaders(name, partitions), RPC_TIMEOUT_S, what)
        return name

    def _has_leaders(self, name: str, partitions: int) -> bool:
        assert self.admin is not None
        found = self.admin.list_topics(name, timeout=RPC_TIMEOUT_S).topics.get(name)
        if found is None or found.error is not None or len(found.partitions) != partitions:
            return False
        return all(p.leader >= 0 and p.error is None for p in found.partitions.values())

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def close(self) -> None:
        self.admin = None  # librdkafka's handle goes before the server, quietly
        self.shutdown()


def start_kafka(cleanup: Cleanup) -> Target:
    progress("Kafka: starting one KRaft node")
    server = KafkaServer(cleanup)

    def make_topic(name: str, partitions: int) -> None:
        assert server.admin is not None
        topic = NewTopic(name, num_partitions=partitions, replication_factor=1)
        server.admin.create_topics([topic])[name].result(RPC_TIMEOUT_S)

    def log_text() -> str:
        return server.log.read_text(errors="replace")

    return Target(KAFKA, server.bootstrap, make_topic, server.stop, log_text)


def start_meridian(cleanup: Cleanup) -> Target:
    progress("Meridian: starting one broker with its Kafka listener")
    node = ListenerBroker(cleanup, cleanup.mkdtemp("meridian-"))

    def make_topic(name: str, partitions: int) -> None:
        node.create_topic(name, partitions, MERIDIAN_SETTING)

    def shutdown() -> None:
        node.close()
        node.stop()

    try:
        return Target(MERIDIAN, node.local.kafka_address, make_topic, shutdown, node.local.log_text)
    except BaseException:
        shutdown()
        raise


STARTERS: dict[str, Callable[[Cleanup], Target]] = {MERIDIAN: start_meridian, KAFKA: start_kafka}


def start_targets(
    cleanup: Cleanup, systems: Sequence[str], sizes: Sizes, setup: broker.Report
) -> list[Target]:
    """Starts and warms up each of ``systems``; one that fails is reported in ``setup``
    and left out."""
    targets: list[Target] = []
    for system in systems:

        def start(system: str = system) -> None:
            target = STARTERS[system](cleanup)
            try:
                warm_up(target, sizes)
            except Exception:
                progress(f"{target.system}: its log ends with\n{target.log_tail()}")
                target.close()
                raise
            except BaseException:
                target.close()
                raise
            targets.append(target)

        broker.attempt(setup, f"{system} start", start)
    return targets


def warm_up(target: Target, sizes: Sizes) -> None:
    """Untimed records through the server and both clients (``kafkapeer.warm_up``'s, on a
    topic of the run's partition count)."""
    n = max(1, sizes.plan.records // 5)
    progress(f"{target.system}: warming up with {n:,} x 100 B")
    topic = target.create_topic("bench.warm-up", sizes.plan.partitions)
    limit_s = sizes.plan.max_case_s * 3
    sent = kafka_produce(target.bootstrap, topic, 100, n, limit_s, ACKS)
    read_all(target.bootstrap, topic, sizes.plan.partitions, sent, limit_s)


# -- the client ---------------------------------------------------------------------------
def read_all(bootstrap: str, topic: str, partitions: int, records: int, max_s: float) -> int:
    """``consume()`` from the start of every partition; returns the records received."""
    return kafka_consume(bootstrap, topic, records, max_s, partitions=partitions)


def latency(target: Target, cleanup: Cleanup, plan: Plan, topic: str) -> Latency:
    """``kafkapeer.kafka_latency`` on any target, the consumer assigned every partition."""
    topic = target.create_topic(topic, plan.partitions)
    result = Latency(target.system, LATENCY_MODE, target.setting, plan.latency_rate)

    def consume(collector: LatencyCollector, deadline: float) -> None:
        extra = {**LATENCY_SOCKETS, "fetch.min.bytes": 1}
        consumer = Consumer(_consumer_config(target.bootstrap, extra))
        try:
            start = confluent_kafka.OFFSET_BEGINNING
            consumer.assign([TopicPartition(topic, p, start) for p in range(plan.partitions)])
            while not collector.done and time.monotonic() < deadline:
                message = consumer.poll(0.1)
                if message is not None and message.error() is None:
                    collector.add(message.value())
        finally:
            consumer.close()

    args = (target.bootstrap, topic)
    return measure_latency(cleanup, result, plan, kafka_paced_producer, args, consume)


# -- the workloads ------------------------------------------------------------------------
def produce_case(target: Target, sizes: Sizes, value_bytes: int, topic: str) -> Throughput:
    n = sizes.records_for(value_bytes)
    target.create_topic(topic, sizes.plan.partitions)
    progress(f"{target.system}: produce() {n:,} x {size_label(value_bytes)}, acks={ACKS}")
    result = Throughput(target.system, "produce", produce_mode(ACKS), value_bytes, target.setting)
    with stopwatch(result):
        result.records = kafka_produce(
            target.bootstrap, topic, value_bytes, n, sizes.plan.max_case_s, ACKS
        )
    return result


def run_produce(target: Target, sizes: Sizes, cleanup: Cleanup, run: int) -> Throughput:
    result = produce_case(target, sizes, 100, f"bench.produce-100-{run}")
    target.loaded = (f"bench.produce-100-{run}", result.records)
    return result


def run_produce_1k(target: Target, sizes: Sizes, cleanup: Cleanup, run: int) -> Throughput:
    return produce_case(target, sizes, 1024, f"bench.produce-1k-{run}")


def run_catch_up(target: Target, sizes: Sizes, cleanup: Cleanup, run: int) -> Throughput:
    plan = sizes.plan
    if target.loaded is None:
        topic = target.create_topic(f"bench.catch-up-{run}", plan.partitions)
        progress(f"{target.system}: loading {plan.records:,} x 100 B to read back")
        sent = kafka_produce(target.bootstrap, topic, 100, plan.records, plan.max_case_s * 3, ACKS)
        target.loaded = (topic, sent)
    topic, n = target.loaded
    progress(f"{target.system}: consume() catch-up, {n:,} x 100 B")
    result = Throughput(target.system, "consume", CONSUME_MODE, 100, target.setting)
    with stopwatch(result):
        result.records = read_all(target.bootstrap, topic, plan.partitions, n, plan.max_case_s)
    if result.records < n:
        result.note = f"read {result.records:,} of {n:,} in the {plan.max_case_s:g} s allowed"
    return result


def run_latency(target: Target, sizes: Sizes, cleanup: Cleanup, run: int) -> Latency:
    plan = sizes.plan
    if not target.latency_warm:
        progress(f"{target.system}: latency warm-up (not reported)")
        latency(target, cleanup, warm_up_plan(plan), "bench.latency-warm-up")
        target.latency_warm = True
    progress(f"{target.system}: latency at {plan.latency_rate:,}/s")
    return latency(target, cleanup, plan, f"bench.latency-{run}")


CASES: dict[str, Callable[[Target, Sizes, Cleanup, int], Throughput | Latency]] = {
    "produce": run_produce,
    "produce-1k": run_produce_1k,
    "catch-up": run_catch_up,
    "latency": run_latency,
}


def run_once(
    cleanup: Cleanup, targets: Sequence[Target], sizes: Sizes, workloads: Sequence[str], run: int
) -> broker.Report:
    """One pass of every workload, each on every target in turn (so figures compared with
    each other are taken seconds apart); odd runs start with the other target."""
    report = broker.Report()
    order = list(targets) if run % 2 == 0 else list(reversed(targets))
    for target in targets:
        target.loaded = None
    for workload in workloads:
        for target in order:
            failures = len(report.errors)
            broker.attempt(
                report,
                f"{target.system} {workload} (run {run + 1})",
                lambda t=target, w=workload: report.add([CASES[w](t, sizes, cleanup, run)]),
            )
            if len(report.errors) > failures:
                progress(f"{target.system}: its log ends with\n{target.log_tail()}")
    return report


# -- figures ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Figure:
    """One row of the comparison: ``value(report, system)`` (NaN when not measured)."""

    label: str
    value: Callable[[broker.Report, str], float]
    show: Callable[[float], str]
    higher_wins: bool = True


def _throughput(workload: str, mode: str, value_bytes: int, unit: str) -> Callable[..., float]:
    def value(report: broker.Report, system: str) -> float:
        found = report.find(system, workload, mode, value_bytes, SETTINGS[system])
        if found is None or not found.records:
            return math.nan
        return found.records_s if unit == "records/s" else found.mb_s

    return value


def _percentile(p: float) -> Callable[..., float]:
    def value(report: broker.Report, system: str) -> float:
        found = report.latency(system, SETTINGS[system], LATENCY_MODE)
        return math.nan if found is None else found.percentile_ms(p)

    return value


def _figures() -> tuple[Figure, ...]:
    rows = []
    for value_bytes in (100, 1024):
        for unit, digits in (("records/s", 0), ("MB/s", 1)):
            rows.append(
                Figure(
                    f"produce {size_label(value_bytes)} acks={ACKS}, {unit}",
                    _throughput("produce", produce_mode(ACKS), value_bytes, unit),
                    lambda x, d=digits: num(x, d),
                )
            )
    rows.append(
        Figure(
            "catch-up 100 B, records/s", _throughput("consume", CONSUME_MODE, 100, "records/s"), num
        )
    )
    for p, name in ((0.50, "p50"), (0.99, "p99")):
        rows.append(Figure(f"latency {name} at 5,000/s, ms", _percentile(p), ms, higher_wins=False))
    return tuple(rows)


FIGURES = _figures()
BY_LABEL = {f.label: f for f in FIGURES}
# (aim, the figure whose Meridian/Kafka ratio it judges, test of that ratio)
AIMS: tuple[tuple[str, str, Callable[[float], bool]], ...] = (
    ("produce 100 B >= 50% of Kafka", "produce 100 B acks=all, records/s", lambda r: r >= 0.5),
    ("produce 1 KiB >= 50% of Kafka", "produce 1 KiB acks=all, records/s", lambda r: r >= 0.5),
    ("catch-up >= 50% of Kafka", "catch-up 100 B, records/s", lambda r: r >= 0.5),
    ("latency p99 <= 2x Kafka's", "latency p99 at 5,000/s, ms", lambda r: r <= AIM_P99_RATIO),
)


def ratio_of(figure: Figure, report: broker.Report) -> float:
    ours, theirs = figure.value(report, MERIDIAN), figure.value(report, KAFKA)
    if not ours or not theirs or math.isnan(ours) or math.isnan(theirs):
        return math.nan
    return ours / theirs


def median(values: Sequence[float]) -> float:
    measured = [v for v in values if not math.isnan(v)]
    return statistics.median(measured) if measured else math.nan


# -- output -------------------------------------------------------------------------------
def print_run(report: broker.Report, title: str) -> None:
    headers = ["system", "how", "value", "fsync", "records", "s", "records/s", "MB/s", "others"]
    rows = [row[:-1] for w in ("produce", "consume") for row in broker.throughput_rows(report, w)]
    print_table(f"{title}: throughput", headers, rows)
    for t in report.throughputs:
        if t.note:
            note(f"{t.system}, {t.workload} {size_label(t.value_bytes)}: {t.note}")
    print_latencies(report, title)
    rows = [comparison_row(f, report) for f in FIGURES]
    print_table(
        f"{title}: Meridian / Kafka", ["workload", MERIDIAN, "Kafka", "Meridian/Kafka"], rows
    )


def comparison_row(figure: Figure, report: broker.Report) -> list[str]:
    ours, theirs = figure.value(report, MERIDIAN), figure.value(report, KAFKA)
    return [figure.label, figure.show(ours), figure.show(theirs), ratio(ours, theirs)]


def print_latencies(report: broker.Report, title: str) -> None:
    headers = ["system", "rate/s", "samples", "lost", "p50 ms", "p99 ms", "p99.9 ms", "max ms"]
    rows = [
        [x.system, num(x.rate), num(len(x.samples_ns)), num(x.lost)]
        + [ms(x.percentile_ms(p)) for p in (0.50, 0.99, 0.999, 1.0)]
        + [num(x.other_cpus, 2)]
        for x in report.latencies
    ]
    print_table(f"{title}: end-to-end latency (warm-up excluded)", [*headers, "others"], rows)
    for x in report.latencies:
        note(f"{x.system}: {x.sender_note}")


def print_summary(reports: Sequence[broker.Report]) -> None:
    """The medians over the runs and each run's ratio."""
    rows = []
    for f in FIGURES:
        ours = median([f.value(r, MERIDIAN) for r in reports])
        theirs = median([f.value(r, KAFKA) for r in reports])
        ratios = [ratio_of(f, r) for r in reports]
        each = ", ".join(ratio(x, 1.0) for x in ratios)
        rows.append([f.label, f.show(ours), f.show(theirs), ratio(median(ratios), 1.0), each])
    headers = ["workload", f"{MERIDIAN} (median)", "Kafka (median)", "Meridian/Kafka (median)"]
    print_table(f"Medians of {len(reports)} runs", [*headers, "each run"], rows)


def print_aims(reports: Sequence[broker.Report]) -> None:
    rows = []
    for aim, label, test in AIMS:
        r = median([ratio_of(BY_LABEL[label], report) for report in reports])
        measured = ratio(r, 1.0) + (" (median)" if len(reports) > 1 else "")
        rows.append([aim, measured, verdict(None if math.isnan(r) else test(r))])
    print_table("Aims (reported, never enforced)", ["aim", "Meridian/Kafka", "verdict"], rows)


def print_settings(systems: Sequence[str]) -> None:
    meaning = {MERIDIAN: broker.MERIDIAN_SETTINGS[MERIDIAN_SETTING], KAFKA: KAFKA_FSYNC[DEFAULT]}
    rows = [[system, SETTINGS[system], meaning[system]] for system in systems]
    print_table("Durability settings of the rows above", ["system", "fsync", "meaning"], rows)
    note("both: " + CLIENT_NOTE.removeprefix("Kafka: "))


# -- running ------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument(
        "--only", default=",".join(WORKLOADS), help=f"some of {','.join(WORKLOADS)}"
    )
    parser.add_argument("--partitions", type=int, default=1, help="partitions of every topic")
    parser.add_argument("--runs", type=int, default=1, help="repeat everything N times")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    systems = parser.add_mutually_exclusive_group()
    # Hidden: one side alone (the Kafka half needs nothing of Meridian's listener).
    systems.add_argument("--peer-only", action="store_true", help=argparse.SUPPRESS)
    systems.add_argument("--meridian-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    chosen = {w.strip() for w in args.only.split(",") if w.strip()}
    if not chosen or chosen - set(WORKLOADS):
        parser.error(f"--only takes some of {', '.join(WORKLOADS)}")
    args.workloads = [w for w in WORKLOADS if w in chosen]
    if args.partitions < 1 or args.runs < 1:
        parser.error("--partitions and --runs must be at least 1")
    args.systems = (
        [KAFKA] if args.peer_only else [MERIDIAN] if args.meridian_only else [MERIDIAN, KAFKA]
    )
    return args


def make_sizes(args: argparse.Namespace) -> Sizes:
    sizes = QUICK if args.quick else FULL
    return dataclasses.replace(
        sizes, plan=dataclasses.replace(sizes.plan, partitions=args.partitions)
    )


def machine_rows(root: Path, args: argparse.Namespace) -> list[tuple[str, str]]:
    rows = [r for r in broker.machine_rows(root) if r[0] not in ("redis-server", "nats-server")]
    rows.append(("meridian", "one broker, its Kafka listener (PLAINTEXT), replication factor 1"))
    rows.append(("topics", f"{args.partitions} partition(s) each, on both"))
    return rows


def run_all(
    cleanup: Cleanup, args: argparse.Namespace, sizes: Sizes, reports: list[broker.Report]
) -> broker.Report:
    """Starts the servers, runs ``args.runs`` passes (each printed as it ends), stops them;
    returns the start-up report (its errors)."""
    setup = broker.Report()
    targets = start_targets(cleanup, args.systems, sizes, setup)
    try:
        for run in range(args.runs if targets else 0):
            report = run_once(cleanup, targets, sizes, args.workloads, run)
            reports.append(report)
            print_run(report, f"Run {run + 1} of {args.runs}" if args.runs > 1 else "Results")
    finally:
        for target in targets:
            target.close()
    return setup


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = make_sizes(args)
    args.dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="meridian-bench-kafka-protocol-", dir=args.dir))
    started = time.perf_counter()
    busy_at_start, ours_at_start = cpu_seconds()
    print(f"Meridian Kafka-protocol benchmark ({'quick' if args.quick else 'full'} run)")
    for key, value in machine_rows(root, args):
        print(f"  {key + ':':<20}{value}")
    reports: list[broker.Report] = []
    try:
        with Cleanup(root) as cleanup:
            setup = run_all(cleanup, args, sizes, reports)
    except KeyboardInterrupt:
        print("\ninterrupted: every process and temporary directory was removed", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if len(reports) > 1:
        print_summary(reports)
    if reports:
        print_aims(reports)
        print_settings(args.systems)
    errors = [e for r in [setup, *reports] for e in r.errors]
    for line in errors:
        print(f"\nFAILED: {line}")
    elapsed = time.perf_counter() - started
    busy, ours = cpu_seconds()
    others = max(0.0, (busy - busy_at_start) - (ours - ours_at_start)) / elapsed
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\ntotal wall time {elapsed:.0f} s; load average at the end: {load};")
    print(f"  CPU used by processes outside this benchmark: {others:.2f} of {os.cpu_count()} CPUs")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

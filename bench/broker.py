"""Broker benchmark: Meridian on one broker process, against Redis Streams, NATS JetStream
and Apache Kafka.

Run ``.venv/bin/python bench/broker.py [--quick] [--only PARTS] [--records N]`` (or
``./dev bench broker ...``). It prints its figures; it is never run as a test.

Parts (``--only``, comma-separated; all by default):

- ``produce``: records/s and MB/s of 100 B and 1 KiB values into one partition, through
  the SDK ``Producer`` and with prebuilt ~1 MB batches over ``ProduceStream`` (the
  broker's ceiling), with ``durability`` interval and always.
- ``consume``: catch-up reads of one partition from its start, through the SDK
  ``Consumer`` and with raw ``Fetch`` (the broker's ceiling).
- ``latency``: end-to-end latency p50/p99/p99.9 at a steady 5,000 records/s, a paced
  producer in a child process and a long-polling consumer here; every record carries the
  time it was due, the warm-up is excluded.
- ``peers``: the selected workloads (all three when none is named) against Redis Streams
  and NATS JetStream, started here from Debian's redis-server and nats-server, and Apache
  Kafka (one KRaft node from Maven Central's jars, ``kafkapeer.py``), with the
  Meridian/peer ratios. ``--only peers`` runs the peers alone; ``redis``, ``nats`` and
  ``kafka`` name one peer each (``--only produce,kafka``).
- ``partitions``: 10,000 idle partitions on one broker: RSS, open descriptors, create and
  restart times (SIGTERM, SIGKILL), then produce round-robin to 1,000 of them.

Every case stops after its record count or ``max_case_s``, whichever comes first. Every
process and temporary directory is removed at the end, also after an error, Ctrl-C or
SIGTERM. Progress goes to stderr, the report to stdout. MB/s are decimal (10**6 bytes) of
record values, not counting keys, headers or framing.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kafkapeer
import peers
from benchkit import (
    Cleanup,
    KiB,
    Latency,
    MiB,
    Plan,
    Throughput,
    cpu_seconds,
    ms,
    note,
    num,
    print_table,
    progress,
    ratio,
    size_label,
    verdict,
)
from brokerload import (
    MERIDIAN,
    PREBUILT_IN_FLIGHT,
    SDK_BATCH_BYTES,
    SDK_CONSUMER,
    SDK_LATENCY_MODE,
    SDK_LINGER_MS,
    SDK_SEND_BATCH,
    SDK_SEND_BATCH_MODE,
    run_meridian,
)
from partitions import FD_LIMIT, PartitionsResult, run_partitions

FULL = Plan(
    records=1_000_000,
    prebuilt_records=5_000_000,
    max_case_s=20.0,
    latency_rate=5_000,
    latency_warmup_s=2.0,
    latency_s=10.0,
    partitions=10_000,
    active_partitions=1_000,
)
QUICK = Plan(
    records=100_000,
    prebuilt_records=500_000,
    max_case_s=5.0,
    latency_rate=5_000,
    latency_warmup_s=1.0,
    latency_s=3.0,
    partitions=1_000,
    active_partitions=100,
)
PEERS = ("redis", "nats", "kafka")
PARTS = ("produce", "consume", "latency", "peers", *PEERS, "partitions")
WORKLOADS = ("produce", "consume", "latency")

AIM_PREBUILT = 2_500_000
AIM_SDK_PRODUCE = 500_000
AIM_SDK_PRODUCE_ALWAYS = 300_000
AIM_SDK_PRODUCE_BATCH = 800_000  # acked 100 B records/s, as Kafka with confluent-kafka here
AIM_SDK_PRODUCE_MB_S = 400  # acked 1 KiB records, MB/s
AIM_SDK_CONSUME = 1_000_000
AIM_P99_MS = 5.0
ISSUE_REDIS_P99_MS = 0.44
AIM_RSS_KIB = 1024 * 1024
AIM_RESTART_S = 30.0
AIM_SPREAD_RATIO = 0.5

OTHERS_NOTE = (
    "others: CPUs used meanwhile by processes outside the benchmark (0 on a quiet machine; "
    "2 means the run got no CPU of its own)"
)
MERIDIAN_SETTINGS = {
    "interval": "durability=interval: acks=1 answers once the append reached the page "
    "cache; fsync at most every flush_interval_ms (1,000 ms)",
    "always": "durability=always: group commit; the ack waits for the fdatasync that "
    "covers the batch",
}


@dataclass
class Report:
    throughputs: list[Throughput] = field(default_factory=list)
    latencies: list[Latency] = field(default_factory=list)
    partitions: PartitionsResult | None = None
    errors: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def add(self, results: Sequence[Any]) -> None:
        for r in results:
            (self.throughputs if isinstance(r, Throughput) else self.latencies).append(r)

    def find(
        self, system: str, workload: str, mode: str, value_bytes: int, setting: str
    ) -> Throughput | None:
        return next(
            (
                t
                for t in self.throughputs
                if (t.system, t.workload, t.mode, t.value_bytes, t.setting)
                == (system, workload, mode, value_bytes, setting)
            ),
            None,
        )

    def latency(self, system: str, setting: str, mode: str | None = None) -> Latency | None:
        return next(
            (
                x
                for x in self.latencies
                if x.system == system and x.setting == setting and mode in (None, x.mode)
            ),
            None,
        )


# -- running ------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--only", default=",".join(PARTS), help=f"some of {','.join(PARTS)}")
    parser.add_argument("--records", type=int, help="records per 100 B case (1 KiB: a quarter)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args(argv)
    args.parts = {p.strip() for p in args.only.split(",") if p.strip()}
    unknown = args.parts - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s) {', '.join(sorted(unknown))}; choose from {PARTS}")
    if "peers" in args.parts:
        args.parts |= set(PEERS)
    return args


def make_plan(args: argparse.Namespace) -> Plan:
    plan = QUICK if args.quick else FULL
    if args.records:
        ratio_prebuilt = plan.prebuilt_records // plan.records
        changes = {"records": args.records, "prebuilt_records": args.records * ratio_prebuilt}
        plan = Plan(**{**plan.__dict__, **changes})
    return plan


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    plan = make_plan(args)
    workloads = set(WORKLOADS) & args.parts
    meridian = bool(workloads)
    if not workloads and args.parts & set(PEERS):
        workloads = set(WORKLOADS)
    args.dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="meridian-bench-broker-", dir=args.dir))
    started = time.perf_counter()
    busy_at_start, ours_at_start = cpu_seconds()
    report = Report()
    print(f"Meridian broker benchmark ({'quick' if args.quick else 'full'} run)")
    for key, value in machine_rows(root):
        print(f"  {key + ':':<20}{value}")
    try:
        with Cleanup(root) as cleanup:
            run_parts(cleanup, root, plan, args.parts, workloads, meridian, report)
    except KeyboardInterrupt:
        print("\ninterrupted: every process and temporary directory was removed", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_report(report, plan)
    elapsed = time.perf_counter() - started
    busy, ours = cpu_seconds()
    others = max(0.0, (busy - busy_at_start) - (ours - ours_at_start)) / elapsed
    print(f"\ntotal wall time {elapsed:.0f} s; CPU used by processes outside this benchmark")
    print(f"  (other work on the machine, kernel threads): {others:.2f} of {os.cpu_count()} CPUs")
    return 1 if report.errors else 0


def run_parts(
    cleanup: Cleanup,
    root: Path,
    plan: Plan,
    parts: set[str],
    workloads: set[str],
    meridian: bool,
    report: Report,
) -> None:
    broker_ok = importlib.util.find_spec("dataplane.broker.__main__") is not None
    sdk = sdk_classes()
    if not broker_ok:
        report.skipped.append("Meridian: no broker yet (dataplane.broker.__main__ is missing)")
    for missing in sorted({"Producer", "Consumer"} - sdk):
        report.skipped.append(f"Meridian SDK rows that need the SDK's {missing}: not there yet")
    # Workload by workload, every system in turn: figures compared with each other are
    # taken minutes apart at most, under the same conditions of a shared machine.
    for workload in (w for w in WORKLOADS if w in workloads):
        if meridian and broker_ok:
            attempt(
                report,
                f"Meridian {workload}",
                lambda w=workload: report.add(
                    run_meridian(cleanup, cleanup.mkdtemp("meridian-"), plan, {w}, sdk)
                ),
            )
        if "redis" in parts:
            attempt(
                report,
                f"Redis {workload}",
                lambda w=workload: report.add(peers.run_redis(cleanup, plan, {w})),
            )
        if "nats" in parts:
            attempt(
                report,
                f"NATS {workload}",
                lambda w=workload: report.add(peers.run_nats(cleanup, plan, {w})),
            )
        if "kafka" in parts:
            attempt(
                report,
                f"Kafka {workload}",
                lambda w=workload: report.add(kafkapeer.run_kafka(cleanup, plan, {w})),
            )
    if "partitions" in parts and broker_ok:

        def many() -> None:
            report.partitions = run_partitions(cleanup, cleanup.mkdtemp("partitions-"), plan)

        attempt(report, "partitions", many)


def attempt(report: Report, what: str, work: Callable[[], None]) -> None:
    """Runs one system's part; a failure is reported and the other parts still run."""
    try:
        work()
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        progress(f"{what} failed:\n{traceback.format_exc()}")
        report.errors.append(f"{what}: {type(exc).__name__}: {exc}")


def sdk_classes() -> set[str]:
    """Which of the SDK's Producer and Consumer exist."""
    import dataplane.client as client

    return {name for name in ("Producer", "Consumer") if hasattr(client, name)}


def machine_rows(root: Path) -> list[tuple[str, str]]:
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
    repo = Path(__file__).resolve().parents[1]
    commit = subprocess.run(
        ["git", "-C", str(repo), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return [
        ("date", datetime.datetime.now().astimezone().isoformat(timespec="seconds")),
        ("cpus", f"{len(os.sched_getaffinity(0))} x {cpu}"),
        ("memory", f"{mem_gib:.1f} GiB"),
        ("kernel", platform.release()),
        ("python", f"{platform.python_implementation()} {platform.python_version()}"),
        ("redis-server", peers.server_version("redis-server")),
        ("nats-server", peers.server_version("nats-server")),
        ("kafka", kafkapeer.describe()),
        ("code", f"{repo} at {commit}" if commit else f"{repo} (not a git checkout)"),
        ("temp dir", str(root)),
        ("load average", ", ".join(f"{x:.2f}" for x in os.getloadavg())),
    ]


# -- reporting ----------------------------------------------------------------------------
def throughput_aim(t: Throughput) -> tuple[str, bool] | None:
    """The issue's aim for this row, if it has one."""
    if t.system != MERIDIAN:
        return None
    if t.value_bytes == KiB and t.workload == "produce" and t.mode.startswith(SDK_SEND_BATCH_MODE):
        return f">= {AIM_SDK_PRODUCE_MB_S} MB/s", t.mb_s >= AIM_SDK_PRODUCE_MB_S
    if t.value_bytes != 100:
        return None
    if t.workload == "produce" and t.mode.startswith(SDK_SEND_BATCH_MODE):
        return f">= {num(AIM_SDK_PRODUCE_BATCH)}/s", t.records_s >= AIM_SDK_PRODUCE_BATCH
    aims = {
        ("produce", "prebuilt batches", "interval"): AIM_PREBUILT,
        ("produce", "SDK Producer", "interval"): AIM_SDK_PRODUCE,
        ("produce", "SDK Producer", "always"): AIM_SDK_PRODUCE_ALWAYS,
        ("consume", "SDK Consumer", "interval"): AIM_SDK_CONSUME,
    }
    aim = aims.get((t.workload, t.mode, t.setting))
    if aim is None:
        return None
    return f">= {num(aim)}/s", t.records_s >= aim


def throughput_rows(report: Report, workload: str) -> list[list[str]]:
    rows = []
    for t in report.throughputs:
        if t.workload != workload:
            continue
        aim = throughput_aim(t)
        rows.append(
            [
                t.system,
                t.mode,
                size_label(t.value_bytes),
                t.setting,
                num(t.records),
                f"{t.seconds:.2f}",
                num(t.records_s),
                num(t.mb_s, 1),
                num(t.other_cpus, 2),
                f"{aim[0]} {verdict(aim[1])}" if aim else "",
            ]
        )
    return rows


def print_throughputs(report: Report) -> None:
    headers = ["system", "how", "value", "fsync", "records", "s", "records/s", "MB/s"]
    headers += ["others", "aim"]
    print_table("1. Produce throughput", headers, throughput_rows(report, "produce"))
    print_table("2. Catch-up consume throughput", headers, throughput_rows(report, "consume"))
    if report.throughputs:
        note(OTHERS_NOTE)


def print_latencies(report: Report) -> None:
    rows = []
    for x in report.latencies:
        p99 = x.percentile_ms(0.99)
        aim = f"< {AIM_P99_MS:g} ms {verdict(p99 < AIM_P99_MS)}" if x.system == MERIDIAN else ""
        rows.append(
            [
                x.system,
                x.mode,
                x.setting,
                num(x.rate),
                num(len(x.samples_ns)),
                num(x.lost),
                ms(x.percentile_ms(0.50)),
                ms(p99),
                ms(x.percentile_ms(0.999)),
                ms(x.percentile_ms(1.0)),
                num(x.other_cpus, 2),
                aim,
            ]
        )
    headers = ["system", "how", "fsync", "rate/s", "samples", "lost", "p50 ms", "p99 ms"]
    headers += ["p99.9 ms", "max ms", "others", "aim (p99)"]
    print_table("3. End-to-end latency at a steady rate (warm-up excluded)", headers, rows)
    if rows:
        note(OTHERS_NOTE)
    for x in report.latencies:
        note(f"{x.system}, {x.mode} ({x.setting}): {x.sender_note}")


# (workload, Meridian mode, Meridian setting, peer, peer mode, peer setting)
COMPARISONS = (
    ("produce", "SDK Producer", "interval", peers.REDIS, "pipelined XADD", "everysec"),
    ("produce", "SDK Producer", "always", peers.REDIS, "pipelined XADD", "always"),
    ("produce", "prebuilt batches", "interval", peers.REDIS, "pipelined XADD", "everysec"),
    ("produce", "prebuilt batches", "always", peers.REDIS, "pipelined XADD", "always"),
    ("produce", "SDK Producer", "interval", peers.NATS, "publish_async", "default"),
    ("produce", "prebuilt batches", "interval", peers.NATS, "publish_async", "default"),
    ("consume", "SDK Consumer", "interval", peers.REDIS, "XRANGE chunks", "everysec"),
    ("consume", "raw Fetch 8 MiB", "interval", peers.REDIS, "XRANGE chunks", "everysec"),
    (
        "consume",
        "SDK Consumer",
        "interval",
        peers.NATS,
        f"pull fetch {peers.NATS_FETCH:,}",
        "default",
    ),
    (
        "consume",
        "raw Fetch 8 MiB",
        "interval",
        peers.NATS,
        f"pull fetch {peers.NATS_FETCH:,}",
        "default",
    ),
)


def print_ratios(report: Report) -> None:
    rows = []
    for workload, mode, setting, peer, peer_mode, peer_setting in (
        *COMPARISONS,
        *kafkapeer.COMPARISONS,
    ):
        for value_bytes in (100, 1024):
            ours = report.find(MERIDIAN, workload, mode, value_bytes, setting)
            theirs = report.find(peer, workload, peer_mode, value_bytes, peer_setting)
            if ours is None or theirs is None:
                continue
            rows.append(
                [
                    f"{workload} {size_label(value_bytes)}",
                    f"{mode} ({setting})",
                    num(ours.records_s),
                    f"{peer}, {peer_mode} ({peer_setting})",
                    num(theirs.records_s),
                    ratio(ours.records_s, theirs.records_s),
                ]
            )
    for ours_lat in (x for x in report.latencies if x.system == MERIDIAN):
        for peer in (peers.REDIS, peers.NATS):
            theirs_lat = next((x for x in report.latencies if x.system == peer), None)
            if theirs_lat is not None:
                rows.append(latency_ratio_row(ours_lat, theirs_lat))
    for mode, setting, peer, peer_setting in kafkapeer.LATENCY_COMPARISONS:
        ours_lat = report.latency(MERIDIAN, setting, mode)
        theirs_lat = report.latency(peer, peer_setting)
        if ours_lat is not None and theirs_lat is not None:
            rows.append(latency_ratio_row(ours_lat, theirs_lat))
    headers = ["workload", "Meridian", "records/s", "peer", "records/s", "Meridian/peer"]
    print_table("4. Meridian / peer ratios (throughput: higher wins)", headers, rows)


def latency_ratio_row(ours: Latency, theirs: Latency) -> list[str]:
    a, b = ours.percentile_ms(0.99), theirs.percentile_ms(0.99)
    return [
        "latency p99 (lower wins)",
        f"{ours.mode} ({ours.setting})",
        f"{ms(a)} ms",
        f"{theirs.system} ({theirs.setting})",
        f"{ms(b)} ms",
        ratio(a, b),
    ]


def print_settings(report: Report) -> None:
    used = {(t.system, t.setting) for t in report.throughputs}
    used |= {(x.system, x.setting) for x in report.latencies}
    systems = {system for system, _ in used}
    rows = [[MERIDIAN, k, v] for k, v in MERIDIAN_SETTINGS.items()]
    rows += [[peers.REDIS, k, v] for k, v in peers.REDIS_FSYNC.items()]
    rows += [[peers.NATS, "default", peers.NATS_FSYNC]]
    rows += [[kafkapeer.KAFKA, k, v] for k, v in kafkapeer.KAFKA_FSYNC.items()]
    rows = [row for row in rows if (row[0], row[1]) in used]
    print_table("Durability settings of the rows above", ["system", "fsync", "meaning"], rows)
    if peers.REDIS in systems or peers.NATS in systems:
        note(
            f"clients: redis-py pipelines of {peers.REDIS_PIPELINE:,} XADD, XRANGE chunks of "
            f"{peers.REDIS_READ_CHUNK:,}; nats-py publish_async with {peers.NATS_IN_FLIGHT:,}"
            f" in flight, pull fetch of {peers.NATS_FETCH:,} without acks"
        )
    if kafkapeer.KAFKA in systems:
        note(kafkapeer.CLIENT_NOTE)
    if MERIDIAN in systems:
        note(
            f"Meridian prebuilt: ~1 MB batches, {PREBUILT_IN_FLIGHT} requests in flight on one "
            f"ProduceStream; SDK producer: acks=1, linger_ms={SDK_LINGER_MS}, "
            f"batch_bytes={SDK_BATCH_BYTES // KiB:,} KiB (send_batch: {SDK_SEND_BATCH:,} records "
            "a call, acks=1 unless the row says acks=all); SDK consumer: "
            + ", ".join(f"{k}={v:,}" for k, v in SDK_CONSUMER.items())
        )


def print_partitions(p: PartitionsResult) -> None:
    rows = [
        [
            s.step,
            f"{s.seconds:.1f}",
            num(s.rss_kib / KiB),
            num(s.hwm_kib / KiB),
            num(s.fds),
        ]
        for s in p.snapshots
    ]
    title = f"5. Many partitions: {p.partitions:,} idle on one broker (durability interval)"
    print_table(title, ["step", "s", "RSS MiB", "peak RSS MiB", "open fds"], rows)
    note(f"broker's open-files limit: {p.fd_limit} (set by the bench: {FD_LIMIT})")
    note(f"SIGTERM stop took {p.stop_s:.1f} s")
    if p.single and p.spread:
        for t in (p.single, p.spread):
            note(
                f"{t.mode}: {num(t.records_s)} records/s, {num(t.mb_s, 1)} MB/s of 100 B "
                f"(others: {num(t.other_cpus, 2)} CPUs)"
            )
        note(f"spread / single: {ratio(p.spread.records_s, p.single.records_s)}")
    if p.error:
        note(f"stopped early: {p.error}")


def aims_rows(report: Report) -> list[list[str]]:
    rows = []
    for t in report.throughputs:
        aim = throughput_aim(t)
        if aim:
            label = f"{t.workload} {t.mode} {size_label(t.value_bytes)} ({t.setting}) {aim[0]}"
            got = f"{num(t.mb_s, 1)} MB/s" if aim[0].endswith("MB/s") else f"{num(t.records_s)}/s"
            rows.append([label, got, verdict(aim[1])])
    ours = report.latency(MERIDIAN, "interval", SDK_LATENCY_MODE)
    if ours is not None:
        p99 = ours.percentile_ms(0.99)
        redis_lat = report.latency(peers.REDIS, "everysec")
        gap = f" (Redis here {ms(redis_lat.percentile_ms(0.99))} ms)" if redis_lat else ""
        rows.append(
            [
                f"SDK p99 < {AIM_P99_MS:g} ms at {ours.rate:,}/s{gap}",
                f"{ms(p99)} ms",
                verdict(p99 < AIM_P99_MS),
            ]
        )
    p = report.partitions
    if p is not None and p.snapshots:
        restart = max(p.seconds("restart after SIGTERM"), p.seconds("restart after SIGKILL"))
        rows += [
            [
                "partitions: RSS < 1 GiB",
                f"{p.max_rss_kib / KiB:,.0f} MiB max",
                verdict(p.max_rss_kib < AIM_RSS_KIB),
            ],
            [
                f"partitions: fds within {FD_LIMIT}",
                f"{p.max_fds:,} max",
                verdict(p.max_fds <= FD_LIMIT and not p.error),
            ],
            [
                f"partitions: restart < {AIM_RESTART_S:g} s",
                f"{restart:.1f} s",
                verdict(restart < AIM_RESTART_S),
            ],
        ]
        if p.single and p.spread:
            r = p.spread.records_s / p.single.records_s if p.single.records_s else 0.0
            rows.append(
                [
                    f"{p.active:,} partitions >= half of one",
                    f"{r:.2f}x",
                    verdict(r >= AIM_SPREAD_RATIO),
                ]
            )
    return rows


def print_report(report: Report, plan: Plan) -> None:
    print_throughputs(report)
    print_latencies(report)
    print_ratios(report)
    if report.throughputs or report.latencies:
        print_settings(report)
    if report.partitions is not None:
        print_partitions(report.partitions)
    print_table(
        "Aims (reported, never enforced)", ["aim", "measured", "verdict"], aims_rows(report)
    )
    for line in report.skipped:
        print(f"\nskipped: {line}")
    for line in report.errors:
        print(f"\nFAILED: {line}")


if __name__ == "__main__":
    sys.exit(main())

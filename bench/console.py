"""Console data benchmark: the cost of rate and lag history at 10,000 topics.

    .venv/bin/python bench/console.py            # ~3 min
    .venv/bin/python bench/console.py --quick    # 1,000 topics in 1-5, a smoke run
    .venv/bin/python bench/console.py --pages-only   # section 6 alone (always 10,000 topics)

Needs the test services (Postgres on 127.0.0.1:55432). Uses its own database
``meridian_bench_console`` (dropped and created afresh each run). Progress goes to
stderr, the report to stdout. No brokers: the collector is fed synthetic observations
(what one pass over the brokers returns), so the figures are the control plane's side:
rates from counter deltas, series lookup, the one bulk upsert per interval, the state
row, and the roll-up and retention statements. The broker side is one ``DescribeState``,
``ListGroups``, ``DescribeGroups`` and ``ListOffsets`` per broker per interval, whatever
the topic count.

1. **Collect**: 10,000 topics (10 per tenant, 1,000 tenants) and 2,000 group-topic
   series, in virtual time (10 s per tick, starting 30 minutes ago): per tick the
   wall time of the whole run (rates, series lookup, the upsert, the state row) and of
   the one bulk upsert alone ("write"), and the WAL bytes written, with every series
   active and with 10% active (the rest idle: no point written).
2. **Roll-up**: one minute of 10 s points into 1 min points, for every series.
3. **Rows**: blocks per day and live rows at the retentions, measured rows times the
   blocks' spans; table and index bytes per live row.
4. **Alternative layout** for the comparison that chose the blocks: one row per series
   and 10 s point (``(series_id, at, 4 float8)``, primary key on both), the same
   10,000 points inserted per tick.
5. **Read**: ``topic_metrics`` for the last hour (10 s points) and the last day (1 min).
6. **Pages** (also alone: ``--pages-only``, ~1 min): a fresh database with 1,000 tenants
   and 10,000 topics (``tenant-00000`` holds 5,005 of them, the 999 others 5 each),
   then server-side times through Django's test client, signed in as a viewer of
   ``tenant-00000`` (a session token from the local issuer, as the page tests do), of
   the dashboard, the topic list (first page; page 15 filtered by ``name=t04``) and a
   topic's detail page, ``PAGE_REQUESTS`` requests each. The cluster's three broker rows
   point at closed ports (connection refused at once): the detail page's broker reads
   fail fast and it renders what the database holds.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
BENCH_DB = "meridian_bench_console"
SERVER = "postgres://meridian:meridian@127.0.0.1:55432"
os.environ["MERIDIAN_DATABASE_URL"] = f"{SERVER}/{BENCH_DB}"
os.environ.setdefault("MERIDIAN_CELERY_BROKER_URL", "redis://127.0.0.1:56379/0")
os.environ["DJANGO_SETTINGS_MODULE"] = "controlplane.settings.testing"
os.environ.setdefault("MERIDIAN_LOG_LEVEL", "WARNING")

AIMS = {"collect p99 (ms)": 1000.0, "page p99 (ms)": 150.0}  # collect: within the 10 s interval
PAGE_REQUESTS = 200


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fresh_database() -> None:
    import psycopg

    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {BENCH_DB}")


def setup_django() -> None:
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def scalar(sql: str, params: Any = None) -> Any:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()[0]


def wal_lsn() -> int:
    return int(scalar("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))


class Traffic:
    """Monotonic counters of ``topics`` topics and ``groups`` group-topic pairs; each
    tick, the active ones move."""

    def __init__(self, topics: int, groups: int) -> None:
        self.names = [f"tenant-{i // 10:05d}.topic-{i % 10}" for i in range(topics)]
        self.pairs = [(f"{self.names[i].split('.')[0]}.g{i}", self.names[i]) for i in range(groups)]
        self.offsets = [0] * topics
        self.committed = [0] * groups

    def observe(self, active: float) -> Any:
        from controlplane.metrics.collect import GroupCounters, Observation, TopicCounters

        for i in range(len(self.offsets)):
            if random.random() < active:
                self.offsets[i] += random.randint(1, 500)
        for i in range(len(self.committed)):
            if random.random() < active:
                self.committed[i] += random.randint(1, 400)
        return Observation(
            topics={
                n: TopicCounters(o, o * 200) for n, o in zip(self.names, self.offsets, strict=True)
            },
            groups={
                pair: GroupCounters(
                    {0: c}, max(0, self.offsets[i] - c) if random.random() < active else 0
                )
                for i, (pair, c) in enumerate(zip(self.pairs, self.committed, strict=True))
            },
        )


def collect(traffic: Traffic, start: datetime, ticks: int, active: float) -> dict[str, Any]:
    from controlplane.metrics import services, store

    times, wal, points, upserts = [], [], [], []
    write_points = store.write_points

    def timed_write(*args: Any) -> None:  # the one bulk statement, timed on its own
        began = time.perf_counter()
        write_points(*args)
        upserts.append(time.perf_counter() - began)

    store.write_points = timed_write  # type: ignore[assignment]
    for tick in range(ticks):
        observation = traffic.observe(active)
        at = start + timedelta(seconds=10 * tick)
        lsn, began = wal_lsn(), time.perf_counter()
        run = services.record_observation(observation, at, began)
        times.append(time.perf_counter() - began)
        wal.append(wal_lsn() - lsn)
        points.append(run.points_written if run else 0)
        if at.second == 50:
            services.roll_up_metrics(at + timedelta(seconds=20))
    store.write_points = write_points  # type: ignore[assignment]
    return {
        "times": times[1:],
        "upserts": upserts[1:],
        "wal": wal[1:],
        "points": statistics.mean(points[1:]),
    }


def roll_up_cost(minute: datetime) -> tuple[float, int]:
    from controlplane.metrics import store
    from controlplane.metrics.models import Collection

    ticks = Collection.objects.filter(at__gte=minute, at__lt=minute + timedelta(minutes=1)).count()
    lsn, began = wal_lsn(), time.perf_counter()
    store.roll_up_minute(minute, max(1, ticks))
    return time.perf_counter() - began, wal_lsn() - lsn


def row_per_point(series: int, ticks: int) -> dict[str, Any]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE bench_point (series_id int, at timestamptz, records_per_s float8,"
            " bytes_per_s float8, lag_records float8, lag_s float8, PRIMARY KEY (series_id, at))"
        )
    times, wal = [], []
    start = datetime.now().astimezone()
    ids = list(range(series))
    for tick in range(ticks):
        values = [random.random() * 1000 for _ in ids]
        lsn, began = wal_lsn(), time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO bench_point SELECT s, %s, r, r * 200, NULL, NULL"
                " FROM unnest(%s::int[], %s::float8[]) AS u(s, r)",
                [start + timedelta(seconds=10 * tick), ids, values],
            )
        times.append(time.perf_counter() - began)
        wal.append(wal_lsn() - lsn)
    size = scalar("SELECT pg_total_relation_size('bench_point')")
    return {"times": times, "wal": wal, "bytes_per_row": size / (series * ticks)}


def read_cost(name: str, span: timedelta, step: int | None) -> float:
    from django.utils import timezone

    from controlplane.core.actors import Actor
    from controlplane.metrics import services

    admin = Actor.system("bench")
    until = timezone.now()
    began = time.perf_counter()
    for _ in range(10):
        services.topic_metrics(admin, name, until - span, until, step)
    return (time.perf_counter() - began) / 10


def live_rows() -> dict[int, int]:
    from django.db.models import Count

    from controlplane.metrics.models import Block

    counts = Block.objects.values("resolution_s").annotate(n=Count("id"))
    return {row["resolution_s"]: row["n"] for row in counts}


def ms(values: list[float], q: float) -> str:
    return f"{pct(values, q) * 1000:.0f}"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, a smoke run")
    parser.add_argument("--pages-only", action="store_true", help="only the page timings")
    parser.add_argument("--profile", action="store_true", help="cProfile the slowest page")
    args = parser.parse_args(argv)
    if args.pages_only:
        return pages(args.profile)
    topics, groups, ticks = (1_000, 200, 13) if args.quick else (10_000, 2_000, 61)
    random.seed(13)
    fresh_database()
    setup_django()
    from django.utils import timezone

    from controlplane.metrics.tiers import COARSE

    bulk_topics(topics)
    traffic = Traffic(topics, groups)
    start = COARSE.point_start(timezone.now() - timedelta(minutes=30))
    log(f"collect: {topics} topics, {groups} group series, {ticks} ticks, all active ...")
    busy = collect(traffic, start, ticks, 1.0)
    later = start + timedelta(seconds=10 * ticks + 60)
    log(f"collect: {ticks} ticks, 10% active ...")
    quiet = collect(traffic, later, ticks, 0.1)
    roll_s, roll_wal = roll_up_cost(start)
    rows = live_rows()
    size = scalar("SELECT pg_total_relation_size('metrics_block')")
    log("alternative: a row per point ...")
    alt = row_per_point(topics + groups, min(ticks, 30))
    log("reads ...")
    reads = {
        "last hour (10 s)": read_cost(traffic.names[0], timedelta(hours=1), None),
        "last day (1 min, step 5 min)": read_cost(traffic.names[0], timedelta(days=1), 300),
    }
    report(topics, groups, busy, quiet, roll_s, roll_wal, rows, size, alt, reads)
    return pages(args.profile)


def page_topics() -> str:
    """1,000 tenants and 10,000 topics; returns the big tenant's slug."""
    from controlplane.regions.models import Broker, Cluster, Region
    from controlplane.tenants.models import Tenant
    from controlplane.topics.models import Topic

    region = Region.objects.create(name="pages")
    cluster = Cluster.objects.create(region=region, name="main", status="ready", broker_count=3)
    for broker_id in (1, 2, 3):  # closed ports: every broker call is refused at once
        Broker.objects.create(cluster=cluster, broker_id=broker_id, port=broker_id, phase="ready")
    tenants = Tenant.objects.bulk_create(
        [
            Tenant(slug=f"tenant-{i:05d}", name=f"T{i}", status="ready", home_region=region)
            for i in range(1000)
        ]
    )
    counts = [5005] + [5] * 999
    Topic.objects.bulk_create(
        [
            Topic(
                tenant=t,
                cluster=cluster,
                name=f"t{j:05d}",
                full_name=f"{t.slug}.t{j:05d}",
                partitions=1 + j % 7,
                retention_ms=86_400_000,
                retention_bytes=2**20,
            )
            for t, n in zip(tenants, counts, strict=True)
            for j in range(n)
        ],
        batch_size=5000,
    )
    return tenants[0].slug


def signed_in(slug: str) -> Any:
    from django.conf import settings
    from django.test import Client

    from controlplane.accounts.identity import get_identity, reset_identity
    from tests.controlplane.conftest import token_for
    from web.auth.session import ACCESS_TOKEN

    settings.IDENTITY_PROVIDER = "local"
    reset_identity()
    client = Client()
    session = client.session
    session[ACCESS_TOKEN] = token_for(get_identity(), roles={slug: "viewer"})  # type: ignore[arg-type]
    session.save()
    return client


def pages(profile: bool) -> int:
    """Section 6 (see the module docstring): the table says PASS or MISS per page."""
    if "django" in sys.modules:  # after the other sections: their connection goes first
        from django.db import connections

        connections.close_all()
    fresh_database()
    setup_django()
    log("pages: 1,000 tenants, 10,000 topics ...")
    slug = page_topics()
    client = signed_in(slug)
    urls = {
        "dashboard": f"/console/t/{slug}/",
        "topic list, page 1": f"/console/t/{slug}/topics/",
        "topic list, name=t04, page 15": f"/console/t/{slug}/topics/?name=t04&page=15",
        "topic detail (brokers refuse)": f"/console/t/{slug}/topics/{slug}.t04321/",
    }
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    timings: dict[str, list[float]] = {}
    queries: dict[str, int] = {}
    for label, url in urls.items():
        log(f"pages: {label} x {PAGE_REQUESTS} ...")
        client.get(url)  # warm: first-use imports, template compilation
        with CaptureQueriesContext(connection) as captured:
            response = client.get(url)
        if response.status_code != 200:
            raise SystemExit(f"{url}: {response.status_code}")
        queries[label] = len(captured.captured_queries)
        timings[label] = []
        for _ in range(PAGE_REQUESTS):
            began = time.perf_counter()
            client.get(url)
            timings[label].append(time.perf_counter() - began)
    aim = AIMS["page p99 (ms)"]
    print(f"\nConsole pages, server side (Django test client), {PAGE_REQUESTS} requests each\n")
    print("| page | SQL queries | p50 ms | p99 ms | aim p99 < 150 ms |")
    print("|---|---|---|---|---|")
    for label, values in timings.items():
        p99 = pct(values, 0.99) * 1000
        verdict = "PASS" if p99 < aim else f"MISS by {p99 - aim:.0f} ms"
        print(f"| {label} | {queries[label]} | {ms(values, 0.5)} | {p99:.0f} | {verdict} |")
    print(f"\nload average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    worst = max(timings, key=lambda k: pct(timings[k], 0.99))
    if profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(20):
            client.get(urls[worst])
        profiler.disable()
        print(f"\ncProfile of {worst}, 20 requests, top by own time:\n")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(15)
    return 0


def bulk_topics(count: int) -> None:
    """``count`` topic rows (10 per tenant) on a cluster without brokers."""
    from controlplane.regions.models import Cluster, Region
    from controlplane.tenants.models import Tenant
    from controlplane.topics.models import Topic

    region = Region.objects.create(name="bench")
    cluster = Cluster.objects.create(region=region, name="main", status="ready")
    tenants = Tenant.objects.bulk_create(
        [Tenant(slug=f"tenant-{i:05d}", name=f"T{i}", status="ready") for i in range(count // 10)]
    )
    Topic.objects.bulk_create(
        [
            Topic(
                tenant=t,
                cluster=cluster,
                name=f"topic-{j}",
                full_name=f"{t.slug}.topic-{j}",
                partitions=1,
                retention_ms=86_400_000,
                retention_bytes=-1,
            )
            for t in tenants
            for j in range(10)
        ],
        batch_size=5000,
    )


def report(
    topics: int,
    groups: int,
    busy: dict[str, Any],
    quiet: dict[str, Any],
    roll_s: float,
    roll_wal: int,
    rows: dict[int, int],
    size: int,
    alt: dict[str, Any],
    reads: dict[str, float],
) -> None:
    series = topics + groups
    print(f"\nRate and lag history: {topics} topics + {groups} group series ({series} series)\n")
    print("| per 10 s interval | points | run p50 ms | run p99 ms | write p50 ms | write p99 ms |")
    print("|---|---|---|---|---|---|")
    for label, run in (("all active (blocks)", busy), ("10% active (blocks)", quiet)):
        print(
            f"| {label} | {run['points']:.0f} | {ms(run['times'], 0.5)} | {ms(run['times'], 0.99)}"
            f" | {ms(run['upserts'], 0.5)} | {ms(run['upserts'], 0.99)} |"
        )
    print(
        f"| all active (row per point) | {series} | | | {ms(alt['times'], 0.5)} |"
        f" {ms(alt['times'], 0.99)} |"
    )
    print("\nWAL per interval (KiB, mean, the whole run):", end=" ")
    print(
        f"blocks all active {statistics.mean(busy['wal']) / 1024:.0f},"
        f" 10% active {statistics.mean(quiet['wal']) / 1024:.0f};"
        f" row per point (the insert) {statistics.mean(alt['wal']) / 1024:.0f}"
    )
    print(
        f"\nroll-up of one minute, every series: {roll_s * 1000:.0f} ms,"
        f" {roll_wal / 1024:.0f} KiB WAL"
    )
    from controlplane.metrics.tiers import COARSE, FINE

    fine_day, coarse_day = (series * 86_400 // t.block_s for t in (FINE, COARSE))
    fine_live, coarse_live = (
        series * (t.retention // timedelta(seconds=t.block_s) + 1) for t in (FINE, COARSE)
    )
    print("\n| layout | rows/day | live rows at retention | bytes/row |")
    print("|---|---|---|---|")
    per_block = size / max(1, sum(rows.values()))
    for label, tier, day, live in (
        ("10 s", FINE, fine_day, fine_live),
        ("1 min", COARSE, coarse_day, coarse_live),
    ):
        print(f"| blocks, {label} ({tier.slots} points) | {day:,} | {live:,} | {per_block:.0f} |")
    print(
        f"| row per point, 10 s + 1 min | {series * (8640 + 1440):,} |"
        f" {series * (360 + 10080):,} | {alt['bytes_per_row']:.0f} |"
    )
    print(f"\n(blocks measured now: {rows}; table + indexes {size / 2**20:.1f} MiB)")
    print("\n| read (topic_metrics) | ms |")
    print("|---|---|")
    for label, seconds in reads.items():
        print(f"| {label} | {seconds * 1000:.1f} |")
    p99 = pct(busy["times"], 0.99) * 1000
    aim = AIMS["collect p99 (ms)"]
    print(f"\ncollect p99 {p99:.0f} ms (aim < {aim:.0f} ms): {'PASS' if p99 < aim else 'MISS'}")


if __name__ == "__main__":
    raise SystemExit(main())

"""Control-plane benchmark: API latency at 1,000 tenants / 10,000 topics, create-to-produce
with a real Celery worker and real brokers, and reconcile time for 1,000 partitions.

    .venv/bin/python bench/controlplane.py            # ~2 min
    .venv/bin/python bench/controlplane.py --quick    # smaller counts, a smoke run

Needs the test services (``./dev services up``: Postgres on 127.0.0.1:55432, Redis on
:56379). Uses its own database ``meridian_bench`` on that server (dropped and created
afresh each run) and its own Celery queue; brokers are local processes in a temporary
directory. Progress goes to stderr, the report to stdout.

1. **API latency**: requests through Django's test client in-process (the whole stack:
   middleware, bearer-token verification against the local issuer's JWKS, DRF, the ORM
   on Postgres), with 1,000 tenants and 10,000 topics bulk-created in the database.
   ``list (tenant)``: a developer of one tenant lists its topics; ``list (admin)``: a
   platform admin lists the first page of all 10,000; ``create``: a developer creates a
   topic (validation, quota lock, placement, audit, the Celery publish to Redis).
2. **Create-to-produce**: ``POST /api/v1/topics``, then a ``Producer`` (already
   connected) sends one record to the new topic; the time until it is acknowledged.
3. **Reconcile 1,000 partitions** on three brokers: ``reconcile_topic`` (create them),
   a ``reconcile_cluster`` pass with nothing to heal, one that heals 100 partitions
   deleted behind its back, and the delete.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
BENCH_DB = "meridian_bench"
SERVER = "postgres://meridian:meridian@127.0.0.1:55432"
os.environ["MERIDIAN_DATABASE_URL"] = f"{SERVER}/{BENCH_DB}"
os.environ.setdefault("MERIDIAN_CELERY_BROKER_URL", "redis://127.0.0.1:56379/0")
os.environ["DJANGO_SETTINGS_MODULE"] = "controlplane.settings.testing"
os.environ.setdefault("MERIDIAN_LOG_LEVEL", "WARNING")

AIMS = {"list p99 (ms)": 100.0, "create-to-produce p50 (ms)": 2000.0}


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


def percentiles(samples_s: list[float]) -> dict[str, float]:
    ordered = sorted(samples_s)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return {"n": len(ordered), "p50": at(0.50), "p99": at(0.99), "max": ordered[-1] * 1000}


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


# --- 1. data and API latency -------------------------------------------------------


def bulk_rows(tenants: int, topics_per_tenant: int) -> tuple[Any, Any]:
    """``tenants`` tenants with quotas and ``topics_per_tenant`` one-partition topics
    each, on a cluster of three broker rows (no processes: the API does not call them)."""
    from django.conf import settings

    from controlplane.quotas.models import Quota
    from controlplane.regions.models import Broker, Cluster, Region
    from controlplane.tenants.models import Tenant
    from controlplane.topics.models import PartitionAssignment, Topic

    region = Region.objects.create(name="bench")
    cluster = Cluster.objects.create(region=region, name="api", status="ready")
    brokers = [
        Broker.objects.create(cluster=cluster, broker_id=i, port=20000 + i, phase="ready")
        for i in (1, 2, 3)
    ]
    rows = [
        Tenant(slug=f"tenant-{i:05d}", name=f"Tenant {i}", home_region=region, status="ready")
        for i in range(tenants)
    ]
    made = Tenant.objects.bulk_create(rows, batch_size=2000)
    Quota.objects.bulk_create(
        [Quota(tenant=t, **settings.DEFAULT_QUOTA) for t in made], batch_size=2000
    )
    topics = [
        Topic(
            tenant=t,
            cluster=cluster,
            name=f"topic-{j}",
            full_name=f"{t.slug}.topic-{j}",
            partitions=1,
            retention_ms=86_400_000,
            retention_bytes=2**30,
            status="ready",
            observed_generation=1,
        )
        for t in made
        for j in range(topics_per_tenant)
    ]
    made_topics = Topic.objects.bulk_create(topics, batch_size=5000)
    PartitionAssignment.objects.bulk_create(
        [
            PartitionAssignment(topic=t, partition=0, broker=brokers[k % 3], status="ready")
            for k, t in enumerate(made_topics)
        ],
        batch_size=5000,
    )
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # as autovacuum would soon after a bulk load
    return made, region


def client_with(roles: dict[str, str] | None = None, admin: bool = False) -> Any:
    from django.test import Client

    from controlplane.accounts.identity import get_identity
    from controlplane.accounts.local import group_path
    from controlplane.tenants.models import Tenant

    identity: Any = get_identity()
    token = identity.issue_token(
        subject=f"bench-{'admin' if admin else 'dev'}",
        username="bench-admin" if admin else "bench-dev",
        groups=[
            group_path(Tenant.objects.get(slug=slug), role) for slug, role in (roles or {}).items()
        ],
        realm_roles=["platform-admin"] if admin else [],
    )
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def api_latency(tenants: list[Any], requests: int, queue: str) -> dict[str, dict[str, float]]:
    from controlplane.quotas.models import Quota
    from controlplane.topics.models import Topic
    from tests.support.controlplane import route_tasks_to

    slug = tenants[len(tenants) // 2].slug
    # Room for every timed create in one tenant (the quota check itself still runs).
    Quota.objects.filter(tenant__slug=slug).update(
        max_topics=10_000, max_partitions=100_000, max_storage_bytes=2**60
    )
    developer = client_with({slug: "developer"})
    admin = client_with(admin=True)
    results = {}

    def get(client: Any, url: str) -> float:
        elapsed, response = timed(lambda: client.get(url))
        assert response.status_code == 200, response.content
        return float(elapsed)

    for _ in range(20):  # warm up connections, caches, JWKS
        get(developer, "/api/v1/topics")
    results["list (tenant, 10 topics)"] = percentiles(
        [get(developer, "/api/v1/topics") for _ in range(requests)]
    )
    total = Topic.objects.count()
    results[f"list (admin, first 50 of {total:,})"] = percentiles(
        [get(admin, "/api/v1/topics?limit=50") for _ in range(requests)]
    )
    with route_tasks_to(queue):
        samples = []
        for i in range(requests):
            body = {"tenant": slug, "name": f"new-{i}", "partitions": 1}
            elapsed, response = timed(
                lambda body=body: developer.post(  # type: ignore[misc]
                    "/api/v1/topics", body, content_type="application/json"
                )
            )
            assert response.status_code == 201, response.content
            samples.append(elapsed)
    results["create"] = percentiles(samples)
    return results


def purge(queue: str) -> None:
    from controlplane.celery import app

    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(queue)


# --- 2. create-to-produce ----------------------------------------------------------


def live_cluster(tmp: Path) -> tuple[list[Any], Any, Any]:
    from controlplane.regions.models import Region
    from tests.support.brokers import start_cluster, wait_for_cluster
    from tests.support.controlplane import make_tenant, register_static_cluster

    processes = start_cluster(tmp, 3)
    wait_for_cluster(processes)
    cluster = register_static_cluster(processes, region="live", name="live")
    tenant = make_tenant("live", region=Region.objects.get(name="live"))
    return processes, cluster, tenant


def create_to_produce(processes: list[Any], tenant: Any, rounds: int) -> dict[str, float]:
    from dataplane.client import Producer

    developer = client_with({tenant.slug: "developer"})
    samples = []
    with Producer([p.address for p in processes], max_block_ms=30_000) as producer:
        for i in range(rounds):
            body = {"name": f"ctp-{i}", "partitions": 3}
            started = time.perf_counter()
            response = developer.post("/api/v1/topics", body, content_type="application/json")
            assert response.status_code == 201, response.content
            # No explicit partition: while the job runs, metadata may list only the
            # partitions made so far, and the producer refuses an unlisted partition.
            producer.send(f"{tenant.slug}.ctp-{i}", b"hello").result(30)
            samples.append(time.perf_counter() - started)
    return percentiles(samples)


# --- 3. reconcile 1,000 partitions -------------------------------------------------


def reconcile_many(
    processes: list[Any], cluster: Any, tenant: Any, partitions: int
) -> dict[str, float]:
    from controlplane.core.actors import Actor
    from controlplane.quotas.models import Quota
    from controlplane.topics import services
    from controlplane.topics.reconcile import reconcile_cluster, reconcile_topic
    from tests.controlplane.reconcile import admin as behind_its_back

    Quota.objects.filter(tenant=tenant).update(
        max_partitions=10 * partitions, max_topics=1000, max_storage_bytes=2**60
    )
    actor = Actor.system("bench")
    # The services' on_commit jobs go to a queue no worker reads (the caller purges it):
    # the timed runs are the in-process calls below.
    topic = services.create_topic(tenant, name="many", partitions=partitions, actor=actor)
    figures = {}
    figures["reconcile_topic (create)"], outcome = timed(lambda: reconcile_topic(topic.pk))
    assert str(outcome) in {"ready", "unchanged"}, outcome
    figures["reconcile_cluster (no drift)"], _ = timed(lambda: reconcile_cluster(cluster.pk))
    owners = {p.broker_id: p for p in processes}
    healed = list(topic.assignments.select_related("broker")[:100])
    for row in healed:
        behind_its_back.delete(owners[row.broker.broker_id], topic.full_name, row.partition)
    figures["reconcile_cluster (heal 100)"], report = timed(lambda: reconcile_cluster(cluster.pk))
    assert len([f for f in report.findings if f.healed]) == len(healed), report.findings
    services.delete_topic(topic, actor=actor)
    figures["reconcile_topic (delete)"], _ = timed(lambda: reconcile_topic(topic.pk))
    return {k: v * 1000 for k, v in figures.items()}


# --- report ------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, a smoke run")
    args = parser.parse_args(argv)
    tenants, per_tenant = (100, 10) if args.quick else (1000, 10)
    requests, rounds, partitions = (50, 3, 100) if args.quick else (300, 10, 1000)

    fresh_database()
    setup_django()
    from tests.support.controlplane import CeleryWorker, route_tasks_to, unique_queue

    log(f"bulk-creating {tenants} tenants, {tenants * per_tenant} topics ...")
    elapsed, (tenant_rows, _) = timed(lambda: bulk_rows(tenants, per_tenant))
    log(f"  {elapsed:.1f} s")
    api_queue = unique_queue()
    log("API latency ...")
    api = api_latency(tenant_rows, requests, api_queue)
    purge(api_queue)

    with tempfile.TemporaryDirectory(prefix="meridian-bench-cp-") as tmp:
        processes, cluster, tenant = live_cluster(Path(tmp))
        try:
            worker = CeleryWorker(unique_queue(), Path(tmp))
            log("create-to-produce (Celery worker, 3 brokers) ...")
            with worker, route_tasks_to(worker.queue):
                ctp = create_to_produce(processes, tenant, rounds)
            log(f"reconcile {partitions} partitions ...")
            with route_tasks_to(api_queue):
                rec = reconcile_many(processes, cluster, tenant, partitions)
            purge(api_queue)
        finally:
            for process in processes:
                process.kill()

    report(tenants, tenants * per_tenant, api, ctp, rec, partitions)
    return 0


def report(
    tenants: int,
    topics: int,
    api: dict[str, dict[str, float]],
    ctp: dict[str, float],
    rec: dict[str, float],
    partitions: int,
) -> None:
    print(f"\nAPI latency ({tenants} tenants, {topics} topics; Django test client, Postgres)")
    print(f"  {'request':32} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for name, p in api.items():
        print(f"  {name:32} {p['n']:>5} {p['p50']:>8.1f} {p['p99']:>8.1f} {p['max']:>8.1f}")
    print("\nCreate-to-produce (API create -> Celery worker -> 3 brokers -> first ack)")
    print(f"  n={ctp['n']}  p50 {ctp['p50']:.0f} ms  max {ctp['max']:.0f} ms")
    print(f"\nReconcile, {partitions} partitions on 3 brokers")
    for name, ms in rec.items():
        print(f"  {name:32} {ms:>8.0f} ms")
    list_p99 = max(p["p99"] for name, p in api.items() if name.startswith("list"))
    print("\nAims")
    for aim, value in (("list p99 (ms)", list_p99), ("create-to-produce p50 (ms)", ctp["p50"])):
        verdict = "PASS" if value < AIMS[aim] else "MISS"
        print(f"  {aim:30} {value:>8.1f} < {AIMS[aim]:.0f}  {verdict}")


if __name__ == "__main__":
    sys.exit(main())

"""Console message browser benchmark: server time of a page of 100 records read through a
real broker with authentication on, with the signed-in user's own token.

    .venv/bin/python bench/message_browser.py            # ~1 min
    .venv/bin/python bench/message_browser.py --quick    # smaller counts, a smoke run

Needs the test services (``./dev services up``: Postgres on 127.0.0.1:55432). Uses its
own database ``meridian_bench_browser`` (dropped and created afresh each run); the
broker is a local process in a temporary directory, verifying tokens with the local
issuer's keys, served by the control plane over HTTP in a thread.

The database holds 1,000 tenants and 10,000 topics (rows only) besides the measured
topic, ``acme.orders``: 4 partitions, 10,000 JSON records of about 200 bytes. Requests
go through Django's test client in-process (session, token verification, the page's
queries, the reader: metadata, ``ListOffsets``, ``Fetch``, decoding, rendering).
Progress goes to stderr, the report to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
BENCH_DB = "meridian_bench_browser"
SERVER = "postgres://meridian:meridian@127.0.0.1:55432"
os.environ["MERIDIAN_DATABASE_URL"] = f"{SERVER}/{BENCH_DB}"
os.environ.setdefault("MERIDIAN_CELERY_BROKER_URL", "redis://127.0.0.1:56379/0")
os.environ["DJANGO_SETTINGS_MODULE"] = "controlplane.settings.testing"
os.environ.setdefault("MERIDIAN_LOG_LEVEL", "WARNING")

AIM_P99_MS = 300.0
PARTITIONS = 4
URL = "/console/t/acme/topics/acme.orders/messages/"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fresh_database() -> None:
    import psycopg

    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {BENCH_DB}")


def setup_django(tmp: Path) -> None:
    import django
    from django.conf import settings
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    settings.IDENTITY_PROVIDER = "local"
    settings.BROKER_AUTH = True
    settings.INTERNAL_CLIENT_SECRET_FILE = str(tmp / "internal-secret")


def serve_control_plane() -> str:
    """The control plane over HTTP in a thread: the broker fetches the issuer's keys
    (and its own client's token) from it."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from django.conf import settings
    from django.core.wsgi import get_wsgi_application

    from controlplane.accounts.identity import reset_identity

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = make_server("127.0.0.1", 0, get_wsgi_application(), handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.API_BASE_URL = f"http://127.0.0.1:{server.server_port}"
    reset_identity()
    return str(settings.API_BASE_URL)


def bulk_rows(tenants: int, topics_per_tenant: int) -> None:
    """Rows only, on a cluster of broker rows without processes."""
    from django.db import connection

    from controlplane.regions.models import Broker, Cluster, Region
    from controlplane.tenants.models import Tenant
    from controlplane.topics.models import PartitionAssignment, Topic

    region = Region.objects.create(name="bulk")
    cluster = Cluster.objects.create(region=region, name="bulk", status="ready")
    broker = Broker.objects.create(cluster=cluster, broker_id=1, port=20001, phase="ready")
    made = Tenant.objects.bulk_create(
        [Tenant(slug=f"tenant-{i:05d}", name=f"T{i}", status="ready") for i in range(tenants)],
        batch_size=2000,
    )
    topics = Topic.objects.bulk_create(
        [
            Topic(
                tenant=t,
                cluster=cluster,
                name=f"topic-{j}",
                full_name=f"{t.slug}.topic-{j}",
                partitions=1,
                retention_ms=86_400_000,
                retention_bytes=2**30,
                status="ready",
            )
            for t in made
            for j in range(topics_per_tenant)
        ],
        batch_size=5000,
    )
    PartitionAssignment.objects.bulk_create(
        [PartitionAssignment(topic=t, partition=0, broker=broker) for t in topics],
        batch_size=5000,
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def start_broker(tmp: Path) -> Any:
    from controlplane.accounts import internal
    from tests.support.brokers import BrokerProcess

    secret = tmp / "broker-secret"
    secret.write_text(internal.client_secret(internal.BROKER_CLIENT_ID))
    args = [
        "--jwks-url", internal.jwks_url(),
        "--token-issuer", internal.issuer(),
        "--token-url", internal.token_url(),
        "--client-id", internal.BROKER_CLIENT_ID,
        "--client-secret-file", str(secret),
    ]  # fmt: skip
    return BrokerProcess(tmp / "broker", extra_args=args).start()


def measured_topic(broker: Any, records: int) -> tuple[str, str]:
    """``acme.orders`` on the broker, filled; a viewer's and a developer's token."""
    from controlplane.accounts.identity import get_identity
    from controlplane.accounts.local import group_path
    from controlplane.core.actors import Actor
    from controlplane.topics import services
    from controlplane.topics.reconcile import reconcile_topic
    from dataplane.client import Producer
    from tests.support.controlplane import make_tenant, register_static_cluster

    cluster = register_static_cluster([broker])
    acme = make_tenant("acme", region=cluster.region)
    topic = services.create_topic(
        acme, name="orders", partitions=PARTITIONS, replication_factor=1, actor=Actor.system("b")
    )
    reconcile_topic(topic.pk)
    identity: Any = get_identity()

    def token(role: str) -> str:
        return str(
            identity.issue_token(
                subject=f"bench-{role}", username=f"bench-{role}", groups=[group_path(acme, role)]
            )
        )

    viewer, developer = token("viewer"), token("developer")
    with Producer(broker.address, credentials=developer, acks="all") as producer:
        for i in range(records):
            value = {"order": i, "customer": f"c-{i % 97}", "items": ["tea", "cake"] * 3}
            producer.send(
                "acme.orders", json.dumps(value).encode(), key=f"k{i}".encode(),
                headers=[("source", b"bench")],
            )  # fmt: skip
        producer.flush(timeout=60)
    return viewer, developer


def client_for(token: str) -> Any:
    from django.test import Client

    from web.auth.session import ACCESS_TOKEN

    client = Client()
    session = client.session
    session[ACCESS_TOKEN] = token
    session.save()
    return client


def percentiles(samples_s: list[float]) -> dict[str, float]:
    ordered = sorted(samples_s)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return {"n": len(ordered), "p50": at(0.50), "p99": at(0.99), "max": ordered[-1] * 1000}


def measure(n: int, call: Callable[[], Any], check: Callable[[Any], None]) -> dict[str, float]:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        response = call()
        samples.append(time.perf_counter() - started)
        check(response)
    return percentiles(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, a smoke run")
    args = parser.parse_args(argv)
    tenants, per_tenant, records, n = (100, 10, 2000, 30) if args.quick else (1000, 10, 10_000, 200)

    fresh_database()
    with tempfile.TemporaryDirectory(prefix="meridian-bench-browser-") as name:
        tmp = Path(name)
        setup_django(tmp)
        serve_control_plane()
        log(f"bulk-creating {tenants} tenants, {tenants * per_tenant} topics ...")
        bulk_rows(tenants, per_tenant)
        broker = start_broker(tmp)
        try:
            log(f"producing {records} records ...")
            viewer_token, developer_token = measured_topic(broker, records)
            results = run(client_for(viewer_token), client_for(developer_token), records, n)
        finally:
            broker.kill()
    report(tenants * per_tenant, records, results)
    return 0


def run(viewer: Any, developer: Any, records: int, n: int) -> dict[str, dict[str, float]]:
    per_partition = records // PARTITIONS

    def page_of(rows: int) -> Callable[[Any], None]:
        def check(response: Any) -> None:
            assert response.status_code == 200, response.content[:500]
            body = response.content.decode()
            assert "Cannot read" not in body, body
            assert body.count('<pre class="value json">') == rows

        return check

    def produced(response: Any) -> None:
        assert response.status_code == 302, response.content[:500]

    results = {}
    log("newest 100, all partitions ...")
    results["newest 100, all 4 partitions"] = measure(
        n, lambda: viewer.get(URL + "?partition=all&mode=newest&count=100"), page_of(100)
    )
    log("100 from a random offset, one partition ...")
    results["100 from an offset, 1 partition"] = measure(
        n,
        lambda: viewer.get(
            URL
            + f"?partition=0&mode=offset&count=100&offset={random.randrange(per_partition - 100)}"
        ),
        page_of(100),
    )
    log("100 from a time, all partitions ...")
    results["100 from a time, all partitions"] = measure(
        n,
        lambda: viewer.get(URL + "?partition=all&mode=timestamp&count=100&time=0"),
        page_of(100),
    )
    log("produce a test record ...")
    results["produce a test record (acks=all)"] = measure(
        max(10, n // 4), lambda: developer.post(URL, {"key": "k", "value": '{"a": 1}'}), produced
    )
    return results


def report(topics: int, records: int, results: dict[str, dict[str, float]]) -> None:
    print(
        f"\nMessage browser ({topics} topics in Postgres; acme.orders: {PARTITIONS} partitions, "
        f"{records} records; one broker, authentication on; Django test client)"
    )
    print(f"  {'page':36} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for name, p in results.items():
        print(f"  {name:36} {p['n']:>5} {p['p50']:>8.1f} {p['p99']:>8.1f} {p['max']:>8.1f}")
    worst = max(p["p99"] for name, p in results.items() if not name.startswith("produce"))
    verdict = "meets" if worst < AIM_P99_MS else "misses"
    print(f"\n  worst page p99 {worst:.1f} ms: {verdict} the aim (< {AIM_P99_MS:.0f} ms)")


if __name__ == "__main__":
    sys.exit(main())

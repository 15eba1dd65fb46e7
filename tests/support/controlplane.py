"""Control-plane test helpers: rows for real brokers, a real Celery worker process,
and waiting for a condition.

    cluster_row = register_static_cluster(brokers)       # Region, Cluster, Broker rows
    tenant = make_tenant("acme")                           # Tenant (ready) + its Quota
    with CeleryWorker(queue=unique_queue()) as worker:     # `celery -A controlplane worker`
        with route_tasks_to(worker.queue):                 # this process publishes there
            ...
    wait_until(lambda: topic_status(pk) == "ready", timeout_s=10)

The worker is a subprocess on the Redis broker the settings name, consuming only its own
queue (so several test sessions sharing one Redis never take each other's jobs), against
the database the test runs on (``database_url()``: the pytest-django test database; use
``transactional_db`` so the worker sees committed rows).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from django.conf import settings

from controlplane.celery import app as celery_app
from controlplane.core.choices import ProvisioningStatus
from controlplane.regions.choices import BrokerPhase, ProvisionerKind
from controlplane.regions.models import Broker, Cluster, Region
from controlplane.tenants.models import Tenant
from tests.support.brokers import REPO_ROOT, BrokerProcess

T = TypeVar("T")
WORKER_READY_TIMEOUT_S = 30.0


def wait_until(
    predicate: Callable[[], T], *, timeout_s: float = 10.0, interval_s: float = 0.05
) -> T:
    """Call ``predicate`` until it returns something truthy (returned); fail after
    ``timeout_s`` with the last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s (last: {value!r})")
        time.sleep(interval_s)


def register_static_cluster(
    brokers: Sequence[BrokerProcess], *, region: str = "local", name: str = "main"
) -> Cluster:
    """Rows for running broker processes: a region, a ``static`` cluster (ready) and one
    ready ``Broker`` per process, with its id and address."""
    region_row, _ = Region.objects.get_or_create(name=region)
    cluster: Cluster = Cluster.objects.create(
        region=region_row,
        name=name,
        provisioner=ProvisionerKind.STATIC,
        broker_count=len(brokers),
        status=ProvisioningStatus.READY,
    )
    for process in brokers:
        host, port = process.address.rsplit(":", 1)
        Broker.objects.create(
            cluster=cluster,
            broker_id=process.broker_id,
            host=host,
            port=int(port),
            phase=BrokerPhase.READY,
        )
    return cluster


def make_tenant(slug: str, *, region: Region | None = None) -> Tenant:
    """A ready tenant with the default quota (rows only: no identity provider)."""
    tenant: Tenant = Tenant.objects.create(
        slug=slug, name=slug.title(), home_region=region, status=ProvisioningStatus.READY
    )
    return tenant


def database_url() -> str:
    """The URL of the database Django uses now (in a test: the test database)."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    user = f"{quote(db['USER'])}:{quote(db['PASSWORD'])}@" if db.get("USER") else ""
    return f"postgres://{user}{db['HOST']}:{db['PORT']}/{quote(db['NAME'])}"


def unique_queue() -> str:
    return f"meridian-test-{uuid.uuid4().hex[:12]}"


@contextmanager
def route_tasks_to(queue: str) -> Iterator[None]:
    """Send every task this process publishes to ``queue`` (restored afterwards)."""
    previous = celery_app.conf.task_routes
    _set_routes({"*": {"queue": queue}})
    try:
        yield
    finally:
        _set_routes(previous)


def _set_routes(routes: Any) -> None:
    celery_app.conf.task_routes = routes
    # The router caches the route table when first built.
    celery_app.amqp.flush_routes()
    celery_app.amqp.__dict__.pop("router", None)


class CeleryWorker:
    """``celery -A controlplane worker --pool=solo`` consuming ``queue`` only, on the
    settings' Celery broker and the current database. Its output goes to ``log_path``."""

    def __init__(self, queue: str, log_dir: Path, *, extra_env: dict[str, str] | None = None):
        self.queue = queue
        self.log_path = Path(log_dir) / f"celery-{queue}.log"
        self.extra_env = dict(extra_env or {})
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> CeleryWorker:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "controlplane.settings.testing",
            "MERIDIAN_DATABASE_URL": database_url(),
            "MERIDIAN_CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "MERIDIAN_CELERY_EAGER": "false",
            **self.extra_env,
        }
        command = [sys.executable, "-m", "celery", "-A", "controlplane", "worker"]
        command += ["--pool=solo", "-Q", self.queue, "-n", f"{self.queue}@%h", "-l", "INFO"]
        command += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        wait_until(self._ready, timeout_s=WORKER_READY_TIMEOUT_S, interval_s=0.1)
        return self

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"celery worker exited:\n{self.log_text()}")
        return " ready." in self.log_text()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM (a warm shutdown), then SIGKILL if it lingers."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> CeleryWorker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

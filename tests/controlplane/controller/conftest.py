"""Fixtures for controller tests: real controller processes on the pytest-django test
database (``transactional_db``, so they see committed rows), broker processes started by
the ``LocalProvisioner`` (killed at teardown), and a region with a topic to serve.

``fleet.start_controller("a")`` runs ``python -m controlplane.controller --region r --id a``
with short ticks and session timeouts; ``fleet.kill_brokers()`` and every controller are
killed at teardown, whatever the test did; logs are printed when a test fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import grpc
import pytest
from django.conf import settings

from controlplane.core.actors import Actor
from controlplane.provisioning.local import LocalProvisioner
from controlplane.regions import services
from controlplane.regions.models import Broker, Cluster, Region
from controlplane.tenants.models import Tenant
from controlplane.topics.models import PartitionAssignment, Topic
from dataplane._gen.meridian.v1 import admin_pb2, admin_pb2_grpc, common_pb2
from dataplane.client.connection import CHANNEL_OPTIONS

ADMIN = Actor.system("test")
REPO_ROOT = Path(__file__).resolve().parents[3]
TICK_S = 0.2
SESSION_TIMEOUT_S = 2.0


def wait_until(condition: Callable[[], Any], timeout_s: float = 15.0, what: str = "") -> Any:
    """Poll ``condition`` until it returns something truthy (returned) or fail."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what or condition}")
        time.sleep(0.05)


def database_url() -> str:
    """The test database (pytest-django's), as the controller processes must see it."""
    db = settings.DATABASES["default"]
    user, password = quote(db["USER"]), quote(db["PASSWORD"])
    return f"postgres://{user}:{password}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


@dataclass
class Fleet:
    """Controller processes of region ``region`` and the brokers they start."""

    root: Path
    region: Region
    controllers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "MERIDIAN_DATABASE_URL": database_url(),
            "MERIDIAN_DATA_DIR": str(self.root / "data"),
            "MERIDIAN_CONTROLLER_TICK_S": str(TICK_S),
            "MERIDIAN_BROKER_SESSION_TIMEOUT_S": str(SESSION_TIMEOUT_S),
            "MERIDIAN_BROKER_RPC_TIMEOUT_S": "1",
            "MERIDIAN_METADATA_PUSH_TIMEOUT_S": "1",
            "MERIDIAN_PREFERRED_LEADER_DELAY_S": "1",
            "PYTHONPATH": str(REPO_ROOT),
            "PYTHONUNBUFFERED": "1",
        }

    def log_path(self, controller_id: str) -> Path:
        return self.root / f"controller-{controller_id}.log"

    def start_controller(self, controller_id: str) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "controlplane.controller"]
        command += ["--region", self.region.name, "--id", controller_id]
        with self.log_path(controller_id).open("ab") as log:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=self.env(), cwd=REPO_ROOT
            )
        self.controllers[controller_id] = process
        return process

    def kill_controller(self, controller_id: str) -> None:
        process = self.controllers[controller_id]
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(10)

    def active_controller(self) -> tuple[str, int]:
        region = Region.objects.get(pk=self.region.pk)
        return region.controller_id, region.controller_epoch

    def provisioner(self) -> LocalProvisioner:
        return LocalProvisioner(self.root / "data")

    def kill_brokers(self) -> None:
        for broker in Broker.objects.filter(cluster__region=self.region, pid__isnull=False):
            if self.provisioner().is_running(broker):
                assert broker.pid is not None
                os.kill(broker.pid, signal.SIGKILL)

    def logs(self) -> str:
        parts = []
        for path in sorted(self.root.rglob("*.log")):
            parts.append(f"===== {path.name} =====\n{path.read_text(errors='replace')[-6000:]}")
        return "\n".join(parts)


@pytest.fixture
def fleet(
    transactional_db: None, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Fleet]:
    region = services.create_region(name="test-region", actor=ADMIN)
    fleet = Fleet(tmp_path, region)
    try:
        yield fleet
    finally:
        for controller_id in fleet.controllers:
            fleet.kill_controller(controller_id)
        fleet.kill_brokers()
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            print(fleet.logs())


def add_topic(cluster: Cluster, name: str, partitions: int) -> Topic:
    """A topic with one partition on each broker in turn (as placement would put it)."""
    tenant, _ = Tenant.objects.get_or_create(slug="acme", defaults={"name": "Acme"})
    topic = Topic.objects.create(
        tenant=tenant,
        cluster=cluster,
        name=name,
        full_name=f"acme.{name}",
        partitions=partitions,
        retention_ms=3_600_000,
        retention_bytes=2**30,
        status="ready",
    )
    brokers = list(cluster.brokers.order_by("broker_id"))
    for p in range(partitions):
        PartitionAssignment.objects.create(
            topic=topic, partition=p, broker=brokers[p % len(brokers)]
        )
    return topic


def create_partitions(topic: Topic) -> None:
    """Create the topic's partitions on their brokers (what the reconciler does)."""
    for assignment in topic.assignments.select_related("broker"):
        spec = admin_pb2.PartitionSpec(
            topic=topic.full_name,
            partition=assignment.partition,
            config=common_pb2.PartitionConfig(),
        )
        with grpc.insecure_channel(assignment.broker.address, options=CHANNEL_OPTIONS) as channel:
            response = admin_pb2_grpc.AdminStub(channel).CreatePartitions(
                admin_pb2.CreatePartitionsRequest(partitions=[spec]), timeout=10
            )
        assert all(r.error == 0 for r in response.results), response


def push(address: str, request: admin_pb2.UpdateMetadataRequest) -> Any:
    with grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        return admin_pb2_grpc.AdminStub(channel).UpdateMetadata(request, timeout=10)

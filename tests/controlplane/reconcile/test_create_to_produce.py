"""End to end with a real Celery worker process (Redis broker, the test database) and
three real brokers: a topic created through the API is produced to within seconds; a
broker that is down meanwhile makes the job retry, not fail."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from controlplane.regions.models import Cluster
from controlplane.tenants.models import Tenant
from controlplane.topics.models import Topic
from dataplane.client import Producer
from tests.controlplane.conftest import ClientFactory
from tests.support.brokers import BrokerProcess
from tests.support.controlplane import CeleryWorker, route_tasks_to, unique_queue, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

CREATE_TO_PRODUCE_DEADLINE_S = 15.0


@pytest.fixture
def worker(tmp_path: Path, transactional_db: None) -> Iterator[CeleryWorker]:
    """A worker process on its own queue; this process's tasks are routed to it."""
    process = CeleryWorker(unique_queue(), tmp_path)
    with process, route_tasks_to(process.queue):
        yield process
    print(f"===== celery worker log =====\n{process.log_text()[-8000:]}")


@pytest.fixture
def developer(client_for: ClientFactory, tenant: Tenant) -> APIClient:
    return client_for(roles={tenant.slug: "developer"})


def _status(full_name: str) -> str:
    return Topic.objects.filter(full_name=full_name).values_list("status", flat=True).first() or ""


def test_a_topic_created_through_the_api_takes_records_within_seconds(
    cluster: list[BrokerProcess],
    cluster_row: Cluster,
    worker: CeleryWorker,
    developer: APIClient,
) -> None:
    with Producer(
        [b.address for b in cluster], max_block_ms=CREATE_TO_PRODUCE_DEADLINE_S * 1000
    ) as producer:
        started = time.monotonic()
        response = developer.post(
            "/api/v1/topics", {"name": "orders", "partitions": 3}, format="json"
        )
        assert response.status_code == 201, response.content
        # No explicit partition: while the job runs, metadata may list only the
        # partitions made so far, and the producer refuses an unlisted partition.
        metadata = producer.send("acme.orders", b"first").result(
            timeout=CREATE_TO_PRODUCE_DEADLINE_S
        )
        elapsed = time.monotonic() - started

    print(f"create-to-produce: {elapsed * 1000:.0f} ms")
    assert metadata.offset == 0
    wait_until(lambda: _status("acme.orders") == "ready", timeout_s=10)


def test_a_broker_down_makes_the_job_retry_until_it_is_back(
    cluster: list[BrokerProcess],
    cluster_row: Cluster,
    worker: CeleryWorker,
    developer: APIClient,
) -> None:
    cluster[2].kill()
    response = developer.post("/api/v1/topics", {"name": "orders", "partitions": 3}, format="json")
    assert response.status_code == 201, response.content
    wait_until(lambda: "Retry in" in worker.log_text(), timeout_s=15)
    assert _status("acme.orders") == "provisioning"

    cluster[2].start()

    wait_until(lambda: _status("acme.orders") == "ready", timeout_s=30)

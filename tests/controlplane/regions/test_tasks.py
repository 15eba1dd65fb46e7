"""Cluster deletion is carried out by a job; a lost or failed job is enqueued again by
the periodic ``regions.reconcile_clusters``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlplane.core.actors import Actor
from controlplane.regions import services, tasks
from controlplane.regions.models import Cluster, Region

ADMIN = Actor.system("tests")


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Deletion jobs enqueued, recorded instead of sent (no worker serves this test)."""
    jobs: list[int] = []
    monkeypatch.setattr(tasks.delete_cluster, "delay", jobs.append)
    return jobs


def _cluster(name: str) -> Cluster:
    region, _ = Region.objects.get_or_create(name="eu-west")
    return services.create_cluster(
        region, name=name, provisioner="static", broker_count=1, actor=ADMIN
    )


def test_stalled_cluster_deletions_are_enqueued_again(
    db: None, enqueued: list[int], settings: Any
) -> None:
    settings.RECONCILE_INTERVAL_S = 30
    stalled, fresh, kept = _cluster("stalled"), _cluster("fresh"), _cluster("kept")
    for cluster in (stalled, fresh):
        services.delete_cluster(cluster, actor=ADMIN)
    Cluster.objects.filter(pk=stalled.pk).update(updated_at=timezone.now() - timedelta(minutes=5))
    assert tasks.reconcile_clusters() == 1
    assert enqueued == [stalled.pk]
    tasks.delete_cluster.run(stalled.pk)  # what the worker does with the job
    assert not Cluster.objects.filter(pk=stalled.pk).exists()
    assert Cluster.objects.filter(pk__in=[fresh.pk, kept.pk]).count() == 2


def test_a_lost_enqueue_does_not_fail_the_committed_delete(
    admin_client: Any, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    def broker_down(cluster_id: int) -> None:
        raise ConnectionError("the Celery broker is down")

    monkeypatch.setattr(tasks.delete_cluster, "delay", broker_down)
    cluster = _cluster("doomed")
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.delete(f"/api/v1/clusters/{cluster.pk}")
    assert response.status_code in (200, 202), response.content
    assert Cluster.objects.get(pk=cluster.pk).status == "deleting"

"""The lanes GC as a Celery job: on the beat schedule with an expiry, and run by a real
worker process."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from controlplane.celery import app
from controlplane.core.actors import Actor
from controlplane.core.models import AuditEvent
from controlplane.lanes import services
from controlplane.lanes.models import Lane
from controlplane.lanes.tasks import collect_idle_lanes
from tests.support.controlplane import (
    CeleryWorker,
    make_tenant,
    route_tasks_to,
    unique_queue,
    wait_until,
)

SYSTEM = Actor.system("tests")


def test_the_gc_is_on_the_beat_schedule_with_an_expiry() -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["lanes.collect_idle_lanes"]
    assert entry["task"] == "lanes.collect_idle_lanes"
    assert 0 < entry["options"]["expires"] <= entry["schedule"]
    assert "lanes.collect_idle_lanes" in app.tasks


@pytest.fixture
def worker(tmp_path: Path, transactional_db: None) -> Iterator[CeleryWorker]:
    process = CeleryWorker(unique_queue(), tmp_path)
    with process, route_tasks_to(process.queue):
        yield process
    print(f"===== celery worker log =====\n{process.log_text()[-6000:]}")


def test_a_worker_collects_a_lane_idle_past_its_ttl(worker: CeleryWorker) -> None:
    acme = make_tenant("acme")
    idle = services.create_lane(acme, name="idle", ttl_s=60, actor=SYSTEM)
    busy = services.create_lane(acme, name="busy", ttl_s=60, actor=SYSTEM)
    long_ago = timezone.now() - timedelta(seconds=120)
    Lane.objects.filter(pk=idle.pk).update(created_at=long_ago)
    Lane.objects.filter(pk=busy.pk).update(created_at=long_ago, last_traffic_at=timezone.now())

    collect_idle_lanes.delay()
    wait_until(lambda: not Lane.objects.filter(pk=idle.pk).exists(), timeout_s=20)
    assert Lane.objects.filter(pk=busy.pk).exists()
    event = AuditEvent.objects.get(action="lane.delete")
    assert (event.actor, event.object_repr) == ("system:lanes-gc", "acme/idle")

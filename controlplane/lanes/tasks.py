"""Celery jobs of the lanes app: thin wrappers over ``controlplane.lanes.services``."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from controlplane.core.actors import Actor
from controlplane.lanes import services

GC = Actor.system("lanes-gc")


@shared_task(name="lanes.collect_idle_lanes", acks_late=True)
def collect_idle_lanes() -> dict[str, list[str]]:
    """Delete lane topics and lanes idle past their lane's TTL (``services``); returns
    what was collected. Idempotent: a second run finds nothing more."""
    collected = services.collect_idle_lanes(timezone.now(), actor=GC)
    return {"lane_topics": collected.lane_topics, "lanes": collected.lanes}

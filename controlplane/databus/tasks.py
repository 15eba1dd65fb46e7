"""Celery jobs of the Databus app: thin wrappers over ``controlplane.databus.services``."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from controlplane.databus import services


@shared_task(name="databus.forget_silent_agents", acks_late=True)
def forget_silent_agents() -> int:
    """Delete the agents silent for ``services.FORGET_AFTER``; returns how many.
    Idempotent: a second run finds nothing more."""
    return services.forget_silent_agents(timezone.now())

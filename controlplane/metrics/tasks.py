"""Celery jobs of the metrics app: thin wrappers over ``controlplane.metrics.services``.
No retries: each run is periodic and the next one covers what a failed one missed (a
rate spans the gap; a roll-up catches up on every unrolled minute)."""

from __future__ import annotations

from celery import shared_task

from controlplane.metrics import services


@shared_task(name="metrics.collect_metrics")
def collect_metrics() -> dict[str, int] | None:
    """One collection run; a summary, or None when a later run already wrote."""
    run = services.collect_metrics()
    if run is None:
        return None
    return {"points": run.points_written, "brokers_answered": run.brokers_answered}


@shared_task(name="metrics.roll_up_metrics")
def roll_up_metrics() -> int:
    """Roll finished minutes into the 1-minute tier; returns the minutes rolled."""
    return services.roll_up_metrics()


@shared_task(name="metrics.prune_metrics")
def prune_metrics() -> dict[str, int]:
    """Delete points past their tier's retention; returns counts deleted."""
    return services.prune_metrics()

"""Celery jobs of the exports app: thin wrappers over ``controlplane.exports.running``.

``exports.run_export`` retries only ``ExportBusy`` (another task runs the export now);
a job's failure is the run's outcome, recorded, not an error of the task. A keeper asked
by the schedule expires after one schedule interval: a keeper still waiting in the queue
by then is superseded by the one the next pass asks, so they never pile up."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from controlplane.core.actors import Actor
from controlplane.exports import running
from controlplane.exports.running import ExportBusy
from controlplane.topics.drift import RETRY_BACKOFF_MAX_S

SCHEDULER = Actor.system("exports-schedule")


@shared_task(
    name="exports.run_export",
    autoretry_for=(ExportBusy,),
    retry_backoff=5,
    retry_backoff_max=RETRY_BACKOFF_MAX_S,
    retry_jitter=True,
    max_retries=12,
    acks_late=True,
)
def run_export(export_id: int, run_id: int) -> str | None:
    """Run one queued run of an export; returns its final state (None: nothing to do)."""
    run = running.run_export(export_id, run_id)
    return None if run is None else str(run.state)


@shared_task(name="exports.enqueue_due_exports", acks_late=True)
def enqueue_due_exports() -> list[int]:
    """Queue a run of every export whose schedule is due and start the keepers of the
    continuous exports whose job does not run; returns the run ids."""
    return running.enqueue_due_exports(
        timezone.now(),
        actor=SCHEDULER,
        enqueue=lambda e, r: run_export.delay(e, r),
        keep=_ask_keeper,
    )


def _ask_keeper(export_id: int) -> None:
    keep_continuous_export.apply_async(
        (export_id,), expires=float(settings.EXPORTS_SCHEDULE_INTERVAL_S)
    )


@shared_task(name="exports.keep_continuous_export", acks_late=True)
def keep_continuous_export(export_id: int) -> str:
    """Run a continuous export's job for as long as the export wants it (it occupies a
    worker slot meanwhile); returns how it ended. A second keeper returns at once."""
    return running.keep_continuous(export_id)

"""Running exports: queueing a run, running it under the export's lock, the schedule,
and keeping continuous exports' jobs alive. The Celery tasks call this module;
``services`` queues runs through it and enqueues their task after commit.

A continuous export runs one ``--continuous`` job (``keep_continuous``, a long task
holding the export's lock while its job lives): each of the job's runs that moves the
coverage or fails is recorded as a run (trigger ``continuous``); the job is stopped
(SIGTERM) when the export is disabled, changed, given another schedule or deleted,
and the beat starts a keeper for every enabled continuous export whose lock is free
(a job that died, a worker lost). Manual runs of an enabled continuous export are
refused (``ExportIsContinuous``): its job already runs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.errors import Conflict, InvalidRequest, Unavailable
from controlplane.exports import jobs, runs, schedule, targets
from controlplane.exports.choices import RunState, RunTrigger, ScheduleKind
from controlplane.exports.fields import spec_fields
from controlplane.exports.models import Export, ExportRun
from controlplane.exports.rules import RunInProgress, check_topic_readable
from controlplane.topics.locks import object_lock
from spark.jobs.spec import ExportSpec, JobResult

# How often a continuous export's keeper reads what its job printed and whether the
# export still wants it.
CONTINUOUS_POLL_S = 2.0
# classid of the two-key advisory lock space ("ME": Meridian exports).
LOCK_NAMESPACE = 0x4D45
EXPORT_MODULE = "spark.jobs.export"

log = logging.getLogger(__name__)


class ExportBusy(Unavailable):
    """Another run of the export holds its lock; the task retries later."""

    code = "export_busy"

    def __init__(self, export_id: int) -> None:
        super().__init__(f"export {export_id} is being run by another task", export_id=export_id)


class ExportIsContinuous(Conflict):
    """A manual run of an enabled continuous export: its job already runs."""

    code = "export_is_continuous"


@transaction.atomic
def queue_run(export: Export, *, actor: Actor, trigger: str = RunTrigger.MANUAL) -> ExportRun:
    """A queued run of ``export`` (its task is the caller's to enqueue after commit).
    ``RunInProgress`` while a run is queued or running; the topic must still be readable
    (``TopicNotTiered``...). A manual run is audited (a scheduled one is the schedule's
    doing, audited with the export)."""
    export = Export.objects.select_for_update().select_related("topic__cluster").get(pk=export.pk)
    if export.runs.filter(state__in=(RunState.QUEUED, RunState.RUNNING)).exists():
        raise RunInProgress(f"export {export.name!r} already has a run queued or running")
    if export.enabled and export.schedule_kind == ScheduleKind.CONTINUOUS:
        raise ExportIsContinuous(
            f"export {export.name!r} is continuous: its job runs by itself; disable it or "
            "give it another schedule to run it by hand"
        )
    check_topic_readable(export.topic)
    run = ExportRun.objects.create(export=export, trigger=trigger, requested_by=actor.name)
    if trigger == RunTrigger.MANUAL:
        audit.record(actor, "export.run", export, after={"run": run.pk}, tenant=export.tenant)
    return run


def export_spec(export: Export) -> ExportSpec:
    """What the job is told: the store of the topic's cluster (with its credentials),
    the target and its options, and the declared shape."""
    cluster = export.topic.cluster
    return ExportSpec(
        export_id=str(export.pk),
        topic=export.topic.full_name,
        store_uri=cluster.remote_store_uri,
        store_options=dict(cluster.remote_store_options),
        target_uri=export.target_uri,
        target_options=targets.target_options(export.target_uri, export.tenant.slug),
        value_format=export.value_format,
        fields=spec_fields(export.fields),
        partition_by=tuple(export.partition_by),
        include_lanes=export.include_lanes,
    )


def export_lock(export_id: int, wait_s: float | None = None) -> Any:
    busy = partial(ExportBusy, export_id)
    if wait_s is None:
        return object_lock(LOCK_NAMESPACE, export_id, busy)
    return object_lock(LOCK_NAMESPACE, export_id, busy, wait_s=wait_s)


def run_export(export_id: int, run_id: int) -> ExportRun | None:
    """Run the queued run ``run_id`` of export ``export_id`` to its end (None: the export
    or the run is gone, or it has finished already). ``ExportBusy`` when another task
    runs this export now (transient)."""
    with export_lock(export_id):
        export = (
            Export.objects.select_related("tenant", "topic__cluster").filter(pk=export_id).first()
        )
        if export is None:
            return None
        return runs.run_claimed(
            ExportRun.objects.filter(export=export),
            run_id,
            export.topic,
            export.include_lanes,
            EXPORT_MODULE,
            lambda: export_spec(export).to_json(),
        )


def is_due(export: Export, now: datetime) -> bool:
    """Whether the export's schedule asks for a run now (see ``schedule``)."""
    if not export.enabled or export.schedule_kind == ScheduleKind.MANUAL:
        return False
    latest = export.runs.order_by("-queued_at").values_list("queued_at", flat=True).first()
    since = latest or export.created_at
    if export.schedule_kind == ScheduleKind.CONTINUOUS:
        return False  # its job runs by itself (``keep_continuous``)
    if export.schedule_kind == ScheduleKind.INTERVAL:
        return latest is None or schedule.interval_due(export.interval_minutes or 1, since, now)
    return schedule.cron_due(export.cron, since, now)


def enqueue_due_exports(
    now: datetime,
    *,
    actor: Actor,
    enqueue: Callable[[int, int], object],
    keep: Callable[[int], object] = lambda export_id: None,
) -> list[int]:
    """Queue a run of every enabled export whose schedule is due and that has no run
    queued or running (``enqueue(export_id, run_id)`` its task once queued), and ask a
    keeper (``keep(export_id)``) for every enabled continuous export whose job does not
    run; fail runs lost past their timeout first. Returns the run ids."""
    for export_id in unkept_continuous_exports():
        keep(export_id)
    runs.fail_overdue(ExportRun.objects.all(), overdue_after(), now)
    active = ExportRun.objects.filter(state__in=(RunState.QUEUED, RunState.RUNNING))
    candidates = (
        Export.objects.filter(enabled=True)
        .exclude(schedule_kind=ScheduleKind.MANUAL)
        .exclude(Q(pk__in=active.values("export_id")))
        .select_related("tenant", "topic__cluster")
    )
    queued = []
    for export in candidates:
        if not is_due(export, now):
            continue
        try:
            run = queue_run(export, actor=actor, trigger=RunTrigger.SCHEDULE)
            transaction.on_commit(partial(enqueue, export.pk, run.pk))
            queued.append(run.pk)
        except (RunInProgress, InvalidRequest):
            continue  # queued meanwhile, or the topic stopped tiering (shown on its next run)
    return queued


def overdue_after() -> timedelta:
    """A run not finished this long after it started was lost with its worker."""
    return timedelta(seconds=settings.SPARK_JOB_TIMEOUT_S + 600)


def unkept_continuous_exports() -> list[int]:
    """The enabled continuous exports whose lock is free: no job of theirs runs."""
    unkept = []
    for export_id in Export.objects.filter(
        enabled=True, schedule_kind=ScheduleKind.CONTINUOUS
    ).values_list("pk", flat=True):
        try:
            with export_lock(export_id, wait_s=0):
                unkept.append(export_id)
        except ExportBusy:
            continue
    return unkept


def keep_continuous(export_id: int) -> str:
    """Run the continuous export's job until it ends or the export stops wanting it
    (module docstring); returns how it ended. Another keeper holding the export's lock
    makes this one return at once."""
    try:
        with export_lock(export_id, wait_s=0):
            return _keep(export_id)
    except ExportBusy:
        return "kept by another task"


def _keep(export_id: int) -> str:
    export = Export.objects.select_related("tenant", "topic__cluster").filter(pk=export_id).first()
    if export is None or not _wants_job(export_id, export.updated_at):
        return "not continuous"
    try:
        check_topic_readable(export.topic)
    except InvalidRequest as refused:
        _record_continuous(export, JobResult(status="failed", error=refused.message))
        return "refused"
    code = jobs.run_continuous(
        EXPORT_MODULE,
        export_spec(export).to_json(),
        interval_s=settings.EXPORT_CONTINUOUS_INTERVAL_S,
        on_result=partial(_record_continuous, export),
        keep_going=partial(_wants_job, export.pk, export.updated_at),
        poll_s=CONTINUOUS_POLL_S,
    )
    return f"the job ended with status {code}"


def _wants_job(export_id: int, stamp: datetime) -> bool:
    """Whether the export is still enabled, continuous and unchanged since ``stamp``."""
    return Export.objects.filter(
        pk=export_id, enabled=True, schedule_kind=ScheduleKind.CONTINUOUS, updated_at=stamp
    ).exists()


@transaction.atomic
def _record_continuous(export: Export, result: JobResult) -> None:
    """A run row for a result that moved the coverage or failed (the others: nothing,
    and nothing once the export is deleted: the row lock holds a deletion off until
    the run is in)."""
    if not Export.objects.select_for_update().filter(pk=export.pk).exists():
        log.info("export %s was deleted while its job ran; the job ended %s", export.pk,
                 result.status)  # fmt: skip
        return
    export_runs = ExportRun.objects.filter(export=export)
    if result.status == "succeeded" and result.covered == runs.last_covered(export_runs):
        return
    now = runs.now()
    run = ExportRun.objects.create(
        export=export, trigger=RunTrigger.CONTINUOUS, state=RunState.RUNNING, started_at=now
    )
    runs.finish(
        export_runs, run.pk, result, now, runs.end_offsets(export.topic, export.include_lanes)
    )

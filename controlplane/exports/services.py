"""Changing a tenant's Parquet exports, and running them.

``create_export``, ``update_export`` and ``delete_export`` are atomic, take the acting
``Actor``, count against ``max_exports`` under the tenant's quota lock and write their
audit event in the same transaction. The rules, each raising a typed error (400 unless
said):

- field invariants (``Export.clean``: fields, partition_by, schedule) -> ``invalid``;
- the topic is one of the tenant's trunk topics (another tenant's answers like a
  missing one) -> ``invalid``;
- exports read sealed segments from the object store, never from the brokers: the topic
  needs ``remote_storage`` (``TopicNotTiered``) and its cluster an object store
  (``ClusterWithoutStore``);
- the target is one the platform allows (``targets.TargetNotAllowed``) and shares no
  folder with another export's (``TargetOverlap``);
- a name in use -> 409 ``conflict``; past ``max_exports`` -> 409 ``quota_exceeded``.

Runs: ``request_run`` queues one (409 ``run_in_progress`` while one is queued or
running) and, after commit, the ``exports.run_export`` task runs it
(``run_export``: one at a time per export under ``export_lock``). The beat's
``enqueue_due_exports`` queues the enabled exports whose schedule is due.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.errors import Conflict, InvalidRequest, Unavailable
from controlplane.core.validators import SLUG_RE, slug_validator
from controlplane.exports import jobs, runs, schedule, targets
from controlplane.exports.choices import RunState, RunTrigger, ScheduleKind
from controlplane.exports.fields import spec_fields
from controlplane.exports.models import Export, ExportRun
from controlplane.quotas.services import check_count_quota
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import lock_open_tenant
from controlplane.topics.choices import TopicStatus
from controlplane.topics.locks import object_lock
from controlplane.topics.models import Topic
from spark.jobs.spec import ExportSpec, JobResult

UPDATABLE_FIELDS = (
    "value_format", "fields", "partition_by", "target_uri", "include_lanes",
    "schedule_kind", "interval_minutes", "cron", "enabled",
)  # fmt: skip
# classid of the two-key advisory lock space ("ME": Meridian exports).
LOCK_NAMESPACE = 0x4D45
EXPORT_MODULE = "spark.jobs.export"


class TopicNotTiered(InvalidRequest):
    """Exports read the topic's sealed segments from the object store: it needs
    tiered storage (``remote_storage``)."""

    code = "topic_not_tiered"

    def __init__(self, topic: Topic) -> None:
        message = (
            f"topic {topic.full_name!r} has no remote_storage: exports read sealed segments "
            "from the object store (tiered storage), never from the brokers; turn "
            "remote_storage on for the topic first"
        )
        super().__init__(f"topic: {message}", topic=[message])


class ClusterWithoutStore(InvalidRequest):
    """The topic's cluster tiers to no object store, so there is nothing to read."""

    code = "cluster_without_store"

    def __init__(self, topic: Topic) -> None:
        message = (
            f"the cluster of topic {topic.full_name!r} has no object store: exports read "
            "sealed segments from it"
        )
        super().__init__(f"topic: {message}", topic=[message])


class TargetOverlap(InvalidRequest):
    """Two exports would write in one folder (the same, or one inside the other)."""

    code = "target_overlap"

    def __init__(self, target: str, other: Export) -> None:
        message = f"overlaps the target of export {other.name!r} ({other.target_uri})"
        super().__init__(f"target_uri: {message}", target_uri=[message], export=other.name)


class RunInProgress(Conflict):
    """A run of the export (or build of the index) is already queued or running."""

    code = "run_in_progress"


class ExportBusy(Unavailable):
    """Another run of the export holds its lock; the task retries later."""

    code = "export_busy"

    def __init__(self, export_id: int) -> None:
        super().__init__(f"export {export_id} is being run by another task", export_id=export_id)


# -- declaring exports ---------------------------------------------------------------------
@transaction.atomic
def create_export(
    tenant: Tenant,
    *,
    name: str,
    topic: str | Topic,
    target_uri: str | None = None,
    actor: Actor,
    **settings_: Any,
) -> Export:
    """A new export ``name`` of ``tenant``'s ``topic`` (a ``Topic``, its full name or its
    name in the tenant). ``target_uri`` defaults to ``<the tenant's first allowed
    prefix>/<name>``. ``settings_`` are the other ``UPDATABLE_FIELDS``. Refusals: the
    module docstring."""
    tenant = lock_open_tenant(tenant)
    check_name(name)
    _check_known(settings_)
    resolved = resolve_topic(tenant, topic)
    check_topic_readable(resolved)
    if target_uri is None:
        target_uri = targets.allowed_prefixes(tenant.slug)[0] + "/" + name
    target = targets.checked_target(target_uri, tenant.slug)
    check_count_quota(tenant, "max_exports", 1)
    if Export.objects.filter(tenant=tenant, name=name).exists():
        raise Conflict(
            f"export {name!r} already exists in tenant {tenant.slug!r}",
            name=[f"{name!r} is in use"],
        )
    _check_no_overlap(target, None)
    export = Export(
        tenant=tenant, name=name, topic=resolved, target_uri=target, created_by=actor.name,
        **settings_,
    )  # fmt: skip
    export.full_clean()
    try:
        with transaction.atomic():
            export.save()
    except IntegrityError as exc:  # created concurrently since the check
        raise Conflict(f"export {name!r} already exists", name=[name]) from exc
    audit.record(actor, "export.create", export, after=audit.snapshot(export), tenant=tenant)
    return export


@transaction.atomic
def update_export(export: Export, *, actor: Actor, **changes: Any) -> Export:
    """Change some of ``UPDATABLE_FIELDS`` (the name and the topic are the export's
    identity). Same refusals as ``create_export``; an unchanged export saves and audits
    nothing. Moving the target starts the new folder from nothing (the old files stay)."""
    _check_known(changes)
    export = Export.objects.select_for_update().select_related("tenant", "topic").get(pk=export.pk)
    before = audit.snapshot(export) or {}
    if "target_uri" in changes:
        changes["target_uri"] = targets.checked_target(changes["target_uri"], export.tenant.slug)
        _check_no_overlap(changes["target_uri"], export)
    _apply_schedule_kind(export, changes)
    for field, value in changes.items():
        setattr(export, field, value)
    export.full_clean()
    if _unstamped(audit.snapshot(export) or {}) == _unstamped(before):
        return export
    export.save()
    audit.record(
        actor, "export.update", export, before=before, after=audit.snapshot(export),
        tenant=export.tenant,
    )  # fmt: skip
    return export


def _apply_schedule_kind(export: Export, changes: dict[str, Any]) -> None:
    """A new schedule kind clears the other kind's settings unless they are given."""
    kind = changes.get("schedule_kind")
    if kind is None or kind == export.schedule_kind:
        return
    if kind != ScheduleKind.INTERVAL:
        changes.setdefault("interval_minutes", None)
    if kind != ScheduleKind.CRON:
        changes.setdefault("cron", "")


@transaction.atomic
def delete_export(export: Export, *, actor: Actor) -> Export:
    """Delete the export and its runs' records; the files it wrote stay where they are
    (they are the tenant's data). Returns the deleted row (unsaved)."""
    export = Export.objects.select_for_update().select_related("tenant").get(pk=export.pk)
    audit.record(
        actor, "export.delete", export, before=audit.snapshot(export), tenant=export.tenant
    )
    export.delete()
    return export


def check_name(name: object) -> None:
    if not isinstance(name, str) or not re.match(SLUG_RE, name):
        rule = str(slug_validator.message)
        raise InvalidRequest(f"name: {rule}", name=[rule])


def _check_known(changes: dict[str, Any]) -> None:
    unknown = sorted(set(changes) - set(UPDATABLE_FIELDS))
    if unknown:
        raise InvalidRequest(
            f"{unknown[0]}: cannot be changed", **{f: ["cannot be changed"] for f in unknown}
        )


def _unstamped(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != "updated_at"}


def resolve_topic(tenant: Tenant, topic: str | Topic) -> Topic:
    """One of ``tenant``'s trunk topics, not being deleted (``InvalidRequest`` naming
    ``topic`` otherwise; another tenant's topic is answered as a missing one)."""
    live = Topic.objects.filter(tenant=tenant, trunk__isnull=True).exclude(
        status=TopicStatus.DELETING
    )
    if isinstance(topic, Topic):
        found = live.filter(pk=topic.pk).select_related("cluster").first()
    else:
        name = str(topic)
        full = name if name.startswith(f"{tenant.slug}.") else f"{tenant.slug}.{name}"
        found = live.filter(full_name=full).select_related("cluster").first()
    if found is None:
        message = f"no topic {str(topic)!r} in tenant {tenant.slug!r}"
        raise InvalidRequest(f"topic: {message}", topic=[message])
    return found


def check_topic_readable(topic: Topic) -> None:
    """The jobs read the object store only: the topic tiers, and to a store."""
    if not topic.remote_storage:
        raise TopicNotTiered(topic)
    if not topic.cluster.remote_store_uri:
        raise ClusterWithoutStore(topic)


def _check_no_overlap(target: str, export: Export | None) -> None:
    others = Export.objects.exclude(pk=export.pk) if export is not None else Export.objects.all()
    for other in others.only("name", "target_uri"):
        if targets.overlaps(target, other.target_uri):
            raise TargetOverlap(target, other)


# -- running them ------------------------------------------------------------------------------
@transaction.atomic
def request_run(export: Export, *, actor: Actor, trigger: str = RunTrigger.MANUAL) -> ExportRun:
    """Queue a run of ``export`` and, after commit, its task. ``RunInProgress`` while a
    run is queued or running; the topic must still be readable (``TopicNotTiered``...)."""
    export = Export.objects.select_for_update().select_related("topic__cluster").get(pk=export.pk)
    if export.runs.filter(state__in=(RunState.QUEUED, RunState.RUNNING)).exists():
        raise RunInProgress(f"export {export.name!r} already has a run queued or running")
    check_topic_readable(export.topic)
    run = ExportRun.objects.create(export=export, trigger=trigger, requested_by=actor.name)
    if trigger == RunTrigger.MANUAL:
        audit.record(
            actor, "export.run", export, after={"run": run.pk}, tenant=export.tenant
        )  # a scheduled run is the schedule's doing, already audited with the export
    transaction.on_commit(lambda: _enqueue(export.pk, run.pk))
    return run


def _enqueue(export_id: int, run_id: int) -> None:
    from controlplane.exports.tasks import run_export  # tasks import this module

    run_export.delay(export_id, run_id)


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


def export_lock(export_id: int) -> Any:
    return object_lock(LOCK_NAMESPACE, export_id, lambda: ExportBusy(export_id))


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
        export_runs = ExportRun.objects.filter(export=export)
        if runs.claim(export_runs, run_id, runs.now()) is None:
            return None
        result = _run_job(export)
        return runs.finish(export_runs, run_id, result, runs.now())


def _run_job(export: Export) -> JobResult:
    try:
        check_topic_readable(export.topic)
    except InvalidRequest as refused:
        return JobResult(status="failed", error=refused.message)
    spec = export_spec(export)
    return jobs.run_job(EXPORT_MODULE, spec.to_json(), timeout_s=settings.SPARK_JOB_TIMEOUT_S)


def is_due(export: Export, now: datetime) -> bool:
    """Whether the export's schedule asks for a run now (see ``schedule``)."""
    if not export.enabled or export.schedule_kind == ScheduleKind.MANUAL:
        return False
    latest = export.runs.order_by("-queued_at").values_list("queued_at", flat=True).first()
    since = latest or export.created_at
    if export.schedule_kind == ScheduleKind.CONTINUOUS:
        return True
    if export.schedule_kind == ScheduleKind.INTERVAL:
        return latest is None or schedule.interval_due(export.interval_minutes or 1, since, now)
    return schedule.cron_due(export.cron, since, now)


def enqueue_due_exports(now: datetime, *, actor: Actor) -> list[int]:
    """Queue a run of every enabled export whose schedule is due and that has no run
    queued or running; fail runs lost past their timeout first. Returns the run ids."""
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
            queued.append(request_run(export, actor=actor, trigger=RunTrigger.SCHEDULE).pk)
        except (RunInProgress, InvalidRequest):
            continue  # queued meanwhile, or the topic stopped tiering (shown on its next run)
    return queued


def overdue_after() -> timedelta:
    """A run not finished this long after it started was lost with its worker."""
    return timedelta(seconds=settings.SPARK_JOB_TIMEOUT_S + 600)


def progress(export: Export) -> dict[str, Any]:
    """``covered``, ``lag`` (per partition) and ``lag_records`` (``runs.progress``)."""
    return runs.progress(ExportRun.objects.filter(export=export), export.topic,
                         export.include_lanes)  # fmt: skip

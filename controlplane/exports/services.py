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
running) and, after commit, the ``exports.run_export`` task runs it (``running``: one
at a time per export under its lock); the beat's ``exports.enqueue_due_exports`` queues
the enabled exports whose schedule is due.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.errors import Conflict, InvalidRequest
from controlplane.exports import running, runs, targets
from controlplane.exports.choices import ScheduleKind
from controlplane.exports.models import Export, ExportRun
from controlplane.exports.rules import (
    ClusterWithoutStore,
    RunInProgress,
    TopicNotTiered,
    check_name,
    check_topic_readable,
    resolve_topic,
)
from controlplane.exports.tasks import run_export
from controlplane.quotas.services import check_count_quota
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import lock_open_tenant
from controlplane.topics.models import Topic

ExportIsContinuous = running.ExportIsContinuous

__all__ = [
    "ClusterWithoutStore", "ExportIsContinuous", "InvalidRequest", "RunInProgress",
    "TopicNotTiered",
]  # fmt: skip

UPDATABLE_FIELDS = (
    "value_format", "fields", "partition_by", "target_uri", "include_lanes",
    "schedule_kind", "interval_minutes", "cron", "enabled",
)  # fmt: skip


class TargetOverlap(InvalidRequest):
    """Two exports would write in one folder (the same, or one inside the other). The
    other export is named only when it is the same tenant's: another tenant's name and
    target are not the caller's to see."""

    code = "target_overlap"

    def __init__(self, target: str, other: Export, tenant_id: int) -> None:
        if other.tenant_id != tenant_id:
            message = "the target is in use"
            super().__init__(f"target_uri: {message}", target_uri=[message])
            return
        message = f"overlaps the target of export {other.name!r} ({other.target_uri})"
        super().__init__(f"target_uri: {message}", target_uri=[message], export=other.name)


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
    _check_no_overlap(target, tenant.pk, None)
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
        _check_no_overlap(changes["target_uri"], export.tenant_id, export)
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


def _check_known(changes: dict[str, Any]) -> None:
    unknown = sorted(set(changes) - set(UPDATABLE_FIELDS))
    if unknown:
        raise InvalidRequest(
            f"{unknown[0]}: cannot be changed", **{f: ["cannot be changed"] for f in unknown}
        )


def _unstamped(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != "updated_at"}


def _check_no_overlap(target: str, tenant_id: int, export: Export | None) -> None:
    """``TargetOverlap`` when ``target`` shares a folder with any other export's, of
    any tenant (``tenant_id``: the caller's)."""
    others = Export.objects.exclude(pk=export.pk) if export is not None else Export.objects.all()
    for other in others.only("name", "target_uri", "tenant_id"):
        if targets.overlaps(target, other.target_uri):
            raise TargetOverlap(target, other, tenant_id)


# -- running them ------------------------------------------------------------------------------
def request_run(export: Export, *, actor: Actor) -> ExportRun:
    """Queue a manual run (``running.queue_run``) and, after commit, its task.
    ``RunInProgress``, ``ExportIsContinuous`` (409) or the topic's refusals."""
    with transaction.atomic():
        run = running.queue_run(export, actor=actor)
        transaction.on_commit(lambda: _enqueue(run.export_id, run.pk))
    return run


def _enqueue(export_id: int, run_id: int) -> None:
    run_export.delay(export_id, run_id)


def progress(export: Export) -> dict[str, Any]:
    """``covered``, ``lag`` (per partition) and ``lag_records`` (``runs.progress``)."""
    return runs.progress(ExportRun.objects.filter(export=export), export.topic,
                         export.include_lanes)  # fmt: skip

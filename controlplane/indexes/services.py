"""Changing a tenant's secondary indexes, building them, and querying them.

``create_index``, ``update_index`` and ``delete_index`` are atomic, take the acting
``Actor``, count against ``max_indexes`` under the tenant's quota lock and write their
audit event in the same transaction. The rules are the exports' (``exports.services``)
where they apply: the topic is one of the tenant's trunk topics, read from the object
store (``TopicNotTiered``, ``ClusterWithoutStore``); 1 to 8 fields
(``Index.clean``). The files go where the platform puts them:
``<INDEX_ROOT>/<tenant id>/<index id>`` (``index_target``); deleting an index deletes
them after commit (``indexes.delete_index_files``).

``request_build`` queues a build (409 ``run_in_progress`` while one is queued or
running); ``build_index`` runs it under the index's lock. ``query`` answers the Index
Query (``indexes.query``) with a tail reader of the index's topics only.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.errors import Conflict, InvalidRequest, Unavailable
from controlplane.exports import jobs, runs
from controlplane.exports.fields import spec_fields
from controlplane.exports.services import (
    RunInProgress,
    check_name,
    check_topic_readable,
    resolve_topic,
)
from controlplane.gateway.tail import tail_reader
from controlplane.indexes import query as index_query
from controlplane.indexes.choices import RunState, RunTrigger
from controlplane.indexes.models import Index, IndexBuild
from controlplane.quotas.services import check_count_quota
from controlplane.regions.models import Broker
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import lock_open_tenant
from controlplane.topics.locks import object_lock
from controlplane.topics.models import Topic
from dataplane.tiered.store import ObjectStore
from spark.jobs.spec import IndexSpec, JobResult

UPDATABLE_FIELDS = ("description",)
# classid of the two-key advisory lock space ("MI": Meridian indexes).
LOCK_NAMESPACE = 0x4D49
INDEX_MODULE = "spark.jobs.index"


class IndexBusy(Unavailable):
    """Another build of the index holds its lock; the task retries later."""

    code = "index_busy"

    def __init__(self, index_id: int) -> None:
        super().__init__(f"index {index_id} is being built by another task", index_id=index_id)


@transaction.atomic
def create_index(
    tenant: Tenant,
    *,
    name: str,
    topic: str | Topic,
    fields: Any,
    include_lanes: bool = False,
    value_format: str = "json",
    description: str = "",
    actor: Actor,
) -> Index:
    """A new index ``name`` of ``tenant``'s ``topic`` on ``fields``. Refusals: the module
    docstring; a name in use (``Conflict``), past ``max_indexes`` (``QuotaExceeded``)."""
    tenant = lock_open_tenant(tenant)
    check_name(name)
    resolved = resolve_topic(tenant, topic)
    check_topic_readable(resolved)
    check_count_quota(tenant, "max_indexes", 1)
    if Index.objects.filter(tenant=tenant, name=name).exists():
        raise Conflict(
            f"index {name!r} already exists in tenant {tenant.slug!r}",
            name=[f"{name!r} is in use"],
        )
    index = Index(
        tenant=tenant, name=name, topic=resolved, fields=fields, include_lanes=include_lanes,
        value_format=value_format, description=description, created_by=actor.name,
    )  # fmt: skip
    index.full_clean()
    try:
        with transaction.atomic():
            index.save()
    except IntegrityError as exc:
        raise Conflict(f"index {name!r} already exists", name=[name]) from exc
    audit.record(actor, "index.create", index, after=audit.snapshot(index), tenant=tenant)
    return index


@transaction.atomic
def update_index(index: Index, *, actor: Actor, **changes: Any) -> Index:
    """Change the description (the topic and fields are the index's identity)."""
    unknown = sorted(set(changes) - set(UPDATABLE_FIELDS))
    if unknown:
        raise InvalidRequest(
            f"{unknown[0]}: cannot be changed (declare another index)",
            **{f: ["cannot be changed"] for f in unknown},
        )
    index = Index.objects.select_for_update().select_related("tenant").get(pk=index.pk)
    before = audit.snapshot(index) or {}
    for field, value in changes.items():
        setattr(index, field, value)
    index.full_clean()
    if all(before.get(f) == getattr(index, f) for f in UPDATABLE_FIELDS):
        return index
    index.save()
    audit.record(
        actor, "index.update", index, before=before, after=audit.snapshot(index),
        tenant=index.tenant,
    )  # fmt: skip
    return index


@transaction.atomic
def delete_index(index: Index, *, actor: Actor) -> Index:
    """Delete the index, its builds' records and, after commit, its files."""
    index = Index.objects.select_for_update().select_related("tenant").get(pk=index.pk)
    audit.record(actor, "index.delete", index, before=audit.snapshot(index), tenant=index.tenant)
    tenant_id, index_id = index.tenant_id, index.pk
    index.delete()
    transaction.on_commit(lambda: _enqueue_file_deletion(tenant_id, index_id))
    return index


def _enqueue_file_deletion(tenant_id: int, index_id: int) -> None:
    from controlplane.indexes.tasks import delete_index_files  # tasks import this module

    delete_index_files.delay(tenant_id, index_id)


def index_key(tenant_id: int, index_id: int) -> str:
    return f"{tenant_id}/{index_id}"


def index_target(index: Index) -> str:
    """``<INDEX_ROOT>/<tenant id>/<index id>``: by ids, so no name can reach another's."""
    return f"{str(settings.INDEX_ROOT).rstrip('/')}/{index_key(index.tenant_id, index.pk)}"


def delete_index_files(tenant_id: int, index_id: int) -> int:
    """Delete a deleted index's files; returns how many objects went."""
    store = ObjectStore.open(str(settings.INDEX_ROOT), dict(settings.INDEX_ROOT_OPTIONS))
    keys = [info.key for info in store.list(index_key(tenant_id, index_id))]
    if keys:
        store.delete(keys)
    return len(keys)


def index_spec(index: Index) -> IndexSpec:
    cluster = index.topic.cluster
    return IndexSpec(
        index_id=str(index.pk),
        topic=index.topic.full_name,
        store_uri=cluster.remote_store_uri,
        store_options=dict(cluster.remote_store_options),
        target_uri=index_target(index),
        target_options=dict(settings.INDEX_ROOT_OPTIONS),
        fields=spec_fields(index.fields),
        value_format=index.value_format,
        include_lanes=index.include_lanes,
    )


# -- building ------------------------------------------------------------------------------------
@transaction.atomic
def request_build(index: Index, *, actor: Actor) -> IndexBuild:
    """Queue a build and, after commit, its task (``RunInProgress`` while one is queued
    or running)."""
    index = Index.objects.select_for_update().select_related("topic__cluster").get(pk=index.pk)
    if index.builds.filter(state__in=(RunState.QUEUED, RunState.RUNNING)).exists():
        raise RunInProgress(f"index {index.name!r} already has a build queued or running")
    check_topic_readable(index.topic)
    build = IndexBuild.objects.create(
        index=index, trigger=RunTrigger.MANUAL, requested_by=actor.name
    )
    audit.record(actor, "index.build", index, after={"build": build.pk}, tenant=index.tenant)
    transaction.on_commit(lambda: _enqueue_build(index.pk, build.pk))
    return build


def _enqueue_build(index_id: int, build_id: int) -> None:
    from controlplane.indexes.tasks import build_index

    build_index.delay(index_id, build_id)


def build_index(index_id: int, build_id: int) -> IndexBuild | None:
    """Run the queued build ``build_id`` to its end (None: gone or finished already);
    ``IndexBusy`` while another task builds this index."""
    with object_lock(LOCK_NAMESPACE, index_id, lambda: IndexBusy(index_id)):
        index = Index.objects.select_related("tenant", "topic__cluster").filter(pk=index_id).first()
        if index is None:
            return None
        builds = IndexBuild.objects.filter(index=index)
        if runs.claim(builds, build_id, runs.now()) is None:
            return None
        try:
            check_topic_readable(index.topic)
        except InvalidRequest as refused:
            return runs.finish(builds, build_id, JobResult("failed", error=refused.message),
                               runs.now())  # fmt: skip
        spec = index_spec(index).to_json()
        result = jobs.run_job(INDEX_MODULE, spec, timeout_s=settings.SPARK_JOB_TIMEOUT_S)
        return runs.finish(builds, build_id, result, runs.now())


def progress(index: Index) -> dict[str, Any]:
    return runs.progress(IndexBuild.objects.filter(index=index), index.topic,
                         index.include_lanes)  # fmt: skip


# -- querying ----------------------------------------------------------------------------------
def query(index: Index, params: dict[str, str]) -> dict[str, Any]:
    """The Index Query's answer (``indexes.query``) for the request's parameters."""
    parsed = index_query.parse_query(params, index.field_names)
    topic = index.topic
    check_topic_readable(topic)
    names = [topic.full_name]
    if index.include_lanes:
        names += list(Topic.objects.filter(trunk=topic).values_list("full_name", flat=True))
    addresses = [b.address for b in Broker.objects.filter(cluster_id=topic.cluster_id) if b.address]
    return index_query.run_query(index_spec(index), parsed, tail_reader(addresses, names))

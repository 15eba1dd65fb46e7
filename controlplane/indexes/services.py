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
running); the ``indexes.build_index`` task runs it (``building``: under the index's
lock). ``query`` answers the Index
Query (``indexes.query``) for every partition of the index's topics the database
declares (``query_partitions``), with a tail reader of those topics only.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.errors import Conflict, InvalidRequest
from controlplane.exports import runs
from controlplane.exports.rules import (
    RunInProgress,
    check_name,
    check_topic_readable,
    resolve_topic,
)
from controlplane.gateway.tail import tail_reader
from controlplane.indexes import query as index_query
from controlplane.indexes.building import index_spec
from controlplane.indexes.choices import RunState, RunTrigger
from controlplane.indexes.models import Index, IndexBuild
from controlplane.indexes.tasks import build_index, delete_index_files
from controlplane.quotas.services import check_count_quota
from controlplane.regions.models import Broker
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import lock_open_tenant
from controlplane.topics.choices import TopicStatus
from controlplane.topics.models import Topic

__all__ = ["InvalidRequest", "RunInProgress"]

UPDATABLE_FIELDS = ("description",)


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
    delete_index_files.delay(tenant_id, index_id)


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
    build_index.delay(index_id, build_id)


def progress(index: Index) -> dict[str, Any]:
    return runs.progress(IndexBuild.objects.filter(index=index), index.topic,
                         index.include_lanes)  # fmt: skip


# -- querying ----------------------------------------------------------------------------------
def query(index: Index, params: dict[str, str]) -> dict[str, Any]:
    """The Index Query's answer (``indexes.query``) for the request's parameters, over
    every partition of the index's topics (``query_partitions``)."""
    parsed = index_query.parse_query(params, index.field_names)
    topic = index.topic
    check_topic_readable(topic)
    partitions = query_partitions(index)
    addresses = [b.address for b in Broker.objects.filter(cluster_id=topic.cluster_id) if b.address]
    tail = tail_reader(addresses, list(partitions))
    return index_query.run_query(index_spec(index), parsed, tail, partitions)


def query_partitions(index: Index) -> dict[str, list[int]]:
    """Per topic the query reads (the index's topic and, with ``include_lanes``, its ready
    lane topics), every partition the database declares: also those nothing of which is in
    the object store yet, which the query then answers from the brokers' tail."""
    topics = Topic.objects.filter(pk=index.topic_id)
    if index.include_lanes:  # lane topics once the brokers hold them (not failed, not going)
        lanes = Q(trunk_id=index.topic_id, status=TopicStatus.READY)
        topics = Topic.objects.filter(Q(pk=index.topic_id) | lanes)
    rows = topics.order_by("full_name").values_list("full_name", "partitions")
    return {name: list(range(count)) for name, count in rows}

"""Changing a tenant's topics: the desired state the reconciler makes true on brokers.

Each function is atomic, takes the acting ``Actor``, checks quotas under the tenant's
quota lock, writes its audit event in the same transaction and, after commit, asks the
reconciler (``topics.reconcile_topic``) to act on the brokers."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Sum

import lanes
from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.errors import Conflict, InvalidRequest
from controlplane.quotas.services import check_topic_quota
from controlplane.regions.models import Cluster, Region
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import lock_open_tenant
from controlplane.topics import validation
from controlplane.topics.choices import TopicStatus
from controlplane.topics.models import Topic
from controlplane.topics.placement import (
    assign_partitions,
    default_replication_factor,
    placeable_count,
)
from controlplane.topics.tasks import reconcile_topic

UPDATABLE_FIELDS = ("partitions", *validation.CONFIG_FIELDS, *validation.REPLICATION_FIELDS)
# Clusters that take no new topics.
CLOSED_CLUSTER_STATUSES = (TopicStatus.FAILED, TopicStatus.DELETING)


class RemoteStorageUnavailable(InvalidRequest):
    """``remote_storage`` asked of a topic whose cluster has no object store."""

    code = "remote_storage_unavailable"

    def __init__(self, cluster: Cluster) -> None:
        message = "the topic's cluster has no object store: tiered storage is not available"
        super().__init__(f"remote_storage: {message}", remote_storage=[message])
        self.cluster_id = cluster.pk


class RemoteStorageIrreversible(InvalidRequest):
    """``remote_storage`` turned off on a topic that has it: its remote segments would
    be orphaned in the object store (brokers refuse it too)."""

    code = "remote_storage_irreversible"

    def __init__(self, topic: Topic) -> None:
        message = "cannot be turned off once on: the remote segments would be orphaned"
        super().__init__(f"remote_storage: {message}", remote_storage=[message])
        self.topic = topic.full_name


@transaction.atomic
def create_topic(
    tenant: Tenant,
    *,
    name: str,
    partitions: int,
    region: Region | str | None = None,
    retention_ms: int | None = None,
    retention_bytes: int | None = None,
    max_message_bytes: int | None = None,
    durability: str | None = None,
    replication_factor: int | None = None,
    min_insync_replicas: int | None = None,
    unclean_leader_election: bool | None = None,
    remote_storage: bool | None = None,
    local_retention_ms: int | None = None,
    local_retention_bytes: int | None = None,
    max_segment_bytes: int | None = None,
    segment_ms: int | None = None,
    actor: Actor,
) -> Topic:
    """A new topic ``<tenant>.<name>`` (status pending) on the least-loaded cluster of
    the region (the given one, the tenant's home region, or the only region), with its
    partitions placed on brokers. Refuses a bad name or config (``InvalidRequest``), a
    name in use or a tenant being deleted (``Conflict``) and a quota overshoot
    (``QuotaExceeded``). The replication factor defaults to
    ``settings.DEFAULT_REPLICATION_FACTOR`` capped by the cluster's brokers; more
    replicas than brokers is an ``InvalidRequest``; ``remote_storage`` on a cluster
    without an object store is ``RemoteStorageUnavailable``."""
    tenant = lock_open_tenant(tenant)
    validation.validate_name(name, tenant.slug)
    validation.validate_partitions(partitions)
    config = validation.resolve_config(
        {
            "retention_ms": retention_ms,
            "retention_bytes": retention_bytes,
            "max_message_bytes": max_message_bytes,
            "durability": durability,
            "remote_storage": remote_storage,
            "local_retention_ms": local_retention_ms,
            "local_retention_bytes": local_retention_bytes,
            "max_segment_bytes": max_segment_bytes,
            "segment_ms": segment_ms,
        }
    )
    full_name = validation.full_name(tenant.slug, name)
    check_topic_quota(
        tenant,
        topics=1,
        partitions=partitions,
        storage_bytes=partitions * config["retention_bytes"],
    )
    # Under the quota lock, so two creates of one name in one tenant cannot both pass.
    if Topic.objects.filter(full_name=full_name).exists():
        raise Conflict(f"topic {full_name!r} already exists", name=[f"{name!r} is in use"])
    cluster = pick_cluster(tenant, region)
    _check_remote_storage(cluster, config)
    replication = _replication_for(cluster, replication_factor, min_insync_replicas,
                                   unclean_leader_election)  # fmt: skip
    topic = Topic(
        tenant=tenant,
        cluster=cluster,
        name=name,
        full_name=full_name,
        partitions=partitions,
        created_by=actor.name,
        status=TopicStatus.PENDING,
        **config,
        **replication,
    )
    topic.full_clean()
    topic.save()
    _place(topic)
    audit.record(actor, "topic.create", topic, after=audit.snapshot(topic), tenant=tenant)
    _reconcile_after_commit(topic)
    return topic


@transaction.atomic
def update_topic(topic: Topic, *, actor: Actor, **changes: Any) -> Topic:
    """Grow the topic's partitions and/or change its configuration (also
    ``min_insync_replicas`` and ``unclean_leader_election``). Partitions never shrink
    (``InvalidRequest``) and the replication factor does not change (``Conflict``; a
    reassignment moves replicas); growth is checked against quotas. ``remote_storage``
    is turned on only on a cluster with an object store (``RemoteStorageUnavailable``)
    and never off (``RemoteStorageIrreversible``). A real change bumps ``generation``
    and sets the topic pending until the reconciler applies it."""
    if topic.is_lane_topic:
        raise Conflict(
            f"topic {topic.full_name!r} is a lane topic: it has its trunk's configuration",
            trunk=["change the trunk topic instead"],
        )
    if "replication_factor" in changes:
        raise Conflict(
            "replication_factor: cannot be changed after creation",
            replication_factor=["cannot be changed after creation"],
        )
    unknown = sorted(set(changes) - set(UPDATABLE_FIELDS))
    if unknown:
        raise InvalidRequest(
            f"{unknown[0]}: cannot be changed", **{f: ["cannot be changed"] for f in unknown}
        )
    lock_open_tenant(topic.tenant)
    topic = Topic.objects.select_for_update().get(pk=topic.pk)
    _check_not_deleting(topic)
    before = audit.snapshot(topic)
    partitions = changes.get("partitions")
    partitions = topic.partitions if partitions is None else partitions
    validation.validate_partitions(partitions, current=topic.partitions)
    config = validation.resolve_config(changes, _config_of(topic))
    if topic.remote_storage and not config["remote_storage"]:
        raise RemoteStorageIrreversible(topic)
    if config["remote_storage"] and not topic.remote_storage:
        _check_remote_storage(topic.cluster, config)
    replication = validation.resolve_replication(
        topic.replication_factor, changes, _replication_of(topic)
    )
    if (
        partitions == topic.partitions
        and config == _config_of(topic)
        and replication == _replication_of(topic)
    ):
        return topic
    _check_growth(topic, partitions, config["retention_bytes"])
    for field, value in {"partitions": partitions, **config, **replication}.items():
        setattr(topic, field, value)
    _mark_changed(topic)
    topic.full_clean()
    topic.save()
    _place(topic)
    audit.record(
        actor,
        "topic.update",
        topic,
        before=before,
        after=audit.snapshot(topic),
        tenant=topic.tenant,
    )
    _reconcile_after_commit(topic)
    _follow_trunk(topic, actor)
    return topic


@transaction.atomic
def create_lane_topic(trunk: Topic, *, lane: str, partitions: int, actor: Actor) -> Topic:
    """The lane topic ``<trunk>~<lane>`` (status pending) next to ``trunk``: on its
    cluster, with its configuration and replication and ``partitions`` partitions, then
    reconciled like any topic. Lane topics count against no topic quota (only storage,
    which the brokers enforce on what is stored): the lane itself is what the tenant's
    ``max_lanes`` bounds, so it never gets more partitions than its trunk has (a larger
    ``partitions`` is cut to the trunk's count). The caller (``lanes.services``) decides
    the lane may have it; a name in use is a ``Conflict``, a trunk being deleted too."""
    lock_open_tenant(trunk.tenant)
    trunk = Topic.objects.select_for_update().select_related("tenant", "cluster").get(pk=trunk.pk)
    if trunk.is_lane_topic:
        raise InvalidRequest(
            f"{trunk.full_name!r} is a lane topic, not a trunk", trunk=["not a trunk topic"]
        )
    _check_not_deleting(trunk)
    validation.validate_partitions(partitions)
    partitions = min(partitions, trunk.partitions)  # read under the trunk's lock
    name = lane_topic_name(trunk.name, lane)
    full_name = validation.full_name(trunk.tenant.slug, name)
    if Topic.objects.filter(full_name=full_name).exists():
        raise Conflict(f"topic {full_name!r} already exists", name=[f"{name!r} is in use"])
    topic = Topic(
        tenant=trunk.tenant,
        cluster=trunk.cluster,
        name=name,
        full_name=full_name,
        partitions=partitions,
        created_by=actor.name,
        status=TopicStatus.PENDING,
        trunk=trunk,
        lane_name=lane,
        replication_factor=trunk.replication_factor,
        **_config_of(trunk),
        **_replication_of(trunk),
    )
    # The name holds '~', which the field's validator (for what tenants type) refuses;
    # ``lane_topic_name`` has checked it.
    topic.full_clean(exclude=["name"])
    topic.save()
    _place(topic)
    audit.record(actor, "topic.create", topic, after=audit.snapshot(topic), tenant=topic.tenant)
    _reconcile_after_commit(topic)
    return topic


def lane_topic_name(trunk_name: str, lane: str) -> str:
    """``<trunk name>~<lane>``; ``InvalidRequest`` for a bad lane name."""
    try:
        return lanes.lane_topic(trunk_name, lane)
    except ValueError as exc:  # InvalidLaneNameError is one
        raise InvalidRequest(str(exc), lane=[str(exc)]) from None


@transaction.atomic
def delete_topic(topic: Topic, *, actor: Actor) -> Topic:
    """Mark the topic deleting (and bump its generation); the reconciler deletes its
    partitions on every broker, then the row. Deleting a deleting topic changes nothing.
    A trunk topic's lane topics are deleted with it (each audited); the trunk's row goes
    only after theirs (``reconcile``)."""
    topic = Topic.objects.select_for_update().get(pk=topic.pk)
    if topic.status == TopicStatus.DELETING:
        return topic
    for lane_topic in topic.lane_topics.exclude(status=TopicStatus.DELETING).order_by("pk"):
        delete_topic(lane_topic, actor=actor)
    before = audit.snapshot(topic)
    topic.status = TopicStatus.DELETING
    topic.status_reason = ""
    topic.generation += 1
    topic.save(update_fields=["status", "status_reason", "generation", "updated_at"])
    audit.record(
        actor,
        "topic.delete",
        topic,
        before=before,
        after=audit.snapshot(topic),
        tenant=topic.tenant,
    )
    _reconcile_after_commit(topic)
    return topic


def pick_cluster(tenant: Tenant, region: Region | str | None) -> Cluster:
    """The cluster a new topic of the tenant goes to: in the named region, else the
    tenant's home region, else the only region; there, the open cluster hosting the
    fewest partitions (ties: the lowest id)."""
    chosen = _region_for(tenant, region)
    cluster = (
        Cluster.objects.filter(region=chosen)
        .exclude(status__in=CLOSED_CLUSTER_STATUSES)
        .annotate(load=Sum("topics__partitions", default=0))
        .order_by("load", "pk")
        .first()
    )
    if cluster is None:
        raise Conflict(
            f"region {chosen.name!r} has no cluster that takes topics", region=chosen.name
        )
    return cluster


def _region_for(tenant: Tenant, region: Region | str | None) -> Region:
    if isinstance(region, Region):
        return region
    if region:
        found = Region.objects.filter(name=region).first()
        if found is None:
            raise InvalidRequest(f"region: no region {region!r}", region=[f"no region {region!r}"])
        return found
    if tenant.home_region_id is not None:
        return Region.objects.get(pk=tenant.home_region_id)
    regions = list(Region.objects.all()[:2])
    if len(regions) != 1:
        message = "name the region" if regions else "no region exists yet"
        raise InvalidRequest(f"region: {message}", region=[message])
    return regions[0]


def _check_not_deleting(topic: Topic) -> None:
    if topic.status == TopicStatus.DELETING:
        raise Conflict(f"topic {topic.full_name!r} is being deleted", status=topic.status)


def _check_growth(topic: Topic, partitions: int, retention_bytes: int) -> None:
    """Quota check for what the change adds: partitions, and storage if it grows."""
    grown_storage = partitions * retention_bytes - topic.storage_bytes
    check_topic_quota(
        topic.tenant,
        partitions=partitions - topic.partitions,
        storage_bytes=max(grown_storage, 0),
    )


def _check_remote_storage(cluster: Cluster, config: dict[str, Any]) -> None:
    if config["remote_storage"] and not cluster.remote_store_uri:
        raise RemoteStorageUnavailable(cluster)


def _config_of(topic: Topic) -> dict[str, Any]:
    return {field: getattr(topic, field) for field in validation.CONFIG_FIELDS}


def _replication_of(topic: Topic) -> dict[str, Any]:
    return {field: getattr(topic, field) for field in validation.REPLICATION_FIELDS}


def _replication_for(
    cluster: Cluster,
    replication_factor: int | None,
    min_insync_replicas: int | None,
    unclean_leader_election: bool | None,
) -> dict[str, Any]:
    """A new topic's replication settings on ``cluster`` (see ``create_topic``)."""
    if replication_factor is None:
        replication_factor = default_replication_factor(cluster.pk)
    validation.validate_replication_factor(replication_factor, placeable_count(cluster.pk))
    changes = {
        "min_insync_replicas": min_insync_replicas,
        "unclean_leader_election": unclean_leader_election,
    }
    return {
        "replication_factor": replication_factor,
        **validation.resolve_replication(replication_factor, changes),
    }


def _follow_trunk(trunk: Topic, actor: Actor) -> None:
    """Give ``trunk``'s lane topics its new configuration (their partitions stay: a
    lane topic's count is its lane's choice at creation)."""
    wanted = {**_config_of(trunk), **_replication_of(trunk)}
    for lane_topic in trunk.lane_topics.exclude(status=TopicStatus.DELETING).order_by("pk"):
        lane_topic = Topic.objects.select_for_update().get(pk=lane_topic.pk)
        if {**_config_of(lane_topic), **_replication_of(lane_topic)} == wanted:
            continue
        before = audit.snapshot(lane_topic)
        for field, value in wanted.items():
            setattr(lane_topic, field, value)
        _mark_changed(lane_topic)
        lane_topic.save()
        audit.record(
            actor,
            "topic.update",
            lane_topic,
            before=before,
            after=audit.snapshot(lane_topic),
            tenant=lane_topic.tenant,
        )
        _reconcile_after_commit(lane_topic)


def _mark_changed(topic: Topic) -> None:
    topic.generation += 1
    topic.status = TopicStatus.PENDING
    topic.status_reason = ""


def _place(topic: Topic) -> None:
    assign_partitions(topic)


def _reconcile_after_commit(topic: Topic) -> None:
    topic_id = topic.pk

    def enqueue() -> None:
        reconcile_topic.delay(topic_id)

    # robust: a lost enqueue is logged, not a failed request (the change is committed);
    # the periodic drift pass enqueues topics that stay unconverged.
    transaction.on_commit(enqueue, robust=True)

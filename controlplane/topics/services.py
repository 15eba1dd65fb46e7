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
from controlplane.topics.models import INTERNAL_PREFIX, LOCAL_RETENTION_TOTAL, Topic
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


class MirrorCopiesExist(Conflict):
    """An origin topic with mirror copies in other regions is not deleted: the links
    that keep them go first, then the copies (each an ordinary topic to delete)."""

    code = "mirror_copies_exist"

    def __init__(self, topic: Topic, copies: list[Topic]) -> None:
        regions = sorted(copy.cluster.region.name for copy in copies)
        links = sorted({copy.mirror_link.name for copy in copies if copy.mirror_link})
        what = f"mirror links {', '.join(links)}" if links else "its copies"
        super().__init__(
            f"topic {topic.full_name!r} has mirror copies in {', '.join(regions)}: delete "
            f"{what} first",
            regions=regions,
            mirror_links=links,
        )


class MirrorCopyManaged(Conflict):
    """A mirror copy kept by a link follows its origin: it is changed through the
    origin, and deleted once the link no longer keeps it."""

    code = "mirror_copy"

    def __init__(self, topic: Topic, doing: str) -> None:
        link = topic.mirror_link.name if topic.mirror_link else ""
        super().__init__(
            f"topic {topic.full_name!r} in region {topic.cluster.region.name!r} is a mirror "
            f"copy kept by mirror link {link!r}: {doing}",
            mirror_link=link,
            region=topic.cluster.region.name,
        )


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
    if topic.mirror_link_id is not None:
        raise MirrorCopyManaged(topic, "change its origin instead")
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
    _follow_copies(topic, actor)
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
    if trunk.is_mirror_copy:
        # A copy's lane topics are copies of its origin's (``create_mirror_copy``).
        raise InvalidRequest(
            f"{trunk.full_name!r} in region {trunk.cluster.region.name!r} is a mirror copy: "
            "lane topics are made beside its origin",
            trunk=["a mirror copy"],
        )
    _check_not_deleting(trunk)
    validation.validate_partitions(partitions)
    partitions = min(partitions, trunk.partitions)  # read under the trunk's lock
    name = lane_topic_name(trunk.name, lane)
    full_name = validation.full_name(trunk.tenant.slug, name)
    if Topic.objects.origins().filter(full_name=full_name).exists():
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


@transaction.atomic
def create_internal_topic(
    tenant: Tenant,
    cluster: Cluster,
    *,
    name: str,
    full_name: str,
    partitions: int,
    config: dict[str, Any],
    actor: Actor,
) -> Topic:
    """An internal topic of ``tenant`` on ``cluster`` (``name`` starts with ``__``: its
    timer log), placed and reconciled like any topic, with ``config`` over the defaults
    (unchecked: the caller's own settings) and the cluster's default replication. It
    counts against no topic quota, only storage for what it holds (``topics.usage``);
    the caller decides the tenant needs it. One of a name per cluster (``Conflict``
    otherwise)."""
    if not name.startswith(INTERNAL_PREFIX):
        raise InvalidRequest(f"{name!r} is not an internal name", name=["starts with '__'"])
    tenant = lock_open_tenant(tenant)
    validation.validate_partitions(partitions)
    if Topic.objects.filter(full_name=full_name, cluster=cluster).exists():
        raise Conflict(f"topic {full_name!r} already exists on {cluster}", name=[full_name])
    topic = Topic(
        tenant=tenant,
        cluster=cluster,
        name=name,
        full_name=full_name,
        partitions=partitions,
        created_by=actor.name,
        status=TopicStatus.PENDING,
        # The caller's settings as they are: an internal topic may need what tenants
        # cannot ask for (a timer log keeps everything until its records are moved).
        **{**validation.resolve_config({}), **config},
        **_replication_for(cluster, None, None, None),
    )
    # An internal name starts with '__', which the field's validator (for what tenants
    # type) refuses.
    topic.full_clean(exclude=["name"])
    topic.save()
    _place(topic)
    audit.record(actor, "topic.create", topic, after=audit.snapshot(topic), tenant=tenant)
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
    only after theirs (``reconcile``).

    Mirror copies: an origin trunk topic with copies is refused (``MirrorCopiesExist``,
    409: delete the links, then the copies); a copy a link keeps is refused
    (``MirrorCopyManaged``); a copy no link keeps any more is deleted like any topic. A
    lane topic's copies are deleted with it (lanes come and go on their own)."""
    topic = Topic.objects.select_for_update().select_related("cluster__region").get(pk=topic.pk)
    if topic.status == TopicStatus.DELETING:
        return topic
    if topic.is_lane_topic:
        return _delete(topic, actor)
    if topic.mirror_link_id is not None:
        raise MirrorCopyManaged(topic, "delete the mirror link first")
    copies = list(
        topic.mirror_copies.exclude(status=TopicStatus.DELETING)
        .select_related("cluster__region", "mirror_link")
        .order_by("pk")
    )
    if copies:
        raise MirrorCopiesExist(topic, copies)
    return _delete(topic, actor)


def _delete(topic: Topic, actor: Actor) -> Topic:
    """``delete_topic`` once allowed: the topic, its lane topics and their copies."""
    topic = Topic.objects.select_for_update().get(pk=topic.pk)
    if topic.status == TopicStatus.DELETING:
        return topic
    for lane_topic in topic.lane_topics.exclude(status=TopicStatus.DELETING).order_by("pk"):
        _delete(lane_topic, actor)
    if topic.is_lane_topic:
        for copy in topic.mirror_copies.exclude(status=TopicStatus.DELETING).order_by("pk"):
            _delete(copy, actor)
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
    lane_topics = trunk.lane_topics.exclude(status=TopicStatus.DELETING)
    # A copy's lane topics are copies too: they follow their origins (``_follow_copies``).
    for lane_topic in lane_topics.filter(mirror_of__isnull=True).order_by("pk"):
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
        _follow_copies(lane_topic, actor)


# -- mirror copies ----------------------------------------------------------------------
@transaction.atomic
def create_mirror_copy(origin: Topic, *, region: Region, link_id: int, actor: Actor) -> Topic:
    """A mirror copy of ``origin`` (an origin topic, or a copy: its origin is copied) in
    ``region``, kept by mirror link ``link_id``: same full name, partition count and
    configuration (tiered storage only where the chosen cluster has an object store),
    the replication of that region's cluster: the cluster of the link's other copies
    there, else the least loaded (``pick_cluster``). A lane topic's copy goes beside its
    trunk's copy in that region (which must exist: ``Conflict`` otherwise). Counted
    against the tenant's partition and storage quotas, not ``max_topics`` (lane topics:
    storage only). A topic of that name already in the region is a ``Conflict``."""
    tenant = lock_open_tenant(origin.tenant)
    origin = _origin_locked(origin)
    _check_not_deleting(origin)
    if Topic.objects.filter(full_name=origin.full_name, cluster__region=region).exists():
        raise Conflict(
            f"topic {origin.full_name!r} already exists in region {region.name!r}",
            region=region.name,
        )
    trunk = _trunk_copy(origin, region) if origin.is_lane_topic else None
    cluster = trunk.cluster if trunk is not None else _copies_cluster(link_id, region)
    cluster = cluster or pick_cluster(tenant, region)
    config = _copied_config(origin, cluster)
    check_topic_quota(
        tenant,
        partitions=0 if origin.is_lane_topic else origin.partitions,
        storage_bytes=origin.partitions * config["retention_bytes"],
    )
    replication_factor = default_replication_factor(cluster.pk)
    replication = _replication_for(cluster, replication_factor,
                                   min(origin.min_insync_replicas, replication_factor),
                                   origin.unclean_leader_election)  # fmt: skip
    topic = Topic(
        tenant=tenant, cluster=cluster, name=origin.name, full_name=origin.full_name,
        partitions=origin.partitions, created_by=actor.name, status=TopicStatus.PENDING,
        trunk=trunk, lane_name=origin.lane_name, mirror_of=origin, mirror_link_id=link_id,
        **config, **replication,
    )  # fmt: skip
    topic.full_clean(exclude=["name"] if origin.is_lane_topic else None)
    topic.save()
    _place(topic)
    audit.record(actor, "topic.create", topic, after=audit.snapshot(topic), tenant=tenant)
    _reconcile_after_commit(topic)
    return topic


@transaction.atomic
def sync_mirror_copy(copy: Topic, *, actor: Actor, link_id: int | None = None) -> Topic:
    """Make the copy follow its origin: its partitions grow to the origin's (never
    shrink: records are keyed to partitions by count, and the copy's own records are
    where they are) and its configuration becomes the origin's (``create_mirror_copy``).
    With ``link_id``, the copy is (or becomes) kept by that link. Growth is checked
    against the tenant's quotas; an unchanged copy is not written."""
    if copy.mirror_of_id is None:
        raise InvalidRequest(f"topic {copy.full_name!r} is not a mirror copy")
    if not _copy_behind(Topic.objects.select_related("cluster").get(pk=copy.pk), link_id):
        return copy  # the common case on every follow: no lock taken
    lock_open_tenant(copy.tenant)
    copy = Topic.objects.select_for_update().select_related("cluster").get(pk=copy.pk)
    _check_not_deleting(copy)
    if not _copy_behind(copy, link_id):
        return copy
    partitions, config = _following(copy)
    before = audit.snapshot(copy)
    if copy.is_lane_topic:
        _check_growth(copy, copy.partitions, config["retention_bytes"])
    else:
        _check_growth(copy, partitions, config["retention_bytes"])
    for field, value in {"partitions": partitions, **config}.items():
        setattr(copy, field, value)
    if link_id is not None:
        copy.mirror_link_id = link_id
    _mark_changed(copy)
    copy.full_clean(exclude=["name"] if copy.is_lane_topic else None)
    copy.save()
    _place(copy)
    audit.record(actor, "topic.update", copy, before=before, after=audit.snapshot(copy),
                 tenant=copy.tenant)  # fmt: skip
    _reconcile_after_commit(copy)
    return copy


def _following(copy: Topic) -> tuple[int, dict[str, Any]]:
    """The partitions and configuration ``copy`` has once it follows its origin."""
    assert copy.mirror_of_id is not None
    origin = Topic.objects.get(pk=copy.mirror_of_id)
    config = _copied_config(origin, copy.cluster)
    if copy.remote_storage:  # never off once on (``RemoteStorageIrreversible``)
        config["remote_storage"] = True
    return max(copy.partitions, origin.partitions), config


def _copy_behind(copy: Topic, link_id: int | None) -> bool:
    partitions, config = _following(copy)
    relink = link_id is not None and copy.mirror_link_id != link_id
    return relink or partitions != copy.partitions or config != _config_of(copy)


@transaction.atomic
def release_mirror_copies(link_id: int, *, keep: set[int], actor: Actor) -> int:
    """Let go of the copies mirror link ``link_id`` keeps but for ``keep`` (topic ids):
    they stay, as copies no link keeps (``mirror_of`` kept, so the name stays unique
    among origins), and the tenant may delete them. Returns how many."""
    released = 0
    let_go = Topic.objects.filter(mirror_link_id=link_id).exclude(pk__in=keep)
    for copy in let_go.select_for_update().select_related("tenant").order_by("pk"):
        before = audit.snapshot(copy)
        copy.mirror_link = None
        copy.save(update_fields=["mirror_link", "updated_at"])
        audit.record(actor, "topic.update", copy, before=before, after=audit.snapshot(copy),
                     tenant=copy.tenant)  # fmt: skip
        released += 1
    return released


def _follow_copies(origin: Topic, actor: Actor) -> None:
    """Give ``origin``'s copies kept by a link its partitions and configuration."""
    copies = origin.mirror_copies.filter(mirror_link__isnull=False).exclude(
        status=TopicStatus.DELETING
    )
    for copy in copies.order_by("pk"):
        sync_mirror_copy(copy, actor=actor)


def _origin_locked(topic: Topic) -> Topic:
    origin_id = topic.mirror_of_id or topic.pk
    return Topic.objects.select_for_update().select_related("tenant").get(pk=origin_id)


def _copies_cluster(link_id: int, region: Region) -> Cluster | None:
    """The open cluster of ``region`` holding the link's other copies: a link's copies
    in a region stay together (its worker there writes to one cluster)."""
    found = (
        Topic.objects.filter(mirror_link_id=link_id, cluster__region=region)
        .exclude(cluster__status__in=CLOSED_CLUSTER_STATUSES)
        .select_related("cluster")
        .order_by("pk")
        .first()
    )
    return found.cluster if found is not None else None


def _trunk_copy(origin: Topic, region: Region) -> Topic:
    assert origin.trunk is not None
    trunk = (
        Topic.objects.filter(full_name=origin.trunk.full_name, cluster__region=region)
        .exclude(status=TopicStatus.DELETING)
        .select_related("cluster")
        .first()
    )
    if trunk is None:
        raise Conflict(
            f"lane topic {origin.full_name!r} has no trunk {origin.trunk.full_name!r} in "
            f"region {region.name!r} to go beside",
            region=region.name,
        )
    return trunk


def _copied_config(origin: Topic, cluster: Cluster) -> dict[str, Any]:
    """``origin``'s configuration for a copy on ``cluster``: tiered storage only where
    the cluster has an object store (the local retentions are then the total)."""
    config = _config_of(origin)
    if config["remote_storage"] and not cluster.remote_store_uri:
        config["remote_storage"] = False
        config["local_retention_ms"] = config["local_retention_bytes"] = LOCAL_RETENTION_TOTAL
    return config


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

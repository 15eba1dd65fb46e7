"""Regions, clusters and brokers: the desired fleet, and what the controller observes.

Desired-state changes (``create_region``, ``create_cluster``, ``register_broker`` ...)
are atomic, take the acting ``Actor`` and write their audit event in the same
transaction. Observed state (a broker's process, heartbeats, phases, the controller's
epoch) is written by the controller and the provisioners through the functions of the
second half; they audit phase transitions only, not every heartbeat.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.core.errors import Conflict, InvalidRequest
from controlplane.regions import tasks
from controlplane.regions.choices import BrokerPhase, ProvisionerKind
from controlplane.regions.models import Broker, Cluster, Region

MAX_BROKERS_PER_CLUSTER = 64
KEEP_PHASE_ON_HEARTBEAT = (
    BrokerPhase.STOPPING,
    BrokerPhase.STOPPED,
    BrokerPhase.DECOMMISSIONING,
    BrokerPhase.DECOMMISSIONED,
)


# -- regions ------------------------------------------------------------------------------
@transaction.atomic
def create_region(*, name: str, display_name: str = "", actor: Actor) -> Region:
    """A new region; ``Conflict`` when the name is taken."""
    region = Region(name=name, display_name=display_name)
    _validate(region)
    if Region.objects.filter(name=name).exists():
        raise Conflict(f"region {name!r} already exists", field="name")
    region.save()
    audit.record(actor, "region.create", region, after=audit.snapshot(region))
    return region


@transaction.atomic
def update_region(region: Region, *, display_name: str, actor: Actor) -> Region:
    """Only the display name of a region changes; its name is its identity."""
    region = Region.objects.select_for_update().get(pk=region.pk)
    before = audit.snapshot(region)
    region.display_name = display_name
    _validate(region)
    region.save(update_fields=["display_name", "updated_at"])
    audit.record(actor, "region.update", region, before=before, after=audit.snapshot(region))
    return region


@transaction.atomic
def delete_region(region: Region, *, actor: Actor) -> None:
    """Remove an empty region; ``Conflict`` while clusters or tenants use it."""
    region = Region.objects.select_for_update().get(pk=region.pk)
    if region.clusters.exists() or region.tenants.exists():
        raise Conflict(f"region {region.name!r} still has clusters or tenants")
    before = audit.snapshot(region)
    audit.record(actor, "region.delete", region, before=before)
    region.delete()


# -- clusters -----------------------------------------------------------------------------
@transaction.atomic
def create_cluster(
    region: Region,
    *,
    name: str,
    provisioner: str,
    broker_count: int,
    actor: Actor,
    remote_store_uri: str = "",
    remote_store_options: dict[str, Any] | None = None,
) -> Cluster:
    """A cluster with brokers 1..``broker_count`` (phase pending). A ``local`` cluster's
    brokers are started by the region's controller; a ``static`` one's run elsewhere and
    get their addresses through ``register_broker``. ``remote_store_uri`` (and its
    secret ``remote_store_options``) is the object store of tiered storage."""
    _check_broker_count(broker_count)
    cluster = Cluster(
        region=region,
        name=name,
        provisioner=provisioner,
        broker_count=broker_count,
        remote_store_uri=remote_store_uri,
        remote_store_options=remote_store_options or {},
    )
    _check_store_options(cluster)
    _validate(cluster, exclude=["region"])
    if Cluster.objects.filter(region=region, name=name).exists():
        raise Conflict(f"cluster {name!r} already exists in region {region.name!r}", field="name")
    cluster.status = ProvisioningStatus.PENDING
    cluster.save()
    Broker.objects.bulk_create(
        [Broker(cluster=cluster, broker_id=i) for i in range(1, broker_count + 1)]
    )
    audit.record(actor, "cluster.create", cluster, after=audit.snapshot(cluster))
    return cluster


@transaction.atomic
def update_cluster(
    cluster: Cluster,
    *,
    broker_count: int | None = None,
    remote_store_uri: str | None = None,
    remote_store_options: dict[str, Any] | None = None,
    actor: Actor,
) -> Cluster:
    """Grow a cluster by new brokers (pending), and/or set its object store (see
    ``set_remote_store``). Shrinking is ``Conflict``: brokers leave one at a time
    through decommissioning, which moves their replicas first."""
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    if remote_store_uri is not None or remote_store_options is not None:
        cluster = set_remote_store(
            cluster, uri=remote_store_uri, options=remote_store_options, actor=actor
        )
    if broker_count is None or broker_count == cluster.broker_count:
        return cluster
    _check_broker_count(broker_count)
    if broker_count < cluster.broker_count:
        raise Conflict(
            "a cluster does not shrink by its broker count: decommission brokers one by one "
            "(POST /api/v1/brokers/{id}/decommission) so their replicas move first",
            broker_count=cluster.broker_count,
        )
    before = audit.snapshot(cluster)
    have = set(cluster.brokers.values_list("broker_id", flat=True))
    new = [i for i in range(1, broker_count + 1) if i not in have]
    Broker.objects.bulk_create([Broker(cluster=cluster, broker_id=i) for i in new])
    cluster.broker_count = max(broker_count, len(have) + len(new))
    cluster.save(update_fields=["broker_count", "updated_at"])
    audit.record(actor, "cluster.update", cluster, before=before, after=audit.snapshot(cluster))
    return cluster


@transaction.atomic
def set_remote_store(
    cluster: Cluster,
    *,
    uri: str | None = None,
    options: dict[str, Any] | None = None,
    actor: Actor,
) -> Cluster:
    """Set the cluster's object store (None keeps a value): the URI (blank: tiering
    off) and its options (``{}`` clears them; a secret, audited only as set or not).
    The URI does not change while a topic of the cluster keeps segments in the store
    (``Conflict``): they would be lost to it; options may (rotated credentials). Brokers
    read both when they start: a running broker keeps its store until restarted."""
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    before = _store_snapshot(cluster)
    if uri is not None and uri != cluster.remote_store_uri:
        tiered = cluster.topics.filter(remote_storage=True)
        if tiered.exists():
            raise Conflict(
                f"cluster {cluster} has topics with remote_storage: its store cannot change",
                remote_store_uri=["topics of the cluster keep segments in the current store"],
                topics=tiered.count(),
            )
        cluster.remote_store_uri = uri
    if options is not None:
        cluster.remote_store_options = options
    _check_store_options(cluster)
    _validate(cluster, exclude=["region"])
    if (uri is None or uri == before["remote_store_uri"]) and options is None:
        return cluster  # nothing asked to change: no write, no audit record
    cluster.save(update_fields=["remote_store_uri", "remote_store_options", "updated_at"])
    audit.record(
        actor, "cluster.remote_store", cluster, before=before, after=_store_snapshot(cluster)
    )
    return cluster


def _store_snapshot(cluster: Cluster) -> dict[str, Any]:
    """The audit picture of a store: its URI and whether options are set, never them."""
    return {
        "remote_store_uri": cluster.remote_store_uri,
        "remote_store_options_set": bool(cluster.remote_store_options),
    }


def _check_store_options(cluster: Cluster) -> None:
    if cluster.remote_store_options and not cluster.remote_store_uri:
        raise InvalidRequest(
            "remote_store_options: needs remote_store_uri",
            remote_store_options=["options without a store: set remote_store_uri too"],
        )


@transaction.atomic
def delete_cluster(cluster: Cluster, *, actor: Actor) -> Cluster:
    """Mark a cluster without topics for deletion; after commit, the
    ``regions.delete_cluster`` job stops its brokers and removes it."""
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    if cluster.topics.exists():
        raise Conflict(f"cluster {cluster} still hosts topics", topics=cluster.topics.count())
    before = audit.snapshot(cluster)
    cluster.status = ProvisioningStatus.DELETING
    cluster.save(update_fields=["status", "updated_at"])
    audit.record(actor, "cluster.delete", cluster, before=before, after=audit.snapshot(cluster))
    cluster_id = cluster.pk
    # robust: a lost enqueue is logged, not a failed request (the change is committed);
    # regions.reconcile_clusters enqueues the deletion again.
    transaction.on_commit(lambda: tasks.delete_cluster.delay(cluster_id), robust=True)
    return cluster


# -- brokers ------------------------------------------------------------------------------
@transaction.atomic
def register_broker(
    cluster: Cluster,
    *,
    broker_id: int,
    host: str,
    port: int,
    actor: Actor,
    rack: str = "",
    kafka_port: int | None = None,
) -> Broker:
    """Record where a broker of a ``static`` cluster listens: gRPC on ``port`` and, with
    ``kafka_port``, Kafka's protocol on the same host (new, or a new address for a known
    one, which then waits for the controller's next heartbeat)."""
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    if cluster.provisioner != ProvisionerKind.STATIC:
        raise Conflict(
            f"cluster {cluster} is {cluster.provisioner}: its brokers are started and "
            "addressed by its provisioner, not registered",
            provisioner=cluster.provisioner,
        )
    broker = Broker.objects.filter(cluster=cluster, broker_id=broker_id).first()
    before = audit.snapshot(broker)
    broker = broker or Broker(cluster=cluster, broker_id=broker_id)
    broker.host, broker.port, broker.kafka_port, broker.rack = host, port, kafka_port, rack
    broker.phase, broker.phase_reason = BrokerPhase.PENDING, ""
    _validate(broker, exclude=["cluster"])
    broker.save()
    if cluster.brokers.count() > cluster.broker_count:
        cluster.broker_count = cluster.brokers.count()
        cluster.save(update_fields=["broker_count", "updated_at"])
    action = "broker.register" if before is None else "broker.update"
    audit.record(actor, action, broker, before=before, after=audit.snapshot(broker))
    return broker


# -- observed state: the controller and the provisioners ------------------------------------
def record_broker_process(
    broker: Broker,
    *,
    host: str,
    port: int,
    pid: int | None,
    data_dir: str,
    kafka_port: int | None = None,
) -> None:
    """A provisioner started (or found) the broker's process, serving gRPC on ``port``
    and Kafka's protocol on ``kafka_port`` (None: no Kafka listener); it is ``starting``
    until its first heartbeat unless it already answers."""
    fields = {
        "host": host,
        "port": port,
        "kafka_port": kafka_port,
        "pid": pid,
        "data_dir": data_dir,
    }
    Broker.objects.filter(pk=broker.pk).update(**fields, updated_at=timezone.now())
    for name, value in fields.items():
        setattr(broker, name, value)
    if broker.phase in (BrokerPhase.PENDING, BrokerPhase.STOPPED):
        set_broker_phase(broker, BrokerPhase.STARTING, actor=Actor.system("provisioner"))


def record_heartbeat(broker: Broker, *, version: str, at: datetime, actor: Actor) -> None:
    """The broker answered the controller's push at ``at``: it is ready — unless it is
    being stopped (a cluster deletion) or decommissioned, which an answer in flight
    must not undo."""
    Broker.objects.filter(pk=broker.pk).update(last_heartbeat_at=at, version=version)
    broker.last_heartbeat_at, broker.version = at, version
    current = Broker.objects.filter(pk=broker.pk).values_list("phase", flat=True).first()
    if current in KEEP_PHASE_ON_HEARTBEAT:
        broker.phase = current
        return
    set_broker_phase(broker, BrokerPhase.READY, actor=actor)


@transaction.atomic
def set_broker_phase(broker: Broker, phase: str, *, actor: Actor, reason: str = "") -> bool:
    """Move a broker to ``phase`` (with ``reason``); a change of phase is audited.
    Returns whether the phase changed."""
    before = audit.snapshot(broker)
    changed = broker.phase != phase
    if not changed and broker.phase_reason == reason:
        return False
    broker.phase, broker.phase_reason = phase, reason
    Broker.objects.filter(pk=broker.pk).update(
        phase=phase, phase_reason=reason, updated_at=timezone.now()
    )
    if changed:
        audit.record(actor, "broker.phase", broker, before=before, after=audit.snapshot(broker))
    return bool(changed)


@transaction.atomic
def set_cluster_status(cluster: Cluster, status: str, *, actor: Actor, reason: str = "") -> None:
    """The controller's verdict on a cluster (ready when every broker answers);
    audited when it changes. A cluster being deleted keeps ``deleting``."""
    updated = (
        Cluster.objects.filter(pk=cluster.pk)
        .exclude(status=ProvisioningStatus.DELETING)
        .exclude(status=status, status_reason=reason)
        .update(status=status, status_reason=reason, updated_at=timezone.now())
    )
    if updated:
        before = audit.snapshot(cluster)
        cluster.status, cluster.status_reason = status, reason
        audit.record(actor, "cluster.status", cluster, before=before, after=audit.snapshot(cluster))


def take_over_region(region_name: str, *, controller_id: str, actor: Actor) -> int:
    """Make ``controller_id`` the region's controller: bump ``controller_epoch``
    atomically and return the new epoch (it fences every earlier controller)."""
    with transaction.atomic():
        region = Region.objects.select_for_update().get(name=region_name)
        before = audit.snapshot(region)
        region.controller_epoch = F("controller_epoch") + 1
        region.controller_id = controller_id
        region.controller_seen_at = timezone.now()
        region.save(update_fields=["controller_epoch", "controller_id", "controller_seen_at"])
        region.refresh_from_db()
        audit.record(
            actor, "region.controller", region, before=before, after=audit.snapshot(region)
        )
        return int(region.controller_epoch)


def advance_controller_epoch(region_name: str, *, epoch: int, actor: Actor) -> int | None:
    """Bump the region's controller epoch from ``epoch`` (the caller's, which it still
    holds) to ``epoch + 1``; None when the region no longer names ``epoch`` (another
    controller took over: the caller is deposed). For a controller whose brokers hold a
    newer epoch than the database (a restored database, a recreated region)."""
    with transaction.atomic():
        region = Region.objects.select_for_update().get(name=region_name)
        if region.controller_epoch != epoch:
            return None
        before = audit.snapshot(region)
        region.controller_epoch = epoch + 1
        region.controller_seen_at = timezone.now()
        region.save(update_fields=["controller_epoch", "controller_seen_at"])
        audit.record(
            actor, "region.controller", region, before=before, after=audit.snapshot(region)
        )
        return epoch + 1


def refresh_controller_seen(region_name: str, *, epoch: int) -> bool:
    """Note that the controller of ``epoch`` is alive; False when a newer controller has
    taken over (the caller is deposed)."""
    updated = Region.objects.filter(name=region_name, controller_epoch=epoch).update(
        controller_seen_at=timezone.now()
    )
    return bool(updated == 1)


# -- helpers ------------------------------------------------------------------------------
def _validate(obj: Region | Cluster | Broker, exclude: list[str] | None = None) -> None:
    """``full_clean`` rules as ``InvalidRequest`` (400); uniqueness is checked by the
    callers, which answer 409 for it."""
    try:
        obj.full_clean(exclude=exclude, validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        details = exc.message_dict if hasattr(exc, "error_dict") else {"": exc.messages}
        first = next(iter(details.items()))
        raise InvalidRequest(f"{first[0]}: {first[1][0]}", **details) from None


def _check_broker_count(count: int) -> None:
    if not 1 <= count <= MAX_BROKERS_PER_CLUSTER:
        raise InvalidRequest(
            f"broker_count must be between 1 and {MAX_BROKERS_PER_CLUSTER}",
            broker_count=[f"must be between 1 and {MAX_BROKERS_PER_CLUSTER}"],
        )

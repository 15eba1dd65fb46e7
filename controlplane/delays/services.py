"""A tenant's delayed records (docs/delay.md): its timer logs, what they hold, and
cancelling.

A **timer log** is the internal topic ``__delay.<tenant>`` of a cluster (a ``Topic``
named ``__delay``), made on first use: a broker asked for it answers
``TIMER_LOG_PENDING`` and reports the demand in its heartbeat; the controller calls
``ensure_timer_log``, which makes it as desired state (reconciled, placed and replicated
as any topic: ``DELAY_TIMER_PARTITIONS`` partitions, the cluster's default replication,
no retention, 64 MiB segments sealed hourly, so what is moved gives space back soon). It
counts against the tenant's storage quota for what it holds, no other quota.

What is pending is the brokers' (the leaders of the timer partitions keep its index):
``pending`` counts it, ``scheduled`` lists it, ``cancel`` cancels one record by id
(audited). A record id of another tenant, or of a topic the tenant does not have,
answers as a missing one (``NotFound``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.errors import Conflict, DomainError, InvalidRequest, NotFound
from controlplane.gateway import delays as gateway
from controlplane.gateway.errors import BrokerUnavailable
from controlplane.regions.models import Cluster
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import lock_open_tenant
from controlplane.topics import services as topic_services
from controlplane.topics.choices import TopicStatus
from controlplane.topics.models import Topic
from dataplane._gen.meridian.v1 import delay_pb2
from dataplane.delays import DelayedId, timer_topic
from dataplane.errors import ErrorCode, MeridianError

log = logging.getLogger(__name__)

TIMER_NAME = "__delay"
MIB = 2**20
MAX_LIST = 500


def timer_config() -> dict[str, int]:
    """A timer log's settings: nothing expires (the movers give space back), records as
    large as any topic allows, segments small and sealed hourly."""
    return {
        "retention_ms": -1,
        "retention_bytes": -1,
        "max_message_bytes": 64 * MIB,
        "max_segment_bytes": 64 * MIB,
        "segment_ms": 3600 * 1000,
    }


def timer_log(tenant: Tenant, cluster: Cluster | int) -> Topic | None:
    cluster_id = cluster if isinstance(cluster, int) else cluster.pk
    return Topic.objects.filter(tenant=tenant, cluster_id=cluster_id, name=TIMER_NAME).first()


@transaction.atomic
def ensure_timer_log(cluster: Cluster, tenant_slug: str, *, actor: Actor) -> Topic | None:
    """The timer log of ``tenant_slug`` on ``cluster`` a broker was asked for: created
    when the tenant is live and has a topic there; the existing one when it exists
    (idempotent). None when it may not exist (no such tenant, being deleted, no topic
    on the cluster) or is being deleted (the demand comes back once it is gone)."""
    tenant = Tenant.objects.filter(slug=tenant_slug).first()
    if tenant is None:
        return None
    try:
        tenant = lock_open_tenant(tenant)
    except DomainError:
        return None
    existing = timer_log(tenant, cluster)
    if existing is not None:
        return existing if existing.status != TopicStatus.DELETING else None
    if not Topic.objects.tenant_facing().filter(tenant=tenant, cluster=cluster).exists():
        return None
    topic = topic_services.create_internal_topic(
        tenant,
        cluster,
        name=TIMER_NAME,
        full_name=timer_topic(tenant.slug),
        partitions=settings.DELAY_TIMER_PARTITIONS,
        config=timer_config(),
        actor=actor,
    )
    log.info("timer log %s created on %s on demand", topic.full_name, cluster)
    return topic


# -- what is pending ------------------------------------------------------------------------
@dataclass
class TimerPartition:
    region: str
    cluster: str
    partition: int
    pending_records: int
    pending_bytes: int
    next_deliver_at_ms: int
    ready: bool


@dataclass
class PendingSummary:
    """What the tenant's timer logs hold, as their leaders answered (``complete``: every
    timer partition answered)."""

    tenant: str
    pending_records: int = 0
    pending_bytes: int = 0
    topics: dict[str, int] = field(default_factory=dict)
    partitions: list[TimerPartition] = field(default_factory=list)
    complete: bool = True


def _timer_logs(tenant: Tenant) -> list[Topic]:
    return list(
        Topic.objects.filter(tenant=tenant, name=TIMER_NAME)
        .exclude(status=TopicStatus.DELETING)
        .select_related("cluster__region")
        .order_by("cluster__region__name", "cluster__name")
    )


def pending(tenant: Tenant, topic: str | None = None) -> PendingSummary:
    """The tenant's pending delayed records by topic (only ``topic``'s when named) and by
    timer partition, from the brokers leading its timer partitions."""
    summary = PendingSummary(tenant.slug)
    for timer in _timer_logs(tenant):
        found = _describe(timer)
        summary.complete &= len(found) == timer.partitions
        for state in found.values():
            counts = {t.topic: t.records for t in state.topics}
            if topic is not None:
                counts = {topic: counts.get(topic, 0)}
            for name, records in counts.items():
                summary.topics[name] = summary.topics.get(name, 0) + records
            in_topic = sum(counts.values())
            summary.pending_records += in_topic
            if topic is None:
                summary.pending_bytes += state.pending_bytes
            summary.partitions.append(
                TimerPartition(
                    timer.cluster.region.name,
                    timer.cluster.name,
                    state.partition,
                    in_topic,
                    state.pending_bytes if topic is None else 0,
                    state.next_deliver_at_ms,
                    state.ready,
                )
            )
    summary.topics = {name: n for name, n in sorted(summary.topics.items()) if n or topic}
    return summary


def _describe(timer: Topic) -> dict[int, delay_pb2.TimerPartitionState]:
    """Each timer partition's state, from whichever broker leads it."""
    found: dict[int, delay_pb2.TimerPartitionState] = {}
    for broker in timer.cluster.brokers.all():
        try:
            answer = gateway.describe_delay(broker.address, [timer.tenant.slug])
        except DomainError as exc:  # a silent broker: the summary says it is partial
            log.debug("no delay state from %s: %s", broker, exc)
            continue
        for state in answer.partitions:
            found.setdefault(state.partition, state)
    return found


# -- listing and cancelling -----------------------------------------------------------------
@dataclass(frozen=True, order=True)
class Cursor:
    """Where a listing stopped: the last record's due time, its timer log's cluster (a
    tenant has a timer log per cluster, each with partitions 0..n), timer partition and
    offset; records are listed in that order."""

    deliver_at_ms: int
    cluster: int
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.deliver_at_ms}.{self.cluster}.{self.partition}.{self.offset}"

    @classmethod
    def parse(cls, text: str) -> Cursor:
        parts = text.split(".")
        if len(parts) != 4 or not all(p.isdigit() and len(p) <= 19 for p in parts):
            raise InvalidRequest(f"after: {text[:100]!r} is not a cursor", after=["not a cursor"])
        return cls(*map(int, parts))


@dataclass
class ScheduledPage:
    records: list[delay_pb2.DelayedRecord]
    next_cursor: str | None


def tenant_topic(tenant: Tenant, full_name: str) -> Topic:
    """The tenant's topic ``full_name`` (its origin); ``NotFound`` otherwise, also for
    another tenant's."""
    found = Topic.objects.filter(tenant=tenant).named(full_name).select_related("cluster").first()
    if found is None:
        raise NotFound(f"topic {full_name!r} not found", topic=full_name)
    return found


def scheduled(
    tenant: Tenant, topic: str | None = None, *, limit: int = 50, after: Cursor | None = None
) -> ScheduledPage:
    """The tenant's scheduled records (only ``topic``'s when named; none for a topic it
    does not have), by due time, then timer partition and offset, a page at a time."""
    limit = max(1, min(MAX_LIST, limit))
    if topic is not None:
        found = Topic.objects.filter(tenant=tenant).named(topic).first()
        timers = [t for t in [found and timer_log(tenant, found.cluster_id)] if t is not None]
    else:
        timers = _timer_logs(tenant)
    merged: list[tuple[Cursor, delay_pb2.DelayedRecord]] = []
    for timer in timers:
        for partition, address in _leaders(timer).items():
            request = delay_pb2.ListDelayedRequest(
                tenant=tenant.slug, partition=partition, topic=topic or "", limit=limit,
                value_bytes=256, **_after(after, timer.cluster_id, partition),
            )  # fmt: skip
            for record in gateway.list_delayed(address, request):
                place = DelayedId.parse(record.id)
                at = Cursor(record.deliver_at_ms, timer.cluster_id, place.partition, place.offset)
                merged.append((at, record))
    merged.sort(key=lambda item: item[0])
    page = merged[:limit]
    more = len(merged) > limit or len(page) == limit
    cursor = str(page[-1][0]) if page and more else None
    return ScheduledPage([record for _, record in page], cursor)


def _after(after: Cursor | None, cluster: int, partition: int) -> dict[str, int]:
    """A timer partition's own cursor for a page after ``after`` (ordered by due time,
    then cluster, partition and offset)."""
    if after is None:
        return {"after_deliver_at_ms": -1, "after_offset": -1}
    if (cluster, partition) < (after.cluster, after.partition):
        return {"after_deliver_at_ms": after.deliver_at_ms, "after_offset": 2**62}
    if (cluster, partition) > (after.cluster, after.partition):
        return {"after_deliver_at_ms": after.deliver_at_ms, "after_offset": -1}
    return {"after_deliver_at_ms": after.deliver_at_ms, "after_offset": after.offset}


def _leaders(timer: Topic) -> dict[int, str]:
    """Each timer partition's leader's address (partitions without one are left out)."""
    return {
        a.partition: a.leader.address
        for a in timer.assignments.select_related("leader").order_by("partition")
        if a.leader is not None and a.leader.address
    }


@dataclass(frozen=True)
class Cancelled:
    id: str
    deliver_at_ms: int


class DelayedRecordDelivered(Conflict):
    """Too late to cancel: the record was delivered."""

    code = "delayed_record_delivered"


def cancel(tenant: Tenant, delayed_id: str, *, actor: Actor) -> Cancelled:
    """Cancel the scheduled record ``delayed_id``; ``NotFound`` when the tenant has no
    such pending record (another tenant's answers so), ``DelayedRecordDelivered`` when it
    was delivered already, ``InvalidRequest`` for a malformed id. Audited."""
    try:
        place = DelayedId.parse(delayed_id)
    except MeridianError as exc:
        raise InvalidRequest(exc.message, id=[exc.message]) from None
    missing = NotFound(f"no scheduled record {delayed_id!r}", id=delayed_id)
    topic = Topic.objects.filter(tenant=tenant).named(place.topic).first()
    timer = timer_log(tenant, topic.cluster_id) if topic is not None else None
    address = _leaders(timer).get(place.partition) if timer is not None else None
    if timer is None or place.partition >= timer.partitions:
        raise missing
    if address is None:
        raise BrokerUnavailable("", f"timer partition {place.partition} has no leader now")
    answer = gateway.cancel_delayed(address, str(place))
    if answer.error == ErrorCode.DELAYED_RECORD_DELIVERED:
        raise DelayedRecordDelivered(answer.error_message, id=delayed_id)
    if answer.error:
        raise missing
    with transaction.atomic():
        audit.record_about(
            actor,
            "delayed_record.cancel",
            object_type="delayed_record",
            object_id=str(place),
            object_repr=str(place),
            after={"topic": place.topic, "deliver_at_ms": int(answer.deliver_at_ms)},
            tenant=tenant,
        )
    return Cancelled(str(place), int(answer.deliver_at_ms))

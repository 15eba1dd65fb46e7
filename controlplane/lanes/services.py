"""Changing a tenant's lanes, and what the controller feeds back from the brokers.

Tenants declare lanes (``create_lane``, ``update_lane``, ``delete_lane``): each atomic,
taking the acting ``Actor``, counted against ``max_lanes`` under the tenant's quota lock
and audited in the same transaction. The controller pushes every live tenant's lanes to
every broker (``lane_declarations``), turns the brokers' demands for missing lane topics
into desired state (``ensure_lane_topic``; the reconciler then creates the topic) and
records who consumes and uses each lane (``record_lane_consumers``,
``record_lane_activity``). A beat task deletes what has been idle longer than its lane's
TTL (``collect_idle_lanes``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Case, DateTimeField, F, Q, Value, When
from django.utils import timezone

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.core.errors import Conflict, DomainError, InvalidRequest
from controlplane.lanes.choices import OrphanPolicy
from controlplane.lanes.models import Lane, LaneTopic
from controlplane.quotas.services import check_lane_quota
from controlplane.regions.models import Cluster
from controlplane.tenants.models import Tenant
from controlplane.tenants.services import lock_open_tenant
from controlplane.topics import services as topic_services
from controlplane.topics.choices import TopicStatus
from controlplane.topics.models import Topic
from dataplane._gen.meridian.v1 import admin_pb2
from lanes.names import LANE_NAME_RE, LANE_NAME_RULE, split_group, split_topic

log = logging.getLogger(__name__)

UPDATABLE_FIELDS = ("all_topics", "topics", "consume_trunk", "orphan_policy", "ttl_s", "partitions")
MAX_TTL_S = 365 * 24 * 3600


class LaneInUse(Conflict):
    """The lane has live consumers (now, or within ``settings.LANE_LIVE_GRACE_S``):
    deleting it would strand them; ``force`` deletes it anyway."""

    code = "lane_in_use"


# -- declaring lanes ----------------------------------------------------------------------
@transaction.atomic
def create_lane(
    tenant: Tenant,
    *,
    name: str,
    all_topics: bool = True,
    topics: Iterable[str | Topic] = (),
    consume_trunk: bool = False,
    orphan_policy: str = OrphanPolicy.TRUNK,
    ttl_s: int | None = None,
    partitions: int | None = None,
    actor: Actor,
) -> Lane:
    """A new lane ``name`` of ``tenant``. ``topics`` (trunk topics of the tenant, as
    objects or full names ``<tenant>.<topic>``; a name without the tenant's prefix gets
    it) is what it covers when not ``all_topics``. Refuses a bad name or value, a topic
    that is not one of the tenant's trunk topics, ``partitions`` above the count of a
    covered trunk topic (any of the tenant's when ``all_topics``) (``InvalidRequest``
    naming the field; another tenant's topic answers like a missing one), a name in use
    or a tenant being deleted (``Conflict``) and a lane past ``max_lanes``
    (``QuotaExceeded``)."""
    tenant = lock_open_tenant(tenant)
    _validate_name(name)
    covered = _resolve_topics(tenant, all_topics, list(topics))
    values = _validated(
        {
            "consume_trunk": consume_trunk,
            "orphan_policy": orphan_policy,
            "ttl_s": settings.LANE_DEFAULT_TTL_S if ttl_s is None else ttl_s,
            "partitions": partitions,
        }
    )
    _check_partitions(tenant, all_topics, covered, values["partitions"])
    check_lane_quota(tenant, lanes=1)
    if Lane.objects.filter(tenant=tenant, name=name).exists():
        raise Conflict(
            f"lane {name!r} already exists in tenant {tenant.slug!r}", name=[f"{name!r} is in use"]
        )
    lane = Lane(tenant=tenant, name=name, all_topics=all_topics, created_by=actor.name, **values)
    lane.full_clean()
    lane.save()
    lane.topics.set(covered)
    audit.record(actor, "lane.create", lane, after=snapshot(lane), tenant=tenant)
    return lane


@transaction.atomic
def update_lane(lane: Lane, *, actor: Actor, **changes: Any) -> Lane:
    """Change some of ``UPDATABLE_FIELDS`` (the name is the lane's identity: it does not
    change). A new ``partitions`` applies to lane topics created from then on (it may
    not exceed a covered trunk's count, ``InvalidRequest`` naming ``partitions``); a lane
    that stops covering a topic keeps its existing lane topic until the GC takes it.
    Same refusals as ``create_lane``."""
    unknown = sorted(set(changes) - set(UPDATABLE_FIELDS))
    if unknown:
        raise InvalidRequest(
            f"{unknown[0]}: cannot be changed", **{f: ["cannot be changed"] for f in unknown}
        )
    tenant = lock_open_tenant(lane.tenant)
    lane = Lane.objects.select_for_update().get(pk=lane.pk)
    before = snapshot(lane)
    all_topics = changes.get("all_topics", lane.all_topics)
    if "topics" in changes or "all_topics" in changes:
        default = [] if all_topics else list(lane.topics.all())
        covered = _resolve_topics(tenant, all_topics, list(changes.get("topics", default)))
        lane.all_topics = all_topics
        lane.topics.set(covered)
    plain = {k: v for k, v in changes.items() if k not in ("topics", "all_topics")}
    for field, value in _validated(plain).items():
        setattr(lane, field, value)
    if {"partitions", "topics", "all_topics"} & set(changes):
        _check_partitions(tenant, lane.all_topics, list(lane.topics.all()), lane.partitions)
    lane.full_clean()
    if _unstamped(snapshot(lane)) == _unstamped(before):
        return lane  # nothing changed: nothing to save or audit
    lane.save()
    audit.record(actor, "lane.update", lane, before=before, after=snapshot(lane), tenant=tenant)
    return lane


def _unstamped(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != "updated_at"}


@transaction.atomic
def delete_lane(lane: Lane, *, actor: Actor, force: bool = False) -> Lane:
    """Delete the lane and (through ``topics.services.delete_topic``, each audited) its
    lane topics. A lane with live consumers (``live_topics`` reported, or seen live
    within ``settings.LANE_LIVE_GRACE_S``) is refused with ``LaneInUse`` unless
    ``force``. Returns the deleted lane (unsaved)."""
    lane = Lane.objects.select_for_update().select_related("tenant").get(pk=lane.pk)
    if not force and is_live(lane, timezone.now()):
        raise LaneInUse(
            f"lane {lane.name!r} of tenant {lane.tenant.slug!r} has live consumers "
            f"(on {', '.join(lane.live_topics) or 'its topics'}); delete with force to "
            "delete it anyway",
            live_topics=list(lane.live_topics),
            last_live_at=lane.last_live_at.isoformat() if lane.last_live_at else None,
        )
    before = snapshot(lane)
    for topic in lane_topics_of(lane).exclude(status=TopicStatus.DELETING):
        topic_services.delete_topic(topic, actor=actor)
    audit.record(actor, "lane.delete", lane, before=before, tenant=lane.tenant)
    lane.delete()
    return lane


def is_live(lane: Lane, now: datetime) -> bool:
    """Whether some consumer of the lane is live, or was within the grace period."""
    if lane.live_topics:
        return True
    grace = timedelta(seconds=settings.LANE_LIVE_GRACE_S)
    return lane.last_live_at is not None and now - lane.last_live_at < grace


def lane_topics_of(lane: Lane) -> Any:
    """The lane's lane topics (``Topic`` rows with a trunk), by full name."""
    return (
        Topic.objects.origins()
        .filter(tenant_id=lane.tenant_id, lane_name=lane.name, trunk__isnull=False)
        .order_by("full_name")
    )


def snapshot(lane: Lane) -> dict[str, Any]:
    """The lane for the audit log, its topics by full name."""
    data = audit.snapshot(lane) or {}
    data["topics"] = sorted(lane.topics.values_list("full_name", flat=True)) if lane.pk else []
    return data


def _validate_name(name: object) -> None:
    if not isinstance(name, str) or not LANE_NAME_RE.match(name):
        raise InvalidRequest(f"name: {LANE_NAME_RULE}", name=[LANE_NAME_RULE])


def _resolve_topics(tenant: Tenant, all_topics: bool, topics: list[str | Topic]) -> list[Topic]:
    """The trunk topics a lane covers (none when ``all_topics``); see ``create_lane``."""
    if not isinstance(all_topics, bool):
        raise InvalidRequest("all_topics: must be true or false", all_topics=["must be a boolean"])
    if all_topics:
        if topics:
            raise InvalidRequest(
                "topics: name topics only with all_topics false",
                topics=["name topics only with all_topics false"],
            )
        return []
    if not topics:
        raise InvalidRequest(
            "topics: name at least one topic, or set all_topics",
            topics=["name at least one topic, or set all_topics"],
        )
    names = {_full_name(tenant, t) for t in topics}
    found = list(
        Topic.objects.origins()
        .filter(tenant=tenant, full_name__in=names, trunk__isnull=True)
        .exclude(status=TopicStatus.DELETING)
        .order_by("full_name")
    )
    missing = sorted(names - {t.full_name for t in found})
    if missing:
        messages = [f"no topic {name!r} in tenant {tenant.slug!r}" for name in missing]
        raise InvalidRequest(f"topics: {messages[0]}", topics=messages)
    return found


def _check_partitions(
    tenant: Tenant, all_topics: bool, covered: list[Topic], partitions: int | None
) -> None:
    """Refuse a lane ``partitions`` above the partition count of a trunk topic it covers
    (every trunk topic of the tenant when ``all_topics``): lane topics do not count
    against the partition quota, so they may not be wider than their trunk."""
    if partitions is None:
        return
    if all_topics:
        covered = list(
            Topic.objects.origins()
            .filter(tenant=tenant, trunk__isnull=True)
            .exclude(status=TopicStatus.DELETING)
        )
    narrower = sorted((t for t in covered if t.partitions < partitions), key=lambda t: t.full_name)
    if narrower:
        message = (
            f"at most {min(t.partitions for t in narrower)}: a lane topic may not have more "
            f"partitions than its trunk ({', '.join(t.full_name for t in narrower)})"
        )
        raise InvalidRequest(f"partitions: {message}", partitions=[message])


def _full_name(tenant: Tenant, topic: str | Topic) -> str:
    if isinstance(topic, Topic):
        return topic.full_name
    if not isinstance(topic, str):
        raise InvalidRequest("topics: name topics by name", topics=["name topics by name"])
    return topic if topic.startswith(f"{tenant.slug}.") else f"{tenant.slug}.{topic}"


def _validated(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (of consume_trunk, orphan_policy, ttl_s, partitions) if each is
    valid; ``InvalidRequest`` naming the first bad one otherwise."""
    checks: dict[str, tuple[Callable[[Any], bool], str]] = {
        "consume_trunk": (lambda v: isinstance(v, bool), "must be true or false"),
        "orphan_policy": (
            lambda v: v in OrphanPolicy.values,
            f"one of {', '.join(OrphanPolicy.values)}",
        ),
        "ttl_s": (lambda v: _is_int(v) and 1 <= v <= MAX_TTL_S, f"between 1 and {MAX_TTL_S}"),
        "partitions": (
            lambda v: v is None or (_is_int(v) and 1 <= v <= _max_partitions()),
            f"null (the trunk's count) or between 1 and {_max_partitions()}",
        ),
    }
    for field, value in values.items():
        valid, rule = checks[field]
        if not valid(value):
            raise InvalidRequest(f"{field}: {rule}", **{field: [rule]})
    return values


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _max_partitions() -> int:
    return int(settings.TOPIC_LIMITS["max_partitions_per_topic"])


# -- what the controller pushes and feeds back ---------------------------------------------
def lane_declarations() -> list[admin_pb2.LaneDeclaration]:
    """Every live tenant's lanes, as pushed to every broker (``lanes_listed``), ordered
    by tenant and name with sorted lists, so an unchanged push encodes the same bytes."""
    lanes = (
        Lane.objects.exclude(tenant__status=ProvisioningStatus.DELETING)
        .select_related("tenant")
        .prefetch_related("topics")
        .order_by("tenant__slug", "name")
    )
    return [
        admin_pb2.LaneDeclaration(
            tenant=lane.tenant.slug,
            name=lane.name,
            all_topics=lane.all_topics,
            topics=[] if lane.all_topics else sorted(t.full_name for t in lane.topics.all()),
            consume_trunk=lane.consume_trunk,
            orphan_policy=lane.orphan_policy,
            live_topics=sorted(lane.live_topics),
            partitions=lane.partitions or 0,
        )
        for lane in lanes
    ]


@transaction.atomic
def ensure_lane_topic(tenant_slug: str, full_name: str, *, actor: Actor) -> Topic | None:
    """The lane topic ``full_name`` (``<tenant>.<topic>~<lane>``) a broker was asked for:
    created as desired state (reconciled after commit, like any topic) when the tenant
    is live, declares the lane, the lane covers the trunk topic and the trunk exists
    (not being deleted); the existing one when it exists already (idempotent). None
    when the lane topic may not exist, or is being deleted (the demand comes back once
    it is gone). A demand is traffic: it keeps the lane from the GC."""
    trunk_name, lane_name = split_topic(full_name)
    if lane_name is None or not LANE_NAME_RE.match(lane_name):
        return None
    tenant = Tenant.objects.filter(slug=tenant_slug).first()
    if tenant is None or not trunk_name.startswith(f"{tenant_slug}."):
        return None
    try:
        # The tenant first, as every change of its lanes and topics locks it first.
        tenant = lock_open_tenant(tenant)
    except DomainError:  # gone or being deleted: its lanes are no longer declared
        return None
    lane = Lane.objects.select_for_update().filter(tenant=tenant, name=lane_name).first()
    if lane is None:
        return None
    existing = Topic.objects.named(full_name).first()
    if existing is not None:
        return existing if existing.status != TopicStatus.DELETING else None
    trunk = _covered_trunk(lane, trunk_name)
    if trunk is None:
        return None
    # Never wider than the trunk (lane topics escape the partition quota), whatever the
    # trunk's count was when the lane was declared.
    partitions = min(lane.partitions or trunk.partitions, trunk.partitions)
    topic = topic_services.create_lane_topic(
        trunk, lane=lane.name, partitions=partitions, actor=actor
    )
    now = timezone.now()
    LaneTopic.objects.create(lane=lane, topic=topic)
    Lane.objects.filter(pk=lane.pk).update(last_traffic_at=now)
    log.info("lane topic %s created on demand", full_name)
    return topic


def _covered_trunk(lane: Lane, trunk_name: str) -> Topic | None:
    trunks = (
        Topic.objects.filter(tenant_id=lane.tenant_id, trunk__isnull=True)
        .named(trunk_name)
        .exclude(status=TopicStatus.DELETING)
    )
    if not lane.all_topics:
        trunks = trunks.filter(covering_lanes=lane)
    return trunks.first()


def _liveness(reports: Iterable[admin_pb2.LaneConsumers]) -> dict[tuple[str, str], set[str]]:
    """Per (tenant slug, lane name), the trunk topics the lane is live for: lane ``L``
    of tenant ``t`` is live for trunk ``T`` (of ``t``) iff some reported group
    ``t.X~L`` subscribes to ``T~L``."""
    live: dict[tuple[str, str], set[str]] = {}
    for report in reports:
        trunk_group, lane = split_group(report.group_id)
        tenant = trunk_group.partition(".")[0]
        if lane is None:
            continue
        for topic in report.topics:
            trunk, topic_lane = split_topic(topic)
            if topic_lane == lane and trunk.partition(".")[0] == tenant:
                live.setdefault((tenant, lane), set()).add(trunk)
    return live


def touch_step(span_s: float) -> timedelta:
    """How stale a stored "last seen" time may get before a report moves it forward,
    for a time read against a span of ``span_s`` (a TTL, a grace): a tenth of it, at
    most 30 s, so the controller does not write every lane on every tick."""
    return timedelta(seconds=min(span_s / 10, 30.0))


def _stale(stored: datetime | None, at: datetime, step: timedelta) -> bool:
    return stored is None or stored < at - step


@transaction.atomic
def record_lane_consumers(
    reports: Iterable[admin_pb2.LaneConsumers],
    *,
    cluster: Cluster | None = None,
    complete: bool = True,
    now: datetime | None = None,
) -> bool:
    """Update each lane's ``live_topics`` from the brokers' ``lane_consumers`` (see
    ``_liveness``). A reported topic becomes live at once. A live topic stops being
    live only when ``complete`` (every broker answered: a silent one may be the one
    that sees its consumers) and no report has shown it for
    ``settings.LANE_ORPHAN_AFTER_S`` (a consumer's restart does not orphan the lane
    topic). ``last_live_at`` of a live lane moves to ``now`` in steps of
    ``touch_step(LANE_LIVE_GRACE_S)``. With ``cluster``, the reports are that cluster's
    brokers' only, and so decide only about trunk topics of that cluster; a lane's
    live topics elsewhere are kept. Returns whether any lane's ``live_topics`` changed
    (the brokers must learn it)."""
    liveness = _liveness(reports)
    now = now or timezone.now()
    local: set[str] | None = None
    if cluster is not None:
        local = set(
            Topic.objects.filter(cluster=cluster, trunk__isnull=True).values_list(
                "full_name", flat=True
            )
        )
    changed = False
    lanes = Lane.objects.select_for_update().select_related("tenant").order_by("pk")
    for lane in lanes.filter(~Q(live_topics=[]) | _named(liveness)):
        reported = liveness.get((lane.tenant.slug, lane.name), set())
        if local is not None:
            reported &= local
        changed |= _set_live(lane, reported, local, complete, now)
    return changed


def _named(liveness: dict[tuple[str, str], set[str]]) -> Q:
    query = Q(pk__in=[])
    for tenant, name in liveness:
        query |= Q(tenant__slug=tenant, name=name)
    return query


def _set_live(
    lane: Lane, reported: set[str], local: set[str] | None, complete: bool, now: datetime
) -> bool:
    orphan_after = timedelta(seconds=settings.LANE_ORPHAN_AFTER_S)
    seen_step = touch_step(settings.LANE_ORPHAN_AFTER_S)
    seen = {t: _parse(at) for t, at in (lane.live_seen or {}).items()}
    live: set[str] = set(reported)
    for topic in lane.live_topics:
        last = seen.get(topic) or lane.last_live_at
        if (
            (local is not None and topic not in local)  # another cluster decides
            or not complete  # a silent broker may be the one seeing its consumers
            or (last is not None and now - last < orphan_after)  # held down
        ):
            live.add(topic)
    touched = {t: now for t in reported if _stale(seen.get(t), now, seen_step)}
    new_seen = {t: touched.get(t) or seen.get(t) or now for t in live}
    fields: dict[str, Any] = {}
    if sorted(live) != sorted(lane.live_topics):
        fields["live_topics"] = sorted(live)
    if touched or set(new_seen) != set(seen):
        fields["live_seen"] = {t: at.isoformat() for t, at in sorted(new_seen.items())}
    if live and _stale(lane.last_live_at, now, touch_step(settings.LANE_LIVE_GRACE_S)):
        fields["last_live_at"] = now
    if fields:
        Lane.objects.filter(pk=lane.pk).update(**fields)
    return "live_topics" in fields


def _parse(at: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(at))
    except ValueError:
        return None


@transaction.atomic
def record_lane_activity(reports: Iterable[admin_pb2.LaneTopicActivity]) -> int:
    """Note the brokers' ``lane_activity``: each lane topic's and its lane's
    ``last_traffic_at`` move forward to the latest append or fetch reported (0: none
    since the broker started), when the stored time is older than that by more than
    ``touch_step(lane.ttl_s)`` (the GC needs no finer time). One read, and at most one
    UPDATE for the lane topics and one for the lanes. Returns how many lane topics
    moved."""
    latest: dict[str, datetime] = {}
    for report in reports:
        ms = max(report.last_append_ms, report.last_fetch_ms)
        if ms > 0:
            at = datetime.fromtimestamp(ms / 1000, tz=UTC)
            latest[report.topic] = max(at, latest.get(report.topic, at))
    if not latest:
        return 0
    rows = LaneTopic.objects.filter(topic__full_name__in=list(latest)).values_list(
        "pk", "topic__full_name", "last_traffic_at", "lane_id", "lane__ttl_s",
        "lane__last_traffic_at",
    )  # fmt: skip
    links: dict[int, datetime] = {}
    lanes: dict[int, datetime] = {}
    for pk, name, link_last, lane_id, ttl_s, lane_last in rows:
        at, step = latest[name], touch_step(ttl_s)
        if _stale(link_last, at, step):
            links[pk] = at
        if _stale(lane_last, at, step):
            lanes[lane_id] = max(at, lanes.get(lane_id, at))
    _move_forward(LaneTopic.objects, links)
    _move_forward(Lane.objects, lanes)
    return len(links)


def _move_forward(manager: Any, times: dict[int, datetime]) -> None:
    """One UPDATE setting each row's ``last_traffic_at`` to ``times[pk]`` unless a
    concurrent write already moved it past that (forward only)."""
    if not times:
        return
    moved = Case(
        *(
            When(
                Q(pk=pk) & (Q(last_traffic_at__isnull=True) | Q(last_traffic_at__lt=at)),
                then=Value(at, output_field=DateTimeField()),
            )
            for pk, at in times.items()
        ),
        default=F("last_traffic_at"),
    )
    manager.filter(pk__in=list(times)).update(last_traffic_at=moved)


# -- the GC -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Collected:
    lane_topics: list[str]
    lanes: list[str]


def collect_idle_lanes(now: datetime, *, actor: Actor) -> Collected:
    """Delete (audited, through ``delete_topic`` / ``delete_lane``) every lane topic
    without traffic (append, fetch or demand; else since its creation) for its lane's
    ``ttl_s``, then every lane without traffic for its ``ttl_s`` (else since its
    creation) that has no live consumers. Each deletion is its own transaction, so one
    failure leaves the others done."""
    topics = [_collect_topic(link.pk, now, actor) for link in _idle_links(now)]
    lanes = [_collect_lane(lane.pk, now, actor) for lane in _idle_lanes(now)]
    return Collected([t for t in topics if t], [name for name in lanes if name])


def _idle_for(last: datetime | None, created: datetime, now: datetime, ttl_s: int) -> bool:
    return now - (last or created) >= timedelta(seconds=ttl_s)


def _link_idle(link: LaneTopic, now: datetime) -> bool:
    return link.topic.status != TopicStatus.DELETING and _idle_for(
        link.last_traffic_at, link.topic.created_at, now, link.lane.ttl_s
    )


def _lane_idle(lane: Lane, now: datetime) -> bool:
    return _idle_for(lane.last_traffic_at, lane.created_at, now, lane.ttl_s) and not is_live(
        lane, now
    )


def _idle_links(now: datetime) -> Sequence[LaneTopic]:
    links = LaneTopic.objects.select_related("lane", "topic").order_by("pk")
    return [link for link in links if _link_idle(link, now)]


def _idle_lanes(now: datetime) -> Sequence[Lane]:
    return [lane for lane in Lane.objects.order_by("pk") if _lane_idle(lane, now)]


@transaction.atomic
def _collect_topic(link_id: int, now: datetime, actor: Actor) -> str | None:
    link = (
        LaneTopic.objects.select_for_update()
        .select_related("lane", "topic")
        .filter(pk=link_id)
        .first()
    )
    if link is None or not _link_idle(link, now):
        return None  # traffic arrived, or it went, since the scan
    topic_services.delete_topic(link.topic, actor=actor)
    log.info("lane topic %s collected: no traffic for %d s", link.topic.full_name, link.lane.ttl_s)
    return link.topic.full_name


@transaction.atomic
def _collect_lane(lane_id: int, now: datetime, actor: Actor) -> str | None:
    lane = Lane.objects.select_for_update().select_related("tenant").filter(pk=lane_id).first()
    if lane is None or not _lane_idle(lane, now):
        return None
    name = str(lane)
    delete_lane(lane, actor=actor)
    log.info("lane %s collected: no traffic for %d s", name, lane.ttl_s)
    return name

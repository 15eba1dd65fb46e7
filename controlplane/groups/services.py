"""A tenant's consumer groups, read from and changed in the brokers.

Groups are tenant-scoped by name, as the brokers scope them (their authorizer):
``<tenant>.`` starts every group id of a tenant. A group lives on the clusters that host
the tenant's topics (its consumers read them there), so every call looks there; a name
outside the tenant's prefix, or one no cluster knows, is ``NotFound`` — the same
answer, so a caller learns nothing about another tenant's groups.

A reset moves committed offsets only while the group has no member (``GroupActive``
otherwise: a live member's next commit would undo it), and a dry run answers the same
moves without making them. Resets and deletes are audited (``group.offsets.reset``,
``group.delete``) in a transaction around the brokers' call, so a refused call leaves
no audit event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from django.db import transaction

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.errors import Conflict, InvalidRequest, NotFound
from controlplane.core.validators import tenant_of_name
from controlplane.gateway import groups as gateway
from controlplane.gateway.errors import BrokerRefusedError
from controlplane.groups.choices import STOPPED_STATES, ResetTarget
from controlplane.regions.choices import BrokerPhase
from controlplane.regions.models import Broker
from controlplane.tenants.models import Tenant
from controlplane.topics.models import Topic
from dataplane.client import TopicPartition
from dataplane.client.admin import PartitionLag
from dataplane.client.coordinator import GroupDescription

OBJECT_TYPE = "groups.group"
_SERVING = (BrokerPhase.READY, BrokerPhase.DECOMMISSIONING, BrokerPhase.UNREACHABLE)
_GONE_CODES = frozenset({"GROUP_ID_NOT_FOUND"})
_ACTIVE_CODES = frozenset({"UNKNOWN_MEMBER_ID", "NON_EMPTY_GROUP", "ILLEGAL_GENERATION"})


class GroupActive(Conflict):
    """The group has members: its offsets change only while it is stopped."""

    code = "group_active"

    def __init__(self, group_id: str, state: str, members: int) -> None:
        super().__init__(
            f"group {group_id!r} has {members} active member(s) (state {state}); "
            "stop its consumers first",
            group=group_id,
            state=state,
            members=members,
        )


@dataclass(frozen=True)
class PartitionPosition:
    topic: str
    partition: int
    committed: int | None
    end_offset: int
    lag: int | None
    lag_seconds: float | None
    oldest_unconsumed_timestamp: int | None  # ms; None when caught up


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    client_host: str
    assignment: list[TopicPartition]


@dataclass(frozen=True)
class GroupSummary:
    group_id: str
    tenant: str
    state: str
    members: int
    lag: int
    lag_seconds: float


@dataclass(frozen=True)
class GroupDetail:
    group_id: str
    tenant: str
    state: str
    protocol: str
    generation_id: int
    members: list[Member]
    partitions: list[PartitionPosition]

    @property
    def lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)

    @property
    def lag_seconds(self) -> float:
        return max((p.lag_seconds or 0.0 for p in self.partitions), default=0.0)


@dataclass(frozen=True)
class OffsetMove:
    topic: str
    partition: int
    current: int | None
    new: int


@dataclass(frozen=True)
class ResetPlan:
    group_id: str
    to: str
    dry_run: bool
    moves: list[OffsetMove] = field(default_factory=list)


# -- where a tenant's groups live ------------------------------------------------------


def tenant_of_group(group_id: str) -> str | None:
    """The tenant slug a group id names (``<tenant>.<name>``), None for none."""
    return tenant_of_name(group_id)


def _clusters(tenant: Tenant) -> list[list[str]]:
    """Broker addresses of each cluster hosting one of the tenant's topics."""
    return list(clusters_of([tenant]).values())


def clusters_of(tenants: Sequence[Tenant]) -> dict[int, list[str]]:
    """Cluster id -> broker addresses, for the clusters hosting the tenants' topics."""
    cluster_ids = Topic.objects.filter(tenant__in=tenants).values_list("cluster_id", flat=True)
    brokers = Broker.objects.filter(cluster_id__in=set(cluster_ids), phase__in=_SERVING)
    by_cluster: dict[int, list[str]] = {}
    for broker in brokers.order_by("cluster_id", "broker_id"):
        if broker.address:
            by_cluster.setdefault(broker.cluster_id, []).append(broker.address)
    return by_cluster


def _not_found(group_id: str) -> NotFound:
    return NotFound(f"group {group_id!r} not found", group=group_id)


def _locate(tenant: Tenant, group_id: str) -> tuple[list[str], GroupDescription]:
    """The cluster holding the tenant's group and its description, or ``NotFound``."""
    if tenant_of_group(group_id) != tenant.slug:
        raise _not_found(group_id)
    for addresses in _clusters(tenant):
        description = gateway.describe_group(addresses, group_id)
        if description.state != "Dead" or description.committed:
            return addresses, description
    raise _not_found(group_id)


# -- reading ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ListedGroup:
    """A group found on a cluster, not described yet (``summarize`` describes it)."""

    group_id: str
    tenant: Tenant
    addresses: tuple[str, ...]


def find_groups(tenants: Sequence[Tenant]) -> list[ListedGroup]:
    """The tenants' groups on every cluster of their topics, by id, with one listing
    call per cluster (whatever the number of tenants on it) and no describe call."""
    by_slug = {tenant.slug: tenant for tenant in tenants}
    found = []
    for addresses in clusters_of(tenants).values():
        for listed in gateway.list_groups(addresses):
            tenant = by_slug.get(tenant_of_group(listed.group_id) or "")
            if tenant is not None:
                found.append(ListedGroup(listed.group_id, tenant, tuple(addresses)))
    return sorted(found, key=lambda g: g.group_id)


def summarize(groups: Iterable[ListedGroup]) -> list[GroupSummary]:
    """State, members and lag of each group: one describe and one lag call each."""
    summaries = []
    for listed in groups:
        description = gateway.describe_group(list(listed.addresses), listed.group_id)
        summaries.append(_summary(_detail(listed.tenant, list(listed.addresses), description)))
    return summaries


def list_groups(tenants: Sequence[Tenant]) -> list[GroupSummary]:
    """Every group of the tenants, described (``find_groups`` then ``summarize``)."""
    return summarize(find_groups(tenants))


def _summary(detail: GroupDetail) -> GroupSummary:
    return GroupSummary(
        detail.group_id,
        detail.tenant,
        detail.state,
        len(detail.members),
        detail.lag,
        detail.lag_seconds,
    )


def describe_group(tenant: Tenant, group_id: str) -> GroupDetail:
    """State, members and per partition position and lag, or ``NotFound``."""
    addresses, description = _locate(tenant, group_id)
    return _detail(tenant, addresses, description)


def _detail(tenant: Tenant, addresses: list[str], description: GroupDescription) -> GroupDetail:
    lags = gateway.group_lag(addresses, description.group_id)
    members = [
        Member(m.member_id, m.client_id, m.client_host, sorted(m.assignment))
        for m in description.members
    ]
    assigned = {tp for m in members for tp in m.assignment}
    ends = {}
    unlagged = [tp for tp in assigned if tp not in lags]
    if unlagged:
        ends = gateway.list_offsets(addresses, dict.fromkeys(unlagged, "latest"))
    positions = [_position(tp, lags.get(tp), ends.get(tp)) for tp in sorted(set(lags) | assigned)]
    return GroupDetail(
        description.group_id,
        tenant.slug,
        description.state,
        description.protocol,
        description.generation_id,
        members,
        positions,
    )


def _position(
    tp: TopicPartition, lag: PartitionLag | None, end: tuple[int, int] | None
) -> PartitionPosition:
    if lag is None:  # assigned, nothing committed yet
        return PartitionPosition(
            tp.topic, tp.partition, None, end[0] if end else -1, None, None, None
        )
    timestamp = lag.record_timestamp if lag.record_timestamp >= 0 else None
    return PartitionPosition(
        tp.topic,
        tp.partition,
        lag.committed,
        lag.end_offset,
        lag.lag,
        lag.lag_seconds,
        timestamp,
    )


# -- changing --------------------------------------------------------------------------


def reset_group_offsets(
    tenant: Tenant,
    group_id: str,
    *,
    to: str,
    actor: Actor,
    topic: str | None = None,
    partitions: Sequence[int] | None = None,
    timestamp: int | None = None,
    offset: int | None = None,
    dry_run: bool = False,
) -> ResetPlan:
    """Move the stopped group's committed offsets of ``topic`` (its ``partitions``, or
    all) — or of every partition it committed — to ``to``; a dry run only answers the
    moves. ``GroupActive`` while the group has members."""
    addresses, description = _locate(tenant, group_id)
    _check_stopped(description)
    targets = _targets(tenant, addresses, description, topic, partitions)
    new = _new_offsets(addresses, targets, ResetTarget(to), timestamp, offset)
    moves = [OffsetMove(tp.topic, tp.partition, targets[tp], new[tp]) for tp in sorted(targets)]
    plan = ResetPlan(group_id, to, dry_run, moves)
    if not dry_run:
        _apply(tenant, addresses, plan, actor)
    return plan


def _check_stopped(description: GroupDescription) -> None:
    if description.members or description.state not in STOPPED_STATES:
        raise GroupActive(description.group_id, description.state, len(description.members))


def _targets(
    tenant: Tenant,
    addresses: list[str],
    description: GroupDescription,
    topic: str | None,
    partitions: Sequence[int] | None,
) -> dict[TopicPartition, int | None]:
    """The partitions to move, each with its committed offset (None: none yet)."""
    committed = {tp: offset for tp, offset in description.committed.items() if offset >= 0}
    if topic is None:
        if partitions:
            raise InvalidRequest("name the topic of the partitions", topic="required")
        return dict(committed)
    count = _partition_count(tenant, topic)
    chosen = sorted(set(partitions)) if partitions else list(range(count))
    bad = [p for p in chosen if not 0 <= p < count]
    if bad:
        raise InvalidRequest(
            f"topic {topic!r} has partitions 0-{count - 1}", partitions=f"no partitions {bad}"
        )
    return {TopicPartition(topic, p): committed.get(TopicPartition(topic, p)) for p in chosen}


def _partition_count(tenant: Tenant, topic: str) -> int:
    found = Topic.objects.filter(tenant=tenant).named(topic).values_list("partitions", flat=True)
    count = found.first()
    if count is None:
        raise InvalidRequest(f"no topic {topic!r} in tenant {tenant.slug!r}", topic="not found")
    return int(count)


def _new_offsets(
    addresses: list[str],
    targets: dict[TopicPartition, int | None],
    to: ResetTarget,
    timestamp: int | None,
    offset: int | None,
) -> dict[TopicPartition, int]:
    if not targets:
        return {}
    earliest = gateway.list_offsets(addresses, dict.fromkeys(targets, "earliest"))
    latest = gateway.list_offsets(addresses, dict.fromkeys(targets, "latest"))
    if to is ResetTarget.EARLIEST:
        return {tp: earliest[tp][0] for tp in targets}
    if to is ResetTarget.LATEST:
        return {tp: latest[tp][0] for tp in targets}
    if to is ResetTarget.TIMESTAMP:
        assert timestamp is not None  # the serializer requires it
        found = gateway.list_offsets(addresses, dict.fromkeys(targets, timestamp))
        # No record at or after the time: nothing to re-read, as Kafka's reset does.
        return {tp: found[tp][0] if found[tp][0] >= 0 else latest[tp][0] for tp in targets}
    assert offset is not None  # the serializer requires it
    return {tp: min(max(offset, earliest[tp][0]), latest[tp][0]) for tp in targets}


def _apply(tenant: Tenant, addresses: list[str], plan: ResetPlan, actor: Actor) -> None:
    before = {f"{m.topic}/{m.partition}": m.current for m in plan.moves}
    after = {f"{m.topic}/{m.partition}": m.new for m in plan.moves}
    offsets = {TopicPartition(m.topic, m.partition): m.new for m in plan.moves}
    with transaction.atomic():
        audit.record_about(
            actor,
            "group.offsets.reset",
            object_type=OBJECT_TYPE,
            object_id=plan.group_id,
            before={"offsets": before},
            after={"offsets": after, "to": plan.to},
            tenant=tenant,
        )
        _refused_as_active(
            plan.group_id, lambda: gateway.alter_group_offsets(addresses, plan.group_id, offsets)
        )


def delete_group(tenant: Tenant, group_id: str, *, actor: Actor) -> None:
    """Delete the stopped group and its committed offsets (``GroupActive`` with members)."""
    addresses, description = _locate(tenant, group_id)
    _check_stopped(description)
    with transaction.atomic():
        audit.record_about(
            actor,
            "group.delete",
            object_type=OBJECT_TYPE,
            object_id=group_id,
            before={"state": description.state, "offsets": _offsets(description.committed.items())},
            tenant=tenant,
        )
        _refused_as_active(group_id, lambda: gateway.delete_group(addresses, group_id))


def _offsets(items: Iterable[tuple[TopicPartition, int]]) -> dict[str, int]:
    return {f"{tp.topic}/{tp.partition}": offset for tp, offset in sorted(items)}


def _refused_as_active(group_id: str, call: Callable[[], None]) -> None:
    """Run ``call``; a member that joined since the check makes the brokers refuse, which
    is ``GroupActive``; a group deleted meanwhile is ``NotFound``."""
    try:
        call()
    except BrokerRefusedError as refused:
        code = refused.details.get("error")
        if code in _ACTIVE_CODES:
            raise GroupActive(group_id, "joined meanwhile", 1) from refused
        if code in _GONE_CODES:
            raise _not_found(group_id) from refused
        raise

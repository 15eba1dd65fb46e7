"""Moving a consumer group's committed positions from one region of a mirror link to the
other: ``failover_group(link, group_id, to_region, actor)``.

Groups are per cluster: the group's committed offsets are read from the cluster hosting
the link's topics in the *from* region (the link's other region) and committed in the
cluster hosting them in ``to_region``, while the group has no live member in either
(``GroupActive``, 409; a group neither region knows is ``NotFound``, 404). Only the
link's topics move.

Per partition, with ``c`` the committed offset in the from region, the answer in the to
region is the first record the group has not consumed there, so nothing is skipped:

- **A**, the from region's own records: the first copy in the to region whose
  ``x-origin-region`` is the from region and whose ``x-origin-offset`` is ``c`` or more
  (the group consumed every earlier one); none yet: the to partition's end. The scan
  starts at the offset map's newest point below ``c`` (``MirrorOffsetPoint``), so it
  reads little. Only when the link copies from → to.
- **B**, the to region's own records (a two-way link, or failing back over a one-way
  link): these reached the group as copies in the from region, in their order, so the
  first one not consumed is the ``x-origin-offset`` of the first copy from the to region
  at or after ``c`` in the from partition; none: everything copied so far was consumed,
  and the first not consumed is the leg's ``next_source_offset`` (read before the scan,
  so a copy made meanwhile cannot be missed).

The answer is min(A, B). Records of the other stream between the two were consumed
already: they are counted as ``may_repeat`` (0, hence ``exact``, over a one-way link
once the copy has caught up with ``c``; records below ``c`` not copied yet land after the
answer and are counted too).

The commit and its audit event (``mirror.failover_group``) are one transaction around
the brokers' call, so a refused call leaves no event.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import transaction

from controlplane.core import audit
from controlplane.core.actors import Actor
from controlplane.core.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    Unavailable,
    scrub_addresses,
)
from controlplane.gateway import groups as gateway
from controlplane.gateway.errors import BrokerRefusedError, BrokerUnavailable
from controlplane.gateway.tail import TailReader, tail_reader
from controlplane.groups.services import GroupActive
from controlplane.mirrors.choices import Direction
from controlplane.mirrors.models import MirrorLink, MirrorOffsetPoint, MirrorPartition
from controlplane.regions.choices import BrokerPhase
from controlplane.regions.models import Broker, Region
from controlplane.topics.models import Topic
from dataplane.client import TopicPartition
from dataplane.client.coordinator import GroupDescription
from dataplane.records import Record

ORIGIN_REGION = "x-origin-region"
ORIGIN_OFFSET = "x-origin-offset"
OBJECT_TYPE = "groups.group"
_SERVING = (BrokerPhase.READY, BrokerPhase.DECOMMISSIONING, BrokerPhase.UNREACHABLE)
_ACTIVE_CODES = frozenset({"UNKNOWN_MEMBER_ID", "NON_EMPTY_GROUP", "ILLEGAL_GENERATION"})


__all__ = [
    "FailoverResult", "GroupActive", "MirrorProgressUnknown", "PartitionFailover",
    "failover_group",
]  # fmt: skip


class MirrorProgressUnknown(Conflict):
    """A leg the answer depends on has not reported its progress for the partition (no
    ``MirrorPartition`` row: its worker has not run, or the row was forgotten with its
    copy): what it copied is unknown, so no position can be proven not to skip."""

    code = "mirror_progress_unknown"

    def __init__(self, link: MirrorLink, from_region: str, tp: TopicPartition) -> None:
        super().__init__(
            f"mirror {link.name}: the copy of {tp.topic}/{tp.partition} from region "
            f"{from_region} has not reported its progress yet: try again once it runs",
            topic=tp.topic, partition=tp.partition, from_region=from_region,
        )  # fmt: skip


@dataclass(frozen=True)
class PartitionFailover:
    """One partition's move: ``from_offset`` is the group's committed offset in the
    region it leaves, ``to_offset`` the one committed in ``to_region``; ``exact``
    whether no record is skipped nor repeated; ``may_repeat`` how many records the
    group will see a second time (0 when exact)."""

    topic: str
    partition: int
    from_offset: int | None
    to_offset: int
    exact: bool
    may_repeat: int = 0


@dataclass(frozen=True)
class FailoverResult:
    group: str
    from_region: str
    to_region: str
    partitions: list[PartitionFailover] = field(default_factory=list)


@dataclass(frozen=True)
class _Side:
    """One region of the link as the failover sees it."""

    region: str
    addresses: list[str]
    description: GroupDescription


def failover_group(
    link: MirrorLink, group_id: str, to_region: Region | str, actor: Actor
) -> FailoverResult:
    """See the module docstring. Raises ``GroupActive`` (409), ``MirrorProgressUnknown``
    (409), ``NotFound`` (404: a group neither region knows, or not the tenant's),
    ``InvalidRequest`` (400: a region not the link's) and ``Unavailable`` (503: a
    region's brokers did not answer). No answer names a broker's address: tenants never
    see them."""
    to_region = to_region.name if isinstance(to_region, Region) else to_region
    try:
        return _failover(link, group_id, to_region, actor)
    except BrokerUnavailable as exc:
        raise Unavailable(
            f"mirror {link.name}: the brokers of a region did not answer: try again",
            group=group_id,
        ) from exc
    except BrokerRefusedError as exc:
        details = {k: v for k, v in exc.details.items() if k != "address"}
        raise BrokerRefusedError(scrub_addresses(exc.message), **details) from exc


def _failover(link: MirrorLink, group_id: str, to_region: str, actor: Actor) -> FailoverResult:
    from_region = _other_region(link, to_region)
    tenant = link.tenant
    if not group_id.startswith(f"{tenant.slug}.") or group_id.startswith("__"):
        raise NotFound(f"group {group_id!r} not found", group=group_id)
    topics = link_topics(link)
    origin = _side(link, from_region, topics, group_id)
    target = _side(link, to_region, topics, group_id)
    if origin.description.state == "Dead" and not origin.description.committed:
        raise NotFound(f"group {group_id!r} not found in region {from_region}", group=group_id)
    moves = [
        _translate(link, origin, target, tp, committed)
        for tp, committed in sorted(origin.description.committed.items())
        if tp.topic in topics
    ]
    _commit(link, group_id, origin, target, moves, actor)
    return FailoverResult(group_id, from_region, to_region, moves)


def link_topics(link: MirrorLink) -> set[str]:
    """Full names of the topics the link copies (its copies' names, in either region)."""
    return set(Topic.objects.filter(mirror_link=link).values_list("full_name", flat=True))


def _other_region(link: MirrorLink, to_region: str) -> str:
    source, target = link.source_region.name, link.target_region.name
    if to_region not in (source, target):
        raise InvalidRequest(
            f"region {to_region!r} is not a region of mirror {link.name} ({source}, {target})",
            to_region=f"one of {source}, {target}",
        )
    return target if to_region == source else source


def _side(link: MirrorLink, region: str, topics: set[str], group_id: str) -> _Side:
    addresses = _addresses(region, topics)
    description = gateway.describe_group(addresses, group_id)
    if description.members:
        raise GroupActive(group_id, f"{description.state} in {region}", len(description.members))
    return _Side(region, addresses, description)


def _addresses(region: str, topics: Iterable[str]) -> list[str]:
    """The brokers of the cluster hosting the link's topics in ``region``."""
    cluster_ids = Topic.objects.filter(
        full_name__in=list(topics), cluster__region__name=region
    ).values_list("cluster_id", flat=True)
    brokers = Broker.objects.filter(cluster_id__in=set(cluster_ids), phase__in=_SERVING)
    return [b.address for b in brokers.order_by("cluster_id", "broker_id") if b.address]


def _copies(link: MirrorLink, from_region: str, to_region: str) -> bool:
    """Whether the link has a leg copying from ``from_region`` into ``to_region``."""
    return link.direction == Direction.TWO_WAY or link.source_region.name == from_region


# -- one partition -------------------------------------------------------------------------


def _translate(
    link: MirrorLink, origin: _Side, target: _Side, tp: TopicPartition, committed: int
) -> PartitionFailover:
    log_start, end = _bounds(target.addresses, tp)
    read_to = tail_reader(target.addresses, [tp.topic])
    own, not_copied = end, 0
    if _copies(link, origin.region, target.region):
        bounds = (log_start, end)
        own, not_copied = _first_copy_from(link, origin.region, tp, committed, read_to, bounds)
    theirs = None
    if _copies(link, target.region, origin.region):
        theirs = max(log_start, _first_unconsumed_local(link, origin, target.region, tp, committed))
    answer = own if theirs is None else min(own, theirs)
    repeats = not_copied
    if theirs is not None and own != theirs:
        upper, own_consumed = (own, True) if answer == theirs else (theirs, False)
        records = read_to(tp.topic, tp.partition, answer)
        repeats += _count(records, upper, origin.region, own_consumed)
    return PartitionFailover(tp.topic, tp.partition, committed, answer, repeats == 0, repeats)


def _bounds(addresses: list[str], tp: TopicPartition) -> tuple[int, int]:
    """The partition's log start and high watermark."""
    found = gateway.list_offsets(addresses, {tp: "earliest"})[tp][0]
    return found, gateway.list_offsets(addresses, {tp: "latest"})[tp][0]


def _first_copy_from(
    link: MirrorLink,
    from_region: str,
    tp: TopicPartition,
    committed: int,
    read_to: TailReader,
    bounds: tuple[int, int],
) -> tuple[int, int]:
    """(A, records below ``committed`` not copied yet): the to-region offset of the first
    copy of a from-region record at or past ``committed``; none: the end of what the scan
    read (every copy made so far is before it)."""
    copied_up_to = _next_source_offset(link, from_region, tp)
    point = (
        MirrorOffsetPoint.objects.filter(
            link=link,
            from_region__name=from_region,
            topic=tp.topic,
            partition=tp.partition,
            source_offset__lt=committed,
        )
        .order_by("-source_offset")
        .first()
    )
    log_start, end = bounds
    scan_from = max(log_start, point.target_offset + 1) if point is not None else log_start
    for record in read_to(tp.topic, tp.partition, scan_from):
        end = max(end, record.offset + 1)
        origin_offset = _origin_offset(record, from_region)
        if origin_offset is not None and origin_offset >= committed:
            return record.offset, 0
    # Offsets below ``committed`` the leg had not passed yet (an upper bound: some of
    # them may be copies the loop rule skips) land after the answer once copied.
    if copied_up_to is None:
        if committed > 0:
            raise MirrorProgressUnknown(link, from_region, tp)
        return end, 0
    return end, max(0, committed - copied_up_to)


def _next_source_offset(link: MirrorLink, from_region: str, tp: TopicPartition) -> int | None:
    """Where the leg from ``from_region`` last reported it would copy next."""
    progress = MirrorPartition.objects.filter(
        link=link, from_region__name=from_region, source_topic=tp.topic, partition=tp.partition
    ).first()
    return progress.next_source_offset if progress is not None else None


def _first_unconsumed_local(
    link: MirrorLink, origin: _Side, to_region: str, tp: TopicPartition, committed: int
) -> int:
    """B: the to-region offset of its first own record the group has not consumed (as a
    copy in the from region)."""
    copied_up_to = _next_source_offset(link, to_region, tp)
    read_from = tail_reader(origin.addresses, [tp.topic])
    start, _end = _bounds(origin.addresses, tp)
    for record in read_from(tp.topic, tp.partition, max(committed, start)):
        origin_offset = _origin_offset(record, to_region)
        if origin_offset is not None:
            return origin_offset
    if copied_up_to is None:
        raise MirrorProgressUnknown(link, to_region, tp)
    return copied_up_to


def _count(records: Iterable[Record], upper: int, from_region: str, from_origin: bool) -> int:
    """Records below ``upper`` of the from region's stream (``from_origin``) or of the to
    region's own."""
    count = 0
    for record in records:
        if record.offset >= upper:
            break
        is_copy = _origin_offset(record, from_region) is not None
        count += is_copy == from_origin and (is_copy or _header(record, ORIGIN_REGION) is None)
    return count


def _header(record: Record, key: str) -> bytes | None:
    for header in record.headers:
        if header.key == key:
            return header.value
    return None


def _origin_offset(record: Record, region: str) -> int | None:
    """The record's ``x-origin-offset`` when its ``x-origin-region`` is ``region``."""
    if _header(record, ORIGIN_REGION) != region.encode():
        return None
    value = _header(record, ORIGIN_OFFSET)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


# -- committing ----------------------------------------------------------------------------


def _commit(
    link: MirrorLink,
    group_id: str,
    origin: _Side,
    target: _Side,
    moves: list[PartitionFailover],
    actor: Actor,
) -> None:
    offsets = {TopicPartition(m.topic, m.partition): m.to_offset for m in moves}
    after = {f"{m.topic}/{m.partition}": m.to_offset for m in moves}
    before = {f"{m.topic}/{m.partition}": m.from_offset for m in moves}
    with transaction.atomic():
        audit.record_about(
            actor,
            "mirror.failover_group",
            object_type=OBJECT_TYPE,
            object_id=group_id,
            before={"region": origin.region, "offsets": before},
            after={"region": target.region, "offsets": after, "mirror": link.name},
            tenant=link.tenant,
        )
        if not offsets:
            return
        try:
            gateway.alter_group_offsets(target.addresses, group_id, offsets)
        except BrokerRefusedError as exc:
            if exc.details.get("error") in _ACTIVE_CODES:
                raise GroupActive(group_id, f"joined in {target.region}", 1) from exc
            raise

"""Moving a consumer group's committed positions from one region of a link to the other
(``POST /api/v1/mirrors/{name}/failover-group``, docs/mirror.md).

The group must have no live members in either region (409 ``group_active``). Its
committed offsets in the other region are translated per partition through the
target's copies (``x-origin-offset``) and the offset map (``MirrorOffsetPoint``,
where the scan starts), then committed in ``to_region``. One-way: exact. Two-way: no
record skipped; ``may_repeat`` counts the records the group may see twice where the
regions interleaved differently."""

from __future__ import annotations

from dataclasses import dataclass, field

from controlplane.core.actors import Actor
from controlplane.core.errors import Conflict, Unimplemented
from controlplane.mirrors.models import MirrorLink
from controlplane.regions.models import Region


class GroupActive(Conflict):
    """The group has live members in one of the link's regions: moving its positions
    under them would be overwritten by their next commit."""

    code = "group_active"


class FailoverUnavailable(Unimplemented):
    code = "not_implemented"


@dataclass(frozen=True)
class PartitionFailover:
    """One partition's move: ``from_offset`` is the group's committed offset in the
    region it leaves (None: none committed), ``to_offset`` the one committed in
    ``to_region``; ``exact`` whether no record is skipped nor repeated; ``may_repeat``
    how many records the group may see a second time (0 when exact)."""

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


def failover_group(
    link: MirrorLink, group: str, to_region: Region | str, actor: Actor
) -> FailoverResult:
    """Move ``group``'s committed positions on the link's topics to ``to_region`` (one
    of the link's two regions; the other is where they are read). Raises
    ``GroupActive`` (409), ``InvalidRequest`` (400: a region not the link's, a group
    not the tenant's) and ``FailoverUnavailable`` (501) until the translation is in."""
    raise FailoverUnavailable(
        "group failover is not available in this deployment yet",
        link=link.name,
        group=group,
        to_region=to_region.name if isinstance(to_region, Region) else str(to_region),
    )

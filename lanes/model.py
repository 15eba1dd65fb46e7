"""A lane's declaration and who consumes its records.

- ``all_topics`` or ``topics`` (trunk topics' full names) say which trunk topics the
  lane covers; a lane topic of a topic it does not cover does not exist
  (``LANE_NOT_FOUND``).
- Its consumer groups read the lane topic, and the trunk topic too when
  ``consume_trunk``.
- A lane is *live* for a trunk topic while some consumer group of the lane has a live
  member subscribed to the lane topic. While it is not, ``orphan_policy`` decides:
  ``trunk`` — the trunk's groups read the lane topic; ``hold`` — its records wait there.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from lanes.names import check_lane_name, lane_topic


class OrphanPolicy(enum.StrEnum):
    TRUNK = "trunk"
    HOLD = "hold"


@dataclass(frozen=True)
class LaneSpec:
    tenant: str
    name: str
    all_topics: bool = True
    topics: frozenset[str] = frozenset()
    consume_trunk: bool = False
    orphan_policy: OrphanPolicy = OrphanPolicy.TRUNK
    live_topics: frozenset[str] = field(default_factory=frozenset)
    partitions: int = 0  # 0: the trunk topic's count

    def __post_init__(self) -> None:
        check_lane_name(self.name)

    def covers(self, trunk_topic: str) -> bool:
        if not trunk_topic.startswith(f"{self.tenant}."):
            return False
        return self.all_topics or trunk_topic in self.topics

    def is_live(self, trunk_topic: str) -> bool:
        return trunk_topic in self.live_topics

    def orphaned_to_trunk(self, trunk_topic: str) -> bool:
        """Whether the trunk's groups read this lane's topic of ``trunk_topic`` now."""
        return (
            self.covers(trunk_topic)
            and self.orphan_policy == OrphanPolicy.TRUNK
            and not self.is_live(trunk_topic)
        )

    def subscriptions(self, trunk_topics: Iterable[str]) -> list[str]:
        """What a consumer group of this lane subscribed to ``trunk_topics`` reads."""
        out: list[str] = []
        for trunk in trunk_topics:
            out.append(lane_topic(trunk, self.name))
            if self.consume_trunk:
                out.append(trunk)
        return out

"""Reading the counters behind the charts from the brokers, through the gateway.

One observation asks every live broker ``DescribeState`` (each leader partition's log end
offset, high watermark and size) and ``ListGroups`` + ``DescribeGroups`` (the committed
offsets of the groups it coordinates). From them, per topic: the sum of its partitions'
log end offsets and sizes, only when every partition's leader answered (a partial sum
would read as a drop); per group and topic: the sum of committed offsets and the lag
(high watermark minus committed offset, over the partitions with a commit).

Lag in seconds needs the brokers to report it per partition; ``group.proto`` has no such
field yet, so ``lag_s`` stays None.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from controlplane.gateway import admin as brokers
from controlplane.gateway.errors import BrokerUnavailable
from controlplane.regions.models import Broker
from dataplane._gen.meridian.v1 import admin_pb2, group_pb2
from dataplane.errors import ErrorCode

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class TopicCounters:
    end_offset: int
    size_bytes: int


@dataclass(frozen=True)
class GroupCounters:
    committed: int
    lag_records: int
    lag_s: float | None = None


@dataclass
class Observation:
    """What one pass read: counters by topic, and by (group, topic)."""

    topics: dict[str, TopicCounters] = field(default_factory=dict)
    groups: dict[tuple[str, str], GroupCounters] = field(default_factory=dict)
    brokers_asked: int = 0
    brokers_answered: int = 0


@dataclass
class _Leaders:
    partitions: dict[TopicPartition, admin_pb2.PartitionState] = field(default_factory=dict)


def observe(live: Iterable[Broker], partitions_of: dict[str, int]) -> Observation:
    """Read every broker of ``live``; ``partitions_of`` names the topics to measure with
    their partition counts. A broker that does not answer is skipped (logged)."""
    observation = Observation()
    leaders = _Leaders()
    descriptions: list[group_pb2.GroupDescription] = []
    for broker in live:
        observation.brokers_asked += 1
        try:
            _read_partitions(broker.address, leaders)
            descriptions += _read_groups(broker.address)
        except BrokerUnavailable as exc:
            log.info("metrics collection skips %s: %s", broker, exc)
            continue
        observation.brokers_answered += 1
    observation.topics = _topic_counters(leaders, partitions_of)
    observation.groups = _group_counters(descriptions, leaders)
    return observation


def _read_partitions(address: str, leaders: _Leaders) -> None:
    for state in brokers.describe_state(address).partitions:
        if state.role == "leader" and not state.offline:
            leaders.partitions[(state.topic, state.partition)] = state


def _read_groups(address: str) -> list[group_pb2.GroupDescription]:
    listed = [g.group_id for g in brokers.list_groups(address) if not g.group_id.startswith("__")]
    if not listed:
        return []
    return [d for d in brokers.describe_groups(address, listed) if d.error == ErrorCode.NONE]


def _topic_counters(leaders: _Leaders, partitions_of: dict[str, int]) -> dict[str, TopicCounters]:
    sums: dict[str, list[int]] = {}
    for (topic, _), state in leaders.partitions.items():
        if topic in partitions_of:
            entry = sums.setdefault(topic, [0, 0, 0])
            entry[0] += state.log_end_offset
            entry[1] += state.size_bytes
            entry[2] += 1
    return {
        topic: TopicCounters(end, size)
        for topic, (end, size, seen) in sums.items()
        if seen == partitions_of[topic]
    }


def _group_counters(
    descriptions: list[group_pb2.GroupDescription], leaders: _Leaders
) -> dict[tuple[str, str], GroupCounters]:
    sums: dict[tuple[str, str], list[int]] = {}
    seen: set[str] = set()
    for description in descriptions:
        if description.group_id in seen:  # two coordinators while one moves: count once
            continue
        seen.add(description.group_id)
        for offset in description.offsets:
            if offset.offset < 0 or offset.error != ErrorCode.NONE:
                continue
            entry = sums.setdefault((description.group_id, offset.topic), [0, 0])
            entry[0] += offset.offset
            state = leaders.partitions.get((offset.topic, offset.partition))
            if state is not None:
                entry[1] += max(0, state.high_watermark - offset.offset)
    return {key: GroupCounters(committed, lag) for key, (committed, lag) in sums.items()}

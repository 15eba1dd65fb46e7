"""Reading the counters behind the charts from the brokers, through the gateway.

One observation asks every live broker ``DescribeState`` (each leader partition's log end
offset, high watermark and size) and ``ListGroups`` + ``DescribeGroups`` (the committed
offsets of the groups it coordinates). From them, per topic: the sum of its partitions'
log end offsets and sizes, only when every partition's leader answered (a partial sum
would read as a drop); per group and topic: the sum of committed offsets and the lag
(high watermark minus committed offset, over the partitions with a commit) and the
committed offset of each partition (a consume rate counts only partitions committed in
both readings: a first commit, far from zero, is not consumption).

Regions: a topic is measured on its origin's cluster only (``clusters_of``), and so are
its groups: a group's commits on a topic count only as its coordinator in that cluster
reports them. A group of the same id consuming a mirror copy in another region is not
measured (its offsets are the copy's, not comparable with the origin's high watermarks),
and never replaces the origin region's figures.

Lag in seconds: once the brokers have answered, each partition's leader is asked once per
pass (one ``ListOffsets`` per broker, for every group at once) the age of the record at
each committed offset below the high watermark (the group's oldest unconsumed record); a
partition caught up has age 0 without asking. ``lag_s`` of a group and topic is the
largest age over its partitions, in seconds; None when some partition behind got no
answer (its leader unknown or not answering: a partial maximum would understate it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from controlplane.gateway import admin as brokers
from controlplane.gateway.errors import BrokerRefusedError, BrokerUnavailable
from controlplane.regions.models import Broker
from dataplane._gen.meridian.v1 import admin_pb2, group_pb2
from dataplane.errors import ErrorCode

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_Described = tuple[int, group_pb2.GroupDescription]  # (the coordinator's cluster id, ...)


@dataclass(frozen=True)
class TopicCounters:
    end_offset: int
    size_bytes: int


@dataclass(frozen=True)
class GroupCounters:
    committed: dict[int, int]  # by partition, the partitions with a commit
    lag_records: int
    lag_s: float | None = None


@dataclass(frozen=True)
class MirrorLag:
    """A mirror link's leg as its worker last reported it: records behind (the sum over
    its partitions) and seconds behind (the largest over them)."""

    lag_records: int
    lag_s: float


@dataclass
class Observation:
    """What one pass read: counters by topic, and by (group, topic); mirror lag by
    (``<tenant>.<link>``, ``<from region>><to region>``), read from the control plane's
    rows, not the brokers."""

    topics: dict[str, TopicCounters] = field(default_factory=dict)
    groups: dict[tuple[str, str], GroupCounters] = field(default_factory=dict)
    mirrors: dict[tuple[str, str], MirrorLag] = field(default_factory=dict)
    brokers_asked: int = 0
    brokers_answered: int = 0


@dataclass
class _Leaders:
    partitions: dict[TopicPartition, admin_pb2.PartitionState] = field(default_factory=dict)
    addresses: dict[TopicPartition, str] = field(default_factory=dict)


def observe(
    live: Iterable[Broker], partitions_of: dict[str, int], clusters_of: dict[str, int] | None = None
) -> Observation:
    """Read every broker of ``live``; ``partitions_of`` names the topics to measure with
    their partition counts; ``clusters_of``, by topic, the cluster whose partitions are
    the topic's (its origin's: a mirror copy of the same name in another region is not
    measured, or a name's figures would jump between the two). A broker that does not
    answer is skipped (logged)."""
    observation = Observation()
    leaders = _Leaders()
    descriptions: list[_Described] = []
    for broker in live:
        observation.brokers_asked += 1
        try:
            _read_partitions(broker, leaders, clusters_of or {})
            descriptions += [(broker.cluster_id, d) for d in _read_groups(broker.address)]
        except BrokerUnavailable as exc:
            log.info("metrics collection skips %s: %s", broker, exc)
            continue
        observation.brokers_answered += 1
    observation.topics = _topic_counters(leaders, partitions_of)
    observation.groups = _group_counters(descriptions, leaders, clusters_of or {})
    ages = _record_ages(observation.groups, leaders)
    observation.groups = {
        key: replace(counters, lag_s=_lag_s(key[1], counters, leaders, ages))
        for key, counters in observation.groups.items()
    }
    return observation


def _read_partitions(broker: Broker, leaders: _Leaders, clusters_of: dict[str, int]) -> None:
    address = broker.address
    for state in brokers.describe_state(address).partitions:
        home = clusters_of.get(state.topic, broker.cluster_id)
        if state.role == "leader" and not state.offline and home == broker.cluster_id:
            leaders.partitions[(state.topic, state.partition)] = state
            leaders.addresses[(state.topic, state.partition)] = address


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
    descriptions: list[_Described], leaders: _Leaders, clusters_of: dict[str, int]
) -> dict[tuple[str, str], GroupCounters]:
    """Per (group, topic), from the coordinators of the topic's origin cluster only (a
    topic ``clusters_of`` does not name: any cluster's)."""
    committed: dict[tuple[str, str], dict[int, int]] = {}
    lag: dict[tuple[str, str], int] = {}
    seen: set[tuple[int, str]] = set()
    for cluster_id, description in descriptions:
        # two coordinators of one cluster while the group moves: count it once
        if (cluster_id, description.group_id) in seen:
            continue
        seen.add((cluster_id, description.group_id))
        for offset in description.offsets:
            if offset.offset < 0 or offset.error != ErrorCode.NONE:
                continue
            if clusters_of.get(offset.topic, cluster_id) != cluster_id:
                continue
            key = (description.group_id, offset.topic)
            committed.setdefault(key, {})[offset.partition] = offset.offset
            state = leaders.partitions.get((offset.topic, offset.partition))
            behind = max(0, state.high_watermark - offset.offset) if state is not None else 0
            lag[key] = lag.get(key, 0) + behind
    return {key: GroupCounters(offsets, lag[key]) for key, offsets in committed.items()}


def _behind(leaders: _Leaders, topic: str, partition: int, offset: int) -> bool:
    """Whether a commit at ``offset`` leaves records to consume (unknown leader: yes)."""
    state = leaders.partitions.get((topic, partition))
    return state is None or offset < state.high_watermark


def _record_ages(
    groups: dict[tuple[str, str], GroupCounters], leaders: _Leaders
) -> dict[brokers.RecordAt, int]:
    """The age (ms) of the record at every committed offset behind its high watermark:
    one call per leader broker, each distinct (partition, offset) asked once."""
    by_leader: dict[str, set[brokers.RecordAt]] = {}
    for (_, topic), counters in groups.items():
        for partition, offset in counters.committed.items():
            address = leaders.addresses.get((topic, partition))
            if address is not None and _behind(leaders, topic, partition, offset):
                by_leader.setdefault(address, set()).add(brokers.RecordAt(topic, partition, offset))
    ages: dict[brokers.RecordAt, int] = {}
    for address, asked in by_leader.items():
        try:
            ages.update(brokers.record_ages(address, sorted(asked, key=_order)))
        except BrokerUnavailable as exc:
            log.info("metrics collection has no record ages from %s: %s", address, exc)
        except BrokerRefusedError as exc:  # lag in seconds null, the rest of the pass kept
            log.warning("metrics collection: %s refused ListOffsets: %s", address, exc)
    return ages


def _order(item: brokers.RecordAt) -> tuple[str, int, int]:
    return (item.topic, item.partition, item.offset)


def _lag_s(
    topic: str, counters: GroupCounters, leaders: _Leaders, ages: dict[brokers.RecordAt, int]
) -> float | None:
    """The largest age (s) over the group's partitions of ``topic``; None when one
    behind has no answer."""
    largest = 0
    for partition, offset in counters.committed.items():
        if not _behind(leaders, topic, partition, offset):
            continue
        age = ages.get(brokers.RecordAt(topic, partition, offset))
        if age is None:
            return None
        largest = max(largest, age)
    return largest / 1000

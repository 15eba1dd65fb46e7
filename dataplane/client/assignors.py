"""Partition assignors: which member of a consumer group consumes which partitions.

An assignor is a pure function of ``subscriptions`` (member id -> ``Subscription``) and
``partition_counts`` (topic -> number of partitions) returning member id -> sorted list
of ``TopicPartition``. Every member of the input is in the output (perhaps with nothing);
a member only gets partitions of topics it subscribes to; no partition goes to two
members; topics without a known partition count are left out. The group's leader runs
the assignor the coordinator chose and sends the result with SyncGroup.

- ``range`` (Kafka's RangeAssignor): per topic, the members subscribed to it, sorted by
  group instance id (static members) or member id, get consecutive ranges; the first
  ``n % members`` get one partition more. Every partition is assigned.
- ``roundrobin``: every subscribed partition, sorted, dealt to the sorted members in
  turn, skipping members not subscribed to its topic. Every partition is assigned.
- ``cooperative-sticky``: a balanced assignment that keeps each member's owned
  partitions (``Subscription.owned_partitions``) where balance allows. Balanced means no
  partition could move from its member to another member subscribed to its topic that
  has at least two fewer partitions (with identical subscriptions: counts differ by at
  most one). Cooperative: a partition that another member still owns is held back from
  its new member in this rebalance; the owner revokes it on seeing its new assignment
  and rejoins, and the follow-up rebalance assigns it.

``range`` and ``roundrobin`` support only the eager rebalance protocol (a member gives
up everything before rejoining); ``cooperative-sticky`` supports both.

The payloads exchanged through the coordinator are ``ConsumerSubscription`` and
``ConsumerAssignment`` (``group.proto``); ``encode_*``/``decode_*`` convert them.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from dataplane._gen.meridian.v1 import common_pb2, group_pb2
from dataplane.client.types import TopicPartition
from dataplane.errors import ErrorCode, MeridianError

RANGE = "range"
ROUNDROBIN = "roundrobin"
COOPERATIVE_STICKY = "cooperative-sticky"

Assignment = dict[str, list[TopicPartition]]


class RebalanceProtocol(enum.StrEnum):
    EAGER = "eager"
    COOPERATIVE = "cooperative"


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a member asks for: its topics, and the partitions it owns now (cooperative)."""

    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    user_data: bytes = b""
    group_instance_id: str = ""


@dataclass(frozen=True, slots=True)
class Assignor:
    name: str
    assign: Callable[[Mapping[str, Subscription], Mapping[str, int]], Assignment]
    protocols: tuple[RebalanceProtocol, ...]


# -- range and roundrobin --------------------------------------------------------------


def _sort_key(subscriptions: Mapping[str, Subscription]) -> Callable[[str], tuple[str, str]]:
    return lambda m: (subscriptions[m].group_instance_id or m, m)


def _empty(subscriptions: Mapping[str, Subscription]) -> Assignment:
    return {member: [] for member in subscriptions}


def range_assign(
    subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]
) -> Assignment:
    """Kafka's RangeAssignor (module docstring)."""
    result = _empty(subscriptions)
    topics = sorted({t for s in subscriptions.values() for t in s.topics} & set(partition_counts))
    for topic in topics:
        members = sorted(
            (m for m, s in subscriptions.items() if topic in s.topics), key=_sort_key(subscriptions)
        )
        per_member, extra = divmod(partition_counts[topic], len(members))
        for i, member in enumerate(members):
            start = i * per_member + min(i, extra)
            length = per_member + (1 if i < extra else 0)
            result[member] += [TopicPartition(topic, p) for p in range(start, start + length)]
    return result


def roundrobin_assign(
    subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]
) -> Assignment:
    """Kafka's RoundRobinAssignor (module docstring)."""
    result = _empty(subscriptions)
    members = sorted(subscriptions, key=_sort_key(subscriptions))
    if not members:
        return result
    turn = itertools.cycle(members)
    for tp in _all_partitions(subscriptions, partition_counts):
        member = next(turn)
        while tp.topic not in subscriptions[member].topics:
            member = next(turn)
        result[member].append(tp)
    return result


def _all_partitions(
    subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]
) -> list[TopicPartition]:
    topics = sorted({t for s in subscriptions.values() for t in s.topics} & set(partition_counts))
    return [TopicPartition(t, p) for t in topics for p in range(partition_counts[t])]


# -- sticky ----------------------------------------------------------------------------


class _Sticky:
    """The balanced, sticky assignment (module docstring), computed once.

    Owned partitions are kept first, the rest go one by one to the least loaded eligible
    member, then single partitions move from the fullest member that can give one to
    the least loaded eligible member while the two differ by two or more; a member
    gives away partitions it did not own before those it did.
    """

    def __init__(
        self, subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]
    ) -> None:
        self.subscriptions = subscriptions
        self.eligible: dict[TopicPartition, list[str]] = {}
        for tp in _all_partitions(subscriptions, partition_counts):
            self.eligible[tp] = sorted(m for m, s in subscriptions.items() if tp.topic in s.topics)
        self.assigned: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
        self.extra: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
        self.kept: dict[str, deque[TopicPartition]] = {m: deque() for m in subscriptions}

    def run(self) -> Assignment:
        self._keep_owned()
        self._assign_unowned()
        while self._move_one():
            pass
        return {m: sorted(tps) for m, tps in self.assigned.items()}

    def _keep_owned(self) -> None:
        """Each partition stays with a valid owner; a contested one with the newest claim."""
        claims = sorted(
            self.subscriptions.items(), key=lambda item: (-item[1].generation_id, item[0])
        )
        taken: set[TopicPartition] = set()
        for member, subscription in claims:
            for tp in sorted(set(subscription.owned_partitions)):
                if member in self.eligible.get(tp, ()) and tp not in taken:
                    taken.add(tp)
                    self.assigned[member].add(tp)
                    self.kept[member].append(tp)

    def _assign_unowned(self) -> None:
        taken = {tp for tps in self.assigned.values() for tp in tps}
        unowned = sorted(
            (tp for tp in self.eligible if tp not in taken),
            key=lambda tp: (len(self.eligible[tp]), tp),
        )
        for tp in unowned:
            self._give(tp, self._least_loaded(tp))

    def _give(self, tp: TopicPartition, member: str) -> None:
        self.assigned[member].add(tp)
        self.extra[member].add(tp)

    def _least_loaded(self, tp: TopicPartition) -> str:
        return min(self.eligible[tp], key=lambda m: (len(self.assigned[m]), m))

    def _move_one(self) -> bool:
        """Move one partition from the fullest member that can give one; False if none can."""
        fullest = max(self.assigned, key=lambda m: (len(self.assigned[m]), m))
        if self._move_from(fullest):
            return True
        others = sorted(self.assigned, key=lambda m: (-len(self.assigned[m]), m))
        return any(self._move_from(m) for m in others if m != fullest)

    def _move_from(self, member: str) -> bool:
        size = len(self.assigned[member])
        for tp in self._movable(member):
            target = self._least_loaded(tp)
            if size - len(self.assigned[target]) >= 2:
                self.assigned[member].discard(tp)
                self.extra[member].discard(tp)
                self._give(tp, target)
                return True
        return False

    def _movable(self, member: str) -> Iterator[TopicPartition]:
        """The member's partitions, those it did not own first (each group sorted)."""
        yield from sorted(self.extra[member])
        kept = self.kept[member]
        while kept and kept[0] not in self.assigned[member]:
            kept.popleft()  # moved away earlier
        yield from (tp for tp in kept if tp in self.assigned[member])


def sticky_assign(
    subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]
) -> Assignment:
    """The balanced assignment that keeps owned partitions (eager: nothing held back)."""
    return _Sticky(subscriptions, partition_counts).run()


def cooperative_sticky_assign(
    subscriptions: Mapping[str, Subscription], partition_counts: Mapping[str, int]
) -> Assignment:
    """``sticky_assign`` minus the partitions another member still owns (module docstring)."""
    result = sticky_assign(subscriptions, partition_counts)
    owners: dict[TopicPartition, set[str]] = {}
    for member, subscription in subscriptions.items():
        for tp in subscription.owned_partitions:
            owners.setdefault(tp, set()).add(member)
    return {
        member: [tp for tp in tps if owners.get(tp, {member}) <= {member}]
        for member, tps in result.items()
    }


ASSIGNORS: dict[str, Assignor] = {
    RANGE: Assignor(RANGE, range_assign, (RebalanceProtocol.EAGER,)),
    ROUNDROBIN: Assignor(ROUNDROBIN, roundrobin_assign, (RebalanceProtocol.EAGER,)),
    COOPERATIVE_STICKY: Assignor(
        COOPERATIVE_STICKY,
        cooperative_sticky_assign,
        (RebalanceProtocol.EAGER, RebalanceProtocol.COOPERATIVE),
    ),
}


def get_assignor(name: str) -> Assignor:
    """The assignor called ``name``; ``INVALID_CONFIG`` for an unknown one."""
    assignor = ASSIGNORS.get(name)
    if assignor is None:
        raise MeridianError(
            ErrorCode.INVALID_CONFIG, f"unknown assignor {name!r}; known: {sorted(ASSIGNORS)}"
        )
    return assignor


def rebalance_protocol(names: Iterable[str]) -> RebalanceProtocol:
    """Cooperative when every named assignor supports it, else eager (as Kafka decides)."""
    cooperative = all(RebalanceProtocol.COOPERATIVE in get_assignor(n).protocols for n in names)
    return RebalanceProtocol.COOPERATIVE if cooperative else RebalanceProtocol.EAGER


# -- payloads --------------------------------------------------------------------------


def _pb_partitions(partitions: Iterable[TopicPartition]) -> list[common_pb2.TopicPartition]:
    return [common_pb2.TopicPartition(topic=t, partition=p) for t, p in sorted(partitions)]


def encode_subscription(subscription: Subscription) -> bytes:
    return group_pb2.ConsumerSubscription(
        topics=sorted(subscription.topics),
        user_data=subscription.user_data,
        owned_partitions=_pb_partitions(subscription.owned_partitions),
        generation_id=subscription.generation_id,
    ).SerializeToString()


def decode_subscription(data: bytes, group_instance_id: str = "") -> Subscription:
    """A member's subscription; ``INCONSISTENT_GROUP_PROTOCOL`` if it does not parse."""
    try:
        pb = group_pb2.ConsumerSubscription.FromString(data)
    except DecodeError as exc:
        raise MeridianError(
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"bad subscription: {exc}"
        ) from exc
    return Subscription(
        topics=tuple(pb.topics),
        owned_partitions=tuple(
            TopicPartition(tp.topic, tp.partition) for tp in pb.owned_partitions
        ),
        generation_id=pb.generation_id,
        user_data=pb.user_data,
        group_instance_id=group_instance_id,
    )


def encode_assignment(partitions: Iterable[TopicPartition], user_data: bytes = b"") -> bytes:
    return group_pb2.ConsumerAssignment(
        partitions=_pb_partitions(partitions), user_data=user_data
    ).SerializeToString()


def decode_assignment(data: bytes) -> frozenset[TopicPartition]:
    """The partitions of an assignment; ``INCONSISTENT_GROUP_PROTOCOL`` if it does not parse."""
    try:
        pb = group_pb2.ConsumerAssignment.FromString(data)
    except DecodeError as exc:
        raise MeridianError(
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"bad assignment: {exc}"
        ) from exc
    return frozenset(TopicPartition(tp.topic, tp.partition) for tp in pb.partitions)

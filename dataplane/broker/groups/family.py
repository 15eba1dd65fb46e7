"""Lane group families: a trunk group ``G`` and its lane groups ``G~L`` (``lanes.names``).

Pure helpers of the coordinator's hand-over fence and lane-consumer report:

- ``peer_group(group_id, topic)``: the family peer of ``group_id`` for lane topic
  ``topic`` of lane L — ``G~L`` for ``G``, ``G`` for ``G~L`` — or None (a trunk topic,
  or a group of another lane);
- ``held_partitions(group)``: the partitions a group's members hold, from their
  ConsumerAssignment payloads: the current assignment when Stable, else (a rebalance)
  the last synced one, kept by ``Group.synced_assignments``; none without members;
- ``subscribed_lane_topics(group)``: the lane topics its members subscribe to (their
  JoinGroup ConsumerSubscription metadata) or were assigned (members restored from the
  log have no metadata until they rejoin). Payloads that do not parse are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.message import DecodeError

from dataplane._gen.meridian.v1 import group_pb2
from dataplane.broker.groups.group import Group, GroupState
from lanes.names import SEPARATOR, split_group, split_topic

CONSUMER_PROTOCOL = "consumer"


def peer_group(group_id: str, topic: str) -> str | None:
    lane = split_topic(topic)[1]
    if lane is None:
        return None
    trunk, group_lane = split_group(group_id)
    if group_lane is None:
        return f"{group_id}{SEPARATOR}{lane}"
    return trunk if group_lane == lane else None


def assigned(payload: bytes) -> list[tuple[str, int]]:
    """The partitions of a serialized ConsumerAssignment (none if it does not parse)."""
    try:
        parsed = group_pb2.ConsumerAssignment.FromString(payload)
    except DecodeError:
        return []
    return [(tp.topic, tp.partition) for tp in parsed.partitions]


def subscribed(payload: bytes) -> list[str]:
    """The topics of a serialized ConsumerSubscription (none if it does not parse)."""
    try:
        return list(group_pb2.ConsumerSubscription.FromString(payload).topics)
    except DecodeError:
        return []


def held_partitions(group: Group | None) -> set[tuple[str, int]]:
    if group is None or not group.members or group.protocol_type != CONSUMER_PROTOCOL:
        return set()
    if group.state is GroupState.STABLE:
        payloads: Iterable[bytes] = [m.assignment for m in group.members.values()]
    else:
        payloads = group.synced_assignments.values()
    return {tp for payload in payloads for tp in assigned(payload)}


def subscribed_lane_topics(group: Group) -> set[str]:
    if group.protocol_type != CONSUMER_PROTOCOL:
        return set()
    topics: set[str] = set()
    for member in group.members.values():
        for _name, metadata in member.protocols:
            topics.update(subscribed(metadata))
        topics.update(topic for topic, _ in assigned(member.assignment))
    return {topic for topic in topics if SEPARATOR in topic}

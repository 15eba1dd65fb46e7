"""The Kafka listener's group APIs, on the broker's one group coordinator.

FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
DescribeGroups, ListGroups and DeleteGroups run through the ``GroupServicer`` as gRPC's do
(``calls``): the same authorization (group ids start with ``<tenant>.``), the same groups,
members, generations and committed offsets. A group may mix Kafka clients and Meridian's
SDK: for ``protocol_type`` "consumer" the payloads are translated at the edge, Kafka's
``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment`` (a version, then the
schema of that version) to the coordinator's ``ConsumerSubscription`` /
``ConsumerAssignment`` and back, so lane hand-overs, group descriptions and lag see a
Kafka consumer's subscription and assignment as an SDK consumer's. A leader gets its
members' subscriptions in the version it sent its own in (it reads what it writes);
assignments are sent as version 0 (the layout is the same in every version). A payload
that does not parse is passed through unchanged. Other protocol types (Connect, ...)
pass through untouched.

FindCoordinator answers group keys here; transactional ids (key type 1) are
``txns.py``'s. OffsetFetch's ``require_stable`` (v7) answers UNSTABLE_OFFSET_COMMIT for an
offset an open transaction committed, as Kafka's read_committed consumers ask.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError
from kafka.protocol.consumer import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from dataplane._gen.meridian.v1 import common_pb2, group_pb2
from dataplane.broker.groups import GroupServicer
from dataplane.broker.kafka import codes
from dataplane.broker.kafka.calls import CallContext
from dataplane.broker.kafka.wire import Request, make
from dataplane.broker.quotas import QuotaManager
from dataplane.broker.throttling import metered
from dataplane.errors import ErrorCode, MeridianError

CONSUMER = "consumer"
GROUP_KEY, TRANSACTION_KEY = 0, 1
_VERSION = struct.Struct(">h")
Values = dict[str, Any]


@dataclass
class GroupServices:
    groups: GroupServicer
    quotas: QuotaManager


async def _call(services: GroupServices, pb: Any, method: Any, ctx: CallContext) -> tuple[Any, int]:
    return await metered(services.quotas, pb, lambda r: method(r, ctx), hold=False)


# -- payload translation ------------------------------------------------------------------
def payload_version(payload: bytes) -> int:
    return _VERSION.unpack_from(payload)[0] if len(payload) >= 2 else 0


def subscription_in(payload: bytes) -> bytes:
    """A Kafka subscription as the coordinator's ``ConsumerSubscription``."""
    try:
        kafka = ConsumerProtocolSubscription.decode(payload, header=True)
    except Exception:  # not Kafka's layout: kept as it came
        return payload
    pb = group_pb2.ConsumerSubscription(
        topics=list(kafka.topics or []),
        user_data=kafka.user_data or b"",
        generation_id=kafka.generation_id,
    )
    for owned in kafka.owned_partitions or []:
        pb.owned_partitions.extend(
            common_pb2.TopicPartition(topic=owned.topic, partition=p) for p in owned.partitions
        )
    return pb.SerializeToString()


def subscription_out(payload: bytes, version: int) -> bytes:
    """The coordinator's ``ConsumerSubscription`` in Kafka's layout ``version``."""
    try:
        pb = group_pb2.ConsumerSubscription.FromString(payload)
    except DecodeError:
        return payload
    version = min(max(version, 0), ConsumerProtocolSubscription.max_version)
    values = {
        "topics": list(pb.topics),
        "user_data": pb.user_data or None,
        "owned_partitions": _grouped(pb.owned_partitions),
        "generation_id": pb.generation_id or -1,
        "rack_id": None,
    }
    return bytes(make(ConsumerProtocolSubscription, values, version).encode(header=True))


def assignment_in(payload: bytes) -> bytes:
    try:
        kafka = ConsumerProtocolAssignment.decode(payload, header=True)
    except Exception:
        return payload
    pb = group_pb2.ConsumerAssignment(user_data=kafka.user_data or b"")
    for assigned in kafka.assigned_partitions or []:
        pb.partitions.extend(
            common_pb2.TopicPartition(topic=assigned.topic, partition=p)
            for p in assigned.partitions
        )
    return pb.SerializeToString()


def assignment_out(payload: bytes) -> bytes:
    try:
        pb = group_pb2.ConsumerAssignment.FromString(payload)
    except DecodeError:
        return payload
    values = {"assigned_partitions": _grouped(pb.partitions), "user_data": pb.user_data or None}
    return bytes(make(ConsumerProtocolAssignment, values, 0).encode(header=True))


def _grouped(partitions: Iterable[common_pb2.TopicPartition]) -> list[Values]:
    topics: dict[str, list[int]] = {}
    for tp in partitions:
        topics.setdefault(tp.topic, []).append(tp.partition)
    return [{"topic": t, "partitions": ps} for t, ps in topics.items()]


# -- FindCoordinator ----------------------------------------------------------------------
async def find_coordinator(services: GroupServices, req: Request, ctx: CallContext) -> Values:
    kind = req.body.key_type
    return await answer_find_coordinator(req, lambda key: _coordinator(services, key, kind, ctx))


async def answer_find_coordinator(
    req: Request, entry: Callable[[str], Awaitable[Values]]
) -> Values:
    """FindCoordinator's answer from ``entry(key)`` for each key (many from v4, one
    before)."""
    body = req.body
    keys = list(body.coordinator_keys) if req.version >= 4 else [body.key]
    found = [await entry(key) for key in keys]
    if req.version >= 4:
        return {"coordinators": found}
    one = found[0]
    return {key: one[key] for key in ("error_code", "error_message", "node_id", "host", "port")}


async def _coordinator(
    services: GroupServices, key: str, key_type: int, ctx: CallContext
) -> Values:
    if key_type != GROUP_KEY:
        return {
            **_no_coordinator(key),
            "error_code": codes.INVALID_REQUEST,
            "error_message": f"coordinator key type {key_type}: groups (0) and transactions (1)",
        }
    pb = group_pb2.FindCoordinatorRequest(group_id=key)
    return await coordinator_entry(key, _call(services, pb, services.groups.FindCoordinator, ctx))


async def coordinator_entry(key: str, find: Awaitable[tuple[Any, int]]) -> Values:
    """One key's entry: the broker ``find`` (a metered FindCoordinator call) names, at
    its Kafka listener's port."""
    try:
        response, _ = await find
    except MeridianError as exc:
        return {
            **_no_coordinator(key),
            "error_code": codes.group_code(exc.code),
            "error_message": exc.message,
        }
    broker = response.coordinator
    if not broker.kafka_port:
        return {
            **_no_coordinator(key),
            "error_code": codes.group_code(ErrorCode.COORDINATOR_NOT_AVAILABLE),
            "error_message": f"broker {broker.id} coordinates it but serves no Kafka listener",
        }
    return {
        "key": key,
        "node_id": broker.id,
        "host": broker.host,
        "port": broker.kafka_port,
        "error_code": codes.NONE,
        "error_message": None,
    }


def _no_coordinator(key: str) -> Values:
    return {"key": key, "node_id": -1, "host": "", "port": -1}


# -- membership ---------------------------------------------------------------------------
async def join_group(services: GroupServices, req: Request, ctx: CallContext) -> Values:
    body = req.body
    consumer = body.protocol_type == CONSUMER
    protocols = [
        group_pb2.GroupProtocol(
            name=p.name, metadata=subscription_in(p.metadata) if consumer else p.metadata
        )
        for p in body.protocols
    ]
    pb = group_pb2.JoinGroupRequest(
        group_id=body.group_id,
        session_timeout_ms=body.session_timeout_ms,
        rebalance_timeout_ms=body.rebalance_timeout_ms
        if req.version >= 1
        else body.session_timeout_ms,
        member_id=body.member_id,
        group_instance_id=body.group_instance_id or "",
        protocol_type=body.protocol_type,
        protocols=protocols,
        client_id=req.client_id,
    )
    try:
        response, throttle_ms = await _call(services, pb, services.groups.JoinGroup, ctx)
    except MeridianError as exc:
        return {
            "error_code": codes.group_code(exc.code),
            "generation_id": -1,
            "protocol_type": body.protocol_type,
            "protocol_name": None if req.version >= 7 else "",
            "leader": "",
            "member_id": body.member_id,
            "members": [],
        }
    own = {p.name: p.metadata for p in body.protocols}.get(response.protocol_name, b"")
    version = payload_version(own)
    return {
        "throttle_time_ms": throttle_ms,
        "error_code": codes.NONE,
        "generation_id": response.generation_id,
        "protocol_type": body.protocol_type,
        "protocol_name": response.protocol_name,
        "leader": response.leader_id,
        "skip_assignment": False,
        "member_id": response.member_id,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id or None,
                "metadata": subscription_out(m.metadata, version) if consumer else m.metadata,
            }
            for m in response.members
        ],
    }


async def sync_group(services: GroupServices, req: Request, ctx: CallContext) -> Values:
    body = req.body
    # The protocol type is named from v5 on; before, a consumer group's payloads are
    # recognised by parsing (the coordinator stores what it is given).
    consumer = req.version < 5 or body.protocol_type in (None, CONSUMER)
    pb = group_pb2.SyncGroupRequest(
        group_id=body.group_id,
        generation_id=body.generation_id,
        member_id=body.member_id,
        assignments=[
            group_pb2.SyncGroupAssignment(
                member_id=a.member_id,
                assignment=assignment_in(a.assignment) if consumer else a.assignment,
            )
            for a in body.assignments
        ],
    )
    try:
        response, throttle_ms = await _call(services, pb, services.groups.SyncGroup, ctx)
    except MeridianError as exc:
        return {
            "error_code": codes.group_code(exc.code),
            "protocol_type": body.protocol_type,
            "protocol_name": body.protocol_name,
            "assignment": b"",
        }
    return {
        "throttle_time_ms": throttle_ms,
        "error_code": codes.NONE,
        "protocol_type": body.protocol_type,
        "protocol_name": response.protocol_name or body.protocol_name,
        "assignment": assignment_out(response.assignment) if consumer else response.assignment,
    }


async def heartbeat(services: GroupServices, req: Request, ctx: CallContext) -> Values:
    body = req.body
    pb = group_pb2.HeartbeatRequest(
        group_id=body.group_id, generation_id=body.generation_id, member_id=body.member_id
    )
    try:
        _, throttle_ms = await _call(services, pb, services.groups.Heartbeat, ctx)
    except MeridianError as exc:
        return {"error_code": codes.group_code(exc.code)}
    return {"throttle_time_ms": throttle_ms, "error_code": codes.NONE}


async def leave_group(services: GroupServices, req: Request, ctx: CallContext) -> Values:
    body = req.body
    members: list[tuple[str, str | None]] = (
        [(m.member_id, m.group_instance_id) for m in body.members]
        if req.version >= 3
        else [(body.member_id, None)]
    )
    if any(instance and not member for member, instance in members):
        members = await _members_by_instance(services, body.group_id, members, ctx)
    outcomes = []
    for member_id, instance_id in members:
        pb = group_pb2.LeaveGroupRequest(group_id=body.group_id, member_id=member_id)
        try:
            await _call(services, pb, services.groups.LeaveGroup, ctx)
            code = codes.NONE
        except MeridianError as exc:
            code = codes.group_code(exc.code)
        outcomes.append(
            {"member_id": member_id, "group_instance_id": instance_id, "error_code": code}
        )
    if req.version < 3:
        return {"error_code": outcomes[0]["error_code"]}
    return {"error_code": codes.NONE, "members": outcomes}


async def _members_by_instance(
    services: GroupServices,
    group_id: str,
    members: list[tuple[str, str | None]],
    ctx: CallContext,
) -> list[tuple[str, str | None]]:
    """``members`` with the member id of each one named only by its static instance id
    (an admin removing a static member sends no member id); unknown ones stay ""."""
    pb = group_pb2.DescribeGroupsRequest(group_ids=[group_id])
    try:
        response, _ = await _call(services, pb, services.groups.DescribeGroups, ctx)
    except MeridianError:
        return members
    current = {
        m.group_instance_id: m.member_id
        for g in response.groups
        for m in g.members
        if m.group_instance_id
    }
    return [(m or current.get(i or "", ""), i) for m, i in members]


# -- offsets ------------------------------------------------------------------------------
async def offset_commit(services: GroupServices, req: Request, ctx: CallContext) -> Values:
    body = req.body
    pb = group_pb2.OffsetCommitRequest(
        group_id=body.group_id,
        generation_id=body.generation_id_or_member_epoch,
        member_id=body.member_id,
    )
    for topic in body.topics:
        for p in topic.partitions:
            pb.partitions.add(
                topic=topic.name,
                partition=p.partition_index,
                offset=p.committed_offset,
                metadata=p.committed_metadata or "",
                leader_epoch=p.committed_leader_epoch if req.version >= 6 else -1,
            )
    asked = [(p.topic, p.partition) for p in pb.partitions]
    try:
        response, throttle_ms = await _call(services, pb, services.groups.OffsetCommit, ctx)
        outcome = {(r.topic, r.partition): codes.group_code(r.error) for r in response.results}
    except MeridianError as exc:
        throttle_ms, outcome = 0, dict.fromkeys(asked, codes.group_code(exc.code))
    topics: dict[str, list[Values]] = {}
    for topic, partition in asked:
        code = outcome.get((topic, partition), codes.UNKNOWN_SERVER_ERROR)
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    return {
        "throttle_time_ms": throttle_ms,
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
    }


async def offset_fetch(services: GroupServices, req: Request, ctx: CallContext) -> Values:
    body = req.body
    stable = req.version >= 7 and bool(body.require_stable)
    pb = group_pb2.OffsetFetchRequest(group_id=body.group_id, require_stable=stable)
    for topic in body.topics or []:
        pb.partitions.extend(
            common_pb2.TopicPartition(topic=topic.name, partition=p)
            for p in topic.partition_indexes
        )
    try:
        response, throttle_ms = await _call(services, pb, services.groups.OffsetFetch, ctx)
    except MeridianError as exc:
        code = codes.group_code(exc.code)
        failed = [
            {"name": tp.topic, "partitions": [_offset(tp.partition, -1, None, -1, code)]}
            for tp in pb.partitions
        ]
        return {"error_code": code, "topics": failed if req.version < 2 else []}
    topics: dict[str, list[Values]] = {}
    for r in response.results:
        topics.setdefault(r.topic, []).append(
            _offset(r.partition, r.offset, r.metadata, r.leader_epoch, codes.group_code(r.error))
        )
    return {
        "throttle_time_ms": throttle_ms,
        "error_code": codes.NONE,
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
    }


def _offset(partition: int, offset: int, metadata: str | None, epoch: int, code: int) -> Values:
    return {
        "partition_index": partition,
        "committed_offset": offset,
        "committed_leader_epoch": epoch if offset >= 0 else -1,
        "metadata": metadata if metadata else ("" if offset >= 0 else None),
        "error_code": code,
    }


# -- administration -----------------------------------------------------------------------
async def describe_groups(services: GroupServices, req: Request, ctx: CallContext) -> Values:
    pb = group_pb2.DescribeGroupsRequest(group_ids=list(req.body.groups))
    response, throttle_ms = await _call(services, pb, services.groups.DescribeGroups, ctx)
    return {"throttle_time_ms": throttle_ms, "groups": [_described(g) for g in response.groups]}


def _described(g: Any) -> Values:
    consumer = g.protocol_type == CONSUMER
    members = []
    for m in g.members:
        assignment = group_pb2.ConsumerAssignment(partitions=list(m.assignment)).SerializeToString()
        members.append(
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id or None,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": b"",
                "member_assignment": assignment_out(assignment) if consumer else b"",
            }
        )
    error = codes.group_code(g.error)
    gone = g.error == ErrorCode.GROUP_ID_NOT_FOUND  # Kafka describes a missing group as Dead
    return {
        "error_code": codes.NONE if gone else error,
        "group_id": g.group_id,
        "group_state": g.state or "Dead",
        "protocol_type": g.protocol_type,
        "protocol_data": g.protocol_name,
        "members": members,
    }


async def list_groups(services: GroupServices, req: Request, ctx: CallContext) -> Values:
    response, throttle_ms = await _call(
        services, group_pb2.ListGroupsRequest(), services.groups.ListGroups, ctx
    )
    wanted = {s.lower() for s in req.body.states_filter or []} if req.version >= 4 else set()
    return {
        "throttle_time_ms": throttle_ms,
        "error_code": codes.NONE,
        "groups": [
            {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state}
            for g in response.groups
            if not wanted or g.state.lower() in wanted
        ],
    }


async def delete_groups(services: GroupServices, req: Request, ctx: CallContext) -> Values:
    pb = group_pb2.DeleteGroupsRequest(group_ids=list(req.body.groups_names))
    try:
        response, throttle_ms = await _call(services, pb, services.groups.DeleteGroups, ctx)
        results = [
            {"group_id": r.group_id, "error_code": codes.group_code(r.error)}
            for r in response.results
        ]
    except MeridianError as exc:
        throttle_ms = 0
        results = [{"group_id": g, "error_code": codes.group_code(exc.code)} for g in pb.group_ids]
    return {"throttle_time_ms": throttle_ms, "results": results}

"""The GroupCoordinator gRPC service: a thin adapter over ``GroupCoordinator``.

Errors follow ``errors.proto``: a failure of a whole request ends the call through the
broker's one table and abort helper (``dataplane/broker/errors.py``: a gRPC status from
``GRPC_STATUS`` whose trailing metadata ``meridian-error`` names the ``ErrorCode``);
failures of one partition or one group travel in that result's ``error`` field. The
response-level ``error`` fields are left ``NONE``.

``locate(p)`` names the broker hosting ``__consumer_offsets`` partition ``p`` (None when
no broker does), which FindCoordinator returns; ``p`` is the partition of the group's
family (its trunk group id), as the coordinator places it. OffsetFetch answers a
lane-topic partition another group of the family still holds with that partition's
``HANDOVER_IN_PROGRESS`` (see ``coordinator``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TypeVar

import grpc
from google.protobuf.message import DecodeError

from dataplane._gen.meridian.v1 import common_pb2, group_pb2, group_pb2_grpc
from dataplane.broker.auth.authorizer import ADMIN, ALLOW_ALL, CONSUME, DESCRIBE, Authorizer
from dataplane.broker.errors import abort, to_error
from dataplane.broker.groups.codec import OffsetAndMetadata
from dataplane.broker.groups.coordinator import (
    GroupCoordinator,
    GroupSummary,
    OffsetCommit,
    check_group_id,
)
from dataplane.broker.groups.membership import JoinRequest
from dataplane.errors import ErrorCode, MeridianError

T = TypeVar("T")
CONSUMER_PROTOCOL = "consumer"


async def _answer(context: grpc.aio.ServicerContext, work: Awaitable[T]) -> T:
    """``work``'s result, or the call aborted with the typed error it raised."""
    try:
        return await work
    except Exception as exc:  # every failure leaves as a typed status (broker/errors.py)
        error = to_error(exc)
    await abort(context, error)


def client_host(peer: str) -> str:
    """The host part of a gRPC peer string (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``)."""
    _, _, address = peer.partition(":")
    host = address.rpartition(":")[0] if address.count(":") >= 1 else address
    return host.strip("[]") or peer


class GroupServicer(group_pb2_grpc.GroupCoordinatorServicer):
    """Serves ``group.proto`` from a ``GroupCoordinator`` (see the module docstring)."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        locate: Callable[[int], common_pb2.BrokerInfo | None],
        authorizer: Authorizer = ALLOW_ALL,
    ) -> None:
        self.coordinator = coordinator
        self.locate = locate
        self.authz = authorizer

    async def _authorize(
        self, context: grpc.aio.ServicerContext, group_id: str, operation: str = CONSUME
    ) -> None:
        """End the call with GROUP_AUTHORIZATION_FAILED unless the caller may do it."""
        error = self.authz.group_error(group_id, operation)
        if error is not None:
            await abort(context, error)

    async def FindCoordinator(  # noqa: N802
        self, request: group_pb2.FindCoordinatorRequest, context: grpc.aio.ServicerContext
    ) -> group_pb2.FindCoordinatorResponse:
        await self._authorize(context, request.group_id, DESCRIBE)

        async def find() -> group_pb2.FindCoordinatorResponse:
            check_group_id(request.group_id)
            partition = self.coordinator.partition_for(request.group_id)
            broker = self.locate(partition)
            if broker is None:
                raise MeridianError(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"no broker leads __consumer_offsets partition {partition}",
                )
            return group_pb2.FindCoordinatorResponse(coordinator=broker)

        return await _answer(context, find())

    async def JoinGroup(  # noqa: N802
        self, request: group_pb2.JoinGroupRequest, context: grpc.aio.ServicerContext
    ) -> group_pb2.JoinGroupResponse:
        await self._authorize(context, request.group_id)
        join = JoinRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=tuple((p.name, p.metadata) for p in request.protocols),
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=client_host(context.peer()),
        )
        result = await _answer(context, self.coordinator.join(join))
        return group_pb2.JoinGroupResponse(
            generation_id=result.generation_id,
            protocol_name=result.protocol_name,
            leader_id=result.leader_id,
            member_id=result.member_id,
            members=[
                group_pb2.JoinGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    metadata=m.metadata,
                )
                for m in result.members
            ],
        )

    async def SyncGroup(  # noqa: N802
        self, request: group_pb2.SyncGroupRequest, context: grpc.aio.ServicerContext
    ) -> group_pb2.SyncGroupResponse:
        await self._authorize(context, request.group_id)
        assignments = {a.member_id: a.assignment for a in request.assignments}
        work = self.coordinator.sync(
            request.group_id, request.generation_id, request.member_id, assignments
        )
        result = await _answer(context, work)
        return group_pb2.SyncGroupResponse(
            protocol_name=result.protocol_name, assignment=result.assignment
        )

    async def Heartbeat(  # noqa: N802
        self, request: group_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> group_pb2.HeartbeatResponse:
        await self._authorize(context, request.group_id)
        work = self.coordinator.heartbeat(
            request.group_id, request.generation_id, request.member_id
        )
        await _answer(context, work)
        return group_pb2.HeartbeatResponse()

    async def LeaveGroup(  # noqa: N802
        self, request: group_pb2.LeaveGroupRequest, context: grpc.aio.ServicerContext
    ) -> group_pb2.LeaveGroupResponse:
        await self._authorize(context, request.group_id)
        await _answer(context, self.coordinator.leave(request.group_id, request.member_id))
        return group_pb2.LeaveGroupResponse()

    async def OffsetCommit(  # noqa: N802
        self, request: group_pb2.OffsetCommitRequest, context: grpc.aio.ServicerContext
    ) -> group_pb2.OffsetCommitResponse:
        await self._authorize(context, request.group_id)
        commits = [
            OffsetCommit(p.topic, p.partition, p.offset, p.metadata, p.leader_epoch)
            for p in request.partitions
        ]
        refused = self._refused_topics((c.topic, c.partition) for c in commits)
        commits = [c for c in commits if (c.topic, c.partition) not in refused]
        work = self.coordinator.commit_offsets(
            request.group_id, request.generation_id, request.member_id, commits
        )
        results = {**await _answer(context, work), **refused}
        return group_pb2.OffsetCommitResponse(
            results=[
                group_pb2.OffsetCommitResult(
                    topic=topic,
                    partition=partition,
                    error=_code(error),
                    error_message=error.message if error else "",
                )
                for (topic, partition), error in results.items()
            ]
        )

    async def OffsetFetch(  # noqa: N802
        self, request: group_pb2.OffsetFetchRequest, context: grpc.aio.ServicerContext
    ) -> group_pb2.OffsetFetchResponse:
        await self._authorize(context, request.group_id)
        wanted = [(tp.topic, tp.partition) for tp in request.partitions] or None
        fetching = self.coordinator.fetch_offsets(
            request.group_id, wanted, require_stable=request.require_stable
        )
        offsets = await _answer(context, fetching)
        # Offsets of topics the caller may not read are not shown (as if none were stored).
        refused = self._refused_topics(offsets)
        shown: dict[tuple[str, int], OffsetAndMetadata | MeridianError | None] = {
            tp: (None if tp in refused else value) for tp, value in offsets.items()
        }
        if wanted is None:
            shown = {tp: value for tp, value in shown.items() if tp not in refused}
        return group_pb2.OffsetFetchResponse(results=_offset_results(shown))

    async def DescribeGroups(  # noqa: N802
        self, request: group_pb2.DescribeGroupsRequest, context: grpc.aio.ServicerContext
    ) -> group_pb2.DescribeGroupsResponse:
        return group_pb2.DescribeGroupsResponse(
            groups=[self._describe(group_id) for group_id in request.group_ids]
        )

    def _describe(self, group_id: str) -> group_pb2.GroupDescription:
        refusal = self.authz.group_error(group_id, DESCRIBE)
        if refusal is not None:
            return group_pb2.GroupDescription(
                group_id=group_id,
                error=_code(refusal),
                error_message=refusal.message,
                state="Dead",
            )
        try:
            summary = self.coordinator.describe(group_id)
        except MeridianError as exc:
            return group_pb2.GroupDescription(
                group_id=group_id, error=_code(exc), error_message=exc.message, state="Dead"
            )
        return _description(summary)

    async def ListGroups(  # noqa: N802
        self, request: group_pb2.ListGroupsRequest, context: grpc.aio.ServicerContext
    ) -> group_pb2.ListGroupsResponse:
        allowed = self.authz.may_describe_group
        listed = [g for g in self.coordinator.list_groups() if allowed(g.group_id)]
        return group_pb2.ListGroupsResponse(
            groups=[
                group_pb2.ListedGroup(
                    group_id=g.group_id, state=g.state, protocol_type=g.protocol_type
                )
                for g in listed
            ]
        )

    async def DeleteGroups(  # noqa: N802
        self, request: group_pb2.DeleteGroupsRequest, context: grpc.aio.ServicerContext
    ) -> group_pb2.DeleteGroupsResponse:
        refused = {
            group_id: error
            for group_id in request.group_ids
            if (error := self.authz.group_error(group_id, ADMIN)) is not None
        }
        allowed = [g for g in request.group_ids if g not in refused]
        deleted = await _answer(context, self.coordinator.delete_groups(allowed))
        outcomes = {**deleted, **refused}
        return group_pb2.DeleteGroupsResponse(
            results=[
                group_pb2.DeleteGroupsResult(
                    group_id=group_id,
                    error=_code(error),
                    error_message=error.message if error else "",
                )
                for group_id, error in outcomes.items()
            ]
        )

    def _refused_topics(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], MeridianError]:
        refused: dict[tuple[str, int], MeridianError] = {}
        for topic, partition in partitions:
            if (error := self.authz.topic_error(topic, CONSUME)) is not None:
                refused[(topic, partition)] = error
        return refused


def _code(error: MeridianError | None) -> ErrorCode.ValueType:
    return ErrorCode.ValueType(error.code if error else ErrorCode.NONE)


def _offset_results(
    offsets: Mapping[tuple[str, int], OffsetAndMetadata | MeridianError | None],
) -> list[group_pb2.OffsetFetchResult]:
    return [
        _offset_result(topic, partition, value)
        for (topic, partition), value in sorted(offsets.items())
    ]


def _offset_result(
    topic: str, partition: int, value: OffsetAndMetadata | MeridianError | None
) -> group_pb2.OffsetFetchResult:
    if isinstance(value, MeridianError):  # the lane hand-over fence (coordinator.py)
        return group_pb2.OffsetFetchResult(
            topic=topic,
            partition=partition,
            offset=-1,
            leader_epoch=-1,
            error=_code(value),
            error_message=value.message,
        )
    return group_pb2.OffsetFetchResult(
        topic=topic,
        partition=partition,
        offset=value.offset if value else -1,
        metadata=value.metadata if value else "",
        leader_epoch=value.leader_epoch if value else -1,
    )


def _description(summary: GroupSummary) -> group_pb2.GroupDescription:
    consumer = summary.protocol_type == CONSUMER_PROTOCOL
    return group_pb2.GroupDescription(
        group_id=summary.group_id,
        state=summary.state,
        protocol_type=summary.protocol_type,
        protocol_name=summary.protocol_name,
        generation_id=summary.generation_id,
        leader_id=summary.leader_id,
        members=[
            group_pb2.GroupMemberDescription(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                assignment=_assigned(m.assignment) if consumer else [],
            )
            for m in summary.members
        ],
        offsets=_offset_results(dict(summary.offsets)),
    )


def _assigned(assignment: bytes) -> list[common_pb2.TopicPartition]:
    """The partitions of a serialized ConsumerAssignment (none if it does not parse)."""
    try:
        return list(group_pb2.ConsumerAssignment.FromString(assignment).partitions)
    except DecodeError:
        return []

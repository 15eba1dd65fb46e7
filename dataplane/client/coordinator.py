"""Talking to a group's coordinator: finding it, retrying, and the calls that need no
membership.

``CoordinatorLink`` finds the coordinator with FindCoordinator on any broker and finds
it again after ``NOT_COORDINATOR``, ``COORDINATOR_NOT_AVAILABLE`` or a transport error,
with backoff. ``JoinRound`` (JoinGroup then SyncGroup, in the background), ``heartbeat``
and ``leave_group`` are the membership calls ``GroupMember`` (``group.py``) makes
through one.

``commit_offsets``, ``fetch_committed``, ``describe_group``, ``list_groups`` and
``delete_group`` work without membership (consumers that ``assign()`` partitions, the
admin client, the CLI).

Thread safety: everything here may be called from any thread.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

from dataplane._gen.meridian.v1 import common_pb2, group_pb2
from dataplane.client.connection import Connection
from dataplane.client.metadata import ClusterMetadata
from dataplane.client.types import TopicPartition
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 30.0
RETRY_BACKOFF_S = 0.1
MAX_BACKOFF_S = 1.0
# Answers that mean "find the coordinator again".
COORDINATOR_ERRORS = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.BROKER_NOT_AVAILABLE,
        ErrorCode.REQUEST_TIMED_OUT,
    }
)
# Answers that mean "the group moved on: join it again".
REJOIN_ERRORS = frozenset(
    {ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID}
)


class _ChannelClosedError(MeridianError):
    """The shared channel was closed (after another call's failure) under this call."""


def backoff_s(attempt: int) -> float:
    """The pause before retry ``attempt`` (exponential, capped, with jitter)."""
    return min(MAX_BACKOFF_S, RETRY_BACKOFF_S * 2.0**attempt) * random.uniform(0.8, 1.2)


class CoordinatorLink:
    """Calls a group's coordinator, finding it (again) and retrying as needed.

    ``call`` retries coordinator errors (module docstring) and
    ``COORDINATOR_LOAD_IN_PROGRESS`` with backoff until ``api_timeout_s`` passes, then
    raises the last error; any other error is raised at once. Thread-safe.

    ``service`` and ``find`` make it a link to another kind of coordinator: the stub of a
    connection the calls go to, and how the coordinator's address is found (the
    transaction coordinator's, ``dataplane.client.transactions``); ``retry`` adds codes
    worth retrying as they are.
    """

    def __init__(
        self,
        metadata: ClusterMetadata,
        group_id: str,
        *,
        service: Callable[[Connection], Any] | None = None,
        find: Callable[[Connection, str], str] | None = None,
        retry: frozenset[int] = frozenset(),
    ) -> None:
        self.metadata = metadata
        self.group_id = group_id
        self._service = service or (lambda conn: conn.group)
        self._find_on = find or _find_group_coordinator
        self._retry = retry
        self._lock = threading.Lock()
        self._address: str | None = None

    def call(
        self,
        rpc: str,
        request: Any,
        *,
        timeout_s: float = REQUEST_TIMEOUT_S,
        api_timeout_s: float | None = None,
        check: Callable[[Any], None] | None = None,
        stop: threading.Event | None = None,
    ) -> Any:
        """Send ``request`` to the coordinator's ``rpc``; ``check`` raises errors found in
        the response, which are retried like request-level ones. Setting ``stop`` ends
        the retries (the last error is raised). ``api_timeout_s`` bounds the retries
        (None: the metadata's ``api_timeout_s``)."""
        if api_timeout_s is None:
            api_timeout_s = self.metadata.api_timeout_s
        deadline = time.monotonic() + api_timeout_s
        pause = stop or threading.Event()
        for attempt in itertools.count():
            try:
                response = self._call_once(rpc, request, timeout_s)
                if check is not None:
                    check(response)
                return response
            except MeridianError as exc:
                left = deadline - time.monotonic()
                if not self._worth_retrying(exc) or left <= 0:
                    raise
                if pause.wait(min(backoff_s(attempt), left)):
                    raise
        raise AssertionError("unreachable")

    def _call_once(self, rpc: str, request: Any, timeout_s: float) -> Any:
        conn = self.coordinator()
        try:
            response = getattr(self._service(conn), rpc)(request, timeout=timeout_s)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc) from exc
        except ValueError as exc:  # another thread closed the channel after a failure
            raise _ChannelClosedError(ErrorCode.BROKER_NOT_AVAILABLE, str(exc)) from exc
        if getattr(response, "error", 0):
            raise MeridianError(response.error, response.error_message)
        return response

    def _worth_retrying(self, error: MeridianError) -> bool:
        if isinstance(error, _ChannelClosedError):
            self.forget()  # the pool has a new channel (or opens one) for the next call
            return True
        if error.code in COORDINATOR_ERRORS:
            self.forget(transport=error.code == ErrorCode.BROKER_NOT_AVAILABLE)
            return True
        return error.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS or error.code in self._retry

    def coordinator(self) -> Connection:
        """The coordinator's connection, found with FindCoordinator if not known."""
        with self._lock:
            address = self._address
        if address is None:
            address = self._find()
            with self._lock:
                self._address = address
        return self.metadata.pool.get(address)

    def _find(self) -> str:
        conn = self.metadata.any_connection()
        try:
            return self._find_on(conn, self.group_id)
        except grpc.RpcError as exc:
            self.metadata.pool.forget(conn.address)
            raise error_from_rpc(exc) from exc
        except ValueError as exc:
            raise _ChannelClosedError(ErrorCode.BROKER_NOT_AVAILABLE, str(exc)) from exc

    def forget(self, *, transport: bool = False) -> None:
        """Find the coordinator again next time (and drop its channel after a transport error)."""
        with self._lock:
            address, self._address = self._address, None
        if transport and address is not None:
            self.metadata.pool.forget(address)


# -- membership calls -------------------------------------------------------------------


def _find_group_coordinator(conn: Connection, group_id: str) -> str:
    request = group_pb2.FindCoordinatorRequest(group_id=group_id)
    response = conn.group.FindCoordinator(request, timeout=REQUEST_TIMEOUT_S)
    if response.error:
        raise MeridianError(response.error, response.error_message)
    return f"{response.coordinator.host}:{response.coordinator.port}"


class JoinRound:
    """One JoinGroup + SyncGroup round trip, on a thread of its own: JoinGroup is answered
    only once every member of the group has rejoined (up to the rebalance timeout), which
    the member's own thread must not wait for.

    Subclasses give the ``join_request()``; the other hooks run on the round's thread:
    ``on_join(response)`` gets the JoinGroup answer and says whether to go on,
    ``lead(response)`` (the leader's round only) returns member id -> assignment, and
    ``on_end()`` runs last whatever happened, with ``assignment`` (this member's,
    encoded) or ``error`` set.
    """

    def __init__(
        self, link: CoordinatorLink, *, rebalance_timeout_ms: int, stop: threading.Event
    ) -> None:
        self.link = link
        # how long each call may take: the coordinator parks it up to the rebalance timeout
        self.wait_s = rebalance_timeout_ms / 1000 + REQUEST_TIMEOUT_S
        self.stop = stop
        self.assignment: bytes | None = None
        self.error: MeridianError | None = None
        self._thread = threading.Thread(target=self._run, name=f"join-{link.group_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join_request(self) -> group_pb2.JoinGroupRequest:
        raise NotImplementedError

    def on_join(self, response: group_pb2.JoinGroupResponse) -> bool:
        return True

    def lead(self, response: group_pb2.JoinGroupResponse) -> Mapping[str, bytes]:
        return {}

    def on_end(self) -> None:
        pass

    def _run(self) -> None:
        try:
            self._round_trip()
        except MeridianError as exc:
            self.error = exc
        except Exception as exc:  # a bug: reported like any failure of the round
            log.exception("group %s: joining failed", self.link.group_id)
            self.error = MeridianError(ErrorCode.UNKNOWN_SERVER_ERROR, repr(exc))
        finally:
            self.on_end()

    def _round_trip(self) -> None:
        joined = self._call("JoinGroup", self.join_request())
        if not self.on_join(joined):
            return
        assignments = self.lead(joined) if joined.leader_id == joined.member_id else {}
        request = group_pb2.SyncGroupRequest(
            group_id=self.link.group_id,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            assignments=[
                group_pb2.SyncGroupAssignment(member_id=mid, assignment=data)
                for mid, data in assignments.items()
            ],
        )
        self.assignment = bytes(self._call("SyncGroup", request).assignment)

    def _call(self, rpc: str, request: Any) -> Any:
        wait_s = self.wait_s
        return self.link.call(rpc, request, timeout_s=wait_s, api_timeout_s=wait_s, stop=self.stop)


def heartbeat(
    link: CoordinatorLink,
    generation: int,
    member_id: str,
    *,
    session_timeout_ms: int,
    stop: threading.Event,
) -> None:
    """One heartbeat, retried within the session timeout."""
    request = group_pb2.HeartbeatRequest(
        group_id=link.group_id, generation_id=generation, member_id=member_id
    )
    session_s = session_timeout_ms / 1000
    link.call("Heartbeat", request, timeout_s=session_s, api_timeout_s=session_s, stop=stop)


def leave_group(link: CoordinatorLink, member_id: str, *, timeout_s: float = 5.0) -> None:
    request = group_pb2.LeaveGroupRequest(group_id=link.group_id, member_id=member_id)
    link.call("LeaveGroup", request, timeout_s=timeout_s, api_timeout_s=timeout_s)


# -- committed offsets ------------------------------------------------------------------


def offset_commit(
    link: CoordinatorLink,
    offsets: Mapping[TopicPartition, int],
    metadata: str,
    generation: int,
    member_id: str,
) -> None:
    """Commit ``offsets`` as ``member_id`` of ``generation`` (-1 and "" outside membership);
    the first partition that failed raises, naming how many did."""
    request = group_pb2.OffsetCommitRequest(
        group_id=link.group_id,
        generation_id=generation,
        member_id=member_id,
        partitions=[
            group_pb2.OffsetCommitPartition(
                topic=tp.topic,
                partition=tp.partition,
                offset=offset,
                metadata=metadata,
                leader_epoch=-1,
            )
            for tp, offset in offsets.items()
        ],
    )
    if not request.partitions:
        return
    response = link.call("OffsetCommit", request)
    failed = [r for r in response.results if r.error]
    if failed:
        first = failed[0]
        raise MeridianError(
            first.error,
            f"{first.topic}-{first.partition}: {first.error_message} "
            f"({len(failed)} of {len(response.results)} partitions failed)",
        )


def offset_fetch(
    link: CoordinatorLink, partitions: Iterable[TopicPartition] | None
) -> dict[TopicPartition, int | None]:
    """Committed offsets of ``partitions`` (None: every committed one); None where none."""
    wanted = None if partitions is None else list(partitions)
    if wanted == []:
        return {}
    request = group_pb2.OffsetFetchRequest(
        group_id=link.group_id,
        partitions=[common_pb2.TopicPartition(topic=t, partition=p) for t, p in wanted or ()],
    )
    response = link.call("OffsetFetch", request)
    return {
        TopicPartition(r.topic, r.partition): (r.offset if r.offset >= 0 else None)
        for r in response.results
    }


def offset_fetch_handover(
    link: CoordinatorLink, partitions: Iterable[TopicPartition], *, require_stable: bool = False
) -> tuple[dict[TopicPartition, int | None], set[TopicPartition]]:
    """Committed offsets of ``partitions`` (None where none), and the lane-topic
    partitions another group of the family still holds (``HANDOVER_IN_PROGRESS``) or,
    with ``require_stable``, an open transaction committed an offset of
    (``UNSTABLE_OFFSET_COMMIT``): these have no answer yet and must not be read until one
    comes."""
    wanted = list(partitions)
    if not wanted:
        return {}, set()
    request = group_pb2.OffsetFetchRequest(
        group_id=link.group_id,
        partitions=[common_pb2.TopicPartition(topic=t, partition=p) for t, p in wanted],
        require_stable=require_stable,
    )
    response = link.call("OffsetFetch", request)
    offsets: dict[TopicPartition, int | None] = {}
    held: set[TopicPartition] = set()
    for r in response.results:
        tp = TopicPartition(r.topic, r.partition)
        if r.error in (ErrorCode.HANDOVER_IN_PROGRESS, ErrorCode.UNSTABLE_OFFSET_COMMIT):
            held.add(tp)
        else:
            offsets[tp] = r.offset if r.offset >= 0 else None
    return offsets, held


def commit_offsets(
    metadata: ClusterMetadata,
    group_id: str,
    offsets: Mapping[TopicPartition, int],
    *,
    metadata_str: str = "",
) -> None:
    """Commit ``offsets`` for ``group_id`` outside group membership (an ``assign()``
    consumer); refused with ``UNKNOWN_MEMBER_ID`` while the group has members."""
    offset_commit(CoordinatorLink(metadata, group_id), offsets, metadata_str, -1, "")


def fetch_committed(
    metadata: ClusterMetadata,
    group_id: str,
    partitions: Iterable[TopicPartition] | None = None,
) -> dict[TopicPartition, int | None]:
    """Committed offsets of ``partitions`` (None: every committed one); None where none."""
    return offset_fetch(CoordinatorLink(metadata, group_id), partitions)


# -- administration ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str
    client_id: str
    client_host: str
    assignment: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group as its coordinator sees it; ``state`` is ``Dead`` for an unknown group."""

    group_id: str
    state: str
    protocol_type: str = ""
    protocol: str = ""
    generation_id: int = -1
    leader_id: str = ""
    members: tuple[MemberDescription, ...] = ()
    committed: dict[TopicPartition, int] = field(default_factory=dict)


def describe_group(metadata: ClusterMetadata, group_id: str) -> GroupDescription:
    """State, members with their assignments, and committed offsets of ``group_id``."""

    def check(response: Any) -> None:
        found = response.groups[0]
        if found.error and found.error != ErrorCode.GROUP_ID_NOT_FOUND:
            raise MeridianError(found.error, found.error_message)

    request = group_pb2.DescribeGroupsRequest(group_ids=[group_id])
    found = CoordinatorLink(metadata, group_id).call("DescribeGroups", request, check=check)
    g = found.groups[0]
    if g.error:
        return GroupDescription(group_id, "Dead")
    members = tuple(
        MemberDescription(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            frozenset(TopicPartition(a.topic, a.partition) for a in m.assignment),
        )
        for m in g.members
    )
    committed = {TopicPartition(o.topic, o.partition): o.offset for o in g.offsets}
    return GroupDescription(
        g.group_id,
        g.state,
        g.protocol_type,
        g.protocol_name,
        g.generation_id,
        g.leader_id,
        members,
        committed,
    )


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    state: str
    protocol_type: str


def list_groups(metadata: ClusterMetadata) -> list[GroupListing]:
    """Every group of the cluster: each broker lists those it coordinates."""
    metadata.refresh()
    listed: dict[str, GroupListing] = {}
    for broker in metadata.snapshot().brokers.values():
        conn = metadata.pool.get(broker.address)
        try:
            response = conn.group.ListGroups(
                group_pb2.ListGroupsRequest(), timeout=REQUEST_TIMEOUT_S
            )
        except grpc.RpcError as exc:
            raise error_from_rpc(exc) from exc
        for g in response.groups:
            listed[g.group_id] = GroupListing(g.group_id, g.state, g.protocol_type)
    return sorted(listed.values(), key=lambda g: g.group_id)


def delete_group(metadata: ClusterMetadata, group_id: str) -> None:
    """Delete an empty group and its committed offsets (``NON_EMPTY_GROUP`` if it has
    members, ``GROUP_ID_NOT_FOUND`` if there is no such group)."""

    def check(response: Any) -> None:
        result = response.results[0]
        if result.error:
            raise MeridianError(result.error, result.error_message)

    request = group_pb2.DeleteGroupsRequest(group_ids=[group_id])
    CoordinatorLink(metadata, group_id).call("DeleteGroups", request, check=check)

"""The group membership protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, expiry.

Kafka's semantics (``group.py`` has the state machine):

- JoinGroup: a member without an id gets ``<client id>-<uuid>``; a member naming an id
  the group does not know gets ``UNKNOWN_MEMBER_ID``. A join starts a rebalance (or
  joins the one under way) and is answered once every known member has rejoined, or
  when the rebalance timeout (the largest of the members') passes, at which point the
  members that did not rejoin are removed. The answer carries the new generation, the
  chosen protocol (one every member supports, most preferred first) and the leader; the
  leader alone also gets every member's metadata. A member rejoining a Stable group
  with unchanged protocols (and not the leader) just gets the current generation back.
- Static members (``group_instance_id``): a join by a new incarnation fences the old
  member id; in a Stable group with unchanged protocols it takes over the old
  assignment without a rebalance.
- SyncGroup: the leader's request carries the assignments, which are persisted before
  any member (the leader included) is answered; followers wait for them.
- Heartbeat: ``REBALANCE_IN_PROGRESS`` while a rebalance is being prepared,
  ``ILLEGAL_GENERATION`` for a stale generation, ``UNKNOWN_MEMBER_ID`` for a member the
  group does not have.
- A member that sends nothing for its session timeout (while not parked in JoinGroup or
  SyncGroup) is removed, as is one that leaves; either starts a rebalance.

Thread safety: none; everything runs on the coordinator's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from dataplane.broker.groups.codec import GroupRecord
from dataplane.broker.groups.group import (
    Group,
    GroupState,
    JoinedMember,
    JoinResult,
    Member,
    SyncResult,
    Waiter,
)
from dataplane.errors import ErrorCode, MeridianError

log = logging.getLogger(__name__)

MAX_ID_CHARS = 255


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    group_instance_id: str = ""
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class SessionBounds:
    min_session_timeout_ms: int = 1_000
    max_session_timeout_ms: int = 300_000


def _error(code: int, message: str) -> MeridianError:
    return MeridianError(code, message)


class Membership:
    """Runs the membership protocol over ``Group`` objects (see the module docstring).

    ``persist(group_id, record)`` durably records a group's metadata (raising
    ``MeridianError``);
    ``clock_ms`` is the time every session and rebalance deadline is measured with.
    """

    def __init__(
        self,
        *,
        clock_ms: Callable[[], int],
        persist: Callable[[str, GroupRecord], Coroutine[Any, Any, None]],
        bounds: SessionBounds = SessionBounds(),
    ) -> None:
        self._clock_ms = clock_ms
        self._persist = persist
        self.bounds = bounds
        self._tasks: set[asyncio.Task[None]] = set()

    # -- JoinGroup -----------------------------------------------------------------------
    async def join(self, group: Group, request: JoinRequest) -> JoinResult:
        self._validate_join(request)
        group.next_check_ms = 0
        if group.state is GroupState.DEAD:
            raise _error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {group.group_id!r} is gone")
        member = group.members.get(request.member_id) if request.member_id else None
        if request.member_id and member is None:
            raise _error(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"member {request.member_id!r} is not in group {group.group_id!r}",
            )
        names = [name for name, _ in request.protocols]
        group.check_protocols(request.member_id, request.protocol_type, names)
        if member is None:
            return await self._join_new(group, request)
        return await self._rejoin(group, member, request)

    def _validate_join(self, request: JoinRequest) -> None:
        low, high = self.bounds.min_session_timeout_ms, self.bounds.max_session_timeout_ms
        if not low <= request.session_timeout_ms <= high:
            raise _error(
                ErrorCode.INVALID_SESSION_TIMEOUT,
                f"session timeout {request.session_timeout_ms} ms is outside [{low}, {high}] ms",
            )
        if request.rebalance_timeout_ms < 0:
            raise _error(ErrorCode.INVALID_REQUEST, "rebalance timeout must not be negative")
        if not request.protocol_type or not request.protocols:
            raise _error(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "a join needs a protocol type and protocols"
            )
        if any(not name for name, _ in request.protocols):
            raise _error(ErrorCode.INVALID_REQUEST, "a protocol needs a name")
        for what in ("client_id", "group_instance_id", "protocol_type"):
            if len(getattr(request, what)) > MAX_ID_CHARS:
                raise _error(ErrorCode.INVALID_REQUEST, f"{what} exceeds {MAX_ID_CHARS} characters")

    def _new_member(self, request: JoinRequest) -> Member:
        return Member(
            member_id=f"{request.client_id or 'member'}-{uuid.uuid4()}",
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms or request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=list(request.protocols),
            last_heartbeat_ms=self._clock_ms(),
        )

    async def _join_new(self, group: Group, request: JoinRequest) -> JoinResult:
        member = self._new_member(request)
        if request.group_instance_id:
            old = group.member_by_instance(request.group_instance_id)
            if old is not None:
                return await self._replace_static(group, old, member)
        group.add(member)
        return await self._park_join(group, member)

    async def _replace_static(self, group: Group, old: Member, new: Member) -> JoinResult:
        old.fail_waiters(
            _error(ErrorCode.UNKNOWN_MEMBER_ID, f"fenced by a new {old.group_instance_id!r}")
        )
        new.assignment = old.assignment
        group.members = {
            (new.member_id if mid == old.member_id else mid): (new if m is old else m)
            for mid, m in group.members.items()
        }
        if group.leader_id == old.member_id:
            group.leader_id = new.member_id
        if group.state is GroupState.STABLE and old.protocols == new.protocols:
            await self._persist(group.group_id, group.to_record(self._clock_ms()))
            return self._join_result(group, new)
        return await self._park_join(group, new)

    async def _rejoin(self, group: Group, member: Member, request: JoinRequest) -> JoinResult:
        unchanged = member.protocols == list(request.protocols)
        member.protocols = list(request.protocols)
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms or request.session_timeout_ms
        member.last_heartbeat_ms = self._clock_ms()
        stable_follower = group.state is GroupState.STABLE and member.member_id != group.leader_id
        if unchanged and (stable_follower or group.state is GroupState.COMPLETING_REBALANCE):
            return self._join_result(group, member)
        return await self._park_join(group, member)

    async def _park_join(self, group: Group, member: Member) -> JoinResult:
        if member.joining is not None:
            member.joining.resolve(_error(ErrorCode.REBALANCE_IN_PROGRESS, "a newer join came"))
        waiter: Waiter[JoinResult] = Waiter()
        member.joining = waiter
        if group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group)
        return await waiter.wait()

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        members: tuple[JoinedMember, ...] = ()
        if member.member_id == group.leader_id:
            members = tuple(
                JoinedMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                for m in group.members.values()
            )
        return JoinResult(
            group.generation_id, group.protocol_name, group.leader_id, member.member_id, members
        )

    # -- rebalancing ---------------------------------------------------------------------
    def _prepare_rebalance(self, group: Group) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            rebalance = _error(ErrorCode.REBALANCE_IN_PROGRESS, "the group is rebalancing again")
            for member in group.members.values():
                member.assignment = b""
                if member.syncing is not None:
                    member.syncing.resolve(rebalance)
        group.state, group.next_check_ms = GroupState.PREPARING_REBALANCE, 0
        group.rebalance_deadline_ms = self._clock_ms() + group.max_rebalance_timeout_ms()
        self._maybe_complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state is GroupState.PREPARING_REBALANCE and group.all_rejoined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        late = _error(ErrorCode.UNKNOWN_MEMBER_ID, "did not rejoin within the rebalance timeout")
        for member in [m for m in group.members.values() if not m.is_joining]:
            group.remove(member.member_id, late)
        group.generation_id += 1
        group.next_check_ms = 0
        if not group.members:
            group.state, group.protocol_name, group.leader_id = GroupState.EMPTY, "", ""
            group.synced_assignments = {}  # nobody holds anything any more
            self._spawn(self._persist(group.group_id, group.to_record(self._clock_ms())))
            return
        group.protocol_name = group.select_protocol()
        group.state = GroupState.COMPLETING_REBALANCE
        now = self._clock_ms()
        for member in group.members.values():
            member.last_heartbeat_ms = now
            if member.joining is not None:
                member.joining.resolve(self._join_result(group, member))

    # -- SyncGroup -----------------------------------------------------------------------
    async def sync(
        self,
        group: Group | None,
        generation_id: int,
        member_id: str,
        assignments: Mapping[str, bytes],
    ) -> SyncResult:
        group, member = self._current_member(group, member_id)
        group.next_check_ms = 0
        if generation_id != group.generation_id:
            raise self._illegal_generation(group, generation_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            raise _error(ErrorCode.REBALANCE_IN_PROGRESS, "rejoin the group")
        if group.state is GroupState.STABLE:
            return SyncResult(group.protocol_name, member.assignment)
        member.last_heartbeat_ms = self._clock_ms()
        if member.syncing is not None:
            member.syncing.resolve(_error(ErrorCode.REBALANCE_IN_PROGRESS, "a newer sync came"))
        waiter: Waiter[SyncResult] = Waiter()
        member.syncing = waiter
        if member_id == group.leader_id:
            self._spawn(self._complete_sync(group, dict(assignments)))
        return await waiter.wait()

    async def _complete_sync(self, group: Group, assignments: dict[str, bytes]) -> None:
        generation = group.generation_id
        group.next_check_ms = 0
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        try:
            await self._persist(group.group_id, group.to_record(self._clock_ms()))
        except MeridianError as exc:
            if self._still(group, generation, GroupState.COMPLETING_REBALANCE):
                for member in group.members.values():
                    if member.syncing is not None:
                        member.syncing.resolve(exc)
                self._prepare_rebalance(group)
            return
        if self._still(group, generation, GroupState.COMPLETING_REBALANCE):
            group.state, group.next_check_ms = GroupState.STABLE, 0
            group.synced_assignments = {m.member_id: m.assignment for m in group.members.values()}
            for member in group.members.values():
                if member.syncing is not None:
                    member.syncing.resolve(SyncResult(group.protocol_name, member.assignment))

    @staticmethod
    def _still(group: Group, generation: int, state: GroupState) -> bool:
        return group.generation_id == generation and group.state is state

    # -- Heartbeat, LeaveGroup, commits, expiry -------------------------------------------
    def heartbeat(self, group: Group | None, generation_id: int, member_id: str) -> None:
        group, member = self._current_member(group, member_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            member.last_heartbeat_ms = self._clock_ms()
            raise _error(ErrorCode.REBALANCE_IN_PROGRESS, "rejoin the group")
        if generation_id != group.generation_id:
            raise self._illegal_generation(group, generation_id)
        member.last_heartbeat_ms = self._clock_ms()

    def leave(self, group: Group | None, member_id: str) -> None:
        group, member = self._current_member(group, member_id)
        self._remove(group, member, _error(ErrorCode.UNKNOWN_MEMBER_ID, "the member left"))

    def check_commit(
        self,
        group: Group | None,
        generation_id: int,
        member_id: str,
        *,
        transactional: bool = False,
    ) -> None:
        """Refuse a commit the group's membership does not allow (module docstring of
        ``coordinator.py``); a member's commit counts as a heartbeat. A transactional
        commit without a generation and member id (TxnOffsetCommit v0-2, Java's
        ``sendOffsetsToTransaction(offsets, groupId)``) is accepted whatever the group's
        state, as in Kafka: its transaction's producer fencing guards it instead."""
        if generation_id < 0 and not member_id:
            if transactional:
                return
            if group is not None and group.members:
                raise _error(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"group {group.group_id!r} has active members: commit as one of them",
                )
            return
        group, member = self._current_member(group, member_id)
        if generation_id != group.generation_id:
            raise self._illegal_generation(group, generation_id)
        if group.state is GroupState.COMPLETING_REBALANCE:
            raise _error(ErrorCode.REBALANCE_IN_PROGRESS, "the group is completing a rebalance")
        member.last_heartbeat_ms = self._clock_ms()

    def expire(self, group: Group) -> None:
        """Remove members whose session lapsed; end a rebalance whose time is up.

        Cheap until the group's next deadline (joins, syncs and leaves reset it)."""
        now = self._clock_ms()
        if now < group.next_check_ms:
            return
        for member in [m for m in group.members.values() if m.session_expired(now)]:
            if member.member_id in group.members:
                timeout = _error(ErrorCode.UNKNOWN_MEMBER_ID, "the member's session timed out")
                self._remove(group, member, timeout)
        preparing = group.state is GroupState.PREPARING_REBALANCE
        if preparing and now >= group.rebalance_deadline_ms:
            self._complete_join(group)
        group.next_check_ms = group.next_deadline_ms()

    def _remove(self, group: Group, member: Member, error: MeridianError) -> None:
        log.info("group %s: removing %s (%s)", group.group_id, member.member_id, error.message)
        group.remove(member.member_id, error)
        group.next_check_ms = 0
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join(group)

    def shut_out(self, group: Group, error: MeridianError) -> None:
        """Fail every parked request of ``group`` (its partition is being unloaded)."""
        for member in group.members.values():
            member.fail_waiters(error)

    # -- helpers -------------------------------------------------------------------------
    @staticmethod
    def _current_member(group: Group | None, member_id: str) -> tuple[Group, Member]:
        member = group.members.get(member_id) if group is not None else None
        if member is None or group is None or group.state is GroupState.DEAD:
            where = f"group {group.group_id!r}" if group is not None else "the group"
            raise _error(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in {where}")
        return group, member

    @staticmethod
    def _illegal_generation(group: Group, generation_id: int) -> MeridianError:
        return _error(
            ErrorCode.ILLEGAL_GENERATION,
            f"generation {generation_id} is not group {group.group_id!r}'s "
            f"current generation {group.generation_id}",
        )

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("group coordination task failed", exc_info=task.exception())

    async def drain(self) -> None:
        """Wait for background persistence in flight."""
        if self._tasks:
            await asyncio.wait(list(self._tasks))

"""A consumer group's in-memory state: members, generation, protocol and state machine.

States, as in Kafka::

    Empty --join--> PreparingRebalance --all rejoined or timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable / CompletingRebalance --join, leave, expiry--> PreparingRebalance
    PreparingRebalance --no member left--> Empty;   Empty --DeleteGroups--> Dead

A ``Member`` waiting for its JoinGroup or SyncGroup answer holds an unresolved future;
futures are resolved with a result or a ``MeridianError`` value (never an exception set
on the future), so an answer nobody waits for any more leaves no warning behind.

Thread safety: none; a group is used only on the coordinator's event loop.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from dataplane.broker.groups.codec import GroupRecord, MemberRecord
from dataplane.errors import ErrorCode, MeridianError

T = TypeVar("T")


class GroupState(enum.StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    """A JoinGroup answer; ``members`` is filled for the leader only."""

    generation_id: int
    protocol_name: str
    leader_id: str
    member_id: str
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    protocol_name: str
    assignment: bytes


class Waiter(Generic[T]):
    """A future answer to a parked request, resolved with a value or a ``MeridianError``."""

    def __init__(self) -> None:
        self.future: asyncio.Future[T | MeridianError] = asyncio.get_running_loop().create_future()

    @property
    def pending(self) -> bool:
        return not self.future.done()

    def resolve(self, outcome: T | MeridianError) -> None:
        if not self.future.done():
            self.future.set_result(outcome)

    async def wait(self) -> T:
        """The answer; a cancelled caller leaves the future (and the member's place) intact."""
        outcome = await asyncio.shield(self.future)
        if isinstance(outcome, MeridianError):
            raise outcome
        return outcome


@dataclass
class Member:
    member_id: str
    group_instance_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_heartbeat_ms: int = 0
    joining: Waiter[JoinResult] | None = None
    syncing: Waiter[SyncResult] | None = None

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")

    @property
    def is_joining(self) -> bool:
        return self.joining is not None and self.joining.pending

    @property
    def awaiting_answer(self) -> bool:
        """Parked in JoinGroup or SyncGroup: alive without heartbeats meanwhile."""
        return self.is_joining or (self.syncing is not None and self.syncing.pending)

    def session_expired(self, now_ms: int) -> bool:
        return (
            not self.awaiting_answer and now_ms - self.last_heartbeat_ms >= self.session_timeout_ms
        )

    def fail_waiters(self, error: MeridianError) -> None:
        for waiter in (self.joining, self.syncing):
            if waiter is not None:
                waiter.resolve(error)

    def to_record(self) -> MemberRecord:
        return MemberRecord(
            self.member_id,
            self.group_instance_id,
            self.client_id,
            self.client_host,
            self.session_timeout_ms,
            self.rebalance_timeout_ms,
            self.assignment,
        )


@dataclass
class Group:
    """One group's membership state; see the module docstring for the state machine."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    protocol_type: str = ""
    protocol_name: str = ""
    generation_id: int = 0
    leader_id: str = ""
    members: dict[str, Member] = field(default_factory=dict)  # in join order
    rebalance_deadline_ms: int = 0
    # no session or rebalance deadline falls before this; 0 after any change
    next_check_ms: int = 0
    # member id -> assignment, as the last completed SyncGroup left them: what the
    # members hold during a rebalance (the hand-over fence of lane families)
    synced_assignments: dict[str, bytes] = field(default_factory=dict)

    # -- membership --------------------------------------------------------------------
    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if not self.leader_id:
            self.leader_id = member.member_id

    def remove(self, member_id: str, error: MeridianError) -> Member | None:
        """Take a member out, failing its parked requests with ``error``."""
        member = self.members.pop(member_id, None)
        if member is not None:
            member.fail_waiters(error)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), "")
        return member

    def member_by_instance(self, group_instance_id: str) -> Member | None:
        return next(
            (m for m in self.members.values() if m.group_instance_id == group_instance_id), None
        )

    def all_rejoined(self) -> bool:
        return all(member.is_joining for member in self.members.values())

    def next_deadline_ms(self) -> int:
        """The earliest time a session may lapse or the rebalance may time out."""
        times = [
            m.last_heartbeat_ms + m.session_timeout_ms
            for m in self.members.values()
            if not m.awaiting_answer
        ]
        if self.state is GroupState.PREPARING_REBALANCE:
            times.append(self.rebalance_deadline_ms)
        return min(times, default=2**63 - 1)

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols ---------------------------------------------------------------------
    def candidate_protocols(self, excluding: str = "") -> set[str] | None:
        """Protocols every member (but ``excluding``) supports; None when there is none."""
        others = [m for m in self.members.values() if m.member_id != excluding]
        if not others:
            return None
        candidates = set(others[0].protocol_names)
        for member in others[1:]:
            candidates &= set(member.protocol_names)
        return candidates

    def check_protocols(self, member_id: str, protocol_type: str, names: list[str]) -> None:
        """Refuse a member whose protocols the others cannot share."""
        candidates = self.candidate_protocols(excluding=member_id)
        if candidates is None:
            return
        if protocol_type != self.protocol_type or not candidates & set(names):
            raise MeridianError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"group {self.group_id!r} uses protocol type {self.protocol_type!r} with "
                f"{sorted(candidates)}; the member offers {protocol_type!r} with {names}",
            )

    def select_protocol(self) -> str:
        """The common protocol most members prefer (ties: the leader's preference order)."""
        candidates = self.candidate_protocols() or set()
        votes = Counter(
            next(name for name in m.protocol_names if name in candidates)
            for m in self.members.values()
        )
        leader = self.members.get(self.leader_id) or next(iter(self.members.values()))
        ranked = [name for name in leader.protocol_names if name in candidates]
        return max(ranked, key=lambda name: (votes[name], -ranked.index(name)))

    # -- persistence -------------------------------------------------------------------
    def to_record(self, now_ms: int) -> GroupRecord:
        members = tuple(m.to_record() for m in self.members.values())
        return GroupRecord(
            self.protocol_type,
            self.generation_id,
            self.protocol_name,
            self.leader_id,
            now_ms,
            members,
        )

    @classmethod
    def from_record(cls, group_id: str, record: GroupRecord, now_ms: int) -> Group:
        """A group as its last record left it; restored members get a fresh session."""
        group = cls(
            group_id,
            state=GroupState.STABLE if record.members else GroupState.EMPTY,
            protocol_type=record.protocol_type,
            protocol_name=record.protocol_name,
            generation_id=record.generation_id,
            leader_id=record.leader_id,
        )
        for rec in record.members:
            group.members[rec.member_id] = Member(
                rec.member_id,
                rec.group_instance_id,
                rec.client_id,
                rec.client_host,
                rec.session_timeout_ms,
                rec.rebalance_timeout_ms,
                record.protocol_type,
                [(record.protocol_name, b"")],
                assignment=rec.assignment,
                last_heartbeat_ms=now_ms,
            )
        group.synced_assignments = {m.member_id: m.assignment for m in record.members}
        return group

"""Consumer-group membership and committed offsets for the SDK.

``GroupMember`` is one consumer's membership of a group, as Kafka's consumer coordinator
does it: ``poll()`` (called by ``Consumer.poll``) never waits for the group. When the
member must join or rejoin, ``poll()`` runs the callbacks due before joining, then hands
the JoinGroup/SyncGroup round trip to a thread of its own (JoinGroup is answered only
once every member has rejoined, which can take up to ``rebalance_timeout_ms``) and
returns; a later ``poll()`` finds the round trip done, installs the assignment and runs
the ``RebalanceListener`` callbacks. Callbacks always run in the thread calling
``poll()``. A background thread sends a heartbeat every ``heartbeat_interval_ms`` and
notes what the coordinator answers (a rebalance to join, a lost membership, a fatal
error), which the next ``poll()`` acts on or raises. If ``poll()`` is not called for
``max_poll_interval_ms`` the heartbeat thread leaves the group, and the next ``poll()``
reports the partitions lost and rejoins.

Rebalance protocol: cooperative when every configured assignor supports it (only
``cooperative-sticky`` does), else eager. Eager: every partition is revoked before
joining, and the new assignment is given whole to ``on_partitions_assigned``.
Cooperative: partitions are kept through the rebalance; those taken away are revoked
(``on_partitions_revoked``) and the member rejoins at once so the group can hand them on,
then ``on_partitions_assigned`` gets the ones added. A membership found lost (unknown
member, stale generation, left for a poll timeout) reports ``on_partitions_lost``.

Talking to the coordinator (finding it, retries, the calls) is ``coordinator.py``;
its helpers that need no membership (``commit_offsets``, ``fetch_committed``,
``describe_group``, ``list_groups``, ``delete_group``) are importable from here too.

Thread safety: ``commit``, ``committed``, ``assignment`` and ``generation`` may be called
from any thread; ``poll``, ``subscribe`` and ``close`` from the consumer's thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from dataplane._gen.meridian.v1 import group_pb2
from dataplane.client.assignors import (
    RebalanceProtocol,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    get_assignor,
    rebalance_protocol,
)
from dataplane.client.coordinator import (  # the helpers without membership: re-exported
    REJOIN_ERRORS,
    CoordinatorLink,
    JoinRound,
    backoff_s,
    commit_offsets,
    delete_group,
    describe_group,
    fetch_committed,
    heartbeat,
    leave_group,
    list_groups,
    offset_commit,
    offset_fetch,
    offset_fetch_handover,
)
from dataplane.client.metadata import ClusterMetadata
from dataplane.client.types import TopicPartition
from dataplane.errors import ErrorCode, MeridianError

__all__ = [
    "CommitFailedError",
    "CoordinatorLink",
    "GroupMember",
    "RebalanceListener",
    "commit_offsets",
    "delete_group",
    "describe_group",
    "fetch_committed",
    "list_groups",
    "offset_fetch_handover",
    "partition_counts",
]

log = logging.getLogger(__name__)

CONSUMER_PROTOCOL = "consumer"


class CommitFailedError(MeridianError):
    """A commit refused because the group rebalanced (or this member left it).

    ``code`` is what the coordinator said (``REBALANCE_IN_PROGRESS``,
    ``ILLEGAL_GENERATION``, ``UNKNOWN_MEMBER_ID``); the partitions may now belong to
    another member. ``poll()`` rejoins; commit again what is still assigned after it.
    """


class RebalanceListener(Protocol):
    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None: ...
    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None: ...
    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None: ...


# -- membership ----------------------------------------------------------------------


@dataclass
class _State:
    """What the member knows of its membership; guarded by ``GroupMember._lock``."""

    member_id: str = ""
    generation: int = -1
    assignment: frozenset[TopicPartition] = frozenset()
    rejoin_needed: bool = True
    lost: bool = False
    joining: bool = False  # a JoinGroup/SyncGroup round trip is in flight: no heartbeats
    fatal: MeridianError | None = None
    # while this member leads: the group's topics and their partition counts (known ones)
    leader_topics: tuple[str, ...] = ()
    leader_counts: dict[str, int] | None = None
    last_poll: float = field(default_factory=time.monotonic)


class GroupMember:
    """One consumer's membership of ``group_id`` (see the module docstring)."""

    PARTITION_CHECK_INTERVAL_S = 5.0  # how often the leader looks for new partitions

    def __init__(
        self,
        metadata: ClusterMetadata,
        *,
        group_id: str,
        assignors: Sequence[str] = ("range", "cooperative-sticky"),
        session_timeout_ms: int = 10000,
        rebalance_timeout_ms: int = 30000,
        heartbeat_interval_ms: int = 3000,
        max_poll_interval_ms: int = 300000,
        client_id: str = "meridian",
        group_instance_id: str | None = None,
        listener: RebalanceListener | None = None,
    ) -> None:
        if not group_id:
            raise MeridianError(ErrorCode.INVALID_GROUP_ID, "a group id is required")
        if not assignors:
            raise MeridianError(ErrorCode.INVALID_CONFIG, "at least one assignor is required")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise MeridianError(
                ErrorCode.INVALID_CONFIG, "heartbeat_interval_ms must be below session_timeout_ms"
            )
        self.metadata = metadata
        self.group_id = group_id
        self.assignors = tuple(assignors)
        self.protocol = rebalance_protocol(self.assignors)
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.client_id = client_id
        self.group_instance_id = group_instance_id or ""
        self.listener = listener
        self.link = CoordinatorLink(metadata, group_id)
        self._lock = threading.RLock()
        self._state = _State()
        self._topics: tuple[str, ...] = ()
        self._next_partition_check = 0.0
        self._stop = threading.Event()
        self._heartbeats: threading.Thread | None = None
        self._closed = False
        self._round: _JoinRound | None = None  # in flight, or done and not yet acted on
        # called on the round's thread when a round trip ends, so a caller blocked
        # waiting for records (Consumer.poll) can come back and install it
        self.on_round_done: Callable[[], None] | None = None
        # the poll thread's own: retries of failed rounds, the first callback error
        self._failures = 0
        self._retry_at = 0.0
        self._callback_error: BaseException | None = None

    # -- the public API --------------------------------------------------------------
    def subscribe(self, topics: Sequence[str]) -> None:
        """Consume ``topics``; takes effect (a rejoin) at the next ``poll()``."""
        chosen = tuple(sorted(set(topics)))
        with self._lock:
            if chosen != self._topics:
                self._topics = chosen
                self._state.rejoin_needed = True

    def assignment(self) -> frozenset[TopicPartition]:
        with self._lock:
            return self._state.assignment

    def generation(self) -> tuple[int, str]:
        with self._lock:
            return self._state.generation, self._state.member_id

    def poll(self) -> None:
        """Start or finish a rebalance as needed, running listener callbacks here; never
        waits for the group (the round trip runs in the background).

        Raises a fatal error the heartbeat thread met, a non-retriable error of the last
        round trip, and any error a callback raised (once the rebalance it happened in
        is over).
        """
        with self._lock:
            self._check_open()
            fatal, self._state.fatal = self._state.fatal, None
            self._state.last_poll = time.monotonic()
            state = self._state
            joined = self._round is not None or bool(state.member_id or state.assignment)
        if fatal is not None:
            raise fatal
        if not self._topics:  # unsubscribed: give everything up and leave
            if joined:
                self._drop_membership(leave=not self.group_instance_id)
            return
        self._start_heartbeats()
        self._maybe_check_partitions()
        self._advance_rebalance()

    def commit(self, offsets: Mapping[TopicPartition, int], *, metadata: str = "") -> None:
        """Commit ``offsets`` (the next offsets to consume) as a member of the group.

        Raises ``CommitFailedError`` when the group rebalanced or the member is not in
        it, and ``MeridianError`` for any other failure (a partition's own included).
        """
        with self._lock:
            generation, member_id = self._state.generation, self._state.member_id
        if generation < 0 or not member_id:
            raise CommitFailedError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"not a member of group {self.group_id!r} yet"
            )
        try:
            offset_commit(self.link, offsets, metadata, generation, member_id)
        except MeridianError as exc:
            if exc.code not in REJOIN_ERRORS:
                raise
            self._note_rejoin(exc, generation)
            raise CommitFailedError(
                exc.code,
                f"commit refused, group {self.group_id!r} rebalanced ({exc.message}); "
                "poll() to rejoin, then commit what is still assigned",
            ) from exc

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        return offset_fetch(self.link, partitions)

    def committed_or_held(
        self, partitions: Iterable[TopicPartition], *, require_stable: bool = False
    ) -> tuple[dict[TopicPartition, int | None], set[TopicPartition]]:
        """``committed``, and the partitions without an answer yet: a lane-topic partition
        another group of the family still holds, or (``require_stable``) one an open
        transaction committed (see ``coordinator.offset_fetch_handover``)."""
        return offset_fetch_handover(self.link, partitions, require_stable=require_stable)

    def request_rejoin(self) -> None:
        """Rejoin at the next ``poll()`` (what the group reads changed underneath it)."""
        with self._lock:
            self._state.rejoin_needed = True

    def close(self, *, leave: bool = True) -> None:
        """Stop heartbeats, revoke the assignment (callbacks here) and leave the group.

        A static member (``group_instance_id``) does not send LeaveGroup: its session
        timeout ends its membership unless it comes back first. A round trip in flight
        is abandoned, not waited for.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        if self._heartbeats is not None:
            self._heartbeats.join(self.session_timeout_ms / 1000)
        self._drop_membership(leave=leave and not self.group_instance_id)

    def _drop_membership(self, *, leave: bool = True) -> None:
        """Give the assignment up (revoked, or lost if the membership was) and leave.
        The listener is told while the membership still stands, so what it commits on
        revocation is committed under the current generation (as Kafka's consumer does
        before it leaves)."""
        with self._lock:
            state = self._state
        try:
            if state.assignment and self.listener is not None:
                valid = state.generation >= 0 and not state.lost
                callback = "on_partitions_revoked" if valid else "on_partitions_lost"
                getattr(self.listener, callback)(set(state.assignment))
        finally:
            with self._lock:
                state, self._state = self._state, _State(rejoin_needed=True)
                if self._round is not None:
                    self._round.abandon(leave=leave)
                    self._round = None
            if leave and state.member_id:
                self._leave(state.member_id)

    # -- rebalancing, in the poll thread -------------------------------------------------
    def _advance_rebalance(self) -> None:
        """Act on a finished round trip, then start the next one if the group needs it."""
        with self._lock:
            finished = self._round if self._round is not None and self._round.done else None
            if finished is not None:
                self._round = None
        if finished is not None:
            self._conclude(finished)
        if self._round is None and self._needs_join() and time.monotonic() >= self._retry_at:
            self._prepare()
            self._start_round()
        if self._round is None and self._callback_error is not None:
            error, self._callback_error = self._callback_error, None
            raise error

    def _rebalancing(self) -> bool:
        """Whether a round trip is in flight or waits for ``poll()`` to install it."""
        return self._round is not None

    def _prepare(self) -> None:
        """Before joining: report lost partitions, or revoke (all of them, when eager)."""
        with self._lock:
            state = self._state
            lost = state.lost or (state.generation < 0 and bool(state.assignment))
            eager = self.protocol is RebalanceProtocol.EAGER
            gone = frozenset(tp for tp in state.assignment if tp.topic not in self._topics)
            dropped = state.assignment if (lost or eager) else gone
            state.assignment = state.assignment - dropped
            state.lost = False
        if dropped:
            self._notify("on_partitions_lost" if lost else "on_partitions_revoked", dropped)

    def _start_round(self) -> None:
        with self._lock:
            state = self._state
            state.rejoin_needed, state.joining = False, True
            subscription = Subscription(self._topics, tuple(state.assignment), state.generation)
            self._round = _JoinRound(self, subscription, state.member_id, state.generation)
        self._round.start()

    def _conclude(self, round_: _JoinRound) -> None:
        """Install what a round got, or schedule the next try (raising what is fatal)."""
        error = round_.error
        if error is None:
            self._failures = 0
            self._install(round_)
            return
        if error.code in REJOIN_ERRORS:
            return  # the round noted it in the state: rejoin at once
        self._failures += 1
        self._retry_at = time.monotonic() + backoff_s(self._failures)
        if not error.retriable:
            raise error
        log.info("group %s: could not join yet: %s", self.group_id, error)

    def _install(self, round_: _JoinRound) -> None:
        """Adopt a round's assignment, unless the membership moved on since it ended."""
        with self._lock:
            state = self._state
            if (state.member_id, state.generation) != (round_.member_id, round_.generation):
                return  # a heartbeat found it gone; the next round reports the loss
            state.leader_topics, state.leader_counts = round_.leader or ((), None)
            owned, assigned = state.assignment, decode_assignment(round_.assignment or b"")
            revoked, added = owned - assigned, assigned - owned
            state.assignment = assigned
            if revoked:  # cooperative: give them up, then rejoin so the group hands them on
                state.rejoin_needed = True
        if round_.leader is not None:
            self._next_partition_check = time.monotonic() + self.PARTITION_CHECK_INTERVAL_S
        if revoked:
            self._notify("on_partitions_revoked", revoked)
        eager = self.protocol is RebalanceProtocol.EAGER
        self._notify("on_partitions_assigned", assigned if eager else added)

    def _notify(self, callback: str, partitions: frozenset[TopicPartition]) -> None:
        if self.listener is None:
            return
        try:
            getattr(self.listener, callback)(set(partitions))
        except Exception as exc:  # raised from poll() once the rebalance is over
            log.exception("group %s: %s failed", self.group_id, callback)
            if self._callback_error is None:
                self._callback_error = exc

    # -- internals ---------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise MeridianError(ErrorCode.INVALID_REQUEST, "the group member is closed")

    def _needs_join(self) -> bool:
        with self._lock:
            state = self._state
            return state.rejoin_needed or state.lost or state.generation < 0

    def _note_rejoin(self, error: MeridianError, generation: int) -> None:
        """Act on a rejoin error for ``generation`` (ignored if the member moved on)."""
        with self._lock:
            state = self._state
            if state.generation != generation:
                return
            state.rejoin_needed = True
            if error.code == ErrorCode.UNKNOWN_MEMBER_ID:
                state.member_id, state.generation, state.lost = "", -1, True
            elif error.code == ErrorCode.ILLEGAL_GENERATION:
                state.generation, state.lost = -1, True

    def _maybe_check_partitions(self) -> None:
        """As the leader, rejoin when a topic of the group gained partitions."""
        with self._lock:
            topics, counts = self._state.leader_topics, self._state.leader_counts
        now = time.monotonic()
        if counts is None or now < self._next_partition_check:
            return
        self._next_partition_check = now + self.PARTITION_CHECK_INTERVAL_S
        try:
            self.metadata.refresh(topics)
        except MeridianError as exc:
            log.debug("partition check of group %s failed: %s", self.group_id, exc)
            return
        if partition_counts(self.metadata, topics) != counts:
            log.info("group %s: partition counts changed, rebalancing", self.group_id)
            with self._lock:
                self._state.rejoin_needed = True

    def _leave(self, member_id: str) -> None:
        try:
            leave_group(self.link, member_id)
        except MeridianError as exc:
            log.info("group %s: leaving failed (%s); the session will expire", self.group_id, exc)

    # -- heartbeats --------------------------------------------------------------------
    def _start_heartbeats(self) -> None:
        if self._heartbeats is None:
            self._heartbeats = threading.Thread(
                target=self._heartbeat_loop, name=f"heartbeat-{self.group_id}", daemon=True
            )
            self._heartbeats.start()

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_interval_ms / 1000):
            try:
                self._heartbeat_once()
            except MeridianError as exc:
                with self._lock:
                    self._state.fatal = exc
            except Exception as exc:  # a bug: surface it at the next poll() all the same
                log.exception("group %s: heartbeat failed", self.group_id)
                with self._lock:
                    self._state.fatal = MeridianError(ErrorCode.UNKNOWN_SERVER_ERROR, repr(exc))

    def _heartbeat_once(self) -> None:
        with self._lock:
            state = self._state
            if state.joining or state.generation < 0 or not state.member_id:
                return
            generation, member_id = state.generation, state.member_id
            idle_s = time.monotonic() - state.last_poll
        if idle_s * 1000 > self.max_poll_interval_ms:
            self._leave_for_poll_timeout(generation, member_id)
            return
        try:
            heartbeat(
                self.link,
                generation,
                member_id,
                session_timeout_ms=self.session_timeout_ms,
                stop=self._stop,
            )
        except MeridianError as exc:
            if exc.code in REJOIN_ERRORS:
                self._note_rejoin(exc, generation)
            elif not exc.retriable:
                raise
            else:
                log.debug("group %s: heartbeat failed: %s", self.group_id, exc)

    def _leave_for_poll_timeout(self, generation: int, member_id: str) -> None:
        log.warning(
            "group %s: poll() not called for %d ms (max_poll_interval_ms); leaving the group",
            self.group_id,
            self.max_poll_interval_ms,
        )
        with self._lock:
            if self._state.generation != generation:
                return
            self._state.member_id, self._state.generation = "", -1
            self._state.lost = self._state.rejoin_needed = True
        if not self.group_instance_id:
            self._leave(member_id)


class _JoinRound(JoinRound):
    """This member's round trip (``coordinator.JoinRound``).

    It records the member id and generation joined in the member's state at once
    (heartbeats and commits use them) and, on failure, notes that a rejoin is needed;
    the ``poll()`` that finds it ``done`` installs the assignment. An abandoned round
    (the member unsubscribed or closed meanwhile) changes nothing, and leaves the group
    again under a member id only it was told.
    """

    def __init__(
        self, member: GroupMember, subscription: Subscription, member_id: str, generation: int
    ) -> None:
        super().__init__(
            member.link, rebalance_timeout_ms=member.rebalance_timeout_ms, stop=member._stop
        )
        self.m = member
        self.subscription = subscription
        # the membership it ends with (the install checks it is still the member's)
        self.member_id, self.generation = member_id, generation
        self.leader: tuple[tuple[str, ...], dict[str, int]] | None = None  # topics, counts
        self.done = False  # guarded by the member's lock, as the two below
        self._abandoned = False
        self._leave_abandoned = False

    def abandon(self, *, leave: bool) -> None:
        """Detach from the member (whose lock the caller holds)."""
        self._abandoned, self._leave_abandoned = True, leave

    def join_request(self) -> group_pb2.JoinGroupRequest:
        m = self.m
        metadata = encode_subscription(self.subscription)
        return group_pb2.JoinGroupRequest(
            group_id=m.group_id,
            session_timeout_ms=m.session_timeout_ms,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            member_id=self.member_id,
            group_instance_id=m.group_instance_id,
            protocol_type=CONSUMER_PROTOCOL,
            protocols=[group_pb2.GroupProtocol(name=n, metadata=metadata) for n in m.assignors],
            client_id=m.client_id,
        )

    def on_join(self, response: group_pb2.JoinGroupResponse) -> bool:
        """Record the membership joined; if abandoned instead, leave it (unless under the
        member id the abandoning side knew, and left itself) and stop."""
        m, member_id, generation = self.m, response.member_id, response.generation_id
        with m._lock:
            if not self._abandoned:
                m._state.member_id, m._state.generation = member_id, generation
                self.member_id, self.generation = member_id, generation
                return True
            leave = self._leave_abandoned and member_id != self.member_id
        if leave:
            m._leave(member_id)
        return False

    def lead(self, response: group_pb2.JoinGroupResponse) -> dict[str, bytes]:
        """Run the chosen assignor over every member's subscription."""
        m = self.m
        subscriptions = {
            member.member_id: decode_subscription(member.metadata, member.group_instance_id)
            for member in response.members
        }
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        try:
            m.metadata.refresh(topics)
        except MeridianError as exc:
            log.warning("group %s: metadata refresh failed: %s", m.group_id, exc)
        counts = partition_counts(m.metadata, topics)
        result = get_assignor(response.protocol_name).assign(subscriptions, counts)
        self.leader = (tuple(topics), counts)
        return {member_id: encode_assignment(tps) for member_id, tps in result.items()}

    def on_end(self) -> None:
        m = self.m
        with m._lock:
            self.done = True
            if self._abandoned:
                return
            m._state.joining = False
            if self.error is not None:
                m._state.rejoin_needed = True
                if self.error.code in REJOIN_ERRORS:
                    m._note_rejoin(self.error, self.generation)
        if m.on_round_done is not None:
            m.on_round_done()


def partition_counts(metadata: ClusterMetadata, topics: Iterable[str]) -> dict[str, int]:
    """Topic -> partition count, from the metadata cache; unknown topics are left out."""
    counts: dict[str, int] = {}
    for topic in topics:
        try:
            partitions = metadata.partitions_for(topic)
        except MeridianError:
            continue
        counts[topic] = max(partitions) + 1
    return counts

"""GroupMember end to end against an in-process coordinator (see
tests/dataplane/broker/groups/support.py): members polling in their own threads, as
consumers do, and several members polled from one thread; and the coordinator.py
helpers that need no membership."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dataplane.client import coordinator, group
from dataplane.client.connection import ConnectionPool
from dataplane.client.coordinator import (
    commit_offsets,
    delete_group,
    describe_group,
    fetch_committed,
    list_groups,
)
from dataplane.client.group import CommitFailedError, GroupMember
from dataplane.client.metadata import ClusterMetadata
from dataplane.client.types import TopicPartition
from dataplane.errors import ErrorCode, MeridianError
from tests.dataplane.broker.groups.members import Recorder, Runner
from tests.dataplane.broker.groups.members import settled as settled_on
from tests.dataplane.broker.groups.support import CoordinatorServer, wait_for

TOPICS = {"orders": 6, "audit": 2}
ALL = {TopicPartition(t, p) for t, n in TOPICS.items() for p in range(n)}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[CoordinatorServer]:
    with CoordinatorServer(tmp_path / "data", topics=TOPICS) as server:
        yield server


@pytest.fixture
def metadata(server: CoordinatorServer) -> Iterator[ClusterMetadata]:
    pool = ConnectionPool(server.address)
    yield ClusterMetadata(pool, timeout_s=5)
    pool.close()


def settled(*members: Runner, expect: set[TopicPartition] = ALL) -> bool:
    return settled_on(*members, expect=expect)


@pytest.fixture
def runners(metadata: ClusterMetadata) -> Iterator[Callable[..., Runner]]:
    started: list[Runner] = []

    def start(name: str, **settings: Any) -> Runner:
        topics = settings.pop("topics", sorted(TOPICS))
        runner = Runner(metadata, name, topics, **settings).start()
        started.append(runner)
        return runner

    yield start
    for runner in started:
        if runner.thread.is_alive():
            runner.stop()
        assert not runner.listener.errors, runner.listener.errors


def test_three_members_share_every_partition_once(runners: Callable[..., Runner]) -> None:
    members = [runners(name) for name in ("a", "b", "c")]
    assert wait_for(lambda: settled(*members), timeout_s=20)
    assert {len(m.assignment) for m in members} == {2, 3}  # range: 6+2 over 3 members
    for m in members:
        kinds = [kind for kind, _ in m.listener.events]
        assert kinds[-1] == "assigned"
        assert "lost" not in kinds


def test_eager_members_revoke_everything_before_rejoining(
    runners: Callable[..., Runner],
) -> None:
    a = runners("a")
    assert wait_for(lambda: settled(a))
    b = runners("b")
    assert wait_for(lambda: settled(a, b))
    events = a.listener.events
    assert events[0] == ("assigned", frozenset(ALL))
    assert events[1] == ("revoked", frozenset(ALL))
    assert events[2] == ("assigned", a.assignment)
    assert b.listener.events == [("assigned", b.assignment)]


def test_cooperative_sticky_moves_only_what_it_must(
    runners: Callable[..., Runner],
) -> None:
    owners: dict[TopicPartition, str] = {}
    coop = {"assignors": ("cooperative-sticky",), "owners": owners}
    a = runners("a", **coop)
    assert wait_for(lambda: settled(a))
    b = runners("b", **coop)
    assert wait_for(lambda: settled(a, b))
    assert {len(a.assignment), len(b.assignment)} == {4}
    revoked = [p for kind, p in a.listener.events if kind == "revoked"]
    assert len(revoked) == 1
    assert revoked[0] == ALL - a.assignment  # a gave up only what b took
    before = {m.name: m.assignment for m in (a, b)}
    c = runners("c", **coop)
    assert wait_for(lambda: settled(a, b, c))
    for m in (a, b):
        assert len(before[m.name] - m.assignment) <= 2
        assert m.assignment <= before[m.name]  # nothing new for the old members
    assert owners == {tp: m.name for m in (a, b, c) for tp in m.assignment}


def test_a_member_that_closes_hands_its_partitions_on(
    runners: Callable[..., Runner],
) -> None:
    a, b = runners("a", session_timeout_ms=30_000), runners("b", session_timeout_ms=30_000)
    assert wait_for(lambda: settled(a, b))
    b.stop()
    assert b.listener.events[-1] == ("revoked", b.listener.events[-2][1])
    assert wait_for(lambda: settled(a))  # well before b's 30 s session could expire


def test_a_silent_member_is_expired(runners: Callable[..., Runner]) -> None:
    a, b = runners("a", session_timeout_ms=500), runners("b", session_timeout_ms=500)
    assert wait_for(lambda: settled(a, b))
    b.stop(leave=False)  # like a SIGKILLed consumer: no LeaveGroup, no more heartbeats
    assert wait_for(lambda: settled(a), timeout_s=20)


def test_commits_are_fenced_after_the_group_moves_on(
    runners: Callable[..., Runner],
) -> None:
    a = runners("a", rebalance_timeout_ms=500)
    assert wait_for(lambda: settled(a))
    tp = TopicPartition("orders", 0)
    a.member.commit({tp: 17}, metadata="note")
    assert a.member.committed([tp, TopicPartition("orders", 1)]) == {
        tp: 17,
        TopicPartition("orders", 1): None,
    }
    a.paused.set()  # a stops polling, so it does not rejoin
    b = runners("b", rebalance_timeout_ms=500)
    assert wait_for(lambda: settled(b), timeout_s=20)
    with pytest.raises(CommitFailedError) as info:
        a.member.commit({tp: 18})
    assert info.value.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION)
    assert b.member.committed([tp]) == {tp: 17}
    a.paused.clear()
    assert wait_for(lambda: settled(a, b))
    assert ("lost", frozenset(ALL)) in a.listener.events


def test_a_member_that_stops_polling_leaves(runners: Callable[..., Runner]) -> None:
    a = runners("a", max_poll_interval_ms=300, session_timeout_ms=30_000)
    b = runners("b", max_poll_interval_ms=60_000, session_timeout_ms=30_000)
    assert wait_for(lambda: settled(a, b))
    a.paused.set()
    assert wait_for(lambda: b.assignment == ALL and settled(b))
    a.paused.clear()
    assert wait_for(lambda: settled(a, b))
    assert any(kind == "lost" for kind, _ in a.listener.events)


def test_new_partitions_reach_the_group(
    runners: Callable[..., Runner], server: CoordinatorServer
) -> None:
    a, b = runners("a", partition_check_s=0.05), runners("b", partition_check_s=0.05)
    assert wait_for(lambda: settled(a, b))
    server.topics["orders"] = 9
    grown = ALL | {TopicPartition("orders", p) for p in (6, 7, 8)}
    assert wait_for(lambda: settled(a, b, expect=grown), timeout_s=20)


def test_members_ride_out_a_coordinator_restart(
    runners: Callable[..., Runner], server: CoordinatorServer
) -> None:
    a, b = runners("a", session_timeout_ms=5000), runners("b", session_timeout_ms=5000)
    assert wait_for(lambda: settled(a, b))
    generation = a.member.generation()
    server.stop()
    server.start()
    a.member.commit({next(iter(a.assignment)): 5})
    assert a.member.generation() == generation  # the group was restored, not rebuilt
    c = runners("c", session_timeout_ms=5000)  # a and b must hear of it from the new one
    assert wait_for(lambda: settled(a, b, c), timeout_s=20)


def test_a_fatal_heartbeat_error_surfaces_at_poll(metadata: ClusterMetadata) -> None:
    member = GroupMember(metadata, group_id="g", heartbeat_interval_ms=20, session_timeout_ms=1000)
    member.subscribe(["orders"])
    member.poll()
    real_call = member.link.call

    def failing(rpc: str, request: Any, **kwargs: Any) -> Any:
        if rpc == "Heartbeat":
            raise MeridianError(ErrorCode.INVALID_REQUEST, "refused")
        return real_call(rpc, request, **kwargs)

    member.link.call = failing  # type: ignore[method-assign]
    with pytest.raises(MeridianError) as info:
        assert wait_for(lambda: member.poll() and False, timeout_s=5)
    assert info.value.code == ErrorCode.INVALID_REQUEST
    member.close()


def test_bad_settings_are_refused_with_typed_errors(metadata: ClusterMetadata) -> None:
    with pytest.raises(MeridianError) as info:
        GroupMember(metadata, group_id="g", assignors=("fastest",))
    assert info.value.code == ErrorCode.INVALID_CONFIG
    member = GroupMember(
        metadata, group_id="g", session_timeout_ms=400_000, heartbeat_interval_ms=100
    )
    member.subscribe(["orders"])
    with pytest.raises(MeridianError) as info:  # the join's answer, at a later poll
        assert wait_for(lambda: member.poll() and False, timeout_s=5)
    assert info.value.code == ErrorCode.INVALID_SESSION_TIMEOUT
    member.close()


def test_offsets_outside_membership_and_administration(
    metadata: ClusterMetadata, runners: Callable[..., Runner]
) -> None:
    tps = [TopicPartition("orders", 0), TopicPartition("orders", 1)]
    commit_offsets(metadata, "manual", {tps[0]: 3, tps[1]: 4}, metadata_str="x")
    assert fetch_committed(metadata, "manual") == {tps[0]: 3, tps[1]: 4}
    assert fetch_committed(metadata, "manual", [TopicPartition("audit", 0)]) == {
        TopicPartition("audit", 0): None
    }
    with pytest.raises(MeridianError) as info:
        commit_offsets(metadata, "manual", {TopicPartition("orders", 2): -5})
    assert info.value.code == ErrorCode.INVALID_COMMIT_OFFSET
    a = runners("a")
    assert wait_for(lambda: settled(a))
    described = describe_group(metadata, "app")
    assert (described.state, described.protocol, described.protocol_type) == (
        "Stable",
        "range",
        "consumer",
    )
    assert [(m.client_id, m.assignment) for m in described.members] == [("a", a.assignment)]
    assert describe_group(metadata, "missing").state == "Dead"
    assert {g.group_id: g.state for g in list_groups(metadata)} == {
        "manual": "Empty",
        "app": "Stable",
    }
    with pytest.raises(MeridianError) as info:
        delete_group(metadata, "app")
    assert info.value.code == ErrorCode.NON_EMPTY_GROUP
    delete_group(metadata, "manual")
    assert fetch_committed(metadata, "manual") == {}


def test_group_module_offers_the_helpers_consumer_and_admin_call() -> None:
    """consumer.py and admin.py call these through ``group``; they live in coordinator.py."""
    names = ["commit_offsets", "fetch_committed", "describe_group", "list_groups", "delete_group"]
    for name in names:
        assert getattr(group, name) is getattr(coordinator, name)


def test_unsubscribing_revokes_and_leaves(runners: Callable[..., Runner]) -> None:
    a, b = runners("a", session_timeout_ms=30_000), runners("b", session_timeout_ms=30_000)
    assert wait_for(lambda: settled(a, b))
    held = b.assignment
    b.member.subscribe([])
    assert wait_for(lambda: settled(a))  # b left: no session had to expire
    assert b.listener.events[-1] == ("revoked", held)
    assert b.member.generation() == (-1, "")


def test_a_topic_created_later_reaches_the_group(
    runners: Callable[..., Runner], server: CoordinatorServer
) -> None:
    a = runners("a", partition_check_s=0.05, topics=["orders", "later"])
    orders = {tp for tp in ALL if tp.topic == "orders"}
    assert wait_for(lambda: settled(a, expect=orders))
    server.topics["later"] = 2
    later = {TopicPartition("later", 0), TopicPartition("later", 1)}
    assert wait_for(lambda: settled(a, expect=orders | later), timeout_s=20)


def test_members_polled_from_one_thread_converge(metadata: ClusterMetadata) -> None:
    """poll() never waits for the group: three members polled in turn by this one thread
    share every partition long before their 60 s rebalance timeout could remove one (no
    member id changes, nothing reported lost)."""
    listeners = [Recorder() for _ in range(3)]
    members = [
        GroupMember(
            metadata,
            group_id="one-thread",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=60_000,
            heartbeat_interval_ms=100,
            client_id=f"m{i}",
            listener=listener,
        )
        for i, listener in enumerate(listeners)
    ]
    member_ids: list[set[str]] = [set() for _ in members]
    for member, listener in zip(members, listeners, strict=True):
        listener.thread = threading.current_thread()
        member.subscribe(sorted(TOPICS))

    def poll_all_then_check() -> bool:
        for member, seen in zip(members, member_ids, strict=True):
            member.poll()
            seen.add(member.generation()[1])
        held = [tp for m in members for tp in m.assignment()]
        return (
            len(held) == len(set(held)) == len(ALL)
            and len({m.generation()[0] for m in members}) == 1
            and not any(m._needs_join() or m._rebalancing() for m in members)
        )

    try:
        assert wait_for(poll_all_then_check, timeout_s=30)
    finally:
        for member in members:
            member.close()
    assert [len(seen - {""}) for seen in member_ids] == [1, 1, 1]
    for listener in listeners:
        assert not listener.errors, listener.errors
        assert "lost" not in [kind for kind, _ in listener.events]

"""The group membership protocol over gRPC: join, sync, heartbeat, leave, expiry."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from dataplane._gen.meridian.v1 import group_pb2, group_pb2_grpc
from dataplane.broker.groups.group import Group, GroupState, Member
from dataplane.broker.groups.membership import Membership
from dataplane.errors import ERROR_METADATA_KEY, ErrorCode, MeridianError

from .support import CoordinatorServer, ManualClock, RawMember, call, wait_for

GROUP = "orders-app"


def assignment(*partitions: tuple[str, int]) -> bytes:
    return group_pb2.ConsumerAssignment(
        partitions=[{"topic": t, "partition": p} for t, p in partitions]
    ).SerializeToString()


def stable_pair(channel: grpc.Channel) -> tuple[RawMember, RawMember]:
    """Two members of GROUP in a Stable generation; the first one leads."""
    a, b = RawMember(channel, GROUP, client_id="a"), RawMember(channel, GROUP, client_id="b")
    a.join()
    a.sync({a.member_id: b""})
    pending_b = b.start_join()
    assert wait_for(lambda: rejoin_needed(a))
    pending_a = a.start_join()
    b.finish_join(pending_b)
    a.finish_join(pending_a)
    follower = b.start_sync()
    a.sync({a.member_id: b"A", b.member_id: b"B"})
    assert follower.result(timeout=10).assignment == b"B"
    return a, b


def rejoin_needed(member: RawMember) -> bool:
    try:
        member.heartbeat()
    except MeridianError as exc:
        if exc.code != ErrorCode.REBALANCE_IN_PROGRESS:
            raise
        return True
    return False


def error_of(action: object) -> int:
    assert callable(action)
    with pytest.raises(MeridianError) as info:
        action()
    return info.value.code


def describe(channel: grpc.Channel, group_id: str = GROUP) -> group_pb2.GroupDescription:
    stub = group_pb2_grpc.GroupCoordinatorStub(channel)
    response = call(stub.DescribeGroups, group_pb2.DescribeGroupsRequest(group_ids=[group_id]))
    return response.groups[0]


def test_first_member_joins_leads_and_becomes_stable(channel: grpc.Channel) -> None:
    member = RawMember(channel, GROUP, client_id="svc")
    joined = member.join()
    assert joined.generation_id == 1
    assert joined.member_id.startswith("svc-")
    assert joined.leader_id == joined.member_id
    assert joined.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in joined.members] == [(joined.member_id, b"meta")]
    mine = assignment(("t", 0), ("t", 1))
    assert member.sync({member.member_id: mine}) == mine
    member.heartbeat()
    described = describe(channel)
    assert described.state == "Stable"
    assert described.members[0].client_id == "svc"
    assert described.members[0].client_host == "127.0.0.1"
    assert [(tp.topic, tp.partition) for tp in described.members[0].assignment] == [
        ("t", 0),
        ("t", 1),
    ]


def test_a_new_member_rebalances_and_only_the_leader_gets_members(
    channel: grpc.Channel,
) -> None:
    a, b = stable_pair(channel)
    assert a.generation == b.generation == 2
    assert a.leader_id == b.leader_id == a.member_id
    c = RawMember(channel, GROUP, client_id="c")
    pending = {c: c.start_join()}
    assert wait_for(lambda: rejoin_needed(a))
    assert rejoin_needed(b)
    pending[a], pending[b] = a.start_join(), b.start_join()
    responses = {m: m.finish_join(f) for m, f in pending.items()}
    assert {m.generation for m in responses} == {3}
    assert len(responses[a].members) == 3
    assert not responses[b].members
    assert not responses[c].members


def test_follower_sync_waits_for_the_leader(channel: grpc.Channel) -> None:
    a, b = stable_pair(channel)
    b.leave()
    assert wait_for(lambda: rejoin_needed(a))
    a.join()
    c = RawMember(channel, GROUP, client_id="c")
    pending_c = c.start_join()
    assert wait_for(lambda: rejoin_needed(a))
    pending_a = a.start_join()
    c.finish_join(pending_c)
    a.finish_join(pending_a)
    waiting = c.start_sync()
    with pytest.raises(grpc.FutureTimeoutError):
        waiting.result(timeout=0.2)
    a.sync({a.member_id: b"1", c.member_id: b"2"})
    assert waiting.result(timeout=10).assignment == b"2"
    assert describe(channel).state == "Stable"


def test_a_rejoin_during_sync_sends_waiting_followers_back(channel: grpc.Channel) -> None:
    a, b = stable_pair(channel)
    d = RawMember(channel, GROUP, client_id="d")
    pending_d = d.start_join()
    assert wait_for(lambda: rejoin_needed(a))
    pending = [a.start_join(), b.start_join()]
    d.finish_join(pending_d)
    a.finish_join(pending[0])
    b.finish_join(pending[1])
    waiting = b.start_sync()
    # d changes its protocols and rejoins before the leader syncs
    d.protocols = (("range", b"other"),)
    pending_d = d.start_join()
    with pytest.raises(grpc.RpcError) as info:
        waiting.result(timeout=10)
    assert info.value.code() == grpc.StatusCode.ABORTED  # REBALANCE_IN_PROGRESS
    assert (ERROR_METADATA_KEY, "REBALANCE_IN_PROGRESS") in info.value.trailing_metadata()
    pending = [a.start_join(), b.start_join()]
    d.finish_join(pending_d)
    assert {a.finish_join(pending[0]).generation_id, b.finish_join(pending[1]).generation_id} == {
        d.generation
    }


def test_leaving_rebalances_and_a_leaving_leader_is_replaced(channel: grpc.Channel) -> None:
    a, b = stable_pair(channel)
    a.leave()
    assert wait_for(lambda: rejoin_needed(b))
    joined = b.join()
    assert joined.leader_id == b.member_id
    assert [m.member_id for m in joined.members] == [b.member_id]
    assert error_of(a.heartbeat) == ErrorCode.UNKNOWN_MEMBER_ID


def test_last_member_leaving_empties_the_group(channel: grpc.Channel) -> None:
    member = RawMember(channel, GROUP)
    member.join()
    member.sync({member.member_id: b""})
    member.leave()
    assert wait_for(lambda: describe(channel).state == "Empty")
    assert describe(channel).generation_id == 2


def test_session_expiry_removes_a_silent_member(channel: grpc.Channel, clock: ManualClock) -> None:
    a, b = stable_pair(channel)
    clock.advance(600)
    a.heartbeat()
    clock.advance(600)  # b has been silent for 1200 ms > its 1000 ms session
    assert wait_for(lambda: rejoin_needed(a))
    joined = a.join()
    assert [m.member_id for m in joined.members] == [a.member_id]
    assert error_of(b.heartbeat) == ErrorCode.UNKNOWN_MEMBER_ID


def test_rebalance_timeout_drops_members_that_do_not_rejoin(
    channel: grpc.Channel, clock: ManualClock, server: CoordinatorServer
) -> None:
    a, b = stable_pair(channel)
    c = RawMember(channel, GROUP, client_id="c")
    pending_c = c.start_join()
    assert wait_for(lambda: rejoin_needed(a))
    pending_a = a.start_join()
    assert wait_for(lambda: server.joining(GROUP, a.member_id))
    clock.advance(2000)  # the rebalance timeout; b never rejoins
    joined = a.finish_join(pending_a)
    c.finish_join(pending_c)
    assert {m.member_id for m in joined.members} == {a.member_id, c.member_id}
    assert error_of(b.heartbeat) == ErrorCode.UNKNOWN_MEMBER_ID


def test_heartbeat_fencing(channel: grpc.Channel) -> None:
    a, _b = stable_pair(channel)
    stale = RawMember(channel, GROUP)
    stale.member_id, stale.generation = a.member_id, a.generation - 1
    assert error_of(stale.heartbeat) == ErrorCode.ILLEGAL_GENERATION
    stranger = RawMember(channel, GROUP)
    stranger.member_id, stranger.generation = "nobody", a.generation
    assert error_of(stranger.heartbeat) == ErrorCode.UNKNOWN_MEMBER_ID
    elsewhere = RawMember(channel, "no-such-group")
    elsewhere.member_id = a.member_id
    assert error_of(elsewhere.heartbeat) == ErrorCode.UNKNOWN_MEMBER_ID
    assert error_of(lambda: stale.sync()) == ErrorCode.ILLEGAL_GENERATION


def test_commit_fencing(channel: grpc.Channel) -> None:
    a, b = stable_pair(channel)
    tp = {("t", 0): 5}
    assert a.commit(tp) == {("t", 0): ErrorCode.NONE}
    assert error_of(lambda: a.commit(tp, generation_id=1)) == ErrorCode.ILLEGAL_GENERATION
    assert error_of(lambda: a.commit(tp, member_id="ghost")) == ErrorCode.UNKNOWN_MEMBER_ID
    outside = {"generation_id": -1, "member_id": ""}
    assert error_of(lambda: a.commit(tp, **outside)) == ErrorCode.UNKNOWN_MEMBER_ID
    c = RawMember(channel, GROUP, client_id="c")
    pending_c = c.start_join()
    assert wait_for(lambda: rejoin_needed(a))
    assert a.commit(tp) == {("t", 0): ErrorCode.NONE}  # allowed while preparing
    pending = [a.start_join(), b.start_join()]
    for member, future in zip((a, b, c), [*pending, pending_c], strict=True):
        member.finish_join(future)
    assert error_of(lambda: b.commit(tp)) == ErrorCode.REBALANCE_IN_PROGRESS


def test_commit_outside_membership_needs_an_empty_group(channel: grpc.Channel) -> None:
    loner = RawMember(channel, "manual")
    outside = {"generation_id": -1, "member_id": ""}
    assert loner.commit({("t", 0): 9}, **outside) == {("t", 0): ErrorCode.NONE}
    assert describe(channel, "manual").state == "Empty"


def test_inconsistent_protocols_are_refused(channel: grpc.Channel) -> None:
    first = RawMember(channel, GROUP, protocols=(("range", b""), ("roundrobin", b"")))
    first.join()
    other = RawMember(channel, GROUP, protocols=(("cooperative-sticky", b""),))
    assert error_of(other.join) == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    typed = RawMember(channel, GROUP, protocol_type="connect")
    assert error_of(typed.join) == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    empty = RawMember(channel, GROUP, protocols=())
    assert error_of(empty.join) == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_the_protocol_most_members_prefer_wins(channel: grpc.Channel) -> None:
    a = RawMember(channel, GROUP, protocols=(("range", b"a"), ("roundrobin", b"a")))
    b = RawMember(channel, GROUP, protocols=(("roundrobin", b"b"), ("range", b"b")))
    c = RawMember(channel, GROUP, protocols=(("roundrobin", b"c"), ("range", b"c")))
    a.join()
    pending = {m: m.start_join() for m in (b, c)}
    assert wait_for(lambda: describe(channel).state == "PreparingRebalance")
    pending[a] = a.start_join()
    responses = [m.finish_join(f) for m, f in pending.items()]
    assert {r.protocol_name for r in responses} == {"roundrobin"}
    leader = next(r for r in responses if r.members)
    assert {m.metadata for m in leader.members} == {b"a", b"b", b"c"}


@pytest.mark.parametrize("session_ms", [50, 300_001])
def test_session_timeout_out_of_bounds_is_typed(channel: grpc.Channel, session_ms: int) -> None:
    member = RawMember(channel, GROUP, session_timeout_ms=session_ms)
    with pytest.raises(grpc.RpcError) as info:
        member.stub.JoinGroup(member.join_request(), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (ERROR_METADATA_KEY, "INVALID_SESSION_TIMEOUT") in info.value.trailing_metadata()


def test_bad_requests_get_typed_errors(channel: grpc.Channel) -> None:
    assert error_of(RawMember(channel, "").join) == ErrorCode.INVALID_GROUP_ID
    assert error_of(RawMember(channel, "g" * 256).join) == ErrorCode.INVALID_GROUP_ID
    unknown = RawMember(channel, GROUP)
    unknown.member_id = "made-up"
    assert error_of(unknown.join) == ErrorCode.UNKNOWN_MEMBER_ID
    stub = group_pb2_grpc.GroupCoordinatorStub(channel)
    find = group_pb2.FindCoordinatorRequest(group_id="")
    assert error_of(lambda: call(stub.FindCoordinator, find)) == ErrorCode.INVALID_GROUP_ID
    negative = RawMember(channel, GROUP, rebalance_timeout_ms=-1)
    assert error_of(negative.join) == ErrorCode.INVALID_REQUEST


def test_static_member_restart_keeps_its_assignment(channel: grpc.Channel) -> None:
    a = RawMember(channel, GROUP, group_instance_id="host-1")
    a.join()
    a.sync({a.member_id: b"mine"})
    restarted = RawMember(channel, GROUP, group_instance_id="host-1")
    joined = restarted.join()
    assert joined.generation_id == a.generation  # no rebalance
    assert restarted.sync() == b"mine"
    assert error_of(a.heartbeat) == ErrorCode.UNKNOWN_MEMBER_ID  # the old incarnation is fenced
    restarted.heartbeat()


def test_not_coordinator_and_no_coordinator(make_server: Callable[..., CoordinatorServer]) -> None:
    lone = make_server(num_partitions=4, owned=[0], locate=lambda _p: None)
    with lone.channel() as channel:
        stub = group_pb2_grpc.GroupCoordinatorStub(channel)
        coordinator = lone.coordinator
        assert coordinator is not None
        names = [f"g{i}" for i in range(40)]
        mine = next(g for g in names if coordinator.partition_for(g) == 0)
        other = next(g for g in names if coordinator.partition_for(g) != 0)
        RawMember(channel, mine).join()
        assert error_of(RawMember(channel, other).join) == ErrorCode.NOT_COORDINATOR
        find = group_pb2.FindCoordinatorRequest(group_id=mine)
        assert error_of(lambda: call(stub.FindCoordinator, find)) == (
            ErrorCode.COORDINATOR_NOT_AVAILABLE
        )


def test_find_coordinator_names_the_broker(
    channel: grpc.Channel, server: CoordinatorServer
) -> None:
    stub = group_pb2_grpc.GroupCoordinatorStub(channel)
    found = call(stub.FindCoordinator, group_pb2.FindCoordinatorRequest(group_id=GROUP))
    assert (found.coordinator.host, found.coordinator.port) == ("127.0.0.1", server.port)


def test_a_transactional_commit_without_generation_is_taken_while_the_group_has_members() -> None:
    """Kafka accepts TxnOffsetCommit with generation -1 and no member id whatever the
    group's state (v0-2 carry neither; Java's ``sendOffsetsToTransaction(offsets,
    groupId)``): the transaction's producer fencing guards it. A plain commit so made is
    still refused while members are active."""

    async def persist(group_id: str, record: object) -> None:
        raise AssertionError("nothing to persist")

    membership = Membership(clock_ms=lambda: 0, persist=persist)  # type: ignore[arg-type]
    member = Member("m-1", "", "c", "h", 10_000, 10_000, "consumer", [("range", b"")])
    group = Group(GROUP, GroupState.STABLE, "consumer", "range", 3, "m-1", {"m-1": member})
    membership.check_commit(group, -1, "", transactional=True)
    assert error_of(lambda: membership.check_commit(group, -1, "")) == ErrorCode.UNKNOWN_MEMBER_ID
    assert error_of(lambda: membership.check_commit(group, 2, "m-1", transactional=True)) == (
        ErrorCode.ILLEGAL_GENERATION
    )

"""Lane group families: ``G`` and ``G~L`` share a coordinator (in-process and on a real
cluster), and OffsetFetch fences a lane partition the family peer still holds, then
answers the larger of the two groups' commits."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from dataplane._gen.meridian.v1 import common_pb2, group_pb2, group_pb2_grpc
from dataplane.errors import ErrorCode, MeridianError
from dataplane.hashing import partition_for_key
from tests.support.brokers import BrokerProcess

from .support import CoordinatorServer, RawMember, call, wait_for

LANE_TOPIC = "acme.orders~ppe"
OUTSIDE = {"generation_id": -1, "member_id": ""}
HANDOVER = "HANDOVER"


def assignment(*partitions: tuple[str, int]) -> bytes:
    return group_pb2.ConsumerAssignment(
        partitions=[{"topic": t, "partition": p} for t, p in partitions]
    ).SerializeToString()


def offsets(
    channel: grpc.Channel, group_id: str, *partitions: tuple[str, int]
) -> dict[tuple[str, int], int | str]:
    """Per partition: the committed offset OffsetFetch answers, or HANDOVER."""
    stub = group_pb2_grpc.GroupCoordinatorStub(channel)
    request = group_pb2.OffsetFetchRequest(
        group_id=group_id, partitions=[{"topic": t, "partition": p} for t, p in partitions]
    )
    answer: dict[tuple[str, int], int | str] = {}
    for r in call(stub.OffsetFetch, request).results:
        if r.error == ErrorCode.HANDOVER_IN_PROGRESS:
            answer[(r.topic, r.partition)] = HANDOVER
        else:
            assert r.error == ErrorCode.NONE, r
            answer[(r.topic, r.partition)] = r.offset
    return answer


def split_group_name(num_partitions: int, brokers: int = 0) -> str:
    """A trunk group id whose lane group ``~ppe`` hashes elsewhere on its own (to
    another offsets partition, or with ``brokers``, another owning broker)."""
    for i in range(1000):
        group = f"acme.g{i}"
        own = partition_for_key(group.encode(), num_partitions)
        lane = partition_for_key(f"{group}~ppe".encode(), num_partitions)
        if (own % brokers != lane % brokers) if brokers else own != lane:
            return group
    raise AssertionError("no such group id")


def coordinator_of(stub: group_pb2_grpc.GroupCoordinatorStub, group_id: str) -> int:
    request = group_pb2.FindCoordinatorRequest(group_id=group_id)
    return int(call(stub.FindCoordinator, request).coordinator.id)


def test_a_lane_group_is_placed_with_its_trunk_group(
    make_server: Callable[..., CoordinatorServer],
) -> None:
    group = split_group_name(16)
    trunk_partition = partition_for_key(group.encode(), 16)

    def locate(p: int) -> common_pb2.BrokerInfo:
        return common_pb2.BrokerInfo(id=100 + p, host="127.0.0.1", port=1)

    server = make_server(num_partitions=16, owned=[trunk_partition], locate=locate)
    assert server.coordinator is not None
    assert server.coordinator.partition_for(f"{group}~ppe") == trunk_partition
    with server.channel() as channel:
        stub = group_pb2_grpc.GroupCoordinatorStub(channel)
        assert coordinator_of(stub, f"{group}~ppe") == coordinator_of(stub, group)
        assert coordinator_of(stub, group) == 100 + trunk_partition
        # This coordinator owns only the trunk group's partition, and serves the lane group.
        lane_member = RawMember(channel, f"{group}~ppe")
        assert lane_member.join().generation_id == 1


def test_a_family_shares_one_coordinator_on_a_cluster(cluster: list[BrokerProcess]) -> None:
    group = split_group_name(16, brokers=len(cluster))
    found = set()
    for broker in cluster:
        with broker.channel() as channel:
            stub = group_pb2_grpc.GroupCoordinatorStub(channel)
            found.add((coordinator_of(stub, group), coordinator_of(stub, f"{group}~ppe")))
    ((trunk_at, lane_at),) = found
    assert trunk_at == lane_at
    coordinator = next(b for b in cluster if b.broker_id == trunk_at)
    with coordinator.channel() as channel:
        assert RawMember(channel, f"{group}~ppe").join().generation_id == 1


def test_offset_fetch_fences_a_lane_partition_the_trunk_group_holds(
    channel: grpc.Channel,
) -> None:
    trunk = RawMember(channel, "acme.g")
    trunk.join()
    trunk.sync({trunk.member_id: assignment((LANE_TOPIC, 0), ("acme.orders", 0))})
    assert set(trunk.commit({(LANE_TOPIC, 0): 7}).values()) == {ErrorCode.NONE}
    lane = RawMember(channel, "acme.g~ppe")
    lane.commit({(LANE_TOPIC, 0): 3, (LANE_TOPIC, 1): 4, (LANE_TOPIC, 2): 9}, **OUTSIDE)
    trunk.commit({(LANE_TOPIC, 2): 5})

    assert offsets(channel, "acme.g~ppe", (LANE_TOPIC, 0), (LANE_TOPIC, 1), (LANE_TOPIC, 2)) == {
        (LANE_TOPIC, 0): HANDOVER,  # the trunk group still holds it
        (LANE_TOPIC, 1): 4,  # only the lane group committed
        (LANE_TOPIC, 2): 9,  # the larger commit
    }
    # The trunk group itself: its peer has no member, so the larger commit.
    assert offsets(channel, "acme.g", (LANE_TOPIC, 0)) == {(LANE_TOPIC, 0): 7}
    # A group of another lane is no peer for this lane's topic: its own commit (none).
    assert offsets(channel, "acme.g~dev", (LANE_TOPIC, 0)) == {(LANE_TOPIC, 0): -1}
    trunk.leave()
    assert offsets(channel, "acme.g~ppe", (LANE_TOPIC, 0)) == {(LANE_TOPIC, 0): 7}

    # The other way: the lane group takes the partition, the trunk group is fenced.
    lane.join()
    lane.sync({lane.member_id: assignment((LANE_TOPIC, 0))})
    lane.commit({(LANE_TOPIC, 0): 12})
    assert offsets(channel, "acme.g", (LANE_TOPIC, 0), (LANE_TOPIC, 1)) == {
        (LANE_TOPIC, 0): HANDOVER,
        (LANE_TOPIC, 1): 4,
    }
    lane.leave()
    assert offsets(channel, "acme.g", (LANE_TOPIC, 0)) == {(LANE_TOPIC, 0): 12}


def test_during_a_rebalance_the_last_synced_assignment_fences(
    server: CoordinatorServer, channel: grpc.Channel
) -> None:
    a = RawMember(channel, "acme.h", client_id="a")
    b = RawMember(channel, "acme.h", client_id="b")
    a.join()
    a.sync({a.member_id: b""})
    pending_b = b.start_join()
    assert wait_for(lambda: state_of(server, "acme.h") == "PreparingRebalance")
    pending_a = a.start_join()
    b.finish_join(pending_b)
    a.finish_join(pending_a)
    follower = b.start_sync()
    a.sync({a.member_id: assignment((LANE_TOPIC, 0)), b.member_id: assignment((LANE_TOPIC, 1))})
    follower.result(timeout=10)
    a.commit({(LANE_TOPIC, 0): 21})
    a.leave()  # a rebalance starts; b still has to rejoin
    assert state_of(server, "acme.h") == "PreparingRebalance"
    wanted = [(LANE_TOPIC, 0), (LANE_TOPIC, 1)]
    assert offsets(channel, "acme.h~ppe", *wanted) == {
        (LANE_TOPIC, 0): HANDOVER,  # a's, as last synced, until the rebalance ends
        (LANE_TOPIC, 1): HANDOVER,
    }
    b.join()
    b.sync({b.member_id: assignment((LANE_TOPIC, 1))})
    assert offsets(channel, "acme.h~ppe", *wanted) == {
        (LANE_TOPIC, 0): 21,
        (LANE_TOPIC, 1): HANDOVER,
    }


def state_of(server: CoordinatorServer, group_id: str) -> str:
    async def read() -> str:
        assert server.coordinator is not None
        group = server.coordinator._group(group_id)
        return group.state.value if group is not None else "none"

    return server.run(read())


def test_a_group_id_with_a_bad_lane_part_is_refused(channel: grpc.Channel) -> None:
    stub = group_pb2_grpc.GroupCoordinatorStub(channel)
    for group_id in ("acme.g~Bad", "acme.g~ppe~qa", "acme.g~", "~ppe", "acme.g~p"):
        requests = [
            (stub.FindCoordinator, group_pb2.FindCoordinatorRequest(group_id=group_id)),
            (stub.JoinGroup, RawMember(channel, group_id).join_request()),
            (
                stub.OffsetCommit,
                group_pb2.OffsetCommitRequest(
                    group_id=group_id,
                    generation_id=-1,
                    partitions=[{"topic": LANE_TOPIC, "offset": 1}],
                ),
            ),
            (
                stub.OffsetFetch,
                group_pb2.OffsetFetchRequest(group_id=group_id, partitions=[{"topic": LANE_TOPIC}]),
            ),
        ]
        for method, request in requests:
            with pytest.raises(MeridianError) as refused:
                call(method, request)
            assert refused.value.code == ErrorCode.INVALID_GROUP_ID, (group_id, method)
    # A well-formed lane group is served.
    assert RawMember(channel, "acme.g~ppe").commit({(LANE_TOPIC, 0): 3}, **OUTSIDE) == {
        (LANE_TOPIC, 0): ErrorCode.NONE
    }


def test_an_offsets_partition_loaded_later_drops_the_commits_of_deleted_lane_topics(
    server: CoordinatorServer, channel: grpc.Channel
) -> None:
    coordinator = server.coordinator
    assert coordinator is not None
    RawMember(channel, "acme.g").commit({(LANE_TOPIC, 0): 50, ("acme.orders", 0): 8}, **OUTSIDE)
    partition = coordinator.partition_for("acme.g")
    # Another broker coordinated the family while the lane topic was deleted.
    server.run(coordinator.unload_partitions([partition]))
    assert server.run(coordinator.lane_topics_pushed(["acme.orders"])) == 0
    server.run(coordinator.load_partitions([partition]))
    assert offsets(channel, "acme.g", (LANE_TOPIC, 0), ("acme.orders", 0)) == {
        (LANE_TOPIC, 0): -1,
        ("acme.orders", 0): 8,
    }

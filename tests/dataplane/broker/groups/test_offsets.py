"""Committed offsets: commit/fetch, durability across clean and unclean restarts,
describe/list/delete, and the bounded offsets log."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from dataplane._gen.meridian.v1 import group_pb2, group_pb2_grpc
from dataplane.broker.groups import OFFSETS_TOPIC, GroupConfig
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import decode_batches

from .support import CoordinatorServer, RawMember, call

OUTSIDE = {"generation_id": -1, "member_id": ""}


def fetch(
    channel: grpc.Channel, group_id: str, partitions: list[tuple[str, int]] | None = None
) -> dict[tuple[str, int], tuple[int, str, int]]:
    stub = group_pb2_grpc.GroupCoordinatorStub(channel)
    request = group_pb2.OffsetFetchRequest(
        group_id=group_id,
        partitions=[{"topic": t, "partition": p} for t, p in partitions or []],
    )
    response = call(stub.OffsetFetch, request)
    return {
        (r.topic, r.partition): (r.offset, r.metadata, r.leader_epoch) for r in response.results
    }


def stub_of(channel: grpc.Channel) -> group_pb2_grpc.GroupCoordinatorStub:
    return group_pb2_grpc.GroupCoordinatorStub(channel)


def list_groups(channel: grpc.Channel) -> dict[str, str]:
    response = call(stub_of(channel).ListGroups, group_pb2.ListGroupsRequest())
    return {g.group_id: g.state for g in response.groups}


def delete(channel: grpc.Channel, *group_ids: str) -> dict[str, int]:
    request = group_pb2.DeleteGroupsRequest(group_ids=list(group_ids))
    response = call(stub_of(channel).DeleteGroups, request)
    return {r.group_id: r.error for r in response.results}


def describe(channel: grpc.Channel, group_id: str) -> group_pb2.GroupDescription:
    request = group_pb2.DescribeGroupsRequest(group_ids=[group_id])
    return call(stub_of(channel).DescribeGroups, request).groups[0]


def test_commit_and_fetch_round_trip(channel: grpc.Channel) -> None:
    member = RawMember(channel, "g")
    committed = member.commit({("t", 0): 10, ("t", 1): 20}, metadata="m", leader_epoch=3, **OUTSIDE)
    assert set(committed.values()) == {ErrorCode.NONE}
    assert fetch(channel, "g") == {("t", 0): (10, "m", 3), ("t", 1): (20, "m", 3)}
    assert fetch(channel, "g", [("t", 1), ("t", 9)]) == {
        ("t", 1): (20, "m", 3),
        ("t", 9): (-1, "", -1),
    }
    member.commit({("t", 0): 11}, **OUTSIDE)
    assert fetch(channel, "g", [("t", 0)]) == {("t", 0): (11, "", -1)}
    assert fetch(channel, "never-seen") == {}


def test_bad_partitions_fail_alone(channel: grpc.Channel) -> None:
    member = RawMember(channel, "g")
    results = member.commit({("t", 0): 5, ("t", 1): -1, ("", 2): 5, ("t", -3): 1}, **OUTSIDE)
    assert results == {
        ("t", 0): ErrorCode.NONE,
        ("t", 1): ErrorCode.INVALID_COMMIT_OFFSET,
        ("", 2): ErrorCode.INVALID_TOPIC,
        ("t", -3): ErrorCode.INVALID_REQUEST,
    }
    too_long = member.commit({("t", 7): 1}, metadata="x" * 4097, **OUTSIDE)
    assert too_long == {("t", 7): ErrorCode.INVALID_COMMIT_OFFSET}
    assert fetch(channel, "g") == {("t", 0): (5, "", -1)}


def test_offsets_and_groups_survive_a_restart(
    make_server: Callable[..., CoordinatorServer], tmp_path: Path
) -> None:
    server = make_server()
    with server.channel() as channel:
        member = RawMember(channel, "live", client_id="svc")
        member.join()
        member.sync({member.member_id: b"\x0a\x05\x0a\x01t\x10\x02"})
        member.commit({("t", 2): 42})
        RawMember(channel, "manual").commit({("u", 0): 7}, **OUTSIDE)
        RawMember(channel, "doomed").commit({("u", 1): 1}, **OUTSIDE)
        assert delete(channel, "doomed") == {"doomed": ErrorCode.NONE}
    server.stop()
    server.start()
    with server.channel() as channel:
        assert fetch(channel, "live") == {("t", 2): (42, "", -1)}
        assert fetch(channel, "manual") == {("u", 0): (7, "", -1)}
        assert fetch(channel, "doomed") == {}
        assert list_groups(channel) == {"live": "Stable", "manual": "Empty"}
        described = describe(channel, "live")
        assert (described.generation_id, described.leader_id) == (1, member.member_id)
        assert [(a.topic, a.partition) for a in described.members[0].assignment] == [("t", 2)]
        member.stub = stub_of(channel)
        member.heartbeat()  # the restored member carries on in its generation
        member.commit({("t", 2): 43})
        assert fetch(channel, "live") == {("t", 2): (43, "", -1)}


def test_offsets_survive_an_unclean_stop(
    make_server: Callable[..., CoordinatorServer], tmp_path: Path
) -> None:
    server = make_server()
    with server.channel() as channel:
        for i in range(20):
            RawMember(channel, f"g{i % 4}").commit({("t", i): i + 100}, **OUTSIDE)
    crashed = tmp_path / "crashed"
    shutil.copytree(server.data_dir, crashed)  # as a crash would leave it: nothing closed
    copy = make_server(crashed)
    with copy.channel() as channel:
        for g in range(4):
            expected = {("t", i): (i + 100, "", -1) for i in range(g, 20, 4)}
            assert fetch(channel, f"g{g}") == expected


def test_describe_list_and_delete(channel: grpc.Channel) -> None:
    member = RawMember(channel, "busy", client_id="worker")
    member.join()
    member.sync({member.member_id: b""})
    member.commit({("t", 0): 3})
    RawMember(channel, "idle").commit({("t", 0): 8}, **OUTSIDE)
    assert list_groups(channel) == {"busy": "Stable", "idle": "Empty"}
    busy = describe(channel, "busy")
    assert (busy.protocol_type, busy.protocol_name) == ("consumer", "range")
    assert [o.offset for o in busy.offsets] == [3]
    missing = describe(channel, "nope")
    assert (missing.error, missing.state) == (ErrorCode.GROUP_ID_NOT_FOUND, "Dead")
    assert delete(channel, "busy", "idle", "nope", "") == {
        "busy": ErrorCode.NON_EMPTY_GROUP,
        "idle": ErrorCode.NONE,
        "nope": ErrorCode.GROUP_ID_NOT_FOUND,
        "": ErrorCode.INVALID_GROUP_ID,
    }
    assert list_groups(channel) == {"busy": "Stable"}
    assert fetch(channel, "idle") == {}


def test_fetch_for_a_group_elsewhere_is_not_coordinator(
    make_server: Callable[..., CoordinatorServer],
) -> None:
    server = make_server(num_partitions=8, owned=[])
    with server.channel() as channel, pytest.raises(MeridianError) as info:
        fetch(channel, "anything")
    assert info.value.code == ErrorCode.NOT_COORDINATOR


def offsets_log_records(server: CoordinatorServer, partition: int) -> int:
    assert server.manager is not None
    log = server.manager.get_log(OFFSETS_TOPIC, partition)
    assert log is not None
    data = log.read(log.log_start_offset, 1 << 24, max_offset=log.log_end_offset).data
    return len(decode_batches(data))


def test_the_offsets_log_stays_bounded(make_server: Callable[..., CoordinatorServer]) -> None:
    config = GroupConfig(min_session_timeout_ms=100, tick_interval_ms=20, compact_min_records=50)
    server = make_server(num_partitions=1, config=config)
    with server.channel() as channel:
        member = RawMember(channel, "g")
        for i in range(400):
            member.commit({("t", i % 5): i}, **OUTSIDE)
        RawMember(channel, "gone").commit({("t", 0): 1}, **OUTSIDE)
        delete(channel, "gone")
    assert server.manager is not None
    log = server.manager.get_log(OFFSETS_TOPIC, 0)
    assert log is not None
    assert log.log_start_offset > 0
    assert offsets_log_records(server, 0) <= 50 + 5
    server.stop()
    server.start()
    with server.channel() as channel:
        assert fetch(channel, "g") == {("t", p): (395 + p, "", -1) for p in range(5)}
        assert fetch(channel, "gone") == {}

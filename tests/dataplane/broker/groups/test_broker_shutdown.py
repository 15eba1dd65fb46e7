"""A broker that stops answers the group calls its coordinator has parked (a JoinGroup
waiting for the rest of the group) instead of holding them for the shutdown grace."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from dataplane._gen.meridian.v1 import group_pb2
from dataplane.broker.app import run_broker_in_thread
from dataplane.broker.config import BrokerConfig
from dataplane.errors import ErrorCode, MeridianError

from .support import RawMember, call, outcome, wait_for

SLOW = {"session_timeout_ms": 30_000, "rebalance_timeout_ms": 60_000}


def group_state(member: RawMember) -> str:
    request = group_pb2.DescribeGroupsRequest(group_ids=[member.group_id])
    return str(call(member.stub.DescribeGroups, request).groups[0].state)


def test_a_parked_join_is_answered_not_coordinator_at_shutdown(tmp_path: Path) -> None:
    config = BrokerConfig(broker_id=1, data_dir=tmp_path / "data", metrics_listen="")
    handle = run_broker_in_thread(config)
    with grpc.insecure_channel(handle.address) as channel:
        try:
            first = RawMember(channel, "g", **SLOW)
            first.join()
            first.sync({first.member_id: b"everything"})
            second = RawMember(channel, "g", **SLOW)
            parked = second.start_join()  # answered once first rejoins, which it never does
            assert wait_for(lambda: group_state(first) == "PreparingRebalance")
        finally:
            handle.stop()
        with pytest.raises(MeridianError) as info:
            outcome(parked)
    assert info.value.code == ErrorCode.NOT_COORDINATOR

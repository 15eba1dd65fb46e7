"""The GroupCoordinator service's error mapping: request-level failures leave through the
broker's one table (``dataplane/broker/errors.py``) as typed gRPC statuses."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from dataplane._gen.meridian.v1 import group_pb2, group_pb2_grpc
from dataplane.broker.groups.servicer import client_host
from dataplane.errors import ErrorCode, MeridianError
from dataplane.storage.errors import LogDirOfflineError

from .support import CoordinatorServer, call


def failing_fetch(error: BaseException) -> Any:
    async def fetch_offsets(*_args: Any, **_kwargs: Any) -> Any:
        raise error

    return fetch_offsets


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (MeridianError(ErrorCode.NOT_COORDINATOR, "moved"), ErrorCode.NOT_COORDINATOR),
        (LogDirOfflineError("/data", OSError(5, "EIO")), ErrorCode.STORAGE_ERROR),
        (RuntimeError("a bug"), ErrorCode.UNKNOWN_SERVER_ERROR),
    ],
)
def test_request_failures_map_through_the_broker_table(
    server: CoordinatorServer,
    channel: grpc.Channel,
    monkeypatch: pytest.MonkeyPatch,
    error: BaseException,
    code: int,
) -> None:
    assert server.coordinator is not None
    monkeypatch.setattr(server.coordinator, "fetch_offsets", failing_fetch(error))
    stub = group_pb2_grpc.GroupCoordinatorStub(channel)
    with pytest.raises(MeridianError) as info:
        call(stub.OffsetFetch, group_pb2.OffsetFetchRequest(group_id="g"))
    assert info.value.code == code


def test_client_host_strips_the_transport_and_port() -> None:
    assert client_host("ipv4:10.1.2.3:5123") == "10.1.2.3"
    assert client_host("ipv6:[::1]:5123") == "::1"

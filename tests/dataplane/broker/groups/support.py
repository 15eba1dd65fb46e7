"""An in-process group coordinator behind a real gRPC server, for tests.

``CoordinatorServer`` runs a ``grpc.aio`` server on 127.0.0.1 (port 0) on an event loop
of its own thread, with a real ``LogManager`` in a test directory, the
``GroupServicer`` under test, and — standing in for the broker app in these tests
only — a tiny Broker service answering ``Metadata`` from a dict of topics.
Every ``__consumer_offsets`` partition is led by this one broker.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import grpc

from dataplane._gen.meridian.v1 import (
    broker_pb2,
    broker_pb2_grpc,
    common_pb2,
    group_pb2,
    group_pb2_grpc,
)
from dataplane.broker.groups import GroupConfig, GroupCoordinator, GroupServicer
from dataplane.client.connection import CHANNEL_OPTIONS
from dataplane.errors import error_from_rpc
from dataplane.storage.manager import LogManager

T = TypeVar("T")
BROKER_ID = 1


class ManualClock:
    """A clock the test moves by hand (milliseconds)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


class StandInMetadata(broker_pb2_grpc.BrokerServicer):
    """Test-only stand-in for the broker app's Metadata: one broker, leader of all."""

    def __init__(self, server: CoordinatorServer) -> None:
        self.server = server

    async def Metadata(  # noqa: N802
        self, request: broker_pb2.MetadataRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.MetadataResponse:
        topics = self.server.topics
        names = list(request.topics) or sorted(topics)
        return broker_pb2.MetadataResponse(
            broker_id=BROKER_ID,
            brokers=[self.server.broker_info()],
            topics=[self._topic(name, topics.get(name)) for name in names],
        )

    @staticmethod
    def _topic(name: str, count: int | None) -> broker_pb2.TopicMetadata:
        if count is None:
            return broker_pb2.TopicMetadata(name=name, error=3, error_message="unknown topic")
        partitions = [
            broker_pb2.PartitionMetadata(partition=p, leader_id=BROKER_ID) for p in range(count)
        ]
        return broker_pb2.TopicMetadata(name=name, partitions=partitions)


class CoordinatorServer:
    """See the module docstring. ``start()``/``stop()`` may be called again to restart."""

    def __init__(
        self,
        data_dir: Path,
        *,
        num_partitions: int = 3,
        clock: Callable[[], int] | None = None,
        config: GroupConfig | None = None,
        topics: dict[str, int] | None = None,
        owned: list[int] | None = None,
        locate: Callable[[int], common_pb2.BrokerInfo | None] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.num_partitions = num_partitions
        self.clock = clock
        self.config = config or GroupConfig(min_session_timeout_ms=100, tick_interval_ms=20)
        self.topics = dict(topics or {})
        self.owned = list(range(num_partitions)) if owned is None else owned
        self.locate = locate or (lambda _p: self.broker_info())
        self.port = 0
        self.coordinator: GroupCoordinator | None = None
        self.manager: LogManager | None = None
        self._server: grpc.aio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def broker_info(self) -> common_pb2.BrokerInfo:
        return common_pb2.BrokerInfo(id=BROKER_ID, host="127.0.0.1", port=self.port)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> CoordinatorServer:
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="coordinator", daemon=True)
        self._thread.start()
        self.run(self._start())
        return self

    async def _start(self) -> None:
        self.manager = LogManager(self.data_dir)
        await asyncio.to_thread(self.manager.open)
        kwargs: dict[str, Any] = {"clock_ms": self.clock} if self.clock else {}
        self.coordinator = GroupCoordinator(
            broker_id=BROKER_ID,
            manager=self.manager,
            num_partitions=self.num_partitions,
            config=self.config,
            **kwargs,
        )
        await self.coordinator.start(self.owned)
        server = self._server = grpc.aio.server()
        group_pb2_grpc.add_GroupCoordinatorServicer_to_server(
            GroupServicer(self.coordinator, self.locate), server
        )
        broker_pb2_grpc.add_BrokerServicer_to_server(StandInMetadata(self), server)
        self.port = server.add_insecure_port(f"127.0.0.1:{self.port}")
        await server.start()

    def stop(self) -> None:
        """Stop serving, stop the coordinator and close the logs cleanly."""
        if self._loop is None:
            return
        self.run(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join()
        self._loop.close()
        self._loop = None

    async def _stop(self) -> None:
        if self._server is not None:
            await self._server.stop(None)
        if self.coordinator is not None:
            await self.coordinator.stop()
        if self.manager is not None:
            await asyncio.to_thread(self.manager.close)

    def run(self, work: Coroutine[Any, Any, T], timeout_s: float = 30.0) -> T:
        """Run a coroutine on the server's loop and return its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout_s)

    def __enter__(self) -> CoordinatorServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def joining(self, group_id: str, member_id: str) -> bool:
        """Whether the coordinator has ``member_id``'s JoinGroup parked."""

        async def check() -> bool:
            assert self.coordinator is not None
            group = self.coordinator._group(group_id)
            member = group.members.get(member_id) if group else None
            return member is not None and member.is_joining

        return self.run(check())

    # -- clients ------------------------------------------------------------------------
    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Poll ``condition`` until it holds or ``timeout_s`` passes; returns its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return condition()


# -- raw protocol clients -------------------------------------------------------------


def call(method: Any, request: Any, timeout_s: float = 10.0) -> Any:
    """A unary call whose failure is raised as the ``MeridianError`` it carries."""
    try:
        return method(request, timeout=timeout_s)
    except grpc.RpcError as exc:
        raise error_from_rpc(exc) from exc


def outcome(future: Any, timeout_s: float = 10.0) -> Any:
    """The result of a ``.future()`` call, its failure raised as a ``MeridianError``."""
    try:
        return future.result(timeout=timeout_s)
    except grpc.RpcError as exc:
        raise error_from_rpc(exc) from exc


class RawMember:
    """One group member speaking the wire protocol directly, remembering its id/generation."""

    def __init__(
        self,
        channel: grpc.Channel,
        group_id: str,
        *,
        protocols: tuple[tuple[str, bytes], ...] = (("range", b"meta"),),
        session_timeout_ms: int = 1000,
        rebalance_timeout_ms: int = 2000,
        client_id: str = "raw",
        group_instance_id: str = "",
        protocol_type: str = "consumer",
    ) -> None:
        self.stub = group_pb2_grpc.GroupCoordinatorStub(channel)
        self.group_id = group_id
        self.protocols = protocols
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.client_id = client_id
        self.group_instance_id = group_instance_id
        self.protocol_type = protocol_type
        self.member_id = ""
        self.generation = -1
        self.leader_id = ""

    def join_request(self) -> group_pb2.JoinGroupRequest:
        return group_pb2.JoinGroupRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            protocol_type=self.protocol_type,
            protocols=[group_pb2.GroupProtocol(name=n, metadata=m) for n, m in self.protocols],
            client_id=self.client_id,
            group_instance_id=self.group_instance_id,
        )

    def start_join(self) -> Any:
        return self.stub.JoinGroup.future(self.join_request(), timeout=20)

    def finish_join(self, future: Any) -> group_pb2.JoinGroupResponse:
        response = outcome(future)
        self.member_id, self.generation = response.member_id, response.generation_id
        self.leader_id = response.leader_id
        return response

    def join(self) -> group_pb2.JoinGroupResponse:
        return self.finish_join(self.start_join())

    def sync_request(
        self, assignments: dict[str, bytes] | None = None
    ) -> group_pb2.SyncGroupRequest:
        return group_pb2.SyncGroupRequest(
            group_id=self.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            assignments=[
                group_pb2.SyncGroupAssignment(member_id=m, assignment=a)
                for m, a in (assignments or {}).items()
            ],
        )

    def start_sync(self, assignments: dict[str, bytes] | None = None) -> Any:
        return self.stub.SyncGroup.future(self.sync_request(assignments), timeout=20)

    def sync(self, assignments: dict[str, bytes] | None = None) -> bytes:
        return bytes(outcome(self.start_sync(assignments)).assignment)

    def heartbeat(self) -> None:
        request = group_pb2.HeartbeatRequest(
            group_id=self.group_id, generation_id=self.generation, member_id=self.member_id
        )
        call(self.stub.Heartbeat, request)

    def leave(self) -> None:
        call(
            self.stub.LeaveGroup,
            group_pb2.LeaveGroupRequest(group_id=self.group_id, member_id=self.member_id),
        )

    def commit(
        self, offsets: dict[tuple[str, int], int], **fields: Any
    ) -> dict[tuple[str, int], int]:
        """Commit as this member; returns the per-partition error codes."""
        fields.setdefault("leader_epoch", -1)
        request = group_pb2.OffsetCommitRequest(
            group_id=self.group_id,
            generation_id=fields.pop("generation_id", self.generation),
            member_id=fields.pop("member_id", self.member_id),
            partitions=[
                group_pb2.OffsetCommitPartition(topic=t, partition=p, offset=o, **fields)
                for (t, p), o in offsets.items()
            ],
        )
        response = call(self.stub.OffsetCommit, request)
        return {(r.topic, r.partition): r.error for r in response.results}

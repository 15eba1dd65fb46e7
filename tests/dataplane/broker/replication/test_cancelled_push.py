"""A push whose caller gives up while the role change runs on the I/O pool; and
partitions created ahead of the push that places them.

A broker resumed after a pause (or slowed down) handles pushes whose deadline passes
while it applies them: gRPC cancels the handler. The role change already under way in
the I/O pool cannot be called back, so the apply must still reach its end -- tell the
follower fetchers, wake waiters -- or the partition is a follower no fetcher pulls, and
every later push at the same leader epoch finds nothing to change: the broker never
rejoins the ISR.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from dataplane._gen.meridian.v1 import admin_pb2
from dataplane.broker.partitions import Partition, PartitionRegistry
from dataplane.broker.replication.manager import ReplicaManager
from dataplane.broker.replication.state import Role
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import build_batch
from dataplane.storage.config import LogConfig
from dataplane.storage.manager import LogManager

TOPIC = "acme.t"


class _WatchedExecutor(ThreadPoolExecutor):
    """An I/O pool that keeps the future of the last job submitted (so a test knows
    when the role change runs)."""

    def __init__(self) -> None:
        super().__init__(2)
        self.last: Future[Any] | None = None

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.last = super().submit(fn, *args, **kwargs)
        return self.last


def _push(leader: int, leader_epoch: int, isr: list[int]) -> admin_pb2.UpdateMetadataRequest:
    return admin_pb2.UpdateMetadataRequest(
        controller_id="c",
        controller_epoch=1,
        cluster_id="meridian",
        topics=[
            admin_pb2.MetadataTopic(
                name=TOPIC,
                min_insync_replicas=2,
                partitions=[
                    admin_pb2.MetadataPartition(
                        partition=0,
                        leader_id=leader,
                        leader_epoch=leader_epoch,
                        replicas=[3, 1, 2],
                        isr=isr,
                        isr_version=leader_epoch + 1,
                    )
                ],
            )
        ],
    )


def _run_on_a_broker(
    tmp_path: Path, scenario: Callable[[_WatchedExecutor, LogManager], Awaitable[None]]
) -> None:
    """Run ``scenario`` with a broker's I/O pool and log manager, closed after."""
    executor = _WatchedExecutor()
    logs = LogManager(tmp_path / "data")
    logs.open()
    try:
        asyncio.run(scenario(executor, logs))
    finally:
        logs.close()
        executor.shutdown()


def test_a_leader_told_to_follow_by_a_cancelled_push_still_follows(tmp_path: Path) -> None:
    """Broker 3 leads at epoch 0; the push making broker 1 leader at epoch 1 is
    cancelled while its role change runs, waiting for a client append in flight (which
    holds the log's append lock). The fetchers are still told that broker 3 follows
    broker 1, once."""
    told: list[tuple[int, Role]] = []

    def on_follow(part: Partition) -> None:
        assert part.replica is not None
        told.append((part.replica.leader_id, part.replica.role))

    async def scenario(executor: _WatchedExecutor, logs: LogManager) -> None:
        registry = PartitionRegistry(logs, executor)
        part = await registry.create(TOPIC, 0, LogConfig())
        manager = ReplicaManager(
            3, registry, executor, replica_lag_time_max_ms=1500, on_follow=on_follow
        )
        await manager.apply(_push(leader=3, leader_epoch=0, isr=[3, 1, 2]))
        assert told == [(3, Role.LEADER)]

        moved = _push(leader=1, leader_epoch=1, isr=[1, 2])
        with part.log.append_lock():  # a client append in flight
            executor.last = None
            applying = asyncio.ensure_future(manager.apply(moved))
            while executor.last is None or not executor.last.running():
                await asyncio.sleep(0.001)
            applying.cancel()  # the push's deadline passed
        await asyncio.wait([applying])
        await asyncio.wrap_future(executor.last)

        await manager.apply(moved)  # the controller's next tick: the same push
        assert part.replica is not None
        assert (part.replica.role, part.replica.leader_id) == (Role.FOLLOWER, 1)
        assert told == [(3, Role.LEADER), (1, Role.FOLLOWER)]

    _run_on_a_broker(tmp_path, scenario)


def test_a_topic_no_push_names_yet_takes_no_append_on_a_managed_broker(tmp_path: Path) -> None:
    """``CreatePartitions`` runs ahead of the push placing the topic. On a broker a
    controller manages (it has a push), such a partition is offline until a push names
    it: were it led unreplicated, it would acknowledge appends (acks=all too) that the
    push could then make it drop as a follower."""

    async def scenario(executor: _WatchedExecutor, logs: LogManager) -> None:
        registry = PartitionRegistry(logs, executor)
        manager = ReplicaManager(1, registry, executor, replica_lag_time_max_ms=1500)
        await registry.create(TOPIC, 0, LogConfig())
        await manager.apply(_push(leader=3, leader_epoch=0, isr=[3, 1, 2]))  # a push
        fresh = await registry.create("acme.fresh", 0, LogConfig())
        await manager.apply_current()  # as CreatePartitions does
        assert fresh.replica is not None
        assert fresh.replica.role is Role.OFFLINE
        with pytest.raises(MeridianError) as refused:
            await asyncio.to_thread(fresh.append, build_batch([b"early"]))
        assert refused.value.code == ErrorCode.LEADER_NOT_AVAILABLE
        assert fresh.log.log_end_offset == 0

    _run_on_a_broker(tmp_path, scenario)


def test_a_broker_no_controller_manages_leads_what_it_hosts(tmp_path: Path) -> None:

    async def scenario(executor: _WatchedExecutor, logs: LogManager) -> None:
        registry = PartitionRegistry(logs, executor)
        manager = ReplicaManager(1, registry, executor, replica_lag_time_max_ms=1500)
        part = await registry.create("acme.static", 0, LogConfig())
        await manager.apply_current()  # no push ever came
        assert part.replica is None
        await asyncio.to_thread(part.append, build_batch([b"kept"]))
        assert part.log.log_end_offset == 1

    _run_on_a_broker(tmp_path, scenario)

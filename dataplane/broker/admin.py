"""Admin: what the control plane drives — which partitions this broker hosts, and how.

Every operation is idempotent and answers per partition (``AdminResult.changed`` is false
when the broker already was in the asked state):

- create: a client topic name (``topics.check_client_topic``) or a tenant's timer log
  (``__delay.<tenant>``, ``dataplane.delays``), partition >= 0, a valid config (broker
  defaults for unset fields). An existing partition whose configuration
  agrees with every set field is unchanged; one that disagrees is ``TOPIC_ALREADY_EXISTS``
  (alter it instead).
- delete: a missing partition is unchanged; internal topics are refused, timer logs
  excepted.
- alter: only the set fields change; the partition must exist.
- describe: every hosted partition with its effective configuration, offsets, role
  (leader, follower, offline) and leader epoch.
- update metadata: the controller's push (see ``cluster.ControllerMetadata``), applied to
  the hosted partitions' roles (``replication.manager``); the answer, a summary of what
  this broker hosts and its health plus the ISR changes it proposes as a leader, and its
  lane demands, lane consumer groups and lane topic activity (``lanes.BrokerLanes``) and
  the timer logs clients asked for (``on_heartbeat``), is the controller's heartbeat.

``validate_only`` runs every check and changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any

from dataplane._gen.meridian.v1 import admin_pb2, common_pb2
from dataplane.broker import topics
from dataplane.broker.cluster import ControllerMetadata
from dataplane.broker.errors import to_error
from dataplane.broker.lanes import BrokerLanes
from dataplane.broker.partitions import Partition, PartitionRegistry
from dataplane.broker.replication.manager import ReplicaManager
from dataplane.broker.tiering import RemoteState, TierManager
from dataplane.delays import is_timer_topic
from dataplane.errors import ErrorCode, MeridianError
from dataplane.storage.config import LogConfig
from lanes.names import is_lane_topic

log = logging.getLogger(__name__)

VERSION = "0.1.0"


class AdminHandler:
    def __init__(
        self,
        registry: PartitionRegistry,
        defaults: LogConfig,
        identity: tuple[int, str, str],
        pushed: ControllerMetadata | None = None,
        executor: Executor | None = None,
        replicas: ReplicaManager | None = None,
        lanes: BrokerLanes | None = None,
        on_push: Callable[[admin_pb2.UpdateMetadataRequest], Awaitable[Any]] | None = None,
        tier: TierManager | None = None,
        on_heartbeat: Callable[[admin_pb2.UpdateMetadataResponse], None] | None = None,
    ) -> None:
        """``identity`` is (broker id, region, cluster id); ``pushed`` keeps the
        controller's metadata (persisted by ``executor``'s threads); ``replicas`` applies
        it to the hosted partitions; ``lanes`` fills the heartbeat's lane fields;
        ``on_push(request)`` is awaited after each accepted push (its failure is logged,
        the push stands); ``tier`` (when the broker has an object store) takes tiered
        topics and reports their remote state; ``on_heartbeat(response)`` adds to each
        heartbeat (the timer logs asked for)."""
        self.tier = tier
        self._on_heartbeat = on_heartbeat
        self.lanes = lanes
        self._on_push = on_push
        self.replicas = replicas
        self.registry = registry
        self.defaults = defaults
        self.broker_id, self.region, self.cluster_id = identity
        self.pushed = pushed
        self._executor = executor
        self._started = time.monotonic()

    async def create(
        self, request: admin_pb2.CreatePartitionsRequest
    ) -> admin_pb2.CreatePartitionsResponse:
        results = [
            await _each(spec.topic, spec.partition, self._create(spec, request.validate_only))
            for spec in request.partitions
        ]
        if self.replicas is not None and any(r.changed for r in results):
            await self.replicas.apply_current()  # the push may name them already
        return admin_pb2.CreatePartitionsResponse(results=results)

    async def _create(self, spec: admin_pb2.PartitionSpec, validate_only: bool) -> bool:
        if not is_timer_topic(spec.topic):
            topics.check_client_topic(spec.topic)
        topics.check_partition(spec.partition)
        config = topics.apply_config(self.defaults, spec.config)
        self._check_tiering(config)
        existing = self.registry.get(spec.topic, spec.partition)
        if existing is not None:
            conflicts = topics.differs(existing.log.config, spec.config)
            if conflicts:
                raise MeridianError(
                    ErrorCode.TOPIC_ALREADY_EXISTS,
                    f"{spec.topic}-{spec.partition} exists with other {', '.join(conflicts)}; "
                    "use AlterPartitionConfigs",
                )
            return False
        if not validate_only:
            await self.registry.create(spec.topic, spec.partition, config)
        return True

    async def delete(
        self, request: admin_pb2.DeletePartitionsRequest
    ) -> admin_pb2.DeletePartitionsResponse:
        results = [
            await _each(tp.topic, tp.partition, self._delete(tp)) for tp in request.partitions
        ]
        return admin_pb2.DeletePartitionsResponse(results=results)

    async def _delete(self, tp: common_pb2.TopicPartition) -> bool:
        if topics.is_internal(tp.topic) and not is_timer_topic(tp.topic):
            raise MeridianError(ErrorCode.INVALID_TOPIC, f"{tp.topic} is internal")
        return await self.registry.delete(tp.topic, tp.partition)

    async def alter(
        self, request: admin_pb2.AlterPartitionConfigsRequest
    ) -> admin_pb2.AlterPartitionConfigsResponse:
        results = [
            await _each(spec.topic, spec.partition, self._alter(spec, request.validate_only))
            for spec in request.partitions
        ]
        return admin_pb2.AlterPartitionConfigsResponse(results=results)

    async def _alter(self, spec: admin_pb2.PartitionSpec, validate_only: bool) -> bool:
        part = self.registry.get(spec.topic, spec.partition)
        if part is None:
            raise MeridianError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{spec.topic}-{spec.partition} is not hosted"
            )
        config = topics.apply_config(part.log.config, spec.config)
        if config == part.log.config:
            return False
        topics.check_alterable(part.log.config, config)
        self._check_tiering(config)
        if not validate_only:
            await self.registry.alter(part, config)
        return True

    def _check_tiering(self, config: LogConfig) -> None:
        if config.remote_storage and self.tier is None:
            raise MeridianError(
                ErrorCode.INVALID_CONFIG,
                "remote_storage needs an object store, and this broker has none (remote_store_uri)",
            )
        if config.remote_storage and not config.topic_id:
            # The id names the topic's objects: without one, a topic made again under the
            # same name would take a deleted one's remote segments for its own.
            raise MeridianError(ErrorCode.INVALID_CONFIG, "remote_storage needs a topic_id")

    def describe(self, request: admin_pb2.DescribeStateRequest) -> admin_pb2.DescribeStateResponse:
        wanted = set(request.topics)
        states = [
            _state(part, self.tier)
            for part in sorted(self.registry.all(), key=lambda p: p.tp)
            if not wanted or part.topic in wanted
        ]
        return admin_pb2.DescribeStateResponse(
            broker_id=self.broker_id,
            region=self.region,
            cluster_id=self.cluster_id,
            partitions=states,
            uptime_ms=int((time.monotonic() - self._started) * 1000),
            version=VERSION,
        )

    async def update_metadata(
        self, request: admin_pb2.UpdateMetadataRequest
    ) -> admin_pb2.UpdateMetadataResponse:
        """Accept the controller's push (``STALE_CONTROLLER_EPOCH`` for a deposed one)
        and answer with this broker's heartbeat."""
        if self.pushed is None:
            raise MeridianError(ErrorCode.INVALID_REQUEST, "this broker takes no pushes")
        await self.pushed.accept(request, self._run)
        if self.replicas is not None:
            await self.replicas.apply(request)
        if self._on_push is not None:
            try:
                await self._on_push(request)
            except Exception:  # the push is accepted whatever its follow-up does
                log.exception("acting on the controller's push failed")
        return self._heartbeat()

    def _run(self, fn: Callable[[], Any]) -> Awaitable[Any]:
        return asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _heartbeat(self) -> admin_pb2.UpdateMetadataResponse:
        parts = list(self.registry.all())
        offline = sum(1 for part in parts if part.log.is_offline)
        assert self.pushed is not None
        response = admin_pb2.UpdateMetadataResponse(
            broker_id=self.broker_id,
            health="degraded" if offline else "ok",
            controller_epoch=self.pushed.epoch,
            hosted_topics=len({part.topic for part in parts}),
            hosted_partitions=len(parts),
            offline_partitions=offline,
            hosted_bytes=sum(part.log.size_bytes for part in parts),
            uptime_ms=int((time.monotonic() - self._started) * 1000),
            version=VERSION,
            isr_proposals=self.replicas.proposals() if self.replicas is not None else [],
        )
        if self.lanes is not None:
            self.lanes.report(response, _led_lane_topics(parts))
        if self._on_heartbeat is not None:
            self._on_heartbeat(response)
        return response


def _led_lane_topics(parts: list[Partition]) -> set[str]:
    return {
        part.topic
        for part in parts
        if is_lane_topic(part.topic) and (part.replica is None or part.replica.is_leader)
    }


def _state(part: Partition, tier: TierManager | None) -> admin_pb2.PartitionState:
    """A partition's offsets and configuration; its role and leader epoch from the push
    (a partition no push named is led here at epoch 0); its remote tier as known here."""
    log = part.log
    state = part.replica
    remote = tier.describe(part) if tier is not None else RemoteState()
    return admin_pb2.PartitionState(
        remote_log_start_offset=remote.log_start_offset,
        remote_end_offset=remote.end_offset,
        remote_bytes=remote.size_bytes,
        remote_segments=remote.segments,
        upload_lag_ms=remote.upload_lag_ms,
        remote_only_bytes=remote.only_bytes,
        topic=part.topic,
        partition=part.index,
        config=topics.to_proto(log.config),
        log_start_offset=log.log_start_offset,
        log_end_offset=log.log_end_offset,
        high_watermark=log.high_watermark,
        size_bytes=log.size_bytes,
        segments=len(log.segments),
        leader_epoch=state.leader_epoch if state is not None else 0,
        role=state.role.value if state is not None else "leader",
        offline=log.is_offline,
    )


async def _each(topic: str, partition: int, action: Awaitable[bool]) -> admin_pb2.AdminResult:
    """Run one partition's action; its failure becomes that partition's result."""
    result = admin_pb2.AdminResult(topic=topic, partition=partition)
    try:
        result.changed = await action
    except Exception as exc:  # every failure is a typed result
        error = to_error(exc)
        result.error = error.code  # type: ignore[assignment]
        result.error_message = error.message
    return result

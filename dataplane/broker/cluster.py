"""The broker's view of the cluster: which broker hosts which partition.

Three sources, merged: the metadata the region's controller last pushed
(``ControllerMetadata``: leaders, leader epochs, replicas, ISR and brokers, kept in the
data directory so a restarted broker serves it before any controller speaks again) is
the truth for every partition it names (leader -1: LEADER_NOT_AVAILABLE); a partition it
does not name is led by the broker hosting it (this one first, leader epoch 0, replicas
and ISR the leader alone); the static peers (``BrokerConfig.peers``) are the fallback
when no controller has pushed. Lane topics are answered with ``lanes`` (``BrokerLanes``:
a missing one is LANE_TOPIC_PENDING or LANE_NOT_FOUND; see ``_add_lane_fields``). A
background task asks each peer for
``Metadata(local_only=True)`` every ``peer_poll_interval_ms`` and keeps the answers; a
client's Metadata request waits (at most ``REFRESH_WAIT_S``) for a round begun after it
arrived, so an admin change completed on any reachable broker before the request is in
the answer. A peer that stops answering keeps its place in the broker list, but its
partitions are dropped once it has been silent for ``peer_expiry_ms``.

``offsets_owner(p)`` is always the static owner of ``__consumer_offsets`` partition ``p``:
``sorted(all broker ids)[p % n]``.

Thread safety: event-loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from dataplane._gen.meridian.v1 import admin_pb2, broker_pb2, broker_pb2_grpc, common_pb2
from dataplane.broker.config import BrokerConfig, parse_address
from dataplane.broker.groups import OFFSETS_TOPIC
from dataplane.broker.lanes import BrokerLanes
from dataplane.broker.outbound import peer_channel
from dataplane.broker.topics import is_internal
from dataplane.delays import is_timer_topic
from dataplane.errors import ErrorCode, MeridianError
from dataplane.files import replace_file
from lanes.names import is_lane_topic, split_topic

log = logging.getLogger(__name__)

REFRESH_WAIT_S = 0.5  # how long a Metadata request waits for a fresh round of peer answers
METADATA_FILE = "controller-metadata.bin"

# topic -> partition -> leader broker id
Placement = dict[str, dict[int, int]]


class ControllerMetadata:
    """The last ``UpdateMetadataRequest`` this broker accepted, in memory and on disk.

    On disk: ``<data_dir>/controller-metadata.bin``, the request's protobuf encoding,
    replaced whole and durably (``dataplane.files.replace_file``), so a crash leaves the
    old push or the new one. An unreadable file is logged and ignored (the broker falls
    back to its static peers until the next push) rather than stopping the broker.
    ``accept`` fences deposed controllers: a push with a lower ``controller_epoch`` than
    the accepted one is refused with STALE_CONTROLLER_EPOCH, also after a restart. Thread
    safety: event-loop only; ``accept`` calls are serialised.
    """

    def __init__(self, data_dir: os.PathLike[str] | str, cluster_id: str) -> None:
        self.path = os.path.join(os.fspath(data_dir), METADATA_FILE)
        self.cluster_id = cluster_id
        self.current: admin_pb2.UpdateMetadataRequest | None = None
        self._encoded = b""
        self._lock = asyncio.Lock()

    @property
    def epoch(self) -> int:
        return self.current.controller_epoch if self.current is not None else 0

    def load(self) -> None:
        """Read the persisted push, if any (blocking; call before serving)."""
        try:
            with open(self.path, "rb") as file:
                data = file.read()
            self.current = admin_pb2.UpdateMetadataRequest.FromString(data)
            self._encoded = data
        except FileNotFoundError:
            return
        except (OSError, DecodeError) as exc:
            log.warning("ignoring unreadable controller metadata %s: %s", self.path, exc)
            return
        log.info(
            "loaded controller metadata: epoch %d from %r, %d topics",
            self.epoch,
            self.current.controller_id,
            len(self.current.topics),
        )

    async def accept(
        self, request: admin_pb2.UpdateMetadataRequest, run: Callable[..., Any]
    ) -> None:
        """Install ``request`` unless it is stale or for another cluster; ``run(fn)``
        runs blocking file I/O off the event loop and returns an awaitable."""
        if not request.cluster_id:
            raise MeridianError(ErrorCode.INVALID_REQUEST, "cluster_id is required")
        if request.cluster_id != self.cluster_id:
            raise MeridianError(
                ErrorCode.INVALID_REQUEST,
                f"this broker is in cluster {self.cluster_id!r}, not {request.cluster_id!r}",
            )
        async with self._lock:
            if request.controller_epoch < self.epoch:
                raise MeridianError(
                    ErrorCode.STALE_CONTROLLER_EPOCH,
                    f"controller epoch {request.controller_epoch} of {request.controller_id!r}"
                    f" is older than the accepted {self.epoch}",
                )
            encoded = request.SerializeToString(deterministic=True)
            if encoded != self._encoded:  # an unchanged push costs no fsync
                write = asyncio.ensure_future(run(lambda: replace_file(self.path, encoded)))
                try:
                    await asyncio.shield(write)
                except asyncio.CancelledError:
                    # The caller gave up (deadline): the write goes on in its thread, so
                    # the lock stays held until it ends and no other push overlaps it.
                    await asyncio.wait([write])
                    raise
                self._encoded = encoded
            self.current = request

    def leaders(self) -> dict[str, dict[int, admin_pb2.MetadataPartition]]:
        if self.current is None:
            return {}
        return {t.name: {p.partition: p for p in t.partitions} for t in self.current.topics}

    def brokers(self) -> list[common_pb2.BrokerInfo]:
        return list(self.current.brokers) if self.current is not None else []


@dataclass
class Peer:
    broker_id: int
    address: str
    info: common_pb2.BrokerInfo
    hosted: dict[str, list[int]] = field(default_factory=dict)
    last_ok: float | None = None  # monotonic time of the last answer
    channel: grpc.aio.Channel | None = None

    def stub(self, config: BrokerConfig) -> broker_pb2_grpc.BrokerStub:
        if self.channel is None:
            self.channel = peer_channel(config, self.address)
        return broker_pb2_grpc.BrokerStub(self.channel)


class ClusterView:
    def __init__(
        self,
        config: BrokerConfig,
        local: Callable[[], Iterable[tuple[str, int]]],
        port: int,
        pushed: ControllerMetadata | None = None,
    ) -> None:
        """``local()`` lists the partitions this broker hosts; ``port`` is the bound one;
        ``pushed`` holds what the controller last pushed."""
        self.config = config
        self._local = local
        self.pushed = pushed or ControllerMetadata(config.data_dir, config.cluster_id)
        self.me = common_pb2.BrokerInfo(
            id=config.broker_id, host=config.host, port=port, region=config.region
        )
        self.peers: dict[int, Peer] = {}
        for peer_id, address in sorted(config.peers.items()):
            host, peer_port = parse_address(address, f"peers.{peer_id}")
            info = common_pb2.BrokerInfo(id=peer_id, host=host, port=peer_port)
            self.peers[peer_id] = Peer(peer_id, address, info)
        self._task: asyncio.Task[None] | None = None
        self._round: asyncio.Future[None] | None = None
        self._round_started = 0.0
        self.lanes: BrokerLanes | None = None  # answers for lane topics (None: plain topics)
        # The answer for a timer log the cluster does not know (None: unknown, as any).
        self.missing_timer_log: Callable[[str], MeridianError] | None = None

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        if self.peers and self._task is None:
            self._task = asyncio.create_task(self._poll_forever(), name="cluster-view")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for peer in self.peers.values():
            if peer.channel is not None:
                await peer.channel.close()

    async def _poll_forever(self) -> None:
        interval = self.config.peer_poll_interval_ms / 1000
        while True:
            try:
                await self.refresh()
            except Exception:  # the view must outlive any one bad answer
                log.exception("refreshing the cluster view failed")
            await asyncio.sleep(interval)

    async def refresh(self, since: float | None = None) -> None:
        """Wait for a round of asking every peer that started at or after ``since``
        (monotonic; default now). Concurrent callers share rounds."""
        since = time.monotonic() if since is None else since
        while True:
            current = self._round
            if current is not None and self._round_started >= since:
                await asyncio.shield(current)
                return
            if current is not None and not current.done():
                await asyncio.shield(current)  # started too early for this caller
                continue
            self._round_started = time.monotonic()
            self._round = asyncio.ensure_future(self._ask_all())

    async def _ask_all(self) -> None:
        await asyncio.gather(*(self._ask(peer) for peer in self.peers.values()))

    async def _ask(self, peer: Peer) -> None:
        timeout = max(0.2, min(2.0, self.config.peer_poll_interval_ms / 1000 * 2))
        request = broker_pb2.MetadataRequest(local_only=True)
        try:
            response = await peer.stub(self.config).Metadata(request, timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            if peer.last_ok is not None:
                log.debug("peer %s did not answer: %s", peer.broker_id, exc.code())
            return
        peer.hosted = {
            t.name: [p.partition for p in t.partitions] for t in response.topics if not t.error
        }
        peer.last_ok = time.monotonic()
        for info in response.brokers:
            if info.id == peer.broker_id:
                peer.info = info

    # -- queries ------------------------------------------------------------------------
    def brokers(self) -> list[common_pb2.BrokerInfo]:
        """This broker, then the controller's view of the others, then static peers. A
        pushed broker without a Kafka port takes the one that broker itself reported, when
        it answered at the same address (a controller that does not know the listener
        yet)."""
        found = {self.me.id: self.me}
        for info in self.pushed.brokers():
            peer = self.peers.get(info.id)
            if (
                not info.kafka_port
                and peer is not None
                and peer.info.kafka_port
                and (peer.info.host, peer.info.port) == (info.host, info.port)
            ):
                merged = common_pb2.BrokerInfo()
                merged.CopyFrom(info)
                merged.kafka_port = peer.info.kafka_port
                info = merged
            found.setdefault(info.id, info)
        for peer in self.peers.values():
            found.setdefault(peer.broker_id, peer.info)
        return [self.me, *(found[i] for i in sorted(found) if i != self.me.id)]

    def is_alive(self, peer: Peer) -> bool:
        expiry = self.config.peer_expiry_ms / 1000
        return peer.last_ok is not None and time.monotonic() - peer.last_ok <= expiry

    def placement(self, *, local_only: bool = False) -> Placement:
        """Where every known partition is led: the controller's push for the partitions
        it names (-1: no leader), this broker for the other partitions it hosts, then
        what live static peers host. ``local_only``: this broker's partitions alone."""
        found: Placement = {}
        pushed = self.pushed.leaders()
        if not local_only:
            for topic, partitions in pushed.items():
                found[topic] = {p: meta.leader_id for p, meta in partitions.items()}
            for peer in self.peers.values():
                if self.is_alive(peer):
                    for topic, hosted in peer.hosted.items():
                        leaders = found.setdefault(topic, {})
                        for partition in hosted:
                            leaders.setdefault(partition, peer.broker_id)
        for topic, partition in self._local():
            meta = pushed.get(topic, {}).get(partition)
            found.setdefault(topic, {})[partition] = self.me.id if meta is None else meta.leader_id
        return found

    def broker(self, broker_id: int) -> common_pb2.BrokerInfo | None:
        return next((info for info in self.brokers() if info.id == broker_id), None)

    def offsets_owner(self, partition: int) -> int:
        ids = self.config.all_broker_ids
        return ids[partition % len(ids)]

    def locate_offsets_partition(self, partition: int) -> common_pb2.BrokerInfo | None:
        """The broker hosting ``__consumer_offsets`` partition ``partition``, if known."""
        leader = self.placement().get(OFFSETS_TOPIC, {}).get(partition)
        return None if leader is None else self.broker(leader)

    async def metadata(self, request: broker_pb2.MetadataRequest) -> broker_pb2.MetadataResponse:
        """The cluster as seen by a round of peer answers begun after this request came
        (within ``REFRESH_WAIT_S``), so it reflects every admin change completed before
        it on a reachable broker; ``local_only`` answers from this broker alone."""
        if not request.local_only and self.peers:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.refresh(time.monotonic()), REFRESH_WAIT_S)
        placement = self.placement(local_only=request.local_only)
        pushed = self.pushed.leaders()
        names = list(dict.fromkeys(request.topics)) if request.topics else sorted(placement)
        topics = [_topic(name, placement.get(name), pushed.get(name, {})) for name in names]
        if self.lanes is not None and not request.local_only:
            _add_lane_fields(self.lanes, topics, placement)
        if self.missing_timer_log is not None and not request.local_only:
            for topic in topics:
                if topic.name not in placement and is_timer_topic(topic.name):
                    error = self.missing_timer_log(topic.name)
                    topic.error, topic.error_message = error.code, error.message  # type: ignore[assignment]
        return broker_pb2.MetadataResponse(
            cluster_id=self.config.cluster_id,
            broker_id=self.me.id,
            brokers=[self.me] if request.local_only else self.brokers(),
            topics=topics,
        )


def _add_lane_fields(
    lanes: BrokerLanes, topics: list[broker_pb2.TopicMetadata], placement: Placement
) -> None:
    """Lane topics: their trunk and consume_trunk, and for one the cluster does not know,
    LANE_TOPIC_PENDING or LANE_NOT_FOUND (``BrokerLanes.missing``) instead of
    UNKNOWN_TOPIC_OR_PARTITION; trunk topics: their orphaned lane topics and whether any
    declared lane covers them (``lanes_declared``). Only names a
    client asked for can be missing: an every-topic answer lists existing topics alone."""
    by_trunk: dict[str, list[str]] = {}
    for name in placement:
        trunk, lane = split_topic(name)
        if lane is not None:
            by_trunk.setdefault(trunk, []).append(name)
    for topic in topics:
        if is_lane_topic(topic.name):
            topic.trunk, topic.consume_trunk = lanes.lane_fields(topic.name)
            if topic.name not in placement:
                error = lanes.missing(topic.name, placement)
                topic.error, topic.error_message = error.code, error.message  # type: ignore[assignment]
        elif not topic.error and not is_internal(topic.name):
            topic.lanes_declared = lanes.table.covers_any(topic.name)
            if topic.name in by_trunk:
                orphans = lanes.orphaned(topic.name, by_trunk[topic.name])
                topic.orphaned_lane_topics.extend(orphans)


def _topic(
    name: str,
    leaders: dict[int, int] | None,
    pushed: dict[int, admin_pb2.MetadataPartition],
) -> broker_pb2.TopicMetadata:
    if leaders is None:
        return broker_pb2.TopicMetadata(
            name=name,
            error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            error_message=f"no broker hosts topic {name!r}",
            internal=is_internal(name),
        )
    partitions = [_partition(p, leader, pushed.get(p)) for p, leader in sorted(leaders.items())]
    return broker_pb2.TopicMetadata(name=name, partitions=partitions, internal=is_internal(name))


def _partition(
    partition: int, leader: int, pushed: admin_pb2.MetadataPartition | None
) -> broker_pb2.PartitionMetadata:
    """The pushed leader, epoch, replicas and ISR hold while the push names the same
    leader; a pushed leader -1 is LEADER_NOT_AVAILABLE."""
    if pushed is not None and pushed.leader_id == leader:
        replicas = list(pushed.replicas) or ([leader] if leader >= 0 else [])
        return broker_pb2.PartitionMetadata(
            partition=partition,
            error=ErrorCode.LEADER_NOT_AVAILABLE if leader < 0 else ErrorCode.NONE,
            leader_id=leader,
            leader_epoch=pushed.leader_epoch,
            replicas=replicas,
            isr=list(pushed.isr) or ([leader] if leader >= 0 else []),
        )
    return broker_pb2.PartitionMetadata(
        partition=partition, leader_id=leader, leader_epoch=0, replicas=[leader], isr=[leader]
    )

"""The broker's view of the cluster: which broker hosts which partition.

Membership is static (``BrokerConfig.peers``) until the control plane drives it. Every
partition is led by the broker hosting it (replication comes later: leader epoch 0,
replicas and ISR are the leader alone). A background task asks each peer for
``Metadata(local_only=True)`` every ``peer_poll_interval_ms`` and keeps the answers; a
client's Metadata request waits (at most ``REFRESH_WAIT_S``) for a round begun after it
arrived, so an admin change completed on any reachable broker before the request is in
the answer. A peer that stops answering keeps its place in the broker list, but its
partitions are dropped once it has been silent for ``peer_expiry_ms``.

``offsets_owner(p)`` is the static owner of ``__consumer_offsets`` partition ``p``:
``sorted(all broker ids)[p % n]``.

Thread safety: event-loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import grpc

from dataplane._gen.meridian.v1 import broker_pb2, broker_pb2_grpc, common_pb2
from dataplane.broker.config import BrokerConfig, parse_address
from dataplane.broker.groups import OFFSETS_TOPIC
from dataplane.broker.topics import is_internal
from dataplane.client.connection import CHANNEL_OPTIONS
from dataplane.errors import ErrorCode

log = logging.getLogger(__name__)

REFRESH_WAIT_S = 0.5  # how long a Metadata request waits for a fresh round of peer answers

# topic -> partition -> leader broker id
Placement = dict[str, dict[int, int]]


@dataclass
class Peer:
    broker_id: int
    address: str
    info: common_pb2.BrokerInfo
    hosted: dict[str, list[int]] = field(default_factory=dict)
    last_ok: float | None = None  # monotonic time of the last answer
    channel: grpc.aio.Channel | None = None

    def stub(self) -> broker_pb2_grpc.BrokerStub:
        if self.channel is None:
            self.channel = grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        return broker_pb2_grpc.BrokerStub(self.channel)


class ClusterView:
    def __init__(
        self, config: BrokerConfig, local: Callable[[], Iterable[tuple[str, int]]], port: int
    ) -> None:
        """``local()`` lists the partitions this broker hosts; ``port`` is the bound one."""
        self.config = config
        self._local = local
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
            response = await peer.stub().Metadata(request, timeout=timeout)
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
        return [self.me, *(peer.info for peer in self.peers.values())]

    def is_alive(self, peer: Peer) -> bool:
        expiry = self.config.peer_expiry_ms / 1000
        return peer.last_ok is not None and time.monotonic() - peer.last_ok <= expiry

    def placement(self, *, local_only: bool = False) -> Placement:
        """Where every known partition is led; this broker's own partitions win."""
        found: Placement = {}
        if not local_only:
            for peer in self.peers.values():
                if self.is_alive(peer):
                    for topic, partitions in peer.hosted.items():
                        leaders = found.setdefault(topic, {})
                        for partition in partitions:
                            leaders.setdefault(partition, peer.broker_id)
        for topic, partition in self._local():
            found.setdefault(topic, {})[partition] = self.me.id
        return found

    def broker(self, broker_id: int) -> common_pb2.BrokerInfo | None:
        if broker_id == self.me.id:
            return self.me
        peer = self.peers.get(broker_id)
        return peer.info if peer is not None else None

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
        names = list(dict.fromkeys(request.topics)) if request.topics else sorted(placement)
        return broker_pb2.MetadataResponse(
            cluster_id=self.config.cluster_id,
            broker_id=self.me.id,
            brokers=[self.me] if request.local_only else self.brokers(),
            topics=[_topic(name, placement.get(name)) for name in names],
        )


def _topic(name: str, leaders: dict[int, int] | None) -> broker_pb2.TopicMetadata:
    if leaders is None:
        return broker_pb2.TopicMetadata(
            name=name,
            error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            error_message=f"no broker hosts topic {name!r}",
            internal=is_internal(name),
        )
    partitions = [
        broker_pb2.PartitionMetadata(
            partition=p, leader_id=leader, leader_epoch=0, replicas=[leader], isr=[leader]
        )
        for p, leader in sorted(leaders.items())
    ]
    return broker_pb2.TopicMetadata(name=name, partitions=partitions, internal=is_internal(name))

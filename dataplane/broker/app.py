"""``BrokerApp``: one broker — its logs, services, cluster view, health and metrics.

Lifecycle: ``await start()`` binds the gRPC port first (``port``; the health service
answers NOT_SERVING and every other call ``BROKER_NOT_AVAILABLE`` while loading), loads
the controller's last metadata push, opens the ``LogManager`` (recovering logs), rebuilds
producer state, starts the group coordinator on the ``__consumer_offsets`` partitions this
broker owns, and only then reports SERVING. ``await stop()`` reports NOT_SERVING, stops
accepting calls, lets in-flight ones finish (``grace_s``) while the group coordinator
answers the calls it parked, snapshots producer state and closes every log cleanly.
With ``kafka_listen`` set, a ``KafkaListener`` (``dataplane.broker.kafka``) also serves
Kafka's wire protocol through the same servicers, bound with the gRPC port (its calls
are answered BROKER_NOT_AVAILABLE while loading, as gRPC's) and stopped first.

``run_broker_in_thread(config)`` runs an app on its own event loop in a thread, for
in-process tests and tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from dataplane._gen.meridian.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    broker_pb2_grpc,
    delay_pb2_grpc,
    group_pb2_grpc,
    replication_pb2_grpc,
    txn_pb2_grpc,
)
from dataplane.broker.admin import AdminHandler
from dataplane.broker.auth import ALLOW_ALL, AuthInterceptor, Authorizer, build_authenticator
from dataplane.broker.cluster import ClusterView, ControllerMetadata
from dataplane.broker.config import BrokerConfig
from dataplane.broker.delay.manager import DelayManager
from dataplane.broker.delay.servicer import DelayServicer
from dataplane.broker.delay.targets import TargetWriter
from dataplane.broker.fetch import FetchHandler, FetchLimits, OffsetsHandler
from dataplane.broker.group_lag import RemoteLags
from dataplane.broker.groups import GroupCoordinator, GroupServicer
from dataplane.broker.kafka import KafkaListener
from dataplane.broker.kafka.data import DataServices
from dataplane.broker.kafka.groups import GroupServices
from dataplane.broker.kafka.txns import TxnServices as KafkaTxnServices
from dataplane.broker.lanes import BrokerLanes, LaneTable
from dataplane.broker.metrics import BrokerMetrics
from dataplane.broker.outbound import peer_channel
from dataplane.broker.partitions import PartitionRegistry
from dataplane.broker.produce import ProduceHandler
from dataplane.broker.producer_ids import ProducerIdAllocator
from dataplane.broker.quotas import QuotaManager
from dataplane.broker.replication.follower import FollowerFetchers
from dataplane.broker.replication.leader import ReplicaFetchHandler, ReplicationServicer
from dataplane.broker.replication.manager import ReplicaManager
from dataplane.broker.services import AdminServicer, BrokerServicer, Readiness
from dataplane.broker.throttling import QuotaInterceptor
from dataplane.broker.tiering import TierManager
from dataplane.broker.txn.wiring import TxnServices
from dataplane.client.connection import MAX_MESSAGE_BYTES
from dataplane.delays import DELIVER_AT
from dataplane.records import decoder, validation
from dataplane.storage.log import PartitionLog, wall_clock_ms
from dataplane.storage.manager import LogManager
from dataplane.tiered.store import ObjectStore

log = logging.getLogger(__name__)

SERVER_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),  # a second broker on the same port must fail, not share it
]
SERVICES = (
    "",
    "meridian.v1.Broker",
    "meridian.v1.Admin",
    "meridian.v1.GroupCoordinator",
    "meridian.v1.Replication",
    "meridian.v1.Delay",
    "meridian.v1.Transactions",
    "meridian.v1.TxnMarkers",
)


class BrokerApp:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.port = 0
        self.metrics_port = 0
        self.kafka_port = 0
        self.kafka: KafkaListener | None = None
        self.metrics = BrokerMetrics()
        self.readiness = Readiness()
        self.health = health_aio.HealthServicer()
        self.executor = ThreadPoolExecutor(config.io_threads, thread_name_prefix="broker-io")
        self.manager = LogManager(
            config.data_dir,
            default_config=config.log,
            max_open_files=config.max_open_files or None,
        )
        self.registry = PartitionRegistry(self.manager, self.executor)
        self.registry.divert_marker = DELIVER_AT.encode()  # records due later: ``delay``
        self.fetchers = FollowerFetchers(config, self.executor, self._locate)
        self.replicas = ReplicaManager(
            config.broker_id,
            self.registry,
            self.executor,
            replica_lag_time_max_ms=config.replica_lag_time_max_ms,
            on_follow=self.fetchers.update,
        )
        self.registry.on_leader_append = self.replicas.update_high_watermark
        self.tier = self._tier_manager(config)
        self.coordinator = GroupCoordinator(
            broker_id=config.broker_id,
            manager=self.manager,
            num_partitions=config.offsets_topic_partitions,
            clock_ms=wall_clock_ms,
            on_handover_refused=self.metrics.handover_refused,
        )
        self.producer_ids = ProducerIdAllocator(config.data_dir, config.broker_id)
        self.txn = TxnServices(
            config,
            manager=self.manager,
            registry=self.registry,
            executor=self.executor,
            groups=self.coordinator,
            new_producer_id=self.producer_ids.next_id,
            channel=self._peer_channel,
            metrics_registry=self.metrics.registry,
        )
        self.pushed = ControllerMetadata(config.data_dir, config.cluster_id)
        self.lanes = BrokerLanes(
            LaneTable(lambda: self.pushed.current),
            known=lambda: self.cluster.placement() if self.cluster is not None else {},
            consumers=self.coordinator.lane_consumers,
            on_refused=self.metrics.lane_refused,
            clock_ms=wall_clock_ms,
        )
        self.metrics.watch_lane_demands(self.lanes.pending_count)
        self._peer_channels: dict[str, grpc.aio.Channel] = {}
        self.remote_lags = RemoteLags(
            self.coordinator.committed_offsets,
            self._local_partitions,
            lambda: self.cluster.placement() if self.cluster is not None else {},
            self._locate,
            self._peer_stub,
            config.group_lag_interval_ms / 1000,
        )
        self.quotas = QuotaManager(
            lambda: self.pushed.current,
            registry=self.metrics.registry,
            max_hold_ms=config.quota_max_hold_ms,
        )
        self.cluster: ClusterView | None = None
        self.delay: DelayManager | None = None
        self._server: grpc.aio.Server | None = None
        self._produce: ProduceHandler | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._opened = False
        self.authenticator = build_authenticator(config, lambda: self.pushed.current)
        self._acl_index: tuple[Any, dict[str, list[Any]]] = (None, {})
        self.authorizer = Authorizer(self._topic_acls) if self.authenticator else ALLOW_ALL
        if self.authenticator is None:
            log.warning("authentication is off: no jwks_url configured; any caller may do all")
        elif config.peers and not config.token_url:
            log.warning("no token_url/client_id: peers with authentication will refuse us")

    def _tier_manager(self, config: BrokerConfig) -> TierManager | None:
        """Tiered storage, when the broker has an object store."""
        if not config.remote_store_uri:
            return None
        store = ObjectStore.from_options_file(
            config.remote_store_uri, config.remote_store_options_file or None
        )
        tier = TierManager(
            self.registry,
            store,
            broker_id=config.broker_id,
            interval_ms=config.tier_interval_ms,
            cache_bytes=config.remote_cache_bytes,
            orphan_grace_s=config.orphan_grace_ms / 1000,
        )
        tier.on_remote_read = self.metrics.observe_remote_read
        return tier

    def _topic_acls(self, topic: str) -> list[Any]:
        """The ACL entries the controller last pushed for ``topic`` (indexed per push)."""
        current = self.pushed.current
        if current is None:
            return []
        if self._acl_index[0] is not current:
            self._acl_index = (current, {t.name: list(t.acls) for t in current.topics if t.acls})
        return self._acl_index[1].get(topic, [])

    # -- start ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Bind, load, serve; raises if the port or the data directory is unavailable."""
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        interceptors: list[grpc.aio.ServerInterceptor] = []
        if self.authenticator:  # authenticate first: quotas see only admitted calls
            interceptors.append(AuthInterceptor(self.authenticator))
        interceptors.append(QuotaInterceptor(self.quotas))
        server = self._server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=interceptors)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        self.port = self._bind(server)
        if not self.port:
            raise OSError(f"cannot listen on {self.config.listen}")
        self.cluster = ClusterView(self.config, self._local_partitions, self.port, self.pushed)
        self.cluster.lanes = self.lanes
        self._add_services(server, self.cluster)
        await server.start()
        if self.kafka is not None:
            self.kafka_port = await self.kafka.start()
            self.cluster.me.kafka_port = self.kafka_port
        if self.config.metrics_listen:
            self.metrics_port = self.metrics.serve(self.config.metrics_listen)
        await self._load()
        self.cluster.start()
        if self.delay is not None:
            self.delay.start()
        self._tasks.append(asyncio.create_task(self._snapshot_producers_forever()))
        self._tasks.append(asyncio.create_task(self.remote_lags.run_forever()))
        if self.tier is not None:
            self._tasks.append(asyncio.create_task(self.tier.run_forever()))
            self.metrics.watch_tier(self.tier)
        self.readiness.ready = True
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)
        log.info("broker %s serving on port %s", self.config.broker_id, self.port)
        if not (decoder.COMPILED and validation.COMPILED):  # ~10x slower validation
            log.warning("the record codec runs in pure Python (native/ was not built)")

    def _bind(self, server: grpc.aio.Server) -> int:
        if not self.config.tls_enabled:
            return int(server.add_insecure_port(self.config.listen))
        key = Path(self.config.tls_key_file).read_bytes()
        cert = Path(self.config.tls_cert_file).read_bytes()
        credentials = grpc.ssl_server_credentials([(key, cert)])
        return int(server.add_secure_port(self.config.listen, credentials))

    def _add_services(self, server: grpc.aio.Server, cluster: ClusterView) -> None:
        config = self.config
        delay = self.delay = DelayManager(
            self.registry,
            self.executor,
            broker_id=config.broker_id,
            authorizer=self.authorizer,
            push=lambda: self.pushed.current,
            placement=cluster.placement,
            metrics=self.metrics.registry,
            clock_ms=wall_clock_ms,
            refuse=self.quotas.storage_refusal,
        )
        produce = self._produce = ProduceHandler(
            self.registry,
            max_request_bytes=config.max_request_bytes,
            on_bytes_in=self.metrics.add_bytes_in,
            refuse=self.quotas.storage_refusal,
            lanes=self.lanes,
            verify=self.txn.verifier.verify,
            delay=delay,
            on_records_in=delay.appended,
        )
        delay.writer = TargetWriter(
            config.broker_id,
            produce.submit,
            lambda topic, partition: cluster.placement().get(topic, {}).get(partition),
            self._peer_stub_of,
            quotas=self.quotas,
        )
        cluster.missing_timer_log = delay.missing_timer_log
        delay_pb2_grpc.add_DelayServicer_to_server(
            DelayServicer(delay, self.metrics, self.readiness), server
        )
        limits = FetchLimits(config.fetch_max_bytes, config.fetch_max_wait_ms)
        fetch = FetchHandler(
            self.registry,
            self.executor,
            limits,
            self.metrics.add_bytes_out,
            on_lane_fetch=self.lanes.fetched,
            tier=self.tier,
        )
        offsets = OffsetsHandler(self.registry, self.executor, self.tier)
        broker = BrokerServicer(
            produce,
            fetch,
            offsets,
            cluster,
            self.producer_ids,
            self.metrics,
            self.readiness,
            max_in_flight=config.produce_max_in_flight,
            authorizer=self.authorizer,
        )
        broker_pb2_grpc.add_BrokerServicer_to_server(broker, server)
        identity = (config.broker_id, config.region, config.cluster_id)
        admin = AdminHandler(
            self.registry,
            config.log,
            identity,
            self.pushed,
            self.executor,
            self.replicas,
            lanes=self.lanes,
            on_push=self._pushed_lane_topics,
            tier=self.tier,
            on_heartbeat=delay.report,
        )
        admin_servicer = AdminServicer(admin, self.metrics, self.readiness, self.authorizer)
        admin_pb2_grpc.add_AdminServicer_to_server(admin_servicer, server)
        groups = GroupServicer(self.coordinator, cluster.locate_offsets_partition, self.authorizer)
        group_pb2_grpc.add_GroupCoordinatorServicer_to_server(groups, server)
        self.txn.bind(cluster)
        transactions, markers = self.txn.servicers(self.metrics, self.readiness, self.authorizer)
        txn_pb2_grpc.add_TransactionsServicer_to_server(transactions, server)
        txn_pb2_grpc.add_TxnMarkersServicer_to_server(markers, server)
        if config.kafka_listen:
            kafka_data = DataServices(
                broker,
                admin_servicer,
                cluster,
                self.registry,
                self.quotas,
                self.authorizer,
                config.log,
                lambda address: admin_pb2_grpc.AdminStub(self._peer_channel(address)),
            )
            self.kafka = KafkaListener(
                config,
                kafka_data,
                GroupServices(groups, self.quotas),
                self.metrics,
                self.authenticator,
                KafkaTxnServices(transactions, self.quotas),
            )
        replica_fetch = ReplicaFetchHandler(
            self.registry, self.replicas, self.executor, config.fetch_max_bytes
        )
        replication_pb2_grpc.add_ReplicationServicer_to_server(
            ReplicationServicer(replica_fetch, self.readiness), server
        )
        self.metrics.watch(
            self._hosted_logs,
            self.coordinator.committed_offsets,
            lambda: self.remote_lags.snapshot,
        )

    async def _pushed_lane_topics(self, request: admin_pb2.UpdateMetadataRequest) -> None:
        """Drop the group commits of lane topics the controller deleted (``coordinator``)."""
        listed = [t.name for t in request.topics] if request.lanes_listed else None
        await self.coordinator.lane_topics_pushed(listed)

    async def _load(self) -> None:
        loop = asyncio.get_running_loop()
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        await loop.run_in_executor(self.executor, self.pushed.load)
        # A partition the saved push names is replicated: reopened at its checkpointed
        # high watermark, never its recovered log end, so a retried duplicate or a reader
        # cannot see a tail that no follower acknowledged before the crash.
        named = self.pushed.leaders()
        reports = await loop.run_in_executor(
            self.executor,
            lambda: self.manager.open(
                replicated=lambda tp: tp.partition in named.get(tp.topic, {})
            ),
        )
        self._opened = True
        self.manager.start()
        repaired = [r for r in reports if not r.clean_shutdown or r.repaired]
        log.info("opened %d logs (%d recovered)", len(reports), len(repaired))
        tiered = [tp for tp, pl in self.manager.logs().items() if pl.config.remote_storage]
        if tiered and self.tier is None:
            log.warning(
                "%d partitions (%s, ...) have remote_storage but this broker has no object "
                "store (remote_store_uri): nothing is uploaded, and their local retention "
                "waits for uploads",
                len(tiered),
                tiered[0],
            )
        await self.registry.adopt()
        await self.coordinator.start(self.owned_offsets_partitions())
        await self.txn.start()
        await self.registry.adopt()  # the offsets and transaction state logs opened
        # Roles from the last push; replicated leaderships wait for a live one.
        await self.replicas.apply(self.pushed.current, saved=True)
        self.replicas.start()

    def owned_offsets_partitions(self) -> list[int]:
        assert self.cluster is not None
        n = self.config.offsets_topic_partitions
        return [p for p in range(n) if self.cluster.offsets_owner(p) == self.config.broker_id]

    def _locate(self, broker_id: int) -> str | None:
        """``host:port`` of a broker, from the push or the static peers."""
        info = self.cluster.broker(broker_id) if self.cluster is not None else None
        return f"{info.host}:{info.port}" if info is not None and info.port else None

    def _peer_stub(self, address: str) -> broker_pb2_grpc.BrokerStub:
        """A Broker stub to a peer, on a channel kept until the broker stops."""
        return broker_pb2_grpc.BrokerStub(self._peer_channel(address))

    def _peer_stub_of(self, broker_id: int) -> broker_pb2_grpc.BrokerStub | None:
        address = self._locate(broker_id)
        return None if address is None else self._peer_stub(address)

    def _peer_channel(self, address: str) -> grpc.aio.Channel:
        channel = self._peer_channels.get(address)
        if channel is None:
            channel = self._peer_channels[address] = peer_channel(self.config, address)
        return channel

    def _local_partitions(self) -> Iterator[tuple[str, int]]:
        for tp in self.manager.logs():
            yield tp.topic, tp.partition

    def _hosted_logs(self) -> Iterator[tuple[str, int, PartitionLog]]:
        for tp, partition_log in self.manager.logs().items():
            yield tp.topic, tp.partition, partition_log

    async def _set_health(self, status: Any) -> None:
        for service in SERVICES:
            await self.health.set(service, status)

    async def _snapshot_producers_forever(self) -> None:
        interval = self.config.producer_snapshot_interval_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            await loop.run_in_executor(
                self.executor, lambda: self.registry.snapshot_producers(only_dirty=True)
            )

    # -- stop -----------------------------------------------------------------------------
    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop serving, finish in-flight calls, and close every log cleanly."""
        self.readiness.ready = False
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        if self.kafka is not None:
            await self.kafka.stop()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.delay is not None:
            await self.delay.stop()
        for channel in self._peer_channels.values():
            await channel.close()
        if self.tier is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.tier.stop)
        await self.fetchers.stop()
        await self.replicas.stop()
        self.registry.wake_all()
        # Alongside the server's stop, which refuses new calls and waits for those in
        # flight: the coordinator answers the JoinGroup/SyncGroup calls it has parked
        # (NOT_COORDINATOR), which would otherwise hold the whole grace period.
        stopping = [self._server.stop(grace_s)] if self._server is not None else []
        if self._opened:
            stopping += [self.coordinator.stop(), self.txn.stop()]
        await asyncio.gather(*stopping)
        if self._produce is not None:
            await self._produce.drain()
        if self.cluster is not None:
            await self.cluster.stop()
        loop = asyncio.get_running_loop()
        if self._opened:
            await loop.run_in_executor(
                self.executor,
                lambda: self.registry.snapshot_producers(only_dirty=False, final=True),
            )
        await loop.run_in_executor(self.executor, self.manager.close)
        self.executor.shutdown(wait=True)
        if self.authenticator is not None:
            self.authenticator.close()
        self.metrics.close()
        log.info("broker %s stopped", self.config.broker_id)


@dataclass
class BrokerHandle:
    """A broker running in a thread of this process: ``port``, ``metrics_port``, ``stop()``."""

    app: BrokerApp
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread

    @property
    def port(self) -> int:
        return self.app.port

    @property
    def metrics_port(self) -> int:
        return self.app.metrics_port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, timeout_s: float = 30.0) -> None:
        asyncio.run_coroutine_threadsafe(self.app.stop(), self.loop).result(timeout_s)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout_s)


def run_broker_in_thread(config: BrokerConfig, timeout_s: float = 30.0) -> BrokerHandle:
    """Start a ``BrokerApp`` on a new event loop in a daemon thread; returns once serving."""
    loop = asyncio.new_event_loop()
    app = BrokerApp(config)
    thread = threading.Thread(
        target=loop.run_forever, name=f"broker-{config.broker_id}", daemon=True
    )
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(app.start(), loop).result(timeout_s)
    except BaseException:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)
        raise
    return BrokerHandle(app, loop, thread)

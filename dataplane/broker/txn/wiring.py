"""``TxnServices``: the broker's transaction coordinator, half messages, marker writer and
verifier, put together over the broker's own parts.

Where things are found: the coordinator of ``__transaction_state`` partition ``p`` is its
static owner (``ClusterView.offsets_owner(p)``, as for ``__consumer_offsets``); a
partition's leader for its marker is the cluster view's placement (the controller's push,
or the static peers), a ``__consumer_offsets`` partition's its static owner. Another
broker is reached on the broker's peer channels (internal credentials).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import Executor

import grpc
from prometheus_client import CollectorRegistry

from dataplane._gen.meridian.v1 import common_pb2, txn_pb2, txn_pb2_grpc
from dataplane.broker.auth import Authorizer
from dataplane.broker.cluster import REFRESH_WAIT_S, ClusterView
from dataplane.broker.config import BrokerConfig
from dataplane.broker.groups import GroupCoordinator
from dataplane.broker.groups.coordinator import OFFSETS_TOPIC
from dataplane.broker.metrics import BrokerMetrics
from dataplane.broker.partitions import PartitionRegistry
from dataplane.broker.services import Readiness
from dataplane.broker.topics import is_internal
from dataplane.broker.txn.coordinator import TransactionCoordinator, TxnConfig
from dataplane.broker.txn.halves import CheckBackHub, HalfMessages
from dataplane.broker.txn.markers import MarkerSender, MarkerWriter
from dataplane.broker.txn.metrics import TxnMetrics
from dataplane.broker.txn.servicer import TransactionsServicer, TxnMarkersServicer
from dataplane.broker.txn.verify import TxnVerifier
from dataplane.errors import ErrorCode, MeridianError
from dataplane.storage.manager import LogManager

TIMEOUT_S = 30.0


class TxnServices:
    def __init__(
        self,
        config: BrokerConfig,
        *,
        manager: LogManager,
        registry: PartitionRegistry,
        executor: Executor,
        groups: GroupCoordinator,
        new_producer_id: Callable[[], int],
        channel: Callable[[str], grpc.aio.Channel],
        metrics_registry: CollectorRegistry,
    ) -> None:
        """``channel(address)``: the broker's peer channel to another broker."""
        self.config = config
        self.registry = registry
        self.cluster: ClusterView | None = None  # set once bound (``bind``)
        self._channel = channel
        self.metrics = TxnMetrics(metrics_registry)
        self.writer = MarkerWriter(registry, executor, groups, self.metrics)
        sender = MarkerSender(
            config.broker_id,
            self._leader_of,
            self.writer,
            self._remote_write,
            is_deleted=self._is_deleted,
            metrics=self.metrics,
        )
        self.coordinator = TransactionCoordinator(
            broker_id=config.broker_id,
            manager=manager,
            num_partitions=config.txn_state_partitions,
            new_producer_id=new_producer_id,
            send_markers=sender.send,
            check_partition=self._check_partition,
            metrics=self.metrics,
            config=TxnConfig(
                max_timeout_ms=config.transaction_max_timeout_ms,
                half_check_interval_ms=config.half_check_interval_ms,
                half_max_checks=config.half_max_checks,
                half_max_lifetime_ms=config.half_max_lifetime_ms,
                max_partitions=config.txn_max_partitions,
                half_max_open_per_tenant=config.half_max_open_per_tenant,
                half_default_commit=config.half_default_outcome == "commit",
            ),
        )
        self.halves = HalfMessages(
            self.coordinator, CheckBackHub(), new_producer_id, self._check_partition
        )
        self.verifier = TxnVerifier(
            config.broker_id, self.coordinator, self._owner_of, self._remote_verify
        )
        groups.verify = self.verifier.offsets
        self.groups = groups
        self.metrics.watch(self.coordinator.open_counts, self._stable_lags, sender.oldest_pending_s)

    def bind(self, cluster: ClusterView) -> None:
        self.cluster = cluster

    def servicers(
        self, metrics: BrokerMetrics, readiness: Readiness, authorizer: Authorizer
    ) -> tuple[TransactionsServicer, TxnMarkersServicer]:
        client = TransactionsServicer(
            self.coordinator,
            self.halves,
            self.groups,
            self._locate,
            metrics,
            readiness,
            authorizer,
            self.writer,
        )
        internal = TxnMarkersServicer(self.writer, self.coordinator, metrics, readiness, authorizer)
        return client, internal

    def owned_partitions(self) -> list[int]:
        assert self.cluster is not None
        n = self.config.txn_state_partitions
        return [p for p in range(n) if self.cluster.offsets_owner(p) == self.config.broker_id]

    async def start(self) -> None:
        await self.coordinator.start(self.owned_partitions())

    async def stop(self) -> None:
        await self.coordinator.stop()

    # -- where things are --------------------------------------------------------------
    def _owner_of(self, partition: int) -> int | None:
        return self.cluster.offsets_owner(partition) if self.cluster is not None else None

    def _locate(self, partition: int) -> common_pb2.BrokerInfo | None:
        owner = self._owner_of(partition)
        return None if owner is None or self.cluster is None else self.cluster.broker(owner)

    def _leader_of(self, topic: str, partition: int) -> int | None:
        if self.cluster is None:
            return None
        if topic == OFFSETS_TOPIC:
            return self.cluster.offsets_owner(partition)
        leader = self.cluster.placement().get(topic, {}).get(partition)
        return None if leader is None or leader < 0 else leader

    def _is_deleted(self, topic: str, partition: int) -> bool:
        """Whether the cluster knows ``topic``-``partition`` deleted, not merely without
        a leader: no placement names it, and either a controller pushes the topics (its
        push no longer names it) or every peer answers and none hosts it (a silent
        peer's partitions leave the placement too, so then nothing is known)."""
        cluster = self.cluster
        if cluster is None or topic == OFFSETS_TOPIC:
            return False
        if partition in cluster.placement().get(topic, {}):
            return False
        if cluster.pushed.leaders():
            return True
        return all(cluster.is_alive(peer) for peer in cluster.peers.values())

    async def _check_partition(self, topic: str, partition: int) -> MeridianError | None:
        """None when the cluster knows ``topic``-``partition``: the cluster view, asked
        again of the peers when it does not yet (a topic created a moment ago)."""
        if is_internal(topic):
            return MeridianError(ErrorCode.INVALID_TOPIC, f"{topic} is internal")
        if self.cluster is None:
            return MeridianError(ErrorCode.BROKER_NOT_AVAILABLE, "the broker is starting")
        if partition not in self.cluster.placement().get(topic, {}):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.cluster.refresh(), REFRESH_WAIT_S)
        if partition not in self.cluster.placement().get(topic, {}):
            return MeridianError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} is not in the cluster"
            )
        return None

    def _stable_lags(self) -> Iterator[tuple[str, int, int]]:
        for part in self.registry.all():
            if part.deleted or (part.replica is not None and not part.replica.is_leader):
                continue
            lag = part.log.high_watermark - part.last_stable_offset()
            yield part.topic, part.index, lag

    # -- other brokers -----------------------------------------------------------------
    def _stub(self, broker_id: int) -> txn_pb2_grpc.TxnMarkersStub:
        info = self.cluster.broker(broker_id) if self.cluster is not None else None
        if info is None or not info.port:
            raise MeridianError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not known")
        return txn_pb2_grpc.TxnMarkersStub(self._channel(f"{info.host}:{info.port}"))

    async def _remote_write(
        self, broker_id: int, request: txn_pb2.WriteTxnMarkersRequest
    ) -> txn_pb2.WriteTxnMarkersResponse:
        response: txn_pb2.WriteTxnMarkersResponse = await self._stub(broker_id).WriteTxnMarkers(
            request, timeout=TIMEOUT_S
        )
        return response

    async def _remote_verify(
        self, broker_id: int, request: txn_pb2.VerifyTxnRequest
    ) -> txn_pb2.VerifyTxnResponse:
        response: txn_pb2.VerifyTxnResponse = await self._stub(broker_id).VerifyTxn(
            request, timeout=TIMEOUT_S
        )
        return response

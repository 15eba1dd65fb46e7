"""The admin client: topics, offsets, the cluster and groups, over every broker's Admin RPCs.

```python
with Admin("127.0.0.1:9092") as admin:
    admin.create_topic("acme.orders", 6, {"retention_ms": 86_400_000})
    admin.describe_topic("acme.orders").partitions[0].high_watermark
    admin.group_lag("billing")
```

Until the control plane places partitions, ``create_topic`` does: the cluster's brokers
(from ``Metadata``, or ``brokers``) in id order, partition ``p`` on broker
``(start + p) mod n`` where ``start`` is the topic name's murmur2 hash mod ``n`` (so
topics spread across brokers), one idempotent ``CreatePartitions`` per broker, then
``Metadata`` is polled until it shows every partition with a leader. Partitions that
already exist keep their broker, so calling it again, or with more partitions, is safe.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc

from dataplane._gen.meridian.v1 import admin_pb2, common_pb2
from dataplane.client import txn_admin
from dataplane.client.auth import Credentials
from dataplane.client.connection import ChannelSecurity, ConnectionPool, Tls
from dataplane.client.metadata import API_TIMEOUT_S, BrokerAddress, ClusterMetadata
from dataplane.client.offsets import LATEST, ends_and_ages, list_offsets, offset_spec
from dataplane.client.txn_admin import HalfMessageListing, TransactionListing
from dataplane.client.types import TopicPartition
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc
from dataplane.hashing import murmur2

CONFIG_KEYS = frozenset(common_pb2.PartitionConfig.DESCRIPTOR.fields_by_name)


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int  # broker id, -1 when none is known
    log_start_offset: int = -1
    log_end_offset: int = -1
    high_watermark: int = -1
    size_bytes: int = 0
    segments: int = 0
    offline: bool = False
    config: dict[str, Any] = field(default_factory=dict)
    remote_bytes: int = 0  # in the cluster's object store (tiered storage)
    remote_segments: int = 0


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: list[PartitionDescription]

    @property
    def size_bytes(self) -> int:
        return sum(p.size_bytes for p in self.partitions)

    @property
    def remote_bytes(self) -> int:
        return sum(p.remote_bytes for p in self.partitions)

    @property
    def records(self) -> int:
        """Records between every partition's log start and high watermark."""
        return sum(max(0, p.high_watermark - p.log_start_offset) for p in self.partitions)


@dataclass(frozen=True)
class BrokerDescription:
    id: int
    host: str
    port: int
    reachable: bool
    region: str = ""
    partitions: int = 0
    uptime_ms: int = 0
    version: str = ""


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str
    brokers: list[BrokerDescription]


@dataclass(frozen=True)
class PartitionLag:
    """A group's position in one partition: the committed offset (None: nothing
    committed), the end offset (high watermark), and the lag in time — the timestamp of
    the record at the committed offset, the group's oldest unconsumed record (-1 when
    caught up), and its age in ms by the leader's clock (0 when caught up)."""

    committed: int | None
    end_offset: int
    record_timestamp: int = -1
    lag_ms: int | None = None

    @property
    def lag(self) -> int | None:
        return None if self.committed is None else max(0, self.end_offset - self.committed)

    @property
    def lag_seconds(self) -> float | None:
        return None if self.lag_ms is None else self.lag_ms / 1000


def config_proto(config: Mapping[str, Any] | None) -> common_pb2.PartitionConfig:
    """A ``PartitionConfig`` from a dict; unknown keys raise ``INVALID_CONFIG``."""
    config = dict(config or {})
    unknown = sorted(set(config) - CONFIG_KEYS)
    if unknown:
        raise MeridianError(
            ErrorCode.INVALID_CONFIG,
            f"unknown topic config {unknown}; known: {sorted(CONFIG_KEYS)}",
        )
    try:
        return common_pb2.PartitionConfig(**config)
    except (TypeError, ValueError) as err:
        raise MeridianError(ErrorCode.INVALID_CONFIG, f"bad topic config: {err}") from None


def _config_dict(config: common_pb2.PartitionConfig) -> dict[str, Any]:
    present = (name for name in CONFIG_KEYS if config.HasField(name))  # type: ignore[arg-type]
    return {name: getattr(config, name) for name in present}


def place(name: str, partitions: Iterable[int], brokers: list[int]) -> dict[int, int]:
    """Partition -> broker id: round-robin over ``brokers`` (sorted) from the name's hash."""
    ordered = sorted(brokers)
    start = murmur2(name.encode()) % len(ordered)
    return {p: ordered[(start + p) % len(ordered)] for p in partitions}


class Admin:
    """Administers a cluster; thread-safe; see the module docstring."""

    def __init__(
        self,
        bootstrap: str | Iterable[str],
        *,
        client_id: str = "meridian-admin",
        request_timeout_ms: float = 30_000,
        api_timeout_ms: float = API_TIMEOUT_S * 1000,
        credentials: Credentials = None,
        tls: Tls = None,
    ) -> None:
        self._timeout_s = request_timeout_ms / 1000
        self._pool = ConnectionPool(
            bootstrap, client_id=client_id, security=ChannelSecurity.of(credentials, tls)
        )
        self.metadata = ClusterMetadata(
            self._pool, timeout_s=self._timeout_s, api_timeout_s=api_timeout_ms / 1000
        )

    # -- topics --------------------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int,
        config: Mapping[str, Any] | None = None,
        *,
        brokers: Iterable[int] | None = None,
        wait_s: float = 30.0,
    ) -> dict[int, int]:
        """Create (or complete) topic ``name``; returns partition -> broker id."""
        if partitions < 1:
            raise MeridianError(ErrorCode.INVALID_PARTITIONS, f"{partitions} partitions")
        spec_config = config_proto(config)
        snapshot = self.metadata.refresh([name])
        candidates = sorted(snapshot.brokers) if brokers is None else sorted(set(brokers))
        unknown = [b for b in candidates if b not in snapshot.brokers]
        if not candidates or unknown:
            raise MeridianError(
                ErrorCode.BROKER_NOT_AVAILABLE,
                f"no broker to place {name} on" if not candidates else f"unknown brokers {unknown}",
            )
        existing = {
            p: b for p, b in snapshot.leaders.get(name, {}).items() if b in snapshot.brokers
        }
        placement = {**place(name, range(partitions), candidates), **existing}
        by_broker: dict[int, list[int]] = defaultdict(list)
        for partition, broker in sorted(placement.items()):
            by_broker[broker].append(partition)
        for broker, hosted in by_broker.items():
            specs = [
                admin_pb2.PartitionSpec(topic=name, partition=p, config=spec_config) for p in hosted
            ]
            request = admin_pb2.CreatePartitionsRequest(partitions=specs)
            self._check(self._call(snapshot.brokers[broker], "CreatePartitions", request).results)
        self._wait_for(
            name, lambda leaders: all(leaders.get(p, -1) >= 0 for p in placement), wait_s
        )
        return placement

    def delete_topic(self, name: str, *, wait_s: float = 30.0) -> None:
        """Delete every partition of ``name`` on every broker hosting one."""
        for broker, hosted in self._hosted(name).items():
            request = admin_pb2.DeletePartitionsRequest(
                partitions=[
                    common_pb2.TopicPartition(topic=name, partition=s.partition) for s in hosted
                ]
            )
            self._check(self._call(broker, "DeletePartitions", request).results)
        self._wait_for(name, lambda leaders: not leaders, wait_s)

    def alter_topic_config(self, name: str, config: Mapping[str, Any]) -> None:
        """Change the set fields of ``config`` on every partition of ``name``."""
        spec_config = config_proto(config)
        hosted = self._hosted(name)
        if not hosted:
            raise MeridianError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        for broker, states in hosted.items():
            specs = [
                admin_pb2.PartitionSpec(topic=name, partition=s.partition, config=spec_config)
                for s in states
            ]
            request = admin_pb2.AlterPartitionConfigsRequest(partitions=specs)
            self._check(self._call(broker, "AlterPartitionConfigs", request).results)

    def describe_topic(self, name: str) -> TopicDescription:
        """Partitions with leaders, offsets, sizes and configuration, from the brokers."""
        snapshot = self.metadata.refresh([name])
        leaders = snapshot.leaders.get(name, {})
        # With authentication on, brokers answer a client about the topics it may describe.
        by_broker = self._hosted(name)
        hosted: dict[int, tuple[BrokerAddress, admin_pb2.PartitionState]] = {}
        for replica, states in by_broker.items():
            for hosted_state in states:  # the leader's state where replicas differ
                partition = hosted_state.partition
                if partition not in hosted or replica.id == leaders.get(partition):
                    hosted[partition] = (replica, hosted_state)
        if not leaders and not hosted:
            raise MeridianError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}")
        partitions = []
        for partition in sorted(set(leaders) | set(hosted)):
            broker, state = hosted.get(partition, (None, None))
            leader = leaders.get(partition, broker.id if broker else -1)
            if state is None:
                partitions.append(PartitionDescription(partition, leader))
                continue
            partitions.append(
                PartitionDescription(
                    partition,
                    leader,
                    state.log_start_offset,
                    state.log_end_offset,
                    state.high_watermark,
                    state.size_bytes,
                    state.segments,
                    state.offline,
                    _config_dict(state.config),
                    state.remote_bytes,
                    state.remote_segments,
                )
            )
        return TopicDescription(name, partitions)

    def list_topics(self, *, internal: bool = False) -> dict[str, int]:
        """Topic -> partition count, as the cluster's metadata has them."""
        snapshot = self.metadata.refresh()
        return {
            topic: len(leaders)
            for topic, leaders in sorted(snapshot.leaders.items())
            if internal or not topic.startswith("__")
        }

    def list_offsets(
        self, specs: Mapping[TopicPartition, int | str], *, read_committed: bool = False
    ) -> dict[TopicPartition, tuple[int, int]]:
        """``{tp: (offset, timestamp)}`` for ``"earliest"``, ``"latest"`` or a timestamp;
        ``read_committed``: latest is the last stable offset."""
        wanted = {TopicPartition(*tp): offset_spec(spec) for tp, spec in specs.items()}
        return list_offsets(
            self.metadata, wanted, timeout_s=self._timeout_s, read_committed=read_committed
        )

    def describe_cluster(self) -> ClusterDescription:
        """Every broker the cluster's metadata lists, with what it reports of itself."""
        snapshot = self.metadata.refresh()
        brokers, cluster_id = [], ""
        for broker in sorted(snapshot.brokers.values(), key=lambda b: b.id):
            try:
                state = self._call(broker, "DescribeState", admin_pb2.DescribeStateRequest())
            except MeridianError:
                brokers.append(BrokerDescription(broker.id, broker.host, broker.port, False))
                continue
            cluster_id = cluster_id or state.cluster_id
            brokers.append(
                BrokerDescription(
                    broker.id,
                    broker.host,
                    broker.port,
                    True,
                    state.region,
                    len(state.partitions),
                    state.uptime_ms,
                    state.version,
                )
            )
        return ClusterDescription(cluster_id, brokers)

    # -- groups --------------------------------------------------------------------------
    def list_groups(self) -> list[Any]:
        """Every group of the cluster (``group.GroupListing``: id, state, protocol type)."""
        from dataplane.client import group

        return group.list_groups(self.metadata)

    def describe_group(self, group_id: str) -> Any:
        """Members, assignments and committed offsets (``group.GroupDescription``)."""
        from dataplane.client import group

        return group.describe_group(self.metadata, group_id)

    # -- transactions and half messages (txn_admin.py) -----------------------------------
    def list_transactions(self, states: Iterable[str] = ()) -> list[TransactionListing]:
        """Every transactional id the caller may describe, in ``states`` (all: none)."""
        return txn_admin.list_transactions(self.metadata, states)

    def describe_transaction(self, transactional_id: str) -> TransactionListing:
        return txn_admin.describe_transaction(self.metadata, transactional_id)

    def abort_transaction(self, transactional_id: str) -> TransactionListing:
        """Abort an open (hanging) transaction, fencing its producer; the state after."""
        return txn_admin.abort_transaction(self.metadata, transactional_id)

    def list_half_messages(self, producer_group: str | None = None) -> list[HalfMessageListing]:
        return txn_admin.list_half_messages(self.metadata, producer_group)

    def resolve_half_message(self, producer_group: str, half_id: str, *, commit: bool) -> str:
        """Commit or roll back a half message as an operator; its state after."""
        return txn_admin.resolve_half_message(self.metadata, producer_group, half_id, commit=commit)

    def describe_producers(self, tp: TopicPartition) -> list[txn_admin.ProducerListing]:
        """The producers of a partition at its leader, with their open transactions."""
        return txn_admin.describe_producers(self.metadata, TopicPartition(*tp))

    def abort_producer(self, tp: TopicPartition, producer_id: int) -> int:
        """An operator's abort marker for ``producer_id``'s transaction hanging on ``tp``
        (Kafka's ``kafka-transactions --abort``); where that transaction began."""
        return txn_admin.abort_producer(self.metadata, TopicPartition(*tp), producer_id)

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, MeridianError | None]:
        """Delete empty groups and their committed offsets: group -> error or None
        (``NON_EMPTY_GROUP`` while members remain, ``GROUP_ID_NOT_FOUND``)."""
        from dataplane.client import group

        outcome: dict[str, MeridianError | None] = {}
        for group_id in group_ids:
            try:
                group.delete_group(self.metadata, group_id)
                outcome[group_id] = None
            except MeridianError as error:
                outcome[group_id] = error
        return outcome

    def group_lag(self, group_id: str) -> dict[TopicPartition, PartitionLag]:
        """Per partition the group committed: committed offset, end offset, lag in
        records and in time (each leader reads the record at the committed offset
        through its offset index)."""
        from dataplane.client import group

        committed = group.fetch_committed(self.metadata, group_id)
        known = {tp: offset for tp, offset in committed.items() if offset is not None}
        ages = ends_and_ages(self.metadata, known, timeout_s=self._timeout_s)
        unknown = dict.fromkeys((tp for tp in committed if tp not in known), LATEST)
        ends = list_offsets(self.metadata, unknown, timeout_s=self._timeout_s) if unknown else {}
        lags = {
            tp: PartitionLag(known[tp], a.end_offset, a.record_timestamp, a.age_ms)
            for tp, a in ages.items()
        }
        lags.update((tp, PartitionLag(None, end)) for tp, (end, _) in ends.items())
        return dict(sorted(lags.items()))

    def alter_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Set ``group_id``'s committed offsets (the next offset each partition's
        consumer reads); refused with ``UNKNOWN_MEMBER_ID`` while the group has members,
        whose own commits would overwrite them."""
        from dataplane.client import group

        group.commit_offsets(self.metadata, group_id, offsets)

    # -- plumbing ------------------------------------------------------------------------
    def _call(self, broker: BrokerAddress, method: str, request: Any) -> Any:
        try:
            return getattr(self._pool.get(broker.address).admin, method)(
                request, timeout=self._timeout_s
            )
        except grpc.RpcError as exc:
            self._pool.forget(broker.address)
            raise error_from_rpc(exc) from None

    def _hosted(self, name: str) -> dict[BrokerAddress, list[admin_pb2.PartitionState]]:
        """What each reachable broker hosts of ``name``."""
        hosted: dict[BrokerAddress, list[admin_pb2.PartitionState]] = {}
        for broker in self.metadata.refresh([name]).brokers.values():
            state = self._call(
                broker, "DescribeState", admin_pb2.DescribeStateRequest(topics=[name])
            )
            partitions = [p for p in state.partitions if p.topic == name]
            if partitions:
                hosted[broker] = partitions
        return hosted

    @staticmethod
    def _check(results: Iterable[admin_pb2.AdminResult]) -> None:
        for result in results:
            if result.error != ErrorCode.NONE:
                raise MeridianError(
                    result.error, f"{result.topic}/{result.partition}: {result.error_message}"
                )

    def _wait_for(self, name: str, done: Any, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            leaders = self.metadata.refresh([name]).leaders.get(name, {})
            if done(leaders):
                return
            if time.monotonic() >= deadline:
                raise MeridianError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"the cluster's metadata did not show the change to {name} within {wait_s} s",
                )
            time.sleep(0.05)

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

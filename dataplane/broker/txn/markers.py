"""Transaction markers: the coordinator's sender and the partition leader's writer
(Kafka's WriteTxnMarkers).

``MarkerSender.send(meta, coordinator_epoch)`` writes the commit or abort marker of a
decided transaction to every partition of it. Partitions are grouped by the broker that
leads them now (``leader_of``: the cluster's metadata; for ``__consumer_offsets``, the
partition's static owner) and sent in one ``TxnMarkers.WriteTxnMarkers`` call per
broker (this broker's own through ``MarkerWriter`` directly). A partition whose marker
is refused with a retriable error (a leader moved, fewer in-sync replicas than the
minimum, a broker down) is sent again, to whoever leads it then, after a backoff (100 ms
doubling to 2 s), until written: so a marker reaches a partition across leader
changes. A marker refused as fenced (``INVALID_PRODUCER_EPOCH``: a newer epoch's marker
is already there; ``TRANSACTION_COORDINATOR_FENCED``) has nothing left to do, but is
counted (``meridian_txn_markers_fenced_total``) and logged as a warning: it is expected
only when a newer coordinator or producer epoch got there first, and otherwise means the
partition's producer state and this coordinator disagree (see the limits in
``docs/transactions.md``). A partition with no leader now (leader -1, or its broker
silent) is retried for as long as it takes: giving it up would leave its part of the
transaction never visible and its last stable offset stuck. Only a partition the cluster
knows deleted (``is_deleted``: the controller's push no longer names its topic, or every
broker answers and none hosts it) for ``unknown_topic_ms`` is given up, with a warning.
A partition whose marker has been pending for more than ``stuck_ms`` is logged once and
shown by ``meridian_txn_marker_oldest_pending_seconds``. ``send`` returns once every
partition is done; it is cancelled when the coordinator stops (a restart sends again
what its log says is decided).

``MarkerWriter.write(request)`` appends markers as the leader of each partition
(``Partition.append_marker``: the producer table applies it under the append lock, so a
fenced marker is refused and nothing written) and answers once the marker is below the
high watermark with the committed ISR at ``min_insync_replicas`` (acks=all, as Kafka
appends markers); for a ``__consumer_offsets`` partition the group coordinator applies
or drops the producer's pending offset commits (``complete_txn``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor

import grpc

from dataplane._gen.meridian.v1 import common_pb2, txn_pb2
from dataplane.broker.errors import to_error
from dataplane.broker.fetch import not_leader
from dataplane.broker.groups.coordinator import OFFSETS_TOPIC, GroupCoordinator
from dataplane.broker.partitions import Partition, PartitionRegistry
from dataplane.broker.produce import wait_for_isr
from dataplane.broker.txn.metrics import TxnMetrics
from dataplane.broker.txn.state import TopicPartitionKey, TxnMetadata, TxnState
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc
from dataplane.records.control import Marker

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 2.0
DEFAULT_TIMEOUT_MS = 30_000
_DONE_CODES = frozenset(
    {ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED}
)

# (topic, partition) -> the id of the broker leading it now; None: no leader known now
LeaderOf = Callable[[str, int], int | None]
# (topic, partition) -> whether the cluster knows it deleted (not merely leaderless)
IsDeleted = Callable[[str, int], bool]
# broker id -> WriteTxnMarkers on that broker
RemoteWrite = Callable[
    [int, txn_pb2.WriteTxnMarkersRequest], Awaitable[txn_pb2.WriteTxnMarkersResponse]
]


class MarkerWriter:
    """Appends markers on the partitions this broker leads (module docstring)."""

    def __init__(
        self,
        registry: PartitionRegistry,
        executor: Executor,
        groups: GroupCoordinator,
        metrics: TxnMetrics,
    ) -> None:
        self._registry = registry
        self._executor = executor
        self._groups = groups
        self._metrics = metrics

    async def write(
        self, request: txn_pb2.WriteTxnMarkersRequest
    ) -> txn_pb2.WriteTxnMarkersResponse:
        deadline = time.monotonic() + (request.timeout_ms or DEFAULT_TIMEOUT_MS) / 1000
        response = txn_pb2.WriteTxnMarkersResponse()
        for marker in request.markers:
            ends = Marker(
                marker.producer_id, marker.producer_epoch, marker.commit, marker.coordinator_epoch
            )
            outcomes = await asyncio.gather(
                *(
                    self._write_one(ends, tp.topic, tp.partition, deadline)
                    for tp in marker.partitions
                )
            )
            result = response.markers.add(producer_id=marker.producer_id)
            for tp, error in zip(marker.partitions, outcomes, strict=True):
                entry = result.results.add(topic=tp.topic, partition=tp.partition)
                if error is not None:
                    entry.error, entry.error_message = error.code, error.message  # type: ignore[assignment]
        return response

    async def _write_one(
        self, marker: Marker, topic: str, partition: int, deadline: float
    ) -> MeridianError | None:
        try:
            if topic == OFFSETS_TOPIC:
                await self._groups.complete_txn(
                    partition, marker.producer_id, marker.producer_epoch, marker.commit
                )
                self._metrics.marker_written(marker.commit)
                return None
            return await self._append(marker, topic, partition, deadline)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every failure is a typed result
            return to_error(exc)

    async def _append(
        self, marker: Marker, topic: str, partition: int, deadline: float
    ) -> MeridianError | None:
        part = self._registry.get(topic, partition)
        if part is None:
            return MeridianError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} is not hosted here"
            )
        refused = not_leader(part)
        if refused is not None:
            return refused
        loop = asyncio.get_running_loop()
        info = await loop.run_in_executor(self._executor, part.append_marker, marker)
        part.after_append()
        error = await wait_for_isr(part, info.last_offset, info.leader_epoch, deadline)
        if error is None:
            self._metrics.marker_written(marker.commit)
        return error

    # -- an operator's view and abort of one partition's producers -------------------
    def describe_producers(self, topic: str, partition: int) -> list[txn_pb2.PartitionProducer]:
        """The producers of a partition this broker leads, with their open transactions."""
        part = self._led(topic, partition)
        return [
            txn_pb2.PartitionProducer(
                producer_id=pid,
                producer_epoch=entry.epoch,
                last_sequence=entry.last_seq,
                txn_first_offset=entry.txn_first_offset,
                coordinator_epoch=entry.coordinator_epoch,
            )
            for pid, entry in sorted(part.producers.entries().items())
        ]

    async def abort_producer(
        self, topic: str, partition: int, producer_id: int, timeout_ms: int = DEFAULT_TIMEOUT_MS
    ) -> int:
        """An operator's abort marker for ``producer_id``'s transaction open on the
        partition (Kafka's ``kafka-transactions --abort``), at the producer's epoch and
        last coordinator epoch there, so the partition takes it; the transaction's first
        offset. ``INVALID_TXN_STATE`` when none is open. A marker its coordinator sends
        later for the same transaction closes nothing more."""
        part = self._led(topic, partition)
        entry = part.producers.get(producer_id)
        first = part.producers.open_transactions().get(producer_id)
        if entry is None or first is None:
            raise MeridianError(
                ErrorCode.INVALID_TXN_STATE,
                f"producer {producer_id} has no transaction open on {topic}-{partition}",
            )
        marker = Marker(producer_id, entry.epoch, False, max(entry.coordinator_epoch, 0))
        deadline = time.monotonic() + timeout_ms / 1000
        error = await self._append(marker, topic, partition, deadline)
        if error is not None:
            raise error
        log.warning(
            "%s-%d: an operator aborted producer %d's transaction open from offset %d",
            topic,
            partition,
            producer_id,
            first,
        )
        return first

    def _led(self, topic: str, partition: int) -> Partition:
        part = self._registry.get(topic, partition)
        if part is None or topic == OFFSETS_TOPIC:
            raise MeridianError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} is not hosted here"
            )
        refused = not_leader(part)
        if refused is not None:
            raise refused
        return part


class MarkerSender:
    """Writes the markers of decided transactions (module docstring)."""

    def __init__(
        self,
        broker_id: int,
        leader_of: LeaderOf,
        local: MarkerWriter,
        remote: RemoteWrite,
        *,
        is_deleted: IsDeleted = lambda topic, partition: False,
        metrics: TxnMetrics | None = None,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        unknown_topic_ms: int = 60_000,
        stuck_ms: int = 60_000,
    ) -> None:
        self._broker_id = broker_id
        self._leader_of = leader_of
        self._is_deleted = is_deleted
        self._metrics = metrics
        self._local = local
        self._remote = remote
        self._timeout_ms = timeout_ms
        self._unknown_topic_s = unknown_topic_ms / 1000
        self._stuck_s = stuck_ms / 1000
        self._sending: dict[int, float] = {}  # id of a send in progress -> its start

    def oldest_pending_s(self) -> float:
        """How long the oldest send still in progress has been going (0: none)."""
        started = min(self._sending.values(), default=None)
        return 0.0 if started is None else time.monotonic() - started

    async def send(self, meta: TxnMetadata, coordinator_epoch: int) -> None:
        key = id(asyncio.current_task())
        self._sending[key] = time.monotonic()
        try:
            await self._send(meta, coordinator_epoch)
        finally:
            self._sending.pop(key, None)

    async def _send(self, meta: TxnMetadata, coordinator_epoch: int) -> None:
        commit = meta.state in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)
        remaining = set(meta.partitions)
        deleted_since: dict[TopicPartitionKey, float] = {}
        started = time.monotonic()
        warned = False
        backoff = FIRST_BACKOFF_S
        while remaining:
            by_broker: dict[int, list[TopicPartitionKey]] = {}
            now = time.monotonic()
            for tp in sorted(remaining):
                leader = self._leader_of(*tp)
                if leader is not None:
                    deleted_since.pop(tp, None)
                    by_broker.setdefault(leader, []).append(tp)
                elif not self._is_deleted(*tp):
                    deleted_since.pop(tp, None)  # leaderless: retried however long
                elif now - deleted_since.setdefault(tp, now) > self._unknown_topic_s:
                    log.warning(
                        "%r: giving up the marker of %s-%d: deleted from the cluster",
                        meta.transactional_id,
                        tp[0],
                        tp[1],
                    )
                    remaining.discard(tp)
            sent = await asyncio.gather(
                *(
                    self._send_to(b, tps, meta, commit, coordinator_epoch)
                    for b, tps in by_broker.items()
                )
            )
            for results in sent:
                for tp, error in results.items():
                    if error is None:
                        remaining.discard(tp)
                    elif error.code in _DONE_CODES:
                        remaining.discard(tp)
                        self._fenced(meta, tp, error)
                    else:
                        log.debug(
                            "%r: marker of %s-%d: %s", meta.transactional_id, tp[0], tp[1], error
                        )
            if remaining and not warned and time.monotonic() - started > self._stuck_s:
                warned = True
                log.warning(
                    "%r: the %s markers of %s are still not written after %.0f s (no leader?)",
                    meta.transactional_id,
                    "commit" if commit else "abort",
                    ", ".join(f"{t}-{p}" for t, p in sorted(remaining)),
                    time.monotonic() - started,
                )
            if remaining:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _fenced(self, meta: TxnMetadata, tp: TopicPartitionKey, error: MeridianError) -> None:
        if self._metrics is not None:
            self._metrics.marker_fenced(error.code_name)
        log.warning(
            "%r: the marker of %s-%d (producer %d epoch %d) was refused as fenced, so not "
            "written: %s",
            meta.transactional_id,
            tp[0],
            tp[1],
            meta.producer_id,
            meta.producer_epoch,
            error,
        )

    async def _send_to(
        self,
        broker_id: int,
        partitions: list[TopicPartitionKey],
        meta: TxnMetadata,
        commit: bool,
        coordinator_epoch: int,
    ) -> dict[TopicPartitionKey, MeridianError | None]:
        request = txn_pb2.WriteTxnMarkersRequest(
            timeout_ms=self._timeout_ms,
            markers=[
                txn_pb2.TxnMarker(
                    producer_id=meta.producer_id,
                    producer_epoch=meta.producer_epoch,
                    coordinator_epoch=coordinator_epoch,
                    commit=commit,
                    transactional_id=meta.transactional_id,
                    partitions=[
                        common_pb2.TopicPartition(topic=t, partition=p) for t, p in partitions
                    ],
                )
            ],
        )
        try:
            if broker_id == self._broker_id:
                response = await self._local.write(request)
            else:
                response = await self._remote(broker_id, request)
        except grpc.RpcError as exc:
            error = error_from_rpc(exc)
            return dict.fromkeys(partitions, error)
        except MeridianError as error:
            return dict.fromkeys(partitions, error)
        found: dict[TopicPartitionKey, MeridianError | None] = {}
        for result in response.markers:
            for entry in result.results:
                tp = (entry.topic, entry.partition)
                found[tp] = MeridianError(entry.error, entry.error_message) if entry.error else None
        missing = MeridianError(ErrorCode.UNKNOWN_SERVER_ERROR, "not answered")
        return {tp: found.get(tp, missing) for tp in partitions}

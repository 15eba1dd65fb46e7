"""Where a stream's drained batches go: the ``Upstream`` protocol, the brokers
(``BrokerUpstream``) and an in-memory cluster for tests of the drain (``MemoryUpstream``).

The drain builds its batches itself (``databus.drain``: one per partition per chunk,
with a producer id, epoch and base sequence it keeps in its journal), so a batch resent
after a kill carries exactly the records and sequences of the first send and the brokers
answer it as a duplicate if they already have it. An upstream only carries batches: it
never splits, merges or re-sequences them.

``produce`` answers every batch with an ``Outcome``: written (``duplicate`` when the
broker already had it) or the error the brokers gave (``dataplane.errors.ErrorCode``;
codes below 100 are worth retrying). A transport failure is ``BROKER_NOT_AVAILABLE``.
"""

from __future__ import annotations

import contextlib
import threading
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Protocol

import grpc

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.client.auth import Credentials
from dataplane.client.connection import ChannelSecurity, ConnectionPool, Tls
from dataplane.client.metadata import ClusterMetadata
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc
from dataplane.records import decode_batches
from dataplane.records.header import read_header

ACKS = {"all": -1, "1": 1}


@dataclass(frozen=True, slots=True)
class PartitionBatch:
    topic: str
    partition: int
    data: bytes  # one RecordBatch v2
    count: int


@dataclass(frozen=True, slots=True)
class Outcome:
    error: int = ErrorCode.NONE
    message: str = ""
    duplicate: bool = False
    base_offset: int = -1
    throttle_ms: int = 0  # the broker asks for a pause before the next request (quotas)

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.NONE


class Upstream(Protocol):
    def partitions(self, topic: str) -> int:
        """The partition count of ``topic``; raises ``MeridianError`` (retriable while a
        lane topic is being made, ``LANE_NOT_FOUND`` for an undeclared lane)."""

    def new_producer(self) -> tuple[int, int]:
        """A fresh producer id and epoch; raises ``MeridianError``."""

    def produce(
        self, batches: list[PartitionBatch], *, acks: str, timeout_s: float
    ) -> dict[tuple[str, int], Outcome]:
        """Send each batch to its partition's leader; an outcome for every batch."""

    def close(self) -> None: ...


class BrokerUpstream:
    """The brokers, through the SDK's connection pool and cluster metadata."""

    def __init__(
        self,
        bootstrap: str | Iterable[str],
        *,
        credentials: Credentials = None,
        tls: Tls = None,
        client_id: str = "meridian-databus",
    ) -> None:
        self.pool = ConnectionPool(
            bootstrap, client_id=client_id, security=ChannelSecurity.of(credentials, tls)
        )
        self.metadata = ClusterMetadata(self.pool)
        self._senders = ThreadPoolExecutor(max_workers=8, thread_name_prefix="databus-send")

    def partitions(self, topic: str) -> int:
        return len(self.metadata.partitions_for(topic))

    def new_producer(self) -> tuple[int, int]:
        request = broker_pb2.InitProducerIdRequest(producer_id=-1, producer_epoch=-1)
        try:
            response = self.metadata.any_connection().broker.InitProducerId(request, timeout=10)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc) from None
        if response.error:
            raise MeridianError(response.error, response.error_message)
        return response.producer_id, response.producer_epoch

    def produce(
        self, batches: list[PartitionBatch], *, acks: str, timeout_s: float
    ) -> dict[tuple[str, int], Outcome]:
        outcomes: dict[tuple[str, int], Outcome] = {}
        by_leader: dict[str, list[PartitionBatch]] = defaultdict(list)
        for batch in batches:
            try:
                leader = self.metadata.leader_for(batch.topic, batch.partition)
            except MeridianError as error:
                outcomes[(batch.topic, batch.partition)] = Outcome(error.code, str(error))
                continue
            by_leader[leader.address].append(batch)
        calls = [
            self._senders.submit(self._send, address, group, ACKS[acks], timeout_s)
            for address, group in by_leader.items()
        ]
        for call in calls:
            outcomes.update(call.result())
        if any(not o.ok for o in outcomes.values()):
            self._refresh({b.topic for b in batches})
        return outcomes

    def _send(
        self, address: str, batches: list[PartitionBatch], acks: int, timeout_s: float
    ) -> dict[tuple[str, int], Outcome]:
        request = broker_pb2.ProduceRequest(
            acks=acks,
            timeout_ms=int(timeout_s * 1000),
            partitions=[
                broker_pb2.PartitionRecords(topic=b.topic, partition=b.partition, records=b.data)
                for b in batches
            ],
        )
        try:
            response = self.pool.get(address).broker.Produce(request, timeout=timeout_s + 5)
        except grpc.RpcError as exc:
            error = error_from_rpc(exc)
            if error.code == ErrorCode.MESSAGE_TOO_LARGE and len(batches) > 1:
                # The request as a whole was too large: one batch a request instead.
                outcomes: dict[tuple[str, int], Outcome] = {}
                for batch in batches:
                    outcomes.update(self._send(address, [batch], acks, timeout_s))
                return outcomes
            self.pool.forget(address)
            # A whole request refused is no verdict on its batches: try them again.
            code = (
                error.code
                if error.code != ErrorCode.MESSAGE_TOO_LARGE
                else ErrorCode.BROKER_NOT_AVAILABLE
            )
            return {(b.topic, b.partition): Outcome(code, str(error)) for b in batches}
        return {
            (r.topic, r.partition): Outcome(
                r.error, r.error_message, r.duplicate, r.base_offset, response.throttle_ms
            )
            for r in response.results
        }

    def _refresh(self, topics: set[str]) -> None:
        with contextlib.suppress(MeridianError):  # the next attempt refreshes again
            self.metadata.refresh(sorted(topics))

    def close(self) -> None:
        self._senders.shutdown(wait=False, cancel_futures=True)
        self.pool.close()


class MemoryUpstream:
    """An in-memory cluster with the brokers' idempotence rules (the last batch of each
    producer and partition is recognised when sent again), for fast tests of the drain.
    ``fail_next`` makes the next sends of a partition fail with a code; ``down`` makes
    every send fail as an unreachable cluster does; ``throttle_ms`` is set on every
    answer, as brokers over a quota do."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = dict(topics)
        self.logs: dict[
            tuple[str, int], list[tuple[bytes | None, bytes | None, tuple[Any, ...]]]
        ] = defaultdict(list)
        self.down = False
        self.throttle_ms = 0
        self.fail_next: dict[tuple[str, int], list[int]] = defaultdict(list)
        self._producers: dict[tuple[int, str, int], tuple[int, int]] = {}
        self._next_pid = 1000
        self._lock = threading.Lock()
        self.requests = 0
        self.batch_sizes: list[int] = []

    def partitions(self, topic: str) -> int:
        if self.down:
            raise MeridianError(ErrorCode.BROKER_NOT_AVAILABLE, "the cluster is down")
        if topic not in self.topics:
            if "~" in topic:  # lanes are declared here by naming their lane topics
                raise MeridianError(ErrorCode.LANE_NOT_FOUND, f"lane of {topic} not declared")
            raise MeridianError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic}")
        return self.topics[topic]

    def new_producer(self) -> tuple[int, int]:
        with self._lock:
            self._next_pid += 1
            return self._next_pid, 0

    def produce(
        self, batches: list[PartitionBatch], *, acks: str, timeout_s: float
    ) -> dict[tuple[str, int], Outcome]:
        with self._lock:
            self.requests += 1
            outcomes = {(b.topic, b.partition): self._append(b) for b in batches}
        if self.throttle_ms:
            return {tp: replace(o, throttle_ms=self.throttle_ms) for tp, o in outcomes.items()}
        return outcomes

    def _append(self, batch: PartitionBatch) -> Outcome:
        tp = (batch.topic, batch.partition)
        if self.down:
            return Outcome(ErrorCode.BROKER_NOT_AVAILABLE, "the cluster is down")
        if self.fail_next[tp]:
            return Outcome(self.fail_next[tp].pop(0), "injected failure")
        records = decode_batches(batch.data)
        header = read_header(batch.data)
        self.batch_sizes.append(len(batch.data))
        base_seq = header.base_sequence
        key = (header.producer_id, *tp)
        last = self._producers.get(key)
        if last is not None and last == (base_seq, base_seq + len(records) - 1):
            return Outcome(duplicate=True)
        expected = 0 if last is None else last[1] + 1
        if base_seq != expected:
            return Outcome(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, f"expected {expected}")
        self._producers[key] = (base_seq, base_seq + len(records) - 1)
        log = self.logs[tp]
        offset = len(log)
        log.extend((r.key, r.value, r.headers) for r in records)
        return Outcome(base_offset=offset)

    def close(self) -> None:
        pass

"""What the producer's sender tracks between requests: settings, per-partition sequences
and unacknowledged batches, and the requests of one pass to one broker."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.client.batch import ProducerBatch
from dataplane.client.link import BrokerLink
from dataplane.client.metadata import ClusterSnapshot
from dataplane.client.types import TopicPartition
from dataplane.errors import MeridianError, error_from_rpc
from dataplane.records import Compression

SEQUENCE_MASK = 0x7FFFFFFF  # sequences wrap from 2**31 - 1 to 0, as in Kafka


@dataclass(frozen=True)
class SenderConfig:
    acks: int
    compression: Compression
    idempotent: bool
    retries: int
    delivery_timeout_s: float
    retry_backoff_s: float
    retry_backoff_max_s: float
    request_timeout_s: float
    max_in_flight: int
    max_request_bytes: int
    client_id: str
    close_gaps: bool = True
    transactional_id: str = ""  # a transactional producer's (dataplane.client.transactions)


class PartitionState:
    """Sequences and the batches sent and not yet acknowledged, of one partition."""

    __slots__ = ("next_sequence", "pending", "retry_at", "tp")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.next_sequence = 0
        self.pending: list[ProducerBatch] = []
        self.retry_at = 0.0

    def in_flight(self) -> int:
        return sum(1 for batch in self.pending if batch.in_flight)

    def remove(self, batch: ProducerBatch) -> list[ProducerBatch]:
        """Take ``batch`` out of ``pending``; returns the batches sent after it."""
        position = self.pending.index(batch)
        later = self.pending[position + 1 :]
        del self.pending[position]
        return later

    def close_gap(self, count: int, later: list[ProducerBatch]) -> None:
        """``count`` records were surely not stored: the later batches' sequences move
        down by as much (they are sealed again before they are resent)."""
        for other in later:
            other.base_sequence = (other.base_sequence - count) & SEQUENCE_MASK
            other.sealed = None
            other.resequenced = True
        self.next_sequence = (self.next_sequence - count) & SEQUENCE_MASK

    def replace(self, batch: ProducerBatch, parts: list[ProducerBatch]) -> None:
        """``batch`` was split into ``parts``: they take its place and its sequences."""
        position = self.pending.index(batch)
        self.pending[position : position + 1] = parts
        sequence = batch.base_sequence
        for part in parts:
            part.base_sequence = sequence if sequence >= 0 else -1
            sequence = (sequence + part.count) & SEQUENCE_MASK


class RequestPlan:
    """The requests one pass sends to one broker: the k-th holds one batch per partition."""

    def __init__(self, link: BrokerLink, slots: int, budget: int) -> None:
        self.link = link
        self.slots = slots
        self.budget = budget
        self.requests: list[dict[tuple[str, int], ProducerBatch]] = []
        self.sizes: list[int] = []
        self.next_index: dict[TopicPartition, int] = {}

    def add(self, batch: ProducerBatch) -> bool:
        key = (batch.tp.topic, batch.tp.partition)
        for index in range(self.next_index.get(batch.tp, 0), self.slots):
            if index == len(self.requests):
                self.requests.append({})
                self.sizes.append(0)
            request = self.requests[index]
            if key in request or (request and self.sizes[index] + batch.size > self.budget):
                continue
            request[key] = batch
            self.sizes[index] += batch.size
            self.next_index[batch.tp] = index + 1
            return True
        return False


class Planner:
    """One sending pass: a ``RequestPlan`` per leader broker, as batches are placed."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        link: Callable[[str], BrokerLink],
        config: SenderConfig,
        now: float,
    ) -> None:
        self._snapshot = snapshot
        self._link = link
        self._config = config
        self._now = now
        self.plans: dict[str, RequestPlan] = {}
        self.leaderless = False  # a partition had no known leader: refresh the metadata

    def plan_for(self, tp: TopicPartition) -> RequestPlan | None:
        leader = self._snapshot.leaders.get(tp.topic, {}).get(tp.partition, -1)
        broker = self._snapshot.brokers.get(leader)
        if broker is None:
            self.leaderless = True
            return None
        plan = self.plans.get(broker.address)
        if plan is None:
            link = self._link(broker.address)
            slots = link.free_slots(self._config.max_in_flight, self._now)
            plan = self.plans[broker.address] = RequestPlan(
                link, slots, self._config.max_request_bytes
            )
        return plan


class ProducerIdentity:
    """The idempotent producer's id and epoch, from ``InitProducerId``."""

    def __init__(self) -> None:
        self.producer_id = -1
        self.epoch = -1

    async def request(self, stub: Any, timeout_s: float, *, bump: bool) -> None:
        """A new id (or, with ``bump``, a new epoch of ours); raises ``MeridianError``."""
        request = broker_pb2.InitProducerIdRequest(
            producer_id=self.producer_id if bump else -1,
            producer_epoch=self.epoch if bump else -1,
        )
        try:
            response = await stub.InitProducerId(request, timeout=timeout_s)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc) from None
        if response.error:
            raise MeridianError(response.error, response.error_message)
        self.producer_id, self.epoch = response.producer_id, response.producer_epoch

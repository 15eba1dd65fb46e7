"""The client's cached view of the cluster: brokers, topics, partitions and leaders.

Any broker answers ``Metadata`` for the whole cluster, so a client needs only bootstrap
addresses. The cache is refreshed on demand (a retriable error such as
``NOT_LEADER_OR_FOLLOWER`` asks for a refresh) and when older than ``max_age_s``.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import grpc

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.client.connection import Connection, ConnectionPool
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc


@dataclass(frozen=True)
class BrokerAddress:
    id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class LaneTopicInfo:
    """What a topic's metadata says of lanes: for a lane topic (also while it is
    ``LANE_TOPIC_PENDING``) its ``trunk`` and whether its lane's groups read the trunk too
    (``consume_trunk``); for a trunk topic the lane topics its groups read while their
    lane has no live consumer (``orphaned_lane_topics``) and whether any declared lane
    covers it (``lanes_declared``)."""

    trunk: str = ""
    consume_trunk: bool = False
    orphaned_lane_topics: tuple[str, ...] = ()
    lanes_declared: bool = False


NO_LANE_INFO = LaneTopicInfo()


@dataclass
class ClusterSnapshot:
    brokers: dict[int, BrokerAddress] = field(default_factory=dict)
    # topic -> partition -> leader broker id (-1: no leader known)
    leaders: dict[str, dict[int, int]] = field(default_factory=dict)
    topic_errors: dict[str, int] = field(default_factory=dict)
    fetched_at: float = 0.0
    # topic -> partition -> (the leader epoch ``leaders`` names, 0 in a cluster no
    # controller runs; when that epoch was first seen, monotonic)
    epochs: dict[str, dict[int, tuple[int, float]]] = field(default_factory=dict)
    # topic -> its lane fields, for every topic answered (errors included)
    lanes: dict[str, LaneTopicInfo] = field(default_factory=dict)


# One broker's Metadata answer takes milliseconds (at most ~0.5 s while it asks its
# peers); a hung broker must not hold a failover for the whole refresh timeout.
# How long an operation that finds its broker (a group's coordinator, ...) may retry,
# by default: Kafka's ``default.api.timeout.ms``.
API_TIMEOUT_S = 60.0
ATTEMPT_TIMEOUT_S = 2.0
# A broker's answer waits up to 0.5 s for a round of its static peers (one of which may
# hang): past this, another broker is asked as well.
HEDGE_AFTER_S = 0.75
# A broker whose last push is behind (a hedged refresh's first answer may come from one)
# names an older leader epoch than the snapshot: within this long of the newer epoch's
# first sighting, its leader is ignored. Past it, an older epoch is believed (a topic
# deleted and created again starts its epochs anew; there are no topic ids to tell).
EPOCH_MEMORY_S = 10.0


class ClusterMetadata:
    """Thread-safe metadata cache over a ``ConnectionPool``."""

    def __init__(
        self,
        pool: ConnectionPool,
        *,
        max_age_s: float = 30.0,
        timeout_s: float = 10.0,
        api_timeout_s: float = API_TIMEOUT_S,
    ) -> None:
        self.pool = pool
        self.max_age_s = max_age_s
        self.timeout_s = timeout_s  # one request's
        self.api_timeout_s = api_timeout_s  # an operation's, retries included
        self._lock = threading.Lock()
        self._snapshot = ClusterSnapshot()
        self._silent: set[str] = set()  # left the last refresh unanswered

    # -- refreshing -----------------------------------------------------------------------
    def refresh(self, topics: Iterable[str] = (), *, avoid: Iterable[str] = ()) -> ClusterSnapshot:
        """Ask a reachable broker (known brokers first, then bootstrap) for metadata.

        Hedged: a broker silent for ``HEDGE_AFTER_S`` (hung, or waiting for a hung
        peer) does not hold the refresh for its whole attempt timeout: the next one is
        asked too, and the first answer wins. Brokers in ``avoid`` (whose requests seem
        stuck) and those that left the last refresh unanswered are asked last."""
        request = broker_pb2.MetadataRequest(topics=sorted(set(topics)))
        suspects = set(avoid) | self._silent
        candidates = self._candidates()
        ordered = [a for a in candidates if a not in suspects]
        ordered += [a for a in candidates if a in suspects]
        asking = _Hedge(self.pool, request, min(self.timeout_s, ATTEMPT_TIMEOUT_S))
        try:
            for address in ordered:
                asking.ask(address)
                answer = asking.first_answer(HEDGE_AFTER_S)
                if answer is not None:
                    return self._merge(answer, full=not request.topics)
            answer = asking.first_answer(ATTEMPT_TIMEOUT_S)
            if answer is not None:
                return self._merge(answer, full=not request.topics)
        finally:
            self._silent = asking.cancel()
        raise asking.last or MeridianError(ErrorCode.BROKER_NOT_AVAILABLE, "no broker reachable")

    def _candidates(self) -> list[str]:
        known = [b.address for b in self._snapshot.brokers.values()]
        random.shuffle(known)
        return known + [a for a in self.pool.bootstrap if a not in known]

    def _merge(self, response: broker_pb2.MetadataResponse, *, full: bool) -> ClusterSnapshot:
        with self._lock:
            old = self._snapshot
            brokers = {b.id: BrokerAddress(b.id, b.host, b.port) for b in response.brokers}
            leaders = {} if full else dict(old.leaders)
            epochs = {} if full else dict(old.epochs)
            errors = {} if full else dict(old.topic_errors)
            lanes = {} if full else dict(old.lanes)
            now = time.monotonic()
            for topic in response.topics:
                if (
                    topic.trunk
                    or topic.consume_trunk
                    or topic.orphaned_lane_topics
                    or topic.lanes_declared
                ):
                    lanes[topic.name] = LaneTopicInfo(
                        topic.trunk,
                        topic.consume_trunk,
                        tuple(topic.orphaned_lane_topics),
                        topic.lanes_declared,
                    )
                else:
                    lanes.pop(topic.name, None)
                if topic.error:
                    errors[topic.name] = topic.error
                    leaders.pop(topic.name, None)
                    epochs.pop(topic.name, None)
                    continue
                errors.pop(topic.name, None)
                leaders[topic.name], epochs[topic.name] = _newest(topic, old, now)
            self._snapshot = ClusterSnapshot(brokers, leaders, errors, now, epochs, lanes)
            return self._snapshot

    def snapshot(self) -> ClusterSnapshot:
        return self._snapshot

    def _fresh(self, topic: str) -> ClusterSnapshot:
        snap = self._snapshot
        stale = time.monotonic() - snap.fetched_at > self.max_age_s
        if stale or topic not in snap.leaders:
            snap = self.refresh([topic] if not stale else [*snap.leaders, topic])
        return snap

    # -- lookups --------------------------------------------------------------------------
    def partitions_for(self, topic: str) -> list[int]:
        """The partitions of ``topic``; raises ``UNKNOWN_TOPIC_OR_PARTITION`` if none."""
        snap = self._fresh(topic)
        leaders = snap.leaders.get(topic)
        if not leaders:
            code = snap.topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            raise MeridianError(code, f"topic {topic!r} is not known to the cluster")
        return sorted(leaders)

    def leader_for(self, topic: str, partition: int) -> BrokerAddress:
        """The leader broker of a partition; raises a retriable error if none is known."""
        snap = self._fresh(topic)
        leader_id = snap.leaders.get(topic, {}).get(partition)
        if leader_id is None:
            raise MeridianError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}/{partition} is not known"
            )
        broker = snap.brokers.get(leader_id)
        if broker is None:
            raise MeridianError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}/{partition} has no live leader"
            )
        return broker

    def connection_for(self, topic: str, partition: int) -> Connection:
        return self.pool.get(self.leader_for(topic, partition).address)

    def broker(self, broker_id: int) -> BrokerAddress | None:
        return self._snapshot.brokers.get(broker_id)

    def any_connection(self) -> Connection:
        """A connection to some broker (known ones first, then bootstrap)."""
        return self.pool.get(self._candidates()[0])


class _Hedge:
    """Metadata calls to several brokers at once; the first answer wins. A broker
    that fails is forgotten by the pool (its channel is reopened next time)."""

    def __init__(
        self, pool: ConnectionPool, request: broker_pb2.MetadataRequest, timeout_s: float
    ) -> None:
        self._pool = pool
        self._request = request
        self._timeout_s = timeout_s
        self._done: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._calls: dict[str, Any] = {}  # the calls not answered yet
        self.last: MeridianError | None = None

    def ask(self, address: str) -> None:
        call = self._pool.get(address).broker.Metadata.future(
            self._request, timeout=self._timeout_s
        )
        self._calls[address] = call
        call.add_done_callback(lambda done: self._done.put((address, done)))

    def first_answer(self, within_s: float) -> broker_pb2.MetadataResponse | None:
        """The first answer within ``within_s``; None when every call asked so far
        failed (``last``) or none answered in time."""
        deadline = time.monotonic() + within_s
        while self._calls:
            try:
                address, call = self._done.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            del self._calls[address]
            try:
                return call.result()  # type: ignore[no-any-return]
            except grpc.RpcError as exc:
                self.last = error_from_rpc(exc)
                self._pool.forget(address)
        return None

    def cancel(self) -> set[str]:
        """Cancel the calls still running; returns their addresses."""
        for call in self._calls.values():
            call.cancel()
        return set(self._calls)


def _newest(
    topic: broker_pb2.TopicMetadata, old: ClusterSnapshot, now: float
) -> tuple[dict[int, int], dict[int, tuple[int, float]]]:
    """``topic``'s leaders and epochs, each partition's from ``old`` where that names a
    leader epoch newer than the answer's and first seen less than ``EPOCH_MEMORY_S`` ago
    (the answering broker's push is behind)."""
    old_leaders = old.leaders.get(topic.name, {})
    old_epochs = old.epochs.get(topic.name, {})
    leaders: dict[int, int] = {}
    epochs: dict[int, tuple[int, float]] = {}
    for p in topic.partitions:
        known, seen_at = old_epochs.get(p.partition, (-1, now))
        if known > p.leader_epoch and now - seen_at < EPOCH_MEMORY_S and p.partition in old_leaders:
            leaders[p.partition], epochs[p.partition] = old_leaders[p.partition], (known, seen_at)
            continue
        leaders[p.partition] = p.leader_id
        epochs[p.partition] = (p.leader_epoch, seen_at if known == p.leader_epoch else now)
    return leaders, epochs

"""The consumer: ``poll`` records of assigned partitions, fetched ahead in the background.

```python
consumer = Consumer("127.0.0.1:9092", group_id="billing", auto_offset_reset="earliest")
consumer.subscribe(["acme.orders"])          # group membership, or:
consumer.assign([TopicPartition("acme.orders", 0)])
while True:
    for record in consumer.poll(timeout_ms=1000):
        handle(record)
consumer.close()                             # commits (auto commit) and leaves the group
```

Partitions come from ``subscribe`` (the group's assignors, ``group.py``) or ``assign``
(manual). A partition's starting position is its committed offset (with a ``group_id``),
else what ``auto_offset_reset`` says: ``earliest``, ``latest`` or ``none`` (``poll``
raises ``OFFSET_OUT_OF_RANGE``). The same policy applies when a fetch position falls
outside the log. ``poll`` returns at most ``max_poll_records`` records, decoding them
from what the fetcher thread (``fetcher.py``) has buffered. With
``enable_auto_commit`` the positions are committed every ``auto_commit_interval_ms``
(at the start of a ``poll``, so what earlier polls returned counts as processed), before
partitions are revoked, and on ``close``.

A consumer is used from one thread (as Kafka's); its fetcher runs on its own.

Lanes (see ``lanes``): ``Consumer(group_id="billing", lane="ppe")`` subscribed to
``acme.orders`` joins the group ``billing~ppe`` and reads the lane topic
``acme.orders~ppe`` (and ``acme.orders`` too when the lane says ``consume_trunk``); a
lane topic not created yet stays subscribed and is read once it exists. A consumer
without a lane reads its topics and the lane topics their metadata lists as orphaned
(lanes with no live consumer, ``orphan_policy=trunk``). Both re-read that metadata every
``lane_refresh_ms`` and rejoin their group when what they read changes, so a lane's
partitions move between the trunk's group and the lane's within seconds. Hand-over is
exact: with auto commit, positions are committed before partitions are given up
(revoked, unsubscribed, closed; an application committing by hand does it in its
``on_partitions_revoked`` and before closing); a partition the other group of the
family still holds (``HANDOVER_IN_PROGRESS``) is not read until the coordinator gives
its starting offset; and a lane-topic partition neither group of the family committed
starts at its earliest record whatever ``auto_offset_reset`` says (a lane topic holds
only the lane's records, all of them waiting for a consumer).

Transactions (``isolation_level``): ``read_uncommitted`` (the default, as Kafka's)
reads up to the high watermark, the records of open and aborted transactions included;
``read_committed`` reads up to the last stable offset and skips aborted transactions'
records, and a partition an open transaction committed an offset of
(``UNSTABLE_OFFSET_COMMIT``) is not read until that transaction ends, so a
consume-transform-produce loop restarting elsewhere never reads from a position a
transaction may still move. Control batches (transaction markers) are never returned;
no consumer ever sees a half message before its commit, nor one rolled back.
``group_metadata()`` is what ``Producer.send_offsets_to_transaction`` takes.

Records keep their topic's name (``acme.orders~ppe``); ``record.lane`` is their lane
(None on the trunk). While the application handles a lane record, the lane is in effect
(``lanes.current_lane``), so what it produces goes to the same lane: iterating over the
consumer sets it for each record until the next one is asked for; with ``poll``, wrap
the handling in ``consumer.processing(record)``:

```python
consumer = Consumer(bootstrap, group_id="billing", lane="ppe")
consumer.subscribe(["acme.orders"])
for record in consumer:                       # the lane is in effect for each record
    producer.send("acme.invoices", b"...")    # -> acme.invoices~ppe
for record in consumer.poll(timeout_ms=1000):
    with consumer.processing(record):
        producer.send("acme.invoices", b"...")
```

Retries (``retries.py``): a group with a retry policy also reads its retry topic
(``<group>.retry``); ``retry_later(record, delay_s)`` and ``nack(record)`` send a record
back to the group after a delay, or to its dead-letter topic once it has been delivered
``max_attempts`` times. Every commit first waits until the retries asked so far are
stored.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any

import lanes
from dataplane.client.auth import Credentials
from dataplane.client.connection import ChannelSecurity, ConnectionPool, Tls
from dataplane.client.delayed import DelayClient
from dataplane.client.errors import ConfigError
from dataplane.client.fetcher import FetchConfig, Fetcher, FetchState, PartitionState, take_batches
from dataplane.client.metadata import NO_LANE_INFO, ClusterMetadata
from dataplane.client.offsets import EARLIEST, LATEST, list_offsets
from dataplane.client.retries import Retrier, RetryFailedError, check_retry_delay, lane_refusal
from dataplane.client.types import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    PolledBatch,
    TopicPartition,
)
from dataplane.errors import ErrorCode, MeridianError

log = logging.getLogger(__name__)

_RESETS = ("earliest", "latest", "none")
_ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
# Fetched data a partition may have waiting for poll, in max_partition_fetch_bytes: enough
# that the next fetch is under way while poll decodes (the whole buffer stays under
# fetch_max_bytes).
PREFETCH_FETCHES = 4
# A partition another group of its family still holds is asked for again after this,
# doubling up to HANDOVER_BACKOFF_MAX_S.
HANDOVER_BACKOFF_S = 0.1
# How often a consumer without a lane re-reads the lane fields of topics no declared lane
# covers (a lane declared later is followed within this; covered topics: lane_refresh_ms).
UNLANED_REFRESH_S = 30.0
# Attempts of the commit made before partitions are given up (revoke, close).
REVOKE_COMMIT_ATTEMPTS = 3
HANDOVER_BACKOFF_MAX_S = 1.0


class Consumer:
    """Reads records from a Meridian cluster; see the module docstring.

    ``lane`` (with ``group_id``) makes it a consumer of that lane: it joins the group
    ``<group_id>~<lane>`` (``group_id`` then is that name; ``trunk_group_id`` the one
    given) and reads the lane's topics. ``lane_refresh_ms`` is how often a subscribed
    consumer re-reads the lane metadata of its topics (orphaned lane topics, a lane's
    ``consume_trunk``, lane topics created since): it bounds how long a hand-over
    between a lane's group and the trunk's takes to start.
    """

    def __init__(
        self,
        bootstrap: str | Iterable[str],
        *,
        group_id: str | None = None,
        client_id: str = "meridian-consumer",
        auto_offset_reset: str = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: float = 5_000,
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 50 * 1024 * 1024,
        max_partition_fetch_bytes: int = 1024 * 1024,
        max_poll_records: int = 500,
        assignors: Collection[str] = ("range", "cooperative-sticky"),
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int = 300_000,
        group_instance_id: str | None = None,
        request_timeout_ms: float = 30_000,
        retry_backoff_ms: float = 100,
        check_crcs: bool = True,
        credentials: Credentials = None,
        tls: Tls = None,
        lane: str | None = None,
        lane_refresh_ms: float = 1_000,
        isolation_level: str = "read_uncommitted",
    ) -> None:
        self.lane = None if lane is None else lanes.check_lane_name(lane)
        if isolation_level not in _ISOLATION_LEVELS:
            raise ConfigError(
                f"isolation_level must be one of {_ISOLATION_LEVELS}, not {isolation_level!r}"
            )
        self.isolation_level = isolation_level
        self._read_committed = isolation_level == "read_committed"
        if self.lane is not None and group_id is None:
            raise ConfigError("a lane consumer needs a group_id", ErrorCode.INVALID_GROUP_ID)
        if auto_offset_reset not in _RESETS:
            raise ConfigError(
                f"auto_offset_reset must be one of {_RESETS}, not {auto_offset_reset!r}"
            )
        for name, value in (
            ("fetch_max_bytes", fetch_max_bytes),
            ("max_partition_fetch_bytes", max_partition_fetch_bytes),
            ("max_poll_records", max_poll_records),
            ("auto_commit_interval_ms", auto_commit_interval_ms),
            ("lane_refresh_ms", lane_refresh_ms),
        ):
            if value <= 0:
                raise ConfigError(f"{name} must be positive, not {value}")
        if group_id is not None and lanes.SEPARATOR in group_id:
            raise ConfigError(
                f"group_id {group_id!r}: '~' is reserved for lane groups; name the lane "
                "with lane= instead",
                ErrorCode.INVALID_GROUP_ID,
            )
        self.trunk_group_id = group_id
        self.group_id = (
            lanes.lane_group(group_id, self.lane) if group_id and self.lane else group_id
        )
        self.client_id = client_id
        self._auto_offset_reset = auto_offset_reset
        self._auto_commit = enable_auto_commit and group_id is not None
        self._auto_commit_s = auto_commit_interval_ms / 1000
        self._retry_backoff_s = retry_backoff_ms / 1000
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        self._max_poll_records = max_poll_records
        self._request_timeout_s = request_timeout_ms / 1000
        self._group_settings: dict[str, Any] = {
            "assignors": tuple(assignors),
            "session_timeout_ms": session_timeout_ms,
            "rebalance_timeout_ms": rebalance_timeout_ms,
            "heartbeat_interval_ms": heartbeat_interval_ms,
            "max_poll_interval_ms": max_poll_interval_ms,
            "client_id": client_id,
            "group_instance_id": group_instance_id,
        }
        self._pool = ConnectionPool(
            bootstrap, client_id=client_id, security=ChannelSecurity.of(credentials, tls)
        )
        self._metadata = ClusterMetadata(self._pool, timeout_s=self._request_timeout_s)
        self._state = FetchState()
        self._fetcher = Fetcher(
            self._metadata,
            self._state,
            FetchConfig(
                min_bytes=fetch_min_bytes,
                max_wait_ms=fetch_max_wait_ms,
                max_bytes=fetch_max_bytes,
                partition_max_bytes=max_partition_fetch_bytes,
                prefetch_bytes=PREFETCH_FETCHES * max_partition_fetch_bytes,
                request_timeout_s=self._request_timeout_s,
                retry_backoff_s=retry_backoff_ms / 1000,
                check_crcs=check_crcs,
                read_committed=self._read_committed,
            ),
            client_id,
        )
        self._member: Any = None
        self._lane_refresh_s = lane_refresh_ms / 1000
        self._requested: tuple[str, ...] = ()  # the topics subscribe() was given
        self._reading: tuple[tuple[str, ...], frozenset[str]] = ((), frozenset())
        self._next_lane_refresh = 0.0
        self._held: dict[TopicPartition, tuple[float, int]] = {}  # retry at, attempts
        self._round_ended = False
        self._committer: concurrent.futures.ThreadPoolExecutor | None = None
        self._retrier: Retrier | None = None
        self._producer_settings: tuple[Any, Credentials, Tls] = (bootstrap, credentials, tls)
        self._closed = False
        self._fetcher.start()

    # -- assignment ----------------------------------------------------------------------
    def subscribe(self, topics: Iterable[str], listener: Any = None) -> None:
        """Join the consumer group ``group_id`` for ``topics``; partitions come and go as
        the group rebalances. ``listener`` gets ``on_partitions_revoked``, ``_assigned``
        and ``_lost`` calls (each optional), in this thread, during ``poll``."""
        self._check_open()
        if self.group_id is None:
            raise ConfigError("subscribe needs a group_id", ErrorCode.INVALID_GROUP_ID)
        if self._member is None and self._state.partitions:
            raise MeridianError(ErrorCode.INVALID_REQUEST, "assign() was used: unassign first")
        from dataplane.client.group import GroupMember

        if self._member is None:
            self._member = GroupMember(
                self._metadata,
                group_id=self.group_id,
                listener=_Rebalance(self, listener),
                **self._group_settings,
            )
            self._member.on_round_done = self._rebalance_ended
        self._requested = tuple(sorted(set(topics) | self._retry_topics()))
        self._reading = ((), frozenset())
        self._follow_lanes(force=True)

    def _retry_topics(self) -> set[str]:
        """The group's retry topic, read beside its topics when it has a retry policy."""
        if self.lane is not None or self.group_id is None:
            return set()
        try:
            policy = self._retries().policy(refresh=True)
        except MeridianError as error:
            log.warning("no retry policy read for group %s: %s", self.group_id, error)
            return set()
        return {policy.retry_topic} if policy is not None else set()

    def _retries(self) -> Retrier:
        if self._retrier is None:
            assert self.group_id is not None
            self._retrier = Retrier(
                self.group_id,
                DelayClient(self._metadata, timeout_s=self._request_timeout_s),
                self._retry_producer,
            )
        return self._retrier

    def _retry_producer(self) -> Any:
        from dataplane.client.producer import Producer

        bootstrap, credentials, tls = self._producer_settings
        return Producer(
            bootstrap,
            client_id=f"{self.client_id}-retries",
            acks="all",
            route_lanes=False,
            credentials=credentials,
            tls=tls,
        )

    def retry_later(
        self, record: ConsumerRecord, delay_s: float | None = None, *, reason: str | None = None
    ) -> Any:
        """Deliver ``record`` to this group again after ``delay_s`` seconds (None: the
        retry policy's backoff for its next attempt; 0: at once), with ``x-attempt``
        incremented, or to the group's dead-letter topic once it has been delivered
        ``max_attempts`` times (``reason`` goes with it). Returns the send's future; the
        next commit waits for it. Raises ``RETRY_POLICY_NOT_FOUND`` for a group without a
        retry policy, ``INVALID_DELAY`` for a delay under a second but 0."""
        self._check_open()
        if self.group_id is None:
            raise ConfigError("retry_later needs a group_id", ErrorCode.INVALID_GROUP_ID)
        lane_refusal(self.lane)
        check_retry_delay(delay_s)
        return self._retries().retry_later(record, delay_s, reason)

    def nack(self, record: ConsumerRecord, *, reason: str | None = None) -> Any:
        """``retry_later`` after the retry policy's backoff for the record's next attempt."""
        return self.retry_later(record, None, reason=reason)

    def unsubscribe(self) -> None:
        """Leave the group's topics: the next ``poll`` revokes the assignment (committing
        positions first, with auto commit) and leaves the group."""
        self._check_open()
        if self._member is not None:
            self._requested = ()
            self._reading = ((), frozenset())
            self._member.subscribe([])

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly ``partitions`` (no group membership); positions start at the
        committed offsets (with a ``group_id``) or by ``auto_offset_reset``."""
        self._check_open()
        if self._member is not None:
            raise MeridianError(ErrorCode.INVALID_REQUEST, "subscribe() was used: close first")
        wanted = {TopicPartition(*tp) for tp in partitions}
        with self._state.lock:
            for tp in list(self._state.partitions):
                if tp not in wanted:
                    self._forget(tp)
            for tp in wanted:
                self._state.partitions.setdefault(tp, PartitionState(tp))
        self._fetcher.wakeup()

    def unassign(self) -> None:
        self.assign(())

    def assignment(self) -> set[TopicPartition]:
        return set(self._state.partitions)

    def partitions_for(self, topic: str) -> list[int]:
        """The partitions of ``topic`` (raises ``UNKNOWN_TOPIC_OR_PARTITION``)."""
        return self._metadata.partitions_for(topic)

    # -- lanes ---------------------------------------------------------------------------
    def _follow_lanes(self, *, force: bool = False) -> None:
        """Re-read the lane metadata of the subscribed topics (every ``lane_refresh_ms``)
        and subscribe the member to what they make this consumer read; a change (or a
        subscribed topic coming into being) rejoins the group."""
        now = time.monotonic()
        if self._member is None or not (force or now >= self._next_lane_refresh):
            return
        self._next_lane_refresh = now + self._lane_refresh_s
        wanted = self._requested
        if self.lane is not None:
            wanted = tuple(
                lanes.lane_topic(t, self.lane) for t in wanted if not lanes.is_lane_topic(t)
            )
        try:
            snapshot = self._metadata.refresh({*self._requested, *wanted}) if wanted else None
        except MeridianError as error:
            log.info("lane metadata of %s not refreshed: %s", wanted, error)
            snapshot = None
        if snapshot is None and self._reading[0]:
            return  # keep reading what we read
        snapshot = snapshot or self._metadata.snapshot()
        topics: list[str] = []
        for topic in self._requested:
            if lanes.is_lane_topic(topic):
                topics.append(topic)  # named outright: read as any topic
            elif self.lane is not None:
                lane_topic = lanes.lane_topic(topic, self.lane)
                topics.append(lane_topic)
                if snapshot.lanes.get(lane_topic, NO_LANE_INFO).consume_trunk:
                    topics.append(topic)
            else:
                topics.append(topic)
                topics.extend(snapshot.lanes.get(topic, NO_LANE_INFO).orphaned_lane_topics)
        reading = tuple(sorted(set(topics)))
        existing = frozenset(t for t in reading if snapshot.leaders.get(t))
        if self.lane is None and not any(
            snapshot.lanes.get(t, NO_LANE_INFO).lanes_declared for t in self._requested
        ):
            # No lane covers these topics: orphans cannot appear until one is declared.
            self._next_lane_refresh = now + max(self._lane_refresh_s, UNLANED_REFRESH_S)
        previous, self._reading = self._reading, (reading, existing)
        if reading != previous[0]:
            if previous[0]:
                log.info("group %s now reads %s (was %s)", self.group_id, reading, previous[0])
            self._member.subscribe(reading)
        elif existing != previous[1]:
            self._member.request_rejoin()  # a lane topic came into being (or went)

    def reading(self) -> tuple[str, ...]:
        """The topics a subscribed consumer reads now: its own, or their lane topics,
        and the orphaned lane topics it takes over (see the module docstring)."""
        return self._reading[0]

    @contextlib.contextmanager
    def processing(self, record: ConsumerRecord) -> Iterator[ConsumerRecord]:
        """Make ``record``'s lane the lane in effect in the block (None for a trunk
        record), so records produced while handling it go to its lane."""
        with lanes.processing_lane(record.lane):
            yield record

    def __iter__(self) -> Iterator[ConsumerRecord]:
        return self.records()

    def records(
        self, *, poll_timeout_ms: float = 1_000, idle_timeout_ms: float | None = None
    ) -> Iterator[ConsumerRecord]:
        """Records as they come, one at a time, until the consumer closes (or nothing
        came for ``idle_timeout_ms``). From a record's yield to the next request for
        one, its lane is the lane in effect (``lanes.current_lane``; None for a trunk
        record); leaving the loop restores the lane in effect before it."""
        token = None
        idle_since = time.monotonic()
        try:
            while not self._closed:
                batch = self.poll(poll_timeout_ms)
                if not batch:
                    idle = (time.monotonic() - idle_since) * 1000
                    if idle_timeout_ms is not None and idle >= idle_timeout_ms:
                        return
                    continue
                for record in batch:
                    if token is None:
                        token = lanes.current_lane.set(record.lane)
                    else:
                        lanes.current_lane.set(record.lane)
                    yield record
                idle_since = time.monotonic()
        finally:
            if token is not None:
                with contextlib.suppress(ValueError):  # closed from another context
                    lanes.current_lane.reset(token)

    def _forget(self, tp: TopicPartition) -> None:
        self._held.pop(tp, None)
        self._state.drop_buffered(tp)
        state = self._state.partitions.pop(tp, None)
        if state is not None:
            state.generation += 1

    def _add(self, tps: Iterable[TopicPartition]) -> None:
        with self._state.lock:
            for tp in tps:
                self._state.partitions.setdefault(tp, PartitionState(tp))
        self._fetcher.wakeup()

    def _remove(self, tps: Iterable[TopicPartition]) -> None:
        tps = list(tps)
        with self._state.lock:
            for tp in tps:
                self._forget(tp)
        if self._retrier is not None:
            self._retrier.forget(tps)

    # -- polling -------------------------------------------------------------------------
    def poll(self, timeout_ms: float = 0) -> list[ConsumerRecord]:
        """Up to ``max_poll_records`` records, waiting up to ``timeout_ms`` for some.

        Raises a partition's fetch error once (``OFFSET_OUT_OF_RANGE`` with
        ``auto_offset_reset='none'``, ``CORRUPT_MESSAGE``, ...), then continues.
        """
        self._check_open()
        deadline = time.monotonic() + max(0.0, timeout_ms) / 1000
        self._follow_lanes()
        self._follow_member()
        if self._auto_commit and time.monotonic() >= self._next_auto_commit:
            self._commit_quietly()
        while True:
            if self._round_ended:
                self._follow_member()  # a rebalance ended while we waited: install it now
            self._resolve_positions()
            self._raise_errors()
            records, freed = self._state.collect(self._max_poll_records)
            if freed:
                self._fetcher.wakeup()
            remaining = deadline - time.monotonic()
            if records or remaining <= 0:
                return records
            if self._held:  # ask for held partitions again in time
                next_ask = min(at for at, _ in self._held.values()) - time.monotonic()
                remaining = max(0.001, min(remaining, next_ask))
            with self._state.lock:
                if not self._state.buffer and not self._round_ended:
                    self._state.data_ready.wait(remaining)

    def poll_batches(self, timeout_ms: float = 0) -> list[PolledBatch]:
        """``poll`` for copying tools: whole fetched batches, their records not decoded
        (hand them to ``Producer.send_copy``), until they hold ``max_poll_records`` or
        more; waits and raises as ``poll`` does, and moves the positions past the batches
        returned. No lane following, no group: for a consumer with assigned partitions.
        """
        self._check_open()
        if self.group_id is not None:
            raise ConfigError("poll_batches reads assigned partitions: a consumer without a group")
        deadline = time.monotonic() + max(0.0, timeout_ms) / 1000
        while True:
            self._resolve_positions()
            self._raise_errors()
            batches, freed = self._state.collect(self._max_poll_records, take_batches)
            if freed:
                self._fetcher.wakeup()
            remaining = deadline - time.monotonic()
            if batches or remaining <= 0:
                return batches
            with self._state.lock:
                if not self._state.buffer:
                    self._state.data_ready.wait(remaining)

    def _follow_member(self) -> None:
        if self._member is not None:
            self._round_ended = False
            self._member.poll()
            self._follow_group()

    def _rebalance_ended(self) -> None:
        """Called on the member's join thread: wake a ``poll`` waiting for records."""
        with self._state.lock:
            self._round_ended = True
            self._state.data_ready.notify_all()

    def _follow_group(self) -> None:
        """Adopt the member's assignment, should a callback not have told us."""
        assigned = set(self._member.assignment())
        current = set(self._state.partitions)
        if assigned != current:
            self._remove(current - assigned)
            self._add(assigned - current)

    def _raise_errors(self) -> None:
        with self._state.lock:
            for state in self._state.partitions.values():
                if state.error is not None:
                    error, state.error = state.error, None
                    state.retry_at = time.monotonic() + 1.0
                    raise error

    # -- positions -----------------------------------------------------------------------
    def _resolve_positions(self) -> None:
        """Give every partition without a position one: committed, else the reset policy."""
        now = time.monotonic()
        with self._state.lock:
            unknown = [
                s.tp
                for s in self._state.partitions.values()
                if s.position is None and self._held.get(s.tp, (0.0, 0))[0] <= now
            ]
            out_of_range = [
                s.tp for s in self._state.partitions.values() if s.reset == "out_of_range"
            ]
        if not unknown and not out_of_range:
            return
        positions: dict[TopicPartition, int] = {}
        held: set[TopicPartition] = set()
        if unknown and self.group_id is not None:
            committed, held = self._committed_or_held(unknown)
            positions = {tp: offset for tp, offset in committed.items() if offset is not None}
            self._hold(unknown, held)
        to_reset = [tp for tp in unknown if tp not in positions and tp not in held]
        to_reset += out_of_range
        if to_reset:
            positions.update(self._reset_offsets(to_reset))
        self._seek_many(positions)

    def _committed_or_held(
        self, tps: list[TopicPartition]
    ) -> tuple[dict[TopicPartition, int | None], set[TopicPartition]]:
        stable = self._read_committed
        if self._member is not None:
            result: tuple[dict[TopicPartition, int | None], set[TopicPartition]]
            result = self._member.committed_or_held(tps, require_stable=stable)
            return result
        from dataplane.client import group

        assert self.group_id is not None
        return group.offset_fetch_handover(
            group.CoordinatorLink(self._metadata, self.group_id), tps, require_stable=stable
        )

    def _hold(self, asked: list[TopicPartition], held: set[TopicPartition]) -> None:
        """Partitions another group of the family still holds stay without a position
        (so unfetched) and are asked for again after a backoff; the others are free."""
        now = time.monotonic()
        for tp in asked:
            if tp not in held:
                self._held.pop(tp, None)
                continue
            attempts = self._held.get(tp, (0.0, 0))[1] + 1
            delay = min(HANDOVER_BACKOFF_S * 2 ** (attempts - 1), HANDOVER_BACKOFF_MAX_S)
            self._held[tp] = (now + delay, attempts)
            if attempts == 1:
                log.info(
                    "%s/%s: waiting for group %s's offset (a hand-over, or an open "
                    "transaction's commit)",
                    *tp,
                    self.group_id,
                )

    def held(self) -> set[TopicPartition]:
        """Assigned lane-topic partitions not read yet: another group of the family
        still holds them (``HANDOVER_IN_PROGRESS``)."""
        return set(self._held)

    def _reset_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        if self._auto_offset_reset == "none":
            tp = tps[0]
            with self._state.lock:
                state = self._state.partitions.get(tp)
                fetching = state is not None and state.reset == "out_of_range"
            raise MeridianError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"{tp.topic}/{tp.partition}: "
                + ("the fetch position is out of range" if fetching else "no committed offset")
                + " and auto_offset_reset is 'none'",
            )
        spec = EARLIEST if self._auto_offset_reset == "earliest" else LATEST
        # A group's lane partitions start at the beginning: a lane topic's records (held,
        # or orphans produced before the trunk's groups saw the topic) wait for it.
        found = self._list_offsets(
            {
                tp: EARLIEST if self.group_id and lanes.is_lane_topic(tp.topic) else spec
                for tp in tps
            }
        )
        return {tp: offset for tp, (offset, _) in found.items()}

    def _list_offsets(
        self, specs: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        return list_offsets(
            self._metadata,
            specs,
            timeout_s=self._request_timeout_s,
            read_committed=self._read_committed,
        )

    def _seek_many(self, positions: Mapping[TopicPartition, int]) -> None:
        with self._state.lock:
            for tp, offset in positions.items():
                state = self._state.partitions.get(tp)
                if state is not None:
                    self._state.drop_buffered(tp)
                    state.seek(offset)
        self._fetcher.wakeup()

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """The next ``poll`` returns ``partition`` from ``offset``."""
        if offset < 0:
            raise MeridianError(ErrorCode.OFFSET_OUT_OF_RANGE, f"negative offset {offset}")
        self._assigned(partition)
        self._seek_many({TopicPartition(*partition): offset})

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(partitions, EARLIEST)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(partitions, LATEST)

    def seek_to_timestamp(
        self, partitions: TopicPartition | Iterable[TopicPartition] | None, timestamp_ms: int
    ) -> None:
        """Move to the first record at or after ``timestamp_ms`` (the end if none);
        ``partitions`` None means every assigned partition."""
        if isinstance(partitions, TopicPartition):
            partitions = [partitions]
        if timestamp_ms < 0:
            raise MeridianError(ErrorCode.INVALID_TIMESTAMP, f"negative timestamp {timestamp_ms}")
        self._seek_to(partitions, timestamp_ms)

    def _seek_to(self, partitions: Iterable[TopicPartition] | None, spec: int) -> None:
        chosen = self.assignment() if partitions is None else partitions
        tps = [TopicPartition(*tp) for tp in chosen]
        for tp in tps:
            self._assigned(tp)
        if not tps:
            return
        found = self._list_offsets(dict.fromkeys(tps, spec))
        missing = [tp for tp, (offset, _) in found.items() if offset < 0]
        if missing:
            ends = self._list_offsets(dict.fromkeys(missing, LATEST))
            found.update(ends)
        self._seek_many({tp: offset for tp, (offset, _) in found.items()})

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record ``poll`` returns for ``partition``."""
        state = self._assigned(partition)
        if state.position is None:
            self._resolve_positions()
        if state.position is None and state.tp in self._held:
            raise MeridianError(
                ErrorCode.HANDOVER_IN_PROGRESS,
                f"{partition}: another group of the family still holds it (hand-over)",
            )
        if state.position is None:
            raise MeridianError(ErrorCode.OFFSET_OUT_OF_RANGE, f"no position for {partition}")
        return state.position

    def _assigned(self, partition: TopicPartition) -> PartitionState:
        state = self._state.partitions.get(TopicPartition(*partition))
        if state is None:
            raise MeridianError(
                ErrorCode.INVALID_REQUEST, f"{partition[0]}/{partition[1]} is not assigned"
            )
        return state

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop fetching and returning ``partitions`` until ``resume``; positions stay."""
        with self._state.lock:
            for tp in partitions:
                state = self._assigned(tp)
                if not state.paused:
                    state.paused = True
                    self._state.drop_buffered(state.tp)
                    state.seek(state.position)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        with self._state.lock:
            for tp in partitions:
                self._assigned(tp).paused = False
        self._fetcher.wakeup()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, state in self._state.partitions.items() if state.paused}

    def lag(self, partition: TopicPartition) -> int | None:
        """Records between the position and the high watermark last fetched, if known."""
        state = self._assigned(partition)
        if state.position is None or state.high_watermark < 0:
            return None
        return max(0, state.high_watermark - state.position)

    # -- commits -------------------------------------------------------------------------
    def commit(
        self, offsets: Mapping[TopicPartition, int] | None = None, asynchronous: bool = False
    ) -> concurrent.futures.Future[None] | None:
        """Commit ``offsets`` (the next offsets to read; default: every position) for
        ``group_id``. ``asynchronous`` returns a future instead of waiting."""
        self._check_open()
        if self.group_id is None:
            raise ConfigError("commit needs a group_id", ErrorCode.INVALID_GROUP_ID)
        chosen = dict(offsets) if offsets is not None else self._positions()
        if not asynchronous:
            self._commit(chosen)
            return None
        if self._committer is None:
            self._committer = concurrent.futures.ThreadPoolExecutor(1, "meridian-commit")
        return self._committer.submit(self._commit, chosen)

    def _positions(self, tps: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        states = self._state.partitions
        chosen = states if tps is None else {tp: states[tp] for tp in tps if tp in states}
        return {tp: s.position for tp, s in chosen.items() if s.position is not None}

    def _commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        failure = None
        if self._retrier is not None:  # what was retried is stored before it is committed
            offsets, failed, failure = self._retrier.settle(offsets)
            for tp, offset in failed.items():
                if tp in self._state.partitions:
                    self.seek(tp, offset)
        self._commit_offsets(offsets)
        if self._retrier is not None:
            self._retrier.committed(offsets)
        if failure is not None:
            raise failure

    def _commit_offsets(self, offsets: Mapping[TopicPartition, int]) -> None:
        if not offsets:
            return
        if self._member is not None:
            self._member.commit(offsets)
            return
        from dataplane.client import group

        assert self.group_id is not None
        group.commit_offsets(self._metadata, self.group_id, offsets)

    def _commit_quietly(
        self, tps: Iterable[TopicPartition] | None = None, *, retry: bool = False
    ) -> None:
        """Auto commit: the positions of ``tps`` (default: all assigned). ``retry``
        (before giving partitions up): a retriable failure (the coordinator moving) is
        tried again a few times, as the commit is where the next owner starts (for a
        lane partition, the family's other group). Failures are logged."""
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        tps = None if tps is None else list(tps)
        for attempt in range(1, REVOKE_COMMIT_ATTEMPTS + 1):
            try:
                # Read each time: a failed retry rewinds its partition below the record.
                self._commit(self._positions(tps))
                return
            except RetryFailedError as error:  # committed, capped below the record
                log.warning("auto commit of group %s: %s", self.group_id, error)
                return
            except MeridianError as error:
                if not (error.retriable and retry) or attempt == REVOKE_COMMIT_ATTEMPTS:
                    log.warning("auto commit of group %s failed: %s", self.group_id, error)
                    return
                time.sleep(self._retry_backoff_s * attempt)

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The committed offsets of ``partitions`` for ``group_id`` (None: nothing)."""
        if self.group_id is None:
            raise ConfigError("committed needs a group_id", ErrorCode.INVALID_GROUP_ID)
        tps = [TopicPartition(*tp) for tp in partitions]
        if self._member is not None:
            return dict(self._member.committed(tps))
        from dataplane.client import group

        return dict(group.fetch_committed(self._metadata, self.group_id, tps))

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The consumer's group, generation and member id now, for
        ``Producer.send_offsets_to_transaction``."""
        if self.group_id is None:
            raise ConfigError("group_metadata needs a group_id", ErrorCode.INVALID_GROUP_ID)
        if self._member is None:
            return ConsumerGroupMetadata(self.group_id)
        generation, member_id = self._member.generation()
        instance = self._group_settings["group_instance_id"] or ""
        return ConsumerGroupMetadata(self.group_id, generation, member_id, instance)

    # -- closing -------------------------------------------------------------------------
    def close(self, *, commit: bool | None = None) -> None:
        """Commit (with auto commit, or ``commit=True``), leave the group and stop.

        Without auto commit nothing is committed here, lane partitions included: an
        application that commits what it processed commits before closing (and in its
        ``on_partitions_revoked``), and the family's next owner of a lane partition
        starts from that commit.
        """
        if self._closed:
            return
        try:
            if self.group_id is not None and (self._auto_commit if commit is None else commit):
                self._commit_quietly(retry=True)
            if self._member is not None:
                self._member.close(leave=True)
        finally:
            self._closed = True
            self._fetcher.close(timeout=5)
            if self._committer is not None:
                self._committer.shutdown(wait=True)
            if self._retrier is not None:
                self._retrier.close()
            self._pool.close()

    def _check_open(self) -> None:
        if self._closed:
            raise MeridianError(ErrorCode.INVALID_REQUEST, "the consumer is closed")

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Consumer(client_id={self.client_id!r}, group_id={self.group_id!r})"


class _Rebalance:
    """The member's listener: commits before revocation, then tells the application."""

    def __init__(self, consumer: Consumer, listener: Any) -> None:
        self._consumer = consumer
        self._listener = listener

    def _tell(self, name: str, tps: set[TopicPartition]) -> None:
        callback = getattr(self._listener, name, None)
        if callback is not None:
            callback(tps)

    def on_partitions_revoked(self, tps: set[TopicPartition]) -> None:
        if self._consumer._auto_commit:
            self._consumer._commit_quietly(tps, retry=True)
        self._tell("on_partitions_revoked", tps)
        self._consumer._remove(tps)

    def on_partitions_assigned(self, tps: set[TopicPartition]) -> None:
        self._consumer._add(tps)
        self._tell("on_partitions_assigned", tps)

    def on_partitions_lost(self, tps: set[TopicPartition]) -> None:
        self._consumer._remove(tps)
        self._tell("on_partitions_lost", tps)

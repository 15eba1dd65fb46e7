"""``DelayManager``: everything a broker does about delayed records and retries.

- **Movers** (``mover.Mover``): one per timer partition (``__delay.<tenant>``) this
  broker leads, started when it takes the lead (a new leader epoch: a new mover, rebuilt
  from the log) and stopped when it loses it; one that ends by an error is started
  again after ``RESTART_BACKOFF_S``.
- **The produce path**: a client's records for a timer log are checked record by record
  (``timer_produce_refusal``, see ``schedule``; a batch the checks cannot read is refused,
  never stored unchecked); a request to a topic holding records with ``x-deliver-at`` is
  diverted (``divert``). Scheduled records are counted once, when a timer partition's
  leader appended them (``appended``).
- **Timer logs made on first use**: a client asking for a tenant's timer log that the
  cluster does not have gets ``TIMER_LOG_PENDING`` (retriable) when a controller manages
  the cluster, and the tenant becomes a *demand*, reported in every heartbeat
  (``UpdateMetadataResponse.delay``) until a push names the timer log; the controller
  creates it as desired state. Without a controller it is ``UNKNOWN_TOPIC_OR_PARTITION``.
- **Retry policies**: the push's ``delay.retry_policies``, answered by ``retry_policy``;
  and the topics' ``max_message_bytes`` (``delay.max_message_bytes``; a broker without a
  push knows those of the partitions it hosts), which scheduling checks records against
  and the movers size their batches by.
- **Listing** (``scheduled``) shows records' keys, values and headers: only of topics the
  caller may consume from, at most ``MAX_VALUE_BYTES`` of each value.
- **Metrics** (the broker's registry): ``meridian_delay_scheduled_records_total{tenant}``,
  ``meridian_delay_moved_records_total{tenant}``,
  ``meridian_delay_cancelled_records_total{tenant}``,
  ``meridian_delay_dropped_records_total{tenant,reason}``,
  ``meridian_delay_lateness_seconds{tenant}`` (delivery time minus due time),
  ``meridian_delay_pending_records{tenant,partition}`` and
  ``meridian_delay_pending_bytes{tenant,partition}`` (the timer partitions led here),
  ``meridian_delay_timer_log_demands``, ``meridian_retry_records_total{group}``
  (records moved back to a group's retry topic) and
  ``meridian_dead_letter_records_total{group}`` (records appended to its dead-letter
  topic).

Thread safety: event-loop only, but for the metrics' scrape (a snapshot of plain ints).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Executor
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dataplane._gen.meridian.v1 import admin_pb2, broker_pb2, delay_pb2
from dataplane.broker.auth.authorizer import CONSUME, DESCRIBE, PRODUCE, Authorizer
from dataplane.broker.delay.mover import Mover, MoverHooks
from dataplane.broker.delay.schedule import build_batches, check_timer_batches, split_marked
from dataplane.broker.delay.targets import TargetWriter
from dataplane.broker.errors import to_error
from dataplane.broker.partitions import Partition, PartitionRegistry
from dataplane.delays import (
    DelayedId,
    is_timer_topic,
    tenant_of_timer,
    tenant_of_topic,
    timer_partition,
    timer_topic,
)
from dataplane.errors import ErrorCode, MeridianError
from dataplane.storage.log import AppendInfo
from lanes.names import is_lane_topic

log = logging.getLogger(__name__)

SYNC_INTERVAL_S = 0.2
RESTART_BACKOFF_S = 1.0
MAX_DEMANDS = 1024
MAX_LIST = 500
MAX_VALUE_BYTES = 4096
LATENESS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 3600)

PushSource = Callable[[], admin_pb2.UpdateMetadataRequest | None]
Placement = Callable[[], dict[str, dict[int, int]]]


class DelayManager:
    """See the module docstring. ``placement()`` is the cluster's leaders by topic and
    partition; ``push()`` the controller's last push (None: no controller);
    ``refuse(topic)`` the storage quota's refusal of a topic's tenant, or None."""

    def __init__(
        self,
        registry: PartitionRegistry,
        executor: Executor,
        *,
        broker_id: int,
        authorizer: Authorizer,
        push: PushSource,
        placement: Placement,
        metrics: CollectorRegistry,
        clock_ms: Callable[[], int],
        refuse: Callable[[str], MeridianError | None] | None = None,
    ) -> None:
        self.registry = registry
        self._executor = executor
        self.broker_id = broker_id
        self._authz = authorizer
        self._push = push
        self._placement = placement
        self._clock_ms = clock_ms
        self._refuse = refuse
        self.writer: TargetWriter | None = None  # set once the produce handler exists
        self._movers: dict[tuple[str, int], tuple[Mover, asyncio.Task[None]]] = {}
        self._failed_at: dict[tuple[str, int], float] = {}
        self._demands: dict[str, None] = {}
        self._task: asyncio.Task[None] | None = None
        self._policies: tuple[Any, dict[str, delay_pb2.RetryPolicy], dict[str, str]] = (
            None,
            {},
            {},
        )
        self._retry_topics: dict[str, str] = {}
        self._limits: tuple[Any, dict[str, int]] = (None, {})
        self._metrics = _Metrics(metrics, self)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._sync_forever(), name="delay-movers")

    async def stop(self) -> None:
        tasks = [t for t in (self._task,) if t is not None]
        tasks += [task for _, task in self._movers.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._movers.clear()

    async def _sync_forever(self) -> None:
        while True:
            try:
                self.sync()
            except Exception:  # the movers must outlive any one bad pass
                log.exception("syncing the timer movers failed")
            await asyncio.sleep(SYNC_INTERVAL_S)

    def sync(self) -> None:
        """Start a mover for each timer partition led here without one (or at an older
        epoch), stop the movers of partitions no longer led here."""
        wanted: dict[tuple[str, int], tuple[Partition, int]] = {}
        for part in self.registry.all():
            if not is_timer_topic(part.topic) or part.deleted or part.log.is_offline:
                continue
            state = part.replica
            # No replica state: led here, unreplicated (no push names it, and none
            # replicates topics: those hold unnamed partitions offline).
            if state is None or state.is_leader:
                wanted[(part.topic, part.index)] = (part, state.leader_epoch if state else 0)
        for key, (mover, task) in list(self._movers.items()):
            found = wanted.get(key)
            if found is None or found[1] != mover.leader_epoch or found[0] is not mover.part:
                task.cancel()
                del self._movers[key]
            elif task.done():
                del self._movers[key]
                self._failed_at[key] = time.monotonic()
        for key, (part, epoch) in wanted.items():
            failed = self._failed_at.get(key, 0.0)
            if key not in self._movers and time.monotonic() - failed >= RESTART_BACKOFF_S:
                self._start(part, epoch)

    def _start(self, part: Partition, epoch: int) -> None:
        assert self.writer is not None, "the target writer is set before the movers start"
        mover = Mover(
            part,
            tenant_of_timer(part.topic),
            epoch,
            run_io=self._run,
            writer=self.writer,
            hooks=MoverHooks(
                moved=self._moved,
                dropped=self._metrics.dropped,
                known_partitions=self._known_partitions,
                message_limit=self.message_limit,
            ),
            clock_ms=self._clock_ms,
        )
        task = asyncio.create_task(self._run_mover(mover), name=f"mover-{part.topic}-{part.index}")
        self._movers[(part.topic, part.index)] = (mover, task)

    async def _run_mover(self, mover: Mover) -> None:
        try:
            await mover.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("timer %s-%d: the mover failed", mover.part.topic, mover.part.index)
            raise

    def _moved(self, tenant: str, topic: str, lateness_ms: list[int]) -> None:
        self._metrics.moved(tenant, lateness_ms)
        group = self.retry_group_of(topic)
        if group is not None:
            self._metrics.retried(group, len(lateness_ms))

    def _run(self, fn: Callable[[], Any]) -> Awaitable[Any]:
        return asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _known_partitions(self, topic: str) -> set[int] | None:
        found = self._placement().get(topic)
        return None if found is None else set(found)

    def movers(self) -> list[Mover]:
        return [mover for mover, _ in self._movers.values()]

    # -- the produce path ------------------------------------------------------------------
    def timer_produce_refusal(self, item: broker_pb2.PartitionRecords) -> MeridianError | None:
        """Why a client's records for a timer log are refused (None: store them as sent,
        once the produce path's other checks, the storage quota among them, pass). The
        records a broker forwards (diverted ones) pass the same checks."""
        tenant = tenant_of_timer(item.topic)
        try:
            scheduled = check_timer_batches(
                item.records,
                tenant,
                self._clock_ms(),
                lambda topic: self._authz.topic_error(topic, PRODUCE),
                self.message_limit,
            )
        except MeridianError as exc:
            return exc
        except Exception as exc:  # what the checks cannot read is never stored unchecked
            error = to_error(exc)
            if error.code == ErrorCode.UNKNOWN_SERVER_ERROR:
                error = MeridianError(ErrorCode.INVALID_RECORD, f"records not checked: {exc}")
            return error
        placement = self._placement()
        for where in {(s.topic, s.partition) for s in scheduled}:
            if where[1] not in placement.get(where[0], {}) and not is_lane_topic(where[0]):
                return MeridianError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"{where[0]}-{where[1]} is not known to the cluster",
                )
        return None

    def _storage_refusal(self, topic: str) -> MeridianError | None:
        return self._refuse(topic) if self._refuse is not None else None

    async def divert(
        self, part: Partition, item: broker_pb2.PartitionRecords
    ) -> AppendInfo | broker_pb2.PartitionProduceResult:
        """Schedule the records with ``x-deliver-at`` of a request to a topic and append
        the others (see ``schedule``): the ``AppendInfo`` of what was appended (none: a
        result without an offset); raises what refused the request, nothing stored (the
        produce handler answers it as the partition's error)."""
        split = split_marked(
            item.records,
            item.topic,
            item.partition,
            self._clock_ms(),
            part.log.config.max_batch_bytes,
        )
        refusal = self._storage_refusal(item.topic)
        if refusal is not None:
            raise refusal
        await self._schedule(item.topic, item.partition, split.timer_records)
        if not split.immediate:
            return broker_pb2.PartitionProduceResult(
                topic=item.topic,
                partition=item.partition,
                base_offset=-1,
                log_append_time_ms=-1,
                log_start_offset=part.log.log_start_offset,
            )
        return await part.submit(b"".join(split.immediate))

    async def _schedule(self, topic: str, partition: int, records: list[Any]) -> None:
        """Store ``records`` (timer records) in the timer partition of ``topic``-
        ``partition``, acknowledged by every in-sync replica; raises what refused it."""
        timer = timer_topic(tenant_of_topic(topic))
        partitions = self._placement().get(timer)
        if not partitions:
            raise self.missing_timer_log(timer)
        key = (timer, timer_partition(topic, partition, len(partitions)))
        assert self.writer is not None
        for batch in build_batches(records):
            # Not metered again: the client's request holding these records already is.
            result = (await self.writer.produce({key: batch}, acks=-1, charge=False))[key]
            if result.error:
                raise MeridianError(result.error, f"{timer}-{key[1]}: {result.error_message}")

    def missing_timer_log(self, timer: str) -> MeridianError:
        """The answer for timer log ``timer``, unknown to the cluster: being made (and
        demanded) when a controller manages the cluster, else unknown."""
        push = self._push()
        if push is None:
            return MeridianError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"no timer log {timer!r} on this cluster, and no controller to make one",
            )
        tenant = tenant_of_timer(timer)
        self._demands.pop(tenant, None)
        self._demands[tenant] = None
        while len(self._demands) > MAX_DEMANDS:
            del self._demands[next(iter(self._demands))]
        return MeridianError(
            ErrorCode.TIMER_LOG_PENDING,
            f"the timer log of tenant {tenant!r} is being created on this cluster: retry shortly",
        )

    def appended(self, topic: str, records: int) -> None:
        """Count records appended to a timer log (scheduled) or to a group's dead-letter
        topic."""
        if is_timer_topic(topic):
            self._metrics.scheduled(tenant_of_timer(topic), records)
            return
        group = self._policy_index()[2].get(topic)
        if group is not None:
            self._metrics.dead_letters(group, records)

    # -- the heartbeat ---------------------------------------------------------------------
    def report(self, response: admin_pb2.UpdateMetadataResponse) -> None:
        """Fill the heartbeat's timer log demands, after dropping those a push names."""
        push = self._push()
        named = {t.name for t in push.topics} if push is not None else set()
        for tenant in [t for t in self._demands if timer_topic(t) in named]:
            del self._demands[tenant]
        response.delay.timer_log_demands.extend(self._demands)

    def demand_count(self) -> int:
        return len(self._demands)

    # -- retry policies ----------------------------------------------------------------------
    def _policy_index(self) -> tuple[Any, dict[str, delay_pb2.RetryPolicy], dict[str, str]]:
        push = self._push()
        if self._policies[0] is not push:
            policies = {p.group_id: p for p in push.delay.retry_policies} if push else {}
            retry = {p.retry_topic: g for g, p in policies.items()}
            dead = {p.dead_letter_topic: g for g, p in policies.items()}
            self._policies = (push, policies, dead)
            self._retry_topics = retry
        return self._policies

    def retry_policy(self, group_id: str) -> delay_pb2.GetRetryPolicyResponse:
        error = self._authz.group_error(group_id, "consume")
        if error is not None:
            raise error
        policy = self._policy_index()[1].get(group_id)
        if policy is None:
            return delay_pb2.GetRetryPolicyResponse(
                error=ErrorCode.RETRY_POLICY_NOT_FOUND,
                error_message=f"group {group_id!r} has no retry policy",
            )
        return delay_pb2.GetRetryPolicyResponse(policy=policy)

    def message_limit(self, topic: str, partition: int) -> int | None:
        """The largest batch ``topic`` stores (its ``max_message_bytes``): the push's, else
        the hosted partition's; None when not known here."""
        push = self._push()
        if push is not None:
            if self._limits[0] is not push:
                self._limits = (push, dict(push.delay.max_message_bytes))
            found = self._limits[1].get(topic)
            if found:
                return found
        part = self.registry.get(topic, partition)
        return part.log.config.max_batch_bytes if part is not None else None

    def retry_group_of(self, topic: str) -> str | None:
        self._policy_index()
        return self._retry_topics.get(topic)

    # -- the Delay service -------------------------------------------------------------------
    def _mover_of(self, tenant: str, partition: int) -> Mover:
        found = self._movers.get((timer_topic(tenant), partition))
        if found is not None:
            return found[0]
        part = self.registry.get(timer_topic(tenant), partition)
        code = ErrorCode.NOT_LEADER_OR_FOLLOWER if part is not None else (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )  # fmt: skip
        raise MeridianError(code, f"timer partition {tenant}-{partition} is not led here")

    def _check_tenant(self, tenant: str, topic: str = "", operation: str = DESCRIBE) -> None:
        """Refuse a caller with no role in ``tenant`` (decided by the name alone, as every
        refusal of the broker: the same whether the timer log or record exists), and one
        that may not do ``operation`` to ``topic``."""
        error = self._authz.topic_error(topic or f"{tenant}._", DESCRIBE)
        if error is None and operation != DESCRIBE:
            error = self._authz.topic_error(topic, operation)
        if error is not None:
            raise error

    async def cancel(
        self, request: delay_pb2.CancelDelayedRequest
    ) -> delay_pb2.CancelDelayedResponse:
        delayed = DelayedId.parse(request.id)
        tenant = tenant_of_topic(delayed.topic)
        self._check_tenant(tenant, delayed.topic, PRODUCE)
        mover = self._mover_of(tenant, delayed.partition)
        answer = await mover.cancel(delayed)
        if not answer.error:
            self._metrics.cancelled(tenant)
        return answer

    async def scheduled(
        self, request: delay_pb2.ListDelayedRequest
    ) -> delay_pb2.ListDelayedResponse:
        """Records' contents: only of topics the caller may consume from (a topic named
        that it may not is refused; the others are left out of the page)."""
        self._check_tenant(request.tenant, request.topic, CONSUME if request.topic else DESCRIBE)
        if request.topic and tenant_of_topic(request.topic) != request.tenant:
            raise MeridianError(ErrorCode.INVALID_REQUEST, "topic is not of the tenant named")
        mover = self._mover_of(request.tenant, request.partition)
        limit = min(MAX_LIST, request.limit or 100)
        after = (request.after_deliver_at_ms, request.after_offset)
        value_bytes = min(MAX_VALUE_BYTES, max(0, request.value_bytes))
        records = await mover.scheduled(
            request.topic,
            after,
            limit,
            value_bytes,
            lambda topic: self._authz.topic_error(topic, CONSUME) is None,
        )
        return delay_pb2.ListDelayedResponse(records=records)

    def describe(self, request: delay_pb2.DescribeDelayRequest) -> delay_pb2.DescribeDelayResponse:
        wanted = set(request.tenants)
        if not wanted:
            self._authz.check_internal("DescribeDelay of every tenant")
        for tenant in wanted:
            self._check_tenant(tenant)
        states = [
            mover.describe()
            for mover in sorted(self.movers(), key=lambda m: (m.part.topic, m.part.index))
            if not wanted or mover.tenant in wanted
        ]
        return delay_pb2.DescribeDelayResponse(broker_id=self.broker_id, partitions=states)


class _Metrics(Collector):
    def __init__(self, registry: CollectorRegistry, manager: DelayManager) -> None:
        self._manager = manager
        self._scheduled = Counter(
            "meridian_delay_scheduled_records_total",
            "Records scheduled for later delivery (their timer log's tenant)",
            ["tenant"],
            registry=registry,
        )
        self._moved = Counter(
            "meridian_delay_moved_records_total",
            "Delayed records delivered to their topics by the movers here",
            ["tenant"],
            registry=registry,
        )
        self._cancelled = Counter(
            "meridian_delay_cancelled_records_total",
            "Scheduled records cancelled",
            ["tenant"],
            registry=registry,
        )
        self._dropped = Counter(
            "meridian_delay_dropped_records_total",
            "Delayed records their topic refused for good (deleted, too large, ...)",
            ["tenant", "reason"],
            registry=registry,
        )
        self._lateness = Histogram(
            "meridian_delay_lateness_seconds",
            "When a delayed record was acknowledged by its topic, minus its due time",
            ["tenant"],
            buckets=LATENESS_BUCKETS,
            registry=registry,
        )
        self._retries = Counter(
            "meridian_retry_records_total",
            "Records moved back to a consumer group's retry topic",
            ["group"],
            registry=registry,
        )
        self._dead = Counter(
            "meridian_dead_letter_records_total",
            "Records appended to a consumer group's dead-letter topic",
            ["group"],
            registry=registry,
        )
        registry.register(self)

    def scheduled(self, tenant: str, count: int) -> None:
        if count:
            self._scheduled.labels(tenant).inc(count)

    def moved(self, tenant: str, lateness_ms: list[int]) -> None:
        self._moved.labels(tenant).inc(len(lateness_ms))
        histogram = self._lateness.labels(tenant)
        for late in lateness_ms:
            histogram.observe(max(0, late) / 1000)

    def retried(self, group: str, count: int) -> None:
        self._retries.labels(group).inc(count)

    def cancelled(self, tenant: str) -> None:
        self._cancelled.labels(tenant).inc()

    def dropped(self, tenant: str, reason: str, count: int) -> None:
        self._dropped.labels(tenant, reason).inc(count)

    def dead_letters(self, group: str, count: int) -> None:
        self._dead.labels(group).inc(count)

    def collect(self) -> Iterator[Metric]:
        records = GaugeMetricFamily(
            "meridian_delay_pending_records",
            "Scheduled records not yet delivered, per timer partition led here",
            labels=["tenant", "partition"],
        )
        size = GaugeMetricFamily(
            "meridian_delay_pending_bytes",
            "Key, value and header bytes of the pending records, per timer partition led here",
            labels=["tenant", "partition"],
        )
        for mover in self._manager.movers():
            labels = [mover.tenant, str(mover.part.index)]
            records.add_metric(labels, mover.pending)
            size.add_metric(labels, mover.pending_bytes)
        demands = GaugeMetricFamily(
            "meridian_delay_timer_log_demands",
            "Tenants' timer logs asked for on this cluster and not yet created",
        )
        demands.add_metric([], self._manager.demand_count())
        yield from (records, size, demands)

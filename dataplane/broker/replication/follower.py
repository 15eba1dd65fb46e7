"""The follower's side of replication: one fetcher task per leader broker.

``FollowerFetchers.update(part)`` (told by the ``ReplicaManager`` at every role change)
puts a partition this broker follows under the fetcher of its leader, and takes it away
from any other. Each fetcher long-polls ``Replication.ReplicaFetch`` for all of its
partitions at once, through ``outbound.peer_channel``, and applies the answer on the I/O
pool, partition by partition, under the partition's ``ReplicaState.lock`` and only if
the partition still follows the same leader at the same epoch:

- records: appended as the leader wrote them (``assign_offsets=False``); a batch with a
  newer ``partition_leader_epoch`` adds a leader-epoch cache entry, and every batch is
  recorded in the producer table without checks (so this broker deduplicates retries if
  it becomes leader); then the HW becomes min(leader's HW, own LEO), and the log start
  follows the leader's (within the HW: retention or deletions on the leader);
- ``diverging_epoch``: truncate to min(its end offset, this log's own end of that
  epoch), trim the epoch cache, rebuild the producer table, fetch again;
- OFFSET_OUT_OF_RANGE below the leader's log start: restart the log empty at it; above
  the leader's LEO: truncate to it;
- any other error (fenced, unknown epoch, not the leader): leave the partition alone for
  a short backoff, until a push tells who leads now.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor

import grpc

from dataplane._gen.meridian.v1 import replication_pb2, replication_pb2_grpc
from dataplane.broker.config import BrokerConfig
from dataplane.broker.outbound import peer_channel
from dataplane.broker.partitions import Partition
from dataplane.broker.replication.manager import rebuild_producers
from dataplane.broker.replication.state import Role
from dataplane.errors import ErrorCode
from dataplane.records import BatchHeader
from dataplane.records.control import markers_in
from dataplane.storage.errors import LogClosedError

log = logging.getLogger(__name__)

PARTITION_MAX_BYTES = 1024 * 1024
MAX_BYTES = 16 * 1024 * 1024
ERROR_BACKOFF_S = 0.2
RPC_BACKOFF_MAX_S = 1.0


class FollowerFetchers:
    def __init__(
        self,
        config: BrokerConfig,
        executor: Executor,
        locate: Callable[[int], str | None],
    ) -> None:
        """``locate(broker_id)`` gives a broker's ``host:port`` (None when unknown)."""
        self.config = config
        self._executor = executor
        self._locate = locate
        self._fetchers: dict[int, _LeaderFetcher] = {}
        self.max_wait_ms = max(10, min(500, config.replica_lag_time_max_ms // 3))

    def update(self, part: Partition) -> None:
        """Follow ``part``'s leader if it is a follower here; stop following it elsewhere."""
        state = part.replica
        leader = state.leader_id if state is not None and state.role is Role.FOLLOWER else None
        key = (part.topic, part.index)
        for leader_id, other in list(self._fetchers.items()):
            removed = leader_id != leader and other.parts.pop(key, None) is not None
            if removed and not other.parts:
                other.stop()
                del self._fetchers[leader_id]
        if leader is None or part.deleted:
            return
        fetcher = self._fetchers.get(leader)
        if fetcher is None:
            fetcher = self._fetchers[leader] = _LeaderFetcher(self, leader)
            fetcher.start()
        fetcher.parts[key] = part
        fetcher.wake()

    async def stop(self) -> None:
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        for fetcher in fetchers:
            fetcher.stop()
        for fetcher in fetchers:
            await fetcher.wait_stopped()


class _LeaderFetcher:
    """Pulls every partition this broker follows from one leader."""

    def __init__(self, owner: FollowerFetchers, leader_id: int) -> None:
        self.owner = owner
        self.leader_id = leader_id
        self.parts: dict[tuple[str, int], Partition] = {}
        self._backoff_until: dict[tuple[str, int], float] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._channel: grpc.aio.Channel | None = None
        self._address: str | None = None
        self._closing: asyncio.Future[None] | None = None  # a replaced channel closing

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def wait_stopped(self) -> None:
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def wake(self) -> None:
        self._wake.set()

    def _stub(self) -> replication_pb2_grpc.ReplicationStub | None:
        address = self.owner._locate(self.leader_id)
        if address is None:
            return None
        if address != self._address or self._channel is None:
            if self._channel is not None:
                self._closing = asyncio.ensure_future(self._channel.close())
            self._channel = peer_channel(self.owner.config, address)
            self._address = address
        return replication_pb2_grpc.ReplicationStub(self._channel)

    async def _run(self) -> None:
        failures = 0
        try:
            while True:
                sent = self._ready_partitions()
                stub = self._stub()
                if not sent or stub is None:
                    self._wake.clear()
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), ERROR_BACKOFF_S)
                    continue
                request = self._request(sent)
                timeout_s = self.owner.max_wait_ms / 1000 + 10
                try:
                    response = await stub.ReplicaFetch(request, timeout=timeout_s)
                except grpc.aio.AioRpcError as exc:
                    failures += 1
                    if failures == 1:
                        log.info("fetching from leader %d: %s", self.leader_id, exc.code())
                    await asyncio.sleep(min(RPC_BACKOFF_MAX_S, 0.05 * 2**failures))
                    continue
                failures = 0
                outcomes = await asyncio.get_running_loop().run_in_executor(
                    self.owner._executor, _apply_all, sent, list(response.results)
                )
                now = time.monotonic()
                for (part, _, _), outcome in zip(sent, outcomes, strict=False):
                    if outcome == _BACK_OFF:
                        self._backoff_until[(part.topic, part.index)] = now + ERROR_BACKOFF_S
                    elif outcome == _HW_MOVED:
                        part.notify()
        finally:
            if self._channel is not None:
                await self._channel.close()

    def _ready_partitions(self) -> list[tuple[Partition, int, int]]:
        """(partition, leader epoch, fetch offset) of each partition to fetch now."""
        now = time.monotonic()
        ready = []
        for key, part in list(self.parts.items()):
            state = part.replica
            if part.deleted or state is None or state.role is not Role.FOLLOWER:
                continue
            if self._backoff_until.get(key, 0.0) > now:
                continue
            ready.append((part, state.leader_epoch, part.log.log_end_offset))
        return ready

    def _request(
        self, sent: list[tuple[Partition, int, int]]
    ) -> replication_pb2.ReplicaFetchRequest:
        return replication_pb2.ReplicaFetchRequest(
            replica_id=self.owner.config.broker_id,
            max_wait_ms=self.owner.max_wait_ms,
            min_bytes=1,
            max_bytes=MAX_BYTES,
            partitions=[
                replication_pb2.ReplicaFetchPartition(
                    topic=part.topic,
                    partition=part.index,
                    current_leader_epoch=epoch,
                    fetch_offset=offset,
                    last_fetched_epoch=part.replica.epochs.latest_epoch() if part.replica else -1,
                    partition_max_bytes=PARTITION_MAX_BYTES,
                )
                for part, epoch, offset in sent
            ],
        )


_NOTHING, _HW_MOVED, _BACK_OFF = 0, 1, 2


def _apply_all(
    sent: list[tuple[Partition, int, int]], results: list[replication_pb2.ReplicaFetchResult]
) -> list[int]:
    """Apply each partition's answer (blocking); one outcome per partition."""
    outcomes = []
    for (part, epoch, offset), result in zip(sent, results, strict=False):
        try:
            outcomes.append(_apply(part, epoch, offset, result))
        except LogClosedError:  # deleted, or the broker is stopping
            outcomes.append(_BACK_OFF)
        except Exception:  # one partition's failure must not stop the others
            log.exception("%s-%s: applying a replica fetch failed", part.topic, part.index)
            outcomes.append(_BACK_OFF)
    return outcomes


def _apply(
    part: Partition, epoch: int, offset: int, result: replication_pb2.ReplicaFetchResult
) -> int:
    state = part.replica
    if state is None:
        return _NOTHING
    with state.lock:
        if part.deleted or state.role is not Role.FOLLOWER or state.leader_epoch != epoch:
            return _NOTHING  # a push changed the role while fetching
        if part.log.log_end_offset != offset:
            return _NOTHING  # truncated meanwhile: this answer is for another position
        if result.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            _out_of_range(part, offset, result)
            return _HW_MOVED
        if result.error:
            log.debug("%s-%s: %s", part.topic, part.index, result.error_message)
            return _BACK_OFF
        if result.HasField("diverging_epoch"):
            _diverged(part, result.diverging_epoch)
            return _HW_MOVED
        if result.records:
            _append(part, result.records)
        log_ = part.log
        before = log_.high_watermark
        after = log_.update_high_watermark(min(result.high_watermark, log_.log_end_offset))
        if result.log_start_offset > log_.log_start_offset:
            log_.advance_log_start_offset(result.log_start_offset)  # bounded by the HW
        return _HW_MOVED if after != before else _NOTHING


def _append(part: Partition, records: bytes) -> None:
    state = part.replica
    assert state is not None

    def before_write(base_offset: int, headers: list[BatchHeader]) -> None:
        latest = state.epochs.latest_epoch()
        for header in headers:
            if header.partition_leader_epoch > latest:
                latest = header.partition_leader_epoch
                state.epochs.assign(latest, header.base_offset)
        markers = dict(markers_in(records)) if any(h.is_control for h in headers) else None
        part.producers.record_replicated(headers, markers)

    part.log.append(records, assign_offsets=False, before_write=before_write)


def _diverged(part: Partition, diverging: replication_pb2.EpochEndOffset) -> None:
    state = part.replica
    assert state is not None
    log_ = part.log
    target = diverging.end_offset
    own_epoch, own_end = state.epochs.end_offset_for(diverging.epoch, log_.log_end_offset)
    if diverging.epoch >= 0 and own_epoch >= 0:
        target = min(target, own_end)
    log.info(
        "%s-%s: diverged from the leader at epoch %d: truncating %d -> %d",
        part.topic,
        part.index,
        diverging.epoch,
        log_.log_end_offset,
        target,
    )
    _truncate(part, target)


def _out_of_range(part: Partition, offset: int, result: replication_pb2.ReplicaFetchResult) -> None:
    log_ = part.log
    if offset < result.log_start_offset:
        log.info(
            "%s-%s: restarting at the leader's log start %d",
            part.topic,
            part.index,
            result.log_start_offset,
        )
        log_.truncate_fully_and_start_at(result.log_start_offset)
        assert part.replica is not None
        part.replica.epochs.clear()
        rebuild_producers(part)
    elif offset > result.log_end_offset >= 0:
        _truncate(part, result.log_end_offset)


def _truncate(part: Partition, offset: int) -> None:
    state = part.replica
    assert state is not None
    state.epochs.truncate_from_end(part.log.truncate_to(offset))
    rebuild_producers(part)

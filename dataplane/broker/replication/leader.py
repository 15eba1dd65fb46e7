# ruff: noqa: N802 - method names are the RPC names of the protos
"""The leader's side of replication: answering ``Replication.ReplicaFetch``.

For each asked partition (one request carries every partition a follower pulls from this
broker):

- not hosted: UNKNOWN_TOPIC_OR_PARTITION; not led here: NOT_LEADER_OR_FOLLOWER;
  ``current_leader_epoch`` older than the leader's: FENCED_LEADER_EPOCH, newer:
  UNKNOWN_LEADER_EPOCH (this broker has not seen that push yet);
- divergence (KIP-595): the leader looks up the end of ``last_fetched_epoch`` in its
  leader-epoch cache; when the follower's ``fetch_offset`` is past it, or the epoch is
  not known, it answers ``diverging_epoch`` {epoch, end_offset} and no records. A
  follower knowing no epoch (``last_fetched_epoch`` -1) past the start of the leader's
  first epoch holds records written without an epoch (before any push named the
  partition, every replica accepted produce): {-1, log start} truncates them;
- ``fetch_offset`` outside [log start, LEO]: OFFSET_OUT_OF_RANGE with the leader's log
  start and LEO (the follower restarts at the log start, or truncates to the LEO);
- otherwise the fetch offset is the follower's LEO (``ReplicaManager.follower_fetched``
  moves the HW and maybe the ISR) and the answer holds whole batches from it up to the
  leader's LEO, with the leader's HW and log start.

Like Fetch, it long-polls: with fewer than ``min_bytes`` read and no error it waits for
an append to one of its partitions (``Partition.appended``), up to ``max_wait_ms``.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Executor
from typing import Any

from dataplane._gen.meridian.v1 import replication_pb2, replication_pb2_grpc
from dataplane.broker.errors import abort, to_error
from dataplane.broker.partitions import Partition, PartitionRegistry
from dataplane.broker.replication.manager import ReplicaManager
from dataplane.broker.replication.state import ReplicaState
from dataplane.errors import ErrorCode

DEFAULT_PARTITION_MAX_BYTES = 1024 * 1024
MAX_WAIT_MS = 30_000


class ReplicaFetchHandler:
    def __init__(
        self,
        registry: PartitionRegistry,
        manager: ReplicaManager,
        executor: Executor,
        max_bytes: int,
    ) -> None:
        self.registry = registry
        self.manager = manager
        self._executor = executor
        self._max_bytes = max_bytes

    async def fetch(
        self, request: replication_pb2.ReplicaFetchRequest
    ) -> replication_pb2.ReplicaFetchResponse:
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + min(max(request.max_wait_ms, 0), MAX_WAIT_MS) / 1000
        max_bytes = min(request.max_bytes or self._max_bytes, self._max_bytes)
        results: list[replication_pb2.ReplicaFetchResult | None] = []
        reads: list[tuple[int, Partition, int, int]] = []  # (index, part, offset, limit)
        for index, item in enumerate(request.partitions):
            part, result = self._check(request.replica_id, item)
            results.append(result)
            if result is None and part is not None:
                limit = item.partition_max_bytes or DEFAULT_PARTITION_MAX_BYTES
                reads.append((index, part, item.fetch_offset, limit))
        while True:
            signals = [part.appended() for _, part, _, _ in reads]
            read = await loop.run_in_executor(self._executor, _read_all, reads, max_bytes)
            total = sum(len(r.records) for r in read.values())
            failed = any(r.error for r in read.values()) or any(r is not None for r in results)
            remaining = deadline - time.monotonic()
            if total >= request.min_bytes or failed or remaining <= 0 or not signals:
                break
            if self.registry.closing:
                break
            await asyncio.wait(signals, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            if any(not _still_leads(part, request.partitions[i]) for i, part, _, _ in reads):
                break  # a role changed while waiting: answer now (re-checked below)
        final = []
        for index, item in enumerate(request.partitions):
            found = results[index] or read.get(index)
            if found is None:  # lost the lead while waiting
                found = _error(item, ErrorCode.NOT_LEADER_OR_FOLLOWER, "no longer the leader")
            final.append(found)
        for index, part, _, _ in reads:
            if not _still_leads(part, request.partitions[index]):
                final[index] = _error(
                    request.partitions[index],
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    "leadership changed while fetching",
                )
        return replication_pb2.ReplicaFetchResponse(results=final)

    def _check(
        self, replica_id: int, item: replication_pb2.ReplicaFetchPartition
    ) -> tuple[Partition | None, replication_pb2.ReplicaFetchResult | None]:
        """(the partition, None) when it may be read; else (None, the answer)."""
        part = self.registry.get(item.topic, item.partition)
        if part is None or part.deleted:
            return None, _error(item, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "not hosted here")
        state = part.replica
        if state is None or not state.is_leader:
            return None, _error(item, ErrorCode.NOT_LEADER_OR_FOLLOWER, "not the leader here")
        if item.current_leader_epoch < state.leader_epoch:
            return None, _error(
                item,
                ErrorCode.FENCED_LEADER_EPOCH,
                f"leader epoch {item.current_leader_epoch} is older than {state.leader_epoch}",
            )
        if item.current_leader_epoch > state.leader_epoch:
            return None, _error(
                item,
                ErrorCode.UNKNOWN_LEADER_EPOCH,
                f"leader epoch {item.current_leader_epoch} is newer than {state.leader_epoch}",
            )
        log = part.log
        leo, start = log.log_end_offset, log.log_start_offset
        if item.last_fetched_epoch < 0 and item.fetch_offset > _first_stamped(state, leo, start):
            # The follower knows no epoch, yet holds records the leader stamped: they
            # were written without one (before any push), and cannot be compared.
            result = _base(item, part)
            result.diverging_epoch.epoch = -1
            result.diverging_epoch.end_offset = start
            return None, result
        if item.last_fetched_epoch >= 0 and item.fetch_offset > start:
            epoch, end = state.epochs.end_offset_for(item.last_fetched_epoch, leo)
            if epoch < 0 or epoch < item.last_fetched_epoch or end < item.fetch_offset:
                result = _base(item, part)
                result.diverging_epoch.epoch = epoch
                result.diverging_epoch.end_offset = end if epoch >= 0 else start
                return None, result
        if not start <= item.fetch_offset <= leo:
            result = _base(item, part)
            result.error = ErrorCode.OFFSET_OUT_OF_RANGE
            result.error_message = f"fetch offset {item.fetch_offset} outside [{start}, {leo}]"
            return None, result
        self.manager.follower_fetched(part, replica_id, item.fetch_offset)
        return part, None


def _first_stamped(state: ReplicaState, leo: int, start: int) -> int:
    """Where the leader's first known epoch starts (its LEO if it knows none): records
    below it carry no epoch (appended before any push)."""
    entries = state.epochs.entries
    return max(entries[0][1], start) if entries else leo


def _still_leads(part: Partition, item: replication_pb2.ReplicaFetchPartition) -> bool:
    state = part.replica
    return (
        not part.deleted
        and state is not None
        and state.is_leader
        and state.leader_epoch == item.current_leader_epoch
    )


def _read_all(
    reads: list[tuple[int, Partition, int, int]], max_bytes: int
) -> dict[int, replication_pb2.ReplicaFetchResult]:
    """Whole batches from each fetch offset up to the LEO (blocking)."""
    found: dict[int, replication_pb2.ReplicaFetchResult] = {}
    total = 0
    for index, part, offset, limit in reads:
        log = part.log
        result = replication_pb2.ReplicaFetchResult(topic=part.topic, partition=part.index)
        budget = min(limit, max_bytes - total)
        try:
            if budget > 0 or total == 0:
                leo = log.log_end_offset
                read = log.read(offset, max(budget, 1), max_offset=leo)
                result.records = read.data
                total += len(read.data)
        except Exception as exc:  # every failure is a typed result
            error = to_error(exc)
            result.error = error.code  # type: ignore[assignment]
            result.error_message = error.message
        result.high_watermark = log.high_watermark
        result.log_start_offset = log.log_start_offset
        result.log_end_offset = log.log_end_offset
        found[index] = result
    return found


def _base(
    item: replication_pb2.ReplicaFetchPartition, part: Partition
) -> replication_pb2.ReplicaFetchResult:
    log = part.log
    return replication_pb2.ReplicaFetchResult(
        topic=item.topic,
        partition=item.partition,
        high_watermark=log.high_watermark,
        log_start_offset=log.log_start_offset,
        log_end_offset=log.log_end_offset,
    )


def _error(
    item: replication_pb2.ReplicaFetchPartition, code: int, message: str
) -> replication_pb2.ReplicaFetchResult:
    return replication_pb2.ReplicaFetchResult(
        topic=item.topic,
        partition=item.partition,
        error=code,  # type: ignore[arg-type]
        error_message=message,
        high_watermark=-1,
        log_start_offset=-1,
        log_end_offset=-1,
    )


class ReplicationServicer(replication_pb2_grpc.ReplicationServicer):
    """``Replication.ReplicaFetch`` over ``ReplicaFetchHandler``; refused while the
    broker is not ready (``readiness.check`` raises ``MeridianError``)."""

    def __init__(self, handler: ReplicaFetchHandler, readiness: Any) -> None:
        self._handler = handler
        self._readiness = readiness

    async def ReplicaFetch(
        self, request: replication_pb2.ReplicaFetchRequest, context: Any
    ) -> replication_pb2.ReplicaFetchResponse:
        try:
            self._readiness.check()
            return await self._handler.fetch(request)
        except Exception as exc:  # every failure leaves as a typed status
            await abort(context, to_error(exc))

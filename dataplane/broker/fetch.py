"""Fetch and ListOffsets: reads on the I/O pool, long polls woken by appends.

A fetch reads every asked partition (whole batches as stored, up to the high watermark)
in one pass on the I/O pool; a follower answers NOT_LEADER_OR_FOLLOWER and an offline
partition LEADER_NOT_AVAILABLE (see ``replication``). If fewer than ``min_bytes`` came
back, no partition failed and ``max_wait_ms`` has not passed, it waits until the high
watermark of one of its partitions moves (``Partition.changed``, armed *before* the read
so a change during it is not missed),
then reads again. Every read is bounded: by ``partition_max_bytes`` and by what is left
of ``max_bytes`` (the first batch of the response is sent whole, as Kafka does).

Isolation (``docs/transactions.md``): a ``READ_COMMITTED`` fetch reads up to the last
stable offset (the first offset of the oldest open transaction, or the high watermark)
and gets the aborted transactions overlapping what it returns, from the partition's
aborted-transaction index; a ``READ_UNCOMMITTED`` fetch reads up to the high watermark
but never past the oldest open half message, and gets the rolled-back half messages
among what it returns: so no consumer ever sees a half message before its commit.
Every answer carries the last stable offset.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.broker.errors import to_error
from dataplane.broker.lag import record_age, timestamp_at
from dataplane.broker.partitions import Partition, PartitionRegistry
from dataplane.broker.producers import is_half_producer
from dataplane.broker.tiering import TierManager
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import HEADER_STRUCT, LOG_OVERHEAD
from dataplane.storage.errors import OffsetOutOfRangeError
from dataplane.storage.log import PartitionLog
from dataplane.tiered.layout import Manifest
from lanes.names import SEPARATOR

DEFAULT_PARTITION_MAX_BYTES = 1024 * 1024
LATEST = -1
EARLIEST = -2


@dataclass(frozen=True)
class FetchLimits:
    max_bytes: int  # cap of a request's max_bytes (0 in a request means this cap)
    max_wait_ms: int  # cap of a request's max_wait_ms


class FetchHandler:
    def __init__(
        self,
        registry: PartitionRegistry,
        executor: Executor,
        limits: FetchLimits,
        on_bytes_out: Callable[[str, int], None] | None = None,
        on_lane_fetch: Callable[[Iterable[str]], None] | None = None,
        tier: TierManager | None = None,
    ) -> None:
        """``on_lane_fetch(topics)``: told the lane topics of each consumer fetch that
        have an asked partition led here. ``tier``: reads below the local log start of a
        tiered partition come from its remote segments."""
        self.registry = registry
        self._tier = tier
        self._on_lane_fetch = on_lane_fetch
        self._executor = executor
        self._limits = limits
        self._on_bytes_out = on_bytes_out

    def check_request(self, request: broker_pb2.FetchRequest) -> None:
        if min(request.max_wait_ms, request.min_bytes, request.max_bytes) < 0:
            raise MeridianError(
                ErrorCode.INVALID_REQUEST, "max_wait_ms, min_bytes and max_bytes must be >= 0"
            )
        seen = set()
        for item in request.partitions:
            key = (item.topic, item.partition)
            if key in seen or item.partition_max_bytes < 0:
                raise MeridianError(
                    ErrorCode.INVALID_REQUEST,
                    f"{item.topic}-{item.partition}: listed twice or negative partition_max_bytes",
                )
            seen.add(key)

    async def fetch(self, request: broker_pb2.FetchRequest) -> broker_pb2.FetchResponse:
        """Answer ``request`` (see the module docstring); raises ``MeridianError``."""
        self.check_request(request)
        if self._on_lane_fetch is not None:
            lane_topics = self._led_lane_topics(request)
            if lane_topics:
                self._on_lane_fetch(lane_topics)
        loop = asyncio.get_running_loop()
        wait_s = min(request.max_wait_ms, self._limits.max_wait_ms) / 1000
        deadline = time.monotonic() + wait_s
        max_bytes = min(request.max_bytes or self._limits.max_bytes, self._limits.max_bytes)
        while True:
            parts = [self.registry.get(i.topic, i.partition) for i in request.partitions]
            signals = [p.changed() for p in parts if p is not None]
            response, sizes, failed = await loop.run_in_executor(
                self._executor, self._read_all, request, max_bytes
            )
            remaining = deadline - time.monotonic()
            done = sum(sizes) >= request.min_bytes or failed or remaining <= 0
            if done or not signals or self.registry.closing:
                break
            await asyncio.wait(signals, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        if self._on_bytes_out is not None:
            for item, size in zip(request.partitions, sizes, strict=True):
                if size:
                    self._on_bytes_out(item.topic, size)
        return response

    def _led_lane_topics(self, request: broker_pb2.FetchRequest) -> set[str]:
        """The lane topics of ``request`` with an asked partition led here: only those
        count as fetched, so names that exist nowhere cannot grow the activity table."""
        found: set[str] = set()
        for item in request.partitions:
            if SEPARATOR in item.topic and item.topic not in found:
                part = self.registry.get(item.topic, item.partition)
                if part is not None and not_leader(part) is None:
                    found.add(item.topic)
        return found

    def _read_all(
        self, request: broker_pb2.FetchRequest, max_bytes: int
    ) -> tuple[broker_pb2.FetchResponse, list[int], bool]:
        """(the response, bytes of records read per partition, whether any partition
        failed); blocking.

        Results are written into the response in place and their sizes kept aside: a
        bytes field read back from a protobuf message, or a message merged into another,
        is a fresh copy of its megabytes (upb), which was most of a catch-up fetch's cost.
        """
        response = broker_pb2.FetchResponse()
        sizes: list[int] = []
        failed = False
        committed = request.isolation_level == broker_pb2.READ_COMMITTED
        for item in request.partitions:
            result = response.results.add(topic=item.topic, partition=item.partition)
            budget, first = max_bytes - sum(sizes), not sum(sizes)
            sizes.append(self._read_one(result, item, budget, first=first, committed=committed))
            failed = failed or result.error != ErrorCode.NONE
        return response, sizes, failed

    def _read_one(
        self,
        result: broker_pb2.FetchPartitionResult,
        item: broker_pb2.FetchPartition,
        budget: int,
        *,
        first: bool,
        committed: bool = False,
    ) -> int:
        """Fill ``result`` for ``item``; returns the bytes of records put in it."""
        part = self.registry.get(item.topic, item.partition)
        if part is None:
            _fail(result, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "not hosted here")
            return 0
        refused = not_leader(part)
        if refused is not None:
            _fail(result, refused.code, refused.message)
            return 0
        log = part.log
        limit = min(item.partition_max_bytes or DEFAULT_PARTITION_MAX_BYTES, max(budget, 0))
        size = 0
        visible = part.visible_end(committed)
        try:
            if limit > 0 or first:
                data, remote = self._read(part, item.fetch_offset, max(limit, 1), visible)
                if first or len(data) <= limit:
                    result.records, size = data, len(data)
                    self._add_aborted(result, part, item.fetch_offset, data, committed, remote)
            elif self._remote(part, item.fetch_offset) is None:
                log.read(item.fetch_offset, 1, max_offset=item.fetch_offset)  # range check
        except Exception as exc:  # every failure is a typed result
            error = to_error(exc)
            _fail(result, error.code, error.message)
        result.last_stable_offset = part.last_stable_offset()
        result.high_watermark = log.high_watermark
        result.log_start_offset = (
            self._tier.log_start_offset(part) if self._tier else log.log_start_offset
        )
        result.log_end_offset = log.log_end_offset
        return size

    def _read(
        self, part: Partition, offset: int, max_bytes: int, visible: int
    ) -> tuple[bytes, Manifest | None]:
        """Whole batches from ``offset`` below ``visible``, and the manifest when they
        came from the remote tier: below a tiered partition's local log (its segments
        lie below the last stable offset), or when local retention moved the log start
        past ``offset`` during the read; else from the log."""
        remote = self._remote(part, offset)
        if remote is None:
            try:
                return part.log.read(offset, max_bytes, max_offset=visible).data, None
            except OffsetOutOfRangeError:
                remote = self._remote(part, offset)
                if remote is None:
                    raise
        assert self._tier is not None
        return self._tier.read(part, remote, offset, max_bytes), remote

    def _add_aborted(
        self,
        result: broker_pb2.FetchPartitionResult,
        part: Partition,
        fetch_offset: int,
        data: bytes,
        committed: bool,
        remote: Manifest | None,
    ) -> None:
        """The aborted transactions overlapping ``data`` (read from ``fetch_offset``):
        all of them for read_committed, the rolled-back half messages for
        read_uncommitted; from the partition's index, or the remote segment's list."""
        if not data:
            return
        end = _end_offset(data)
        if remote is not None and self._tier is not None:
            listed = self._tier.aborted(remote, fetch_offset)
            found = [(p, f) for p, f, last in listed if last >= fetch_offset and f < end]
        else:
            index = part.producers.aborted
            if index is None or not len(index):
                return
            found = [(a.producer_id, a.first_offset) for a in index.collect(fetch_offset, end)]
        for producer_id, first_offset in found:
            if committed or is_half_producer(producer_id):
                result.aborted_transactions.add(producer_id=producer_id, first_offset=first_offset)

    def _remote(self, part: Partition, offset: int) -> Manifest | None:
        return self._tier.check_readable(part, offset) if self._tier is not None else None


def not_leader(part: Partition) -> MeridianError | None:
    """Why a client may not read ``part`` here: a follower (NOT_LEADER_OR_FOLLOWER) or
    an offline partition (LEADER_NOT_AVAILABLE); None when this broker leads it."""
    state = part.replica
    if state is None or state.is_leader:
        return None
    if state.leader_id < 0:
        return MeridianError(
            ErrorCode.LEADER_NOT_AVAILABLE, f"{part.topic}-{part.index} has no leader"
        )
    return MeridianError(
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        f"{part.topic}-{part.index} is led by broker {state.leader_id}",
    )


def high_watermark_unknown(part: Partition) -> MeridianError | None:
    """A new leader whose high watermark is still behind the start of its epoch
    (LEADER_NOT_AVAILABLE, retriable; Kafka's OFFSET_NOT_AVAILABLE of KIP-207): it took
    the HW it knew as a follower, which may lag the previous leader's until its
    followers fetch from it, so the latest offset it would list (the HW, the last
    stable offset) could lie below what the previous leader answered for the same
    records. Earliest offsets and offsets by time do not depend on the HW: answered."""
    state = part.replica
    if state is None or not state.is_leader:
        return None
    start = state.epochs.start_offset_of(state.leader_epoch)
    high_watermark = part.log.high_watermark
    if start is None or high_watermark >= start:
        return None
    return MeridianError(
        ErrorCode.LEADER_NOT_AVAILABLE,
        f"{part.topic}-{part.index}: the new leader's high watermark ({high_watermark}) "
        f"is behind the start of its leader epoch ({start}): retry",
    )


def _fail(
    result: broker_pb2.FetchPartitionResult, code: int, message: str
) -> broker_pb2.FetchPartitionResult:
    result.error = code  # type: ignore[assignment]
    result.error_message = message
    result.high_watermark = result.log_start_offset = result.log_end_offset = -1
    result.last_stable_offset = -1
    return result


def _end_offset(data: bytes) -> int:
    """The offset after the last whole batch of ``data`` (walking the batch lengths)."""
    position, end, last = 0, len(data), 0
    while position + HEADER_STRUCT.size <= end:
        fields = HEADER_STRUCT.unpack_from(data, position)
        length = fields[1] + LOG_OVERHEAD
        if position + length > end:
            break
        last = fields[0] + fields[6] + 1
        position += length
    return last


class OffsetsHandler:
    """ListOffsets: latest (the high watermark; for ``READ_COMMITTED`` the last stable
    offset; never past an open half message), earliest, or the first at a time; with
    ``record_at``, also the age of the record there (``lag``: a group's lag in time)."""

    def __init__(
        self, registry: PartitionRegistry, executor: Executor, tier: TierManager | None = None
    ) -> None:
        self.registry = registry
        self._executor = executor
        self._tier = tier

    async def list_offsets(
        self, request: broker_pb2.ListOffsetsRequest
    ) -> broker_pb2.ListOffsetsResponse:
        loop = asyncio.get_running_loop()
        results = await loop.run_in_executor(self._executor, self._lookup_all, request)
        return broker_pb2.ListOffsetsResponse(results=results)

    def _lookup_all(
        self, request: broker_pb2.ListOffsetsRequest
    ) -> list[broker_pb2.ListOffsetsResult]:
        committed = request.isolation_level == broker_pb2.READ_COMMITTED
        return [self._lookup(item, committed) for item in request.partitions]

    def _lookup(
        self, item: broker_pb2.ListOffsetsPartition, committed: bool = False
    ) -> broker_pb2.ListOffsetsResult:
        result = broker_pb2.ListOffsetsResult(
            topic=item.topic,
            partition=item.partition,
            offset=-1,
            timestamp=-1,
            record_timestamp=-1,
        )
        part = self.registry.get(item.topic, item.partition)
        if part is None:
            result.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            result.error_message = "not hosted here"
            return result
        refused = not_leader(part)
        if refused is None and item.timestamp == LATEST:
            refused = high_watermark_unknown(part)
        if refused is not None:
            result.error, result.error_message = refused.code, refused.message  # type: ignore[assignment]
            return result
        try:
            if not self._find_remote(part, item, result):
                self._find(part.log, item, result)
            if item.timestamp == LATEST:  # what a consumer of this isolation may read
                result.offset = part.visible_end(committed)
        except Exception as exc:  # every failure is a typed result
            error = to_error(exc)
            result.error, result.error_message = error.code, error.message  # type: ignore[assignment]
            result.offset, result.timestamp = -1, -1
        return result

    def _find_remote(
        self,
        part: Partition,
        item: broker_pb2.ListOffsetsPartition,
        result: broker_pb2.ListOffsetsResult,
    ) -> bool:
        """Answer from the remote tier of a tiered partition: the earliest offset kept, or
        the first at a time before the local log; False to look in the local log."""
        tier = self._tier
        if tier is None or not part.log.config.remote_storage or item.timestamp == LATEST:
            return False
        if item.timestamp < 0 and item.timestamp != EARLIEST:
            return False
        manifest = tier.require_view(part)
        if manifest is None:
            return False  # nothing below the local log
        if item.timestamp == EARLIEST:
            result.offset = tier.log_start_offset(part)
        elif manifest.is_empty or item.timestamp > manifest.segments[-1].max_timestamp:
            return False
        else:
            found = tier.offset_for_timestamp(manifest, item.timestamp)
            if found is None:
                return False
            result.offset, result.timestamp = found, -1
        if item.HasField("record_at"):
            age = record_age(part.log, item.record_at)
            result.record_timestamp, result.record_age_ms = age.timestamp, age.age_ms
        return True

    @staticmethod
    def _find(
        log: PartitionLog,
        item: broker_pb2.ListOffsetsPartition,
        result: broker_pb2.ListOffsetsResult,
    ) -> None:
        if item.timestamp == LATEST:
            result.offset = log.high_watermark
        elif item.timestamp == EARLIEST:
            result.offset = log.log_start_offset
        elif item.timestamp < 0:
            result.error = ErrorCode.INVALID_TIMESTAMP
            result.error_message = f"timestamp {item.timestamp}: use -1, -2 or a time in ms"
            return
        else:
            found = log.offset_for_timestamp(item.timestamp)
            if found is not None:
                result.offset, result.timestamp = found, timestamp_at(log, found)
        if item.HasField("record_at"):
            age = record_age(log, item.record_at)
            result.record_timestamp, result.record_age_ms = age.timestamp, age.age_ms

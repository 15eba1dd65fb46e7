"""The consumer's background fetcher: long-poll ``Fetch`` per leader, prefetch into a buffer.

``FetchState`` holds, per assigned partition, the application's ``position`` (the next
offset ``poll`` returns) and the fetcher's ``fetch_offset`` (the next offset to ask
for), which runs ahead of it by at most ``prefetch_bytes`` of buffered data. A seek, a
reset or a pause bumps the partition's ``generation``: data fetched for an older one is
dropped, so nothing from before a seek is ever returned after it.

The fetcher thread keeps at most one ``Fetch`` in flight per leader broker, carrying
every fetchable partition it leads, and waits on the completions (gRPC futures) and on
wakeups from ``poll`` (buffer space freed, a seek, a new assignment). A response's
batches are checked and decompressed here (``decoder.split_batches``) and queued as a
``CompletedFetch``; ``poll`` decodes records from it as it returns them
(``take``), ``poll_batches`` returns its batches undecoded (``take_batches``).

A response's ``throttle_ms`` (the broker held it for the tenant's fetch quota) keeps
the next fetch from that broker until ``throttle_ms`` after the request was sent: a
broker that held the whole time costs no further wait.

Isolation: ``read_committed`` fetches end at the last stable offset; the batches of
aborted transactions the broker lists (and, at either level, of rolled-back half
messages) are skipped as control batches are (``decoder.drop_aborted``).

Errors: ``OFFSET_OUT_OF_RANGE`` marks the partition for its reset policy (applied by
``poll``); a retriable code or a transport failure refreshes the metadata and retries
the partition after a backoff; any other code is kept and raised by the next ``poll``.

Thread safety: ``FetchState.lock`` guards the partition states and the buffer; the
application thread and the fetcher thread both take it, never across I/O.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.client.decoder import decode_records, drop_aborted, split_batches
from dataplane.client.metadata import ClusterMetadata
from dataplane.client.types import ConsumerRecord, PolledBatch, RecordSource, TopicPartition
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc
from dataplane.records import TIMESTAMP_TYPE_MASK, FetchedBatch

log = logging.getLogger(__name__)

_WAKE = object()


@dataclass(frozen=True)
class FetchConfig:
    min_bytes: int
    max_wait_ms: int
    max_bytes: int
    partition_max_bytes: int
    prefetch_bytes: int  # per partition, fetched and not yet returned
    request_timeout_s: float
    retry_backoff_s: float
    check_crcs: bool = True
    read_committed: bool = False


@dataclass(eq=False)
class PartitionState:
    tp: TopicPartition
    position: int | None = None
    fetch_offset: int | None = None
    generation: int = 0
    paused: bool = False
    reset: str | None = None  # a reset policy to apply before fetching: earliest | latest
    error: MeridianError | None = None  # raised by the next poll
    high_watermark: int = -1
    log_start_offset: int = -1
    buffered_bytes: int = 0
    in_flight: bool = False
    retry_at: float = 0.0

    def seek(self, offset: int | None) -> None:
        """A new position; what was fetched for the old one is dropped."""
        self.position = self.fetch_offset = offset
        self.generation += 1
        self.reset = None
        self.error = None
        self.retry_at = 0.0

    def fetchable(self, now: float, prefetch_bytes: int) -> bool:
        return (
            self.fetch_offset is not None
            and not self.paused
            and not self.in_flight
            and self.reset is None
            and self.error is None
            and now >= self.retry_at
            and self.buffered_bytes < prefetch_bytes
        )


@dataclass(eq=False)
class CompletedFetch:
    """Whole batches fetched for one partition, drained by ``poll``."""

    state: PartitionState
    generation: int
    batches: deque[FetchedBatch]
    size: int
    records: list[ConsumerRecord] = field(default_factory=list)
    index: int = 0
    batch_end: int = -1  # the offset after the batch ``records`` came from
    current: FetchedBatch | None = None  # the batch ``records`` came from


class FetchState:
    """The assigned partitions and the buffer of completed fetches; see the module docstring."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.data_ready = threading.Condition(self.lock)
        self.partitions: dict[TopicPartition, PartitionState] = {}
        self.buffer: deque[CompletedFetch] = deque()

    def collect(
        self, limit: int, taker: Callable[[CompletedFetch, int], list[Any]] | None = None
    ) -> tuple[list[Any], bool]:
        """Up to ``limit`` records from the buffer, decoded batch by batch, moving the
        positions; and whether buffer space was freed (the fetcher wants to know).
        ``taker``: ``take`` (records) or ``take_batches`` (batches, undecoded).

        Decoding runs outside the lock: only the application thread takes records."""
        taker = taker or take
        out: list[Any] = []
        freed = False
        while len(out) < limit:
            with self.lock:
                if not self.buffer:
                    break
                completed = self.buffer[0]
                state = completed.state
                if state.generation != completed.generation or state.paused:
                    self._pop(completed)
                    freed = True
                    continue
            out += taker(completed, limit - len(out))
            if not completed.batches and completed.index >= len(completed.records):
                with self.lock:
                    if self.buffer and self.buffer[0] is completed:
                        self._pop(completed)
                freed = True
        return out, freed

    def _pop(self, completed: CompletedFetch) -> None:
        self.buffer.popleft()
        completed.state.buffered_bytes -= completed.size

    def buffered_bytes(self) -> int:
        """Bytes fetched and not yet returned, over every partition (under ``lock``)."""
        return sum(completed.size for completed in self.buffer)

    def drop_buffered(self, tp: TopicPartition) -> None:
        """Forget fetched data of ``tp`` (call under ``lock``)."""
        kept: deque[CompletedFetch] = deque()
        for completed in self.buffer:
            if completed.state.tp == tp:
                completed.state.buffered_bytes -= completed.size
            else:
                kept.append(completed)
        self.buffer = kept


def take(completed: CompletedFetch, limit: int) -> list[ConsumerRecord]:
    """Up to ``limit`` records of ``completed`` at or after its partition's position; the
    position moves past them, and past a batch once it is used up (so the gaps of a
    compacted log and control batches are stepped over)."""
    state = completed.state
    out: list[ConsumerRecord] = []
    while len(out) < limit:
        if completed.index >= len(completed.records):
            if state.position is None or completed.batch_end > state.position:
                state.position = completed.batch_end
            if not completed.batches:
                break
            batch = completed.batches.popleft()
            position = state.position if state.position is not None else 0
            completed.batch_end = batch.next_offset
            completed.records, completed.index, completed.current = [], 0, batch
            if batch.next_offset <= position or batch.is_control:
                continue
            timestamp_type = (batch.attributes & TIMESTAMP_TYPE_MASK) >> 3
            source = RecordSource(
                state.tp.topic, state.tp.partition, timestamp_type, batch.leader_epoch
            )
            completed.records = decode_records(batch, source, position)
        chunk = completed.records[completed.index : completed.index + limit - len(out)]
        completed.index += len(chunk)
        out += chunk
        if chunk:
            state.position = chunk[-1].offset + 1
    return out


def take_batches(completed: CompletedFetch, limit: int) -> list[PolledBatch]:
    """``take`` a batch at a time, undecoded: the batches of ``completed`` holding
    records at or after its partition's position, until they hold ``limit`` records or
    more; the position moves past each (and past control batches). A batch ``take``
    began is returned from the position on."""
    state = completed.state
    out: list[PolledBatch] = []
    taken = 0
    if completed.index < len(completed.records) and completed.current is not None:
        position = completed.records[completed.index].offset
        taken = len(completed.records) - completed.index
        completed.records, completed.index = [], 0
        end = completed.batch_end
        out.append(PolledBatch(state.tp, position, end, taken, completed.current))
        state.position = end
    while taken < limit and completed.batches:
        batch = completed.batches.popleft()
        position = state.position if state.position is not None else 0
        completed.batch_end, completed.current = batch.next_offset, None
        if batch.next_offset > position and not batch.is_control:
            out.append(PolledBatch(state.tp, position, batch.next_offset, batch.count, batch))
            taken += batch.count
        if state.position is None or batch.next_offset > state.position:
            state.position = batch.next_offset
    return out


class Fetcher:
    def __init__(
        self, metadata: ClusterMetadata, state: FetchState, config: FetchConfig, client_id: str
    ) -> None:
        self._metadata = metadata
        self._state = state
        self._config = config
        self._events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._in_flight: set[str] = set()
        self._throttled_until: dict[str, float] = {}  # address -> monotonic time
        self._closed = False
        self._refresh_wanted = False
        self._last_refresh = 0.0
        self._thread = threading.Thread(
            target=self._run, name=f"meridian-fetcher-{client_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def wakeup(self) -> None:
        self._events.put(_WAKE)

    def close(self, timeout: float | None = None) -> None:
        self._closed = True
        self.wakeup()
        self._thread.join(timeout)

    # -- the loop ------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._closed:
            try:
                self._maybe_refresh()
                self._send_fetches()
                self._handle(self._events.get(timeout=self._config.retry_backoff_s))
                while not self._events.empty():
                    self._handle(self._events.get_nowait())
            except queue.Empty:
                continue
            except Exception:
                log.exception("the consumer's fetcher failed; retrying")
                time.sleep(self._config.retry_backoff_s)

    def _handle(self, event: Any) -> None:
        if event is not _WAKE:
            self._completed(*event)

    def _maybe_refresh(self) -> None:
        now = time.monotonic()
        if not self._refresh_wanted or now - self._last_refresh < self._config.retry_backoff_s:
            return
        self._refresh_wanted = False
        self._last_refresh = now
        topics = {tp.topic for tp in self._state.partitions}
        try:
            self._metadata.refresh(topics)
        except MeridianError as error:
            log.info("metadata refresh failed: %s", error)

    def _send_fetches(self) -> None:
        for address, offsets in self._plan().items():
            request = broker_pb2.FetchRequest(
                max_wait_ms=self._config.max_wait_ms,
                min_bytes=self._config.min_bytes,
                max_bytes=self._config.max_bytes,
                replica_id=-1,
                isolation_level=(
                    broker_pb2.READ_COMMITTED
                    if self._config.read_committed
                    else broker_pb2.READ_UNCOMMITTED
                ),
                partitions=[
                    broker_pb2.FetchPartition(
                        topic=state.tp.topic,
                        partition=state.tp.partition,
                        fetch_offset=offset,
                        partition_max_bytes=self._config.partition_max_bytes,
                    )
                    for state, (offset, _) in offsets.items()
                ],
            )
            self._in_flight.add(address)
            sent_at = time.monotonic()
            timeout = self._config.max_wait_ms / 1000 + self._config.request_timeout_s
            try:
                call = self._metadata.pool.get(address).broker.Fetch.future(
                    request, timeout=timeout
                )
            except MeridianError:  # the pool is closed: the consumer is closing
                self._in_flight.discard(address)
                return
            call.add_done_callback(
                lambda f, a=address, o=offsets, t=sent_at: self._events.put((a, o, f, t))
            )

    def _plan(self) -> dict[str, dict[PartitionState, tuple[int, int]]]:
        """Fetchable partitions by leader address (skipping leaders already polled)."""
        now = time.monotonic()
        snapshot = self._metadata.snapshot()
        plans: dict[str, dict[PartitionState, tuple[int, int]]] = {}
        with self._state.lock:
            if self._state.buffered_bytes() >= self._config.max_bytes:
                return plans
            for state in self._state.partitions.values():
                if not state.fetchable(now, self._config.prefetch_bytes):
                    continue
                leader = snapshot.leaders.get(state.tp.topic, {}).get(state.tp.partition, -1)
                broker = snapshot.brokers.get(leader)
                if broker is None:
                    self._refresh_wanted = True
                    continue
                if broker.address in self._in_flight:
                    continue
                if self._throttled_until.get(broker.address, 0.0) > now:
                    continue
                assert state.fetch_offset is not None
                plan = plans.setdefault(broker.address, {})
                plan[state] = (state.fetch_offset, state.generation)
                state.in_flight = True
        return plans

    # -- responses -----------------------------------------------------------------------
    def _completed(
        self,
        address: str,
        sent: dict[PartitionState, tuple[int, int]],
        call: grpc.Future,
        sent_at: float,
    ) -> None:
        self._in_flight.discard(address)
        try:
            response = call.result()
        except grpc.RpcError as exc:
            self._transport_failure(address, sent, error_from_rpc(exc))
            return
        if response.throttle_ms > 0:
            self._throttled_until[address] = sent_at + response.throttle_ms / 1000
        by_tp = {state.tp: state for state in sent}
        for result in response.results:
            state = by_tp.pop(TopicPartition(result.topic, result.partition), None)
            if state is not None:
                self._partition_result(state, sent[state], result)
        with self._state.lock:
            for state in by_tp.values():
                state.in_flight = False

    def _transport_failure(
        self, address: str, sent: dict[PartitionState, tuple[int, int]], error: MeridianError
    ) -> None:
        if error.retriable:
            self._metadata.pool.forget(address)
            self._refresh_wanted = True
        retry_at = time.monotonic() + self._config.retry_backoff_s
        with self._state.lock:
            for state, (_, generation) in sent.items():
                state.in_flight = False
                if state.generation != generation:
                    continue
                if error.retriable:
                    state.retry_at = retry_at
                else:
                    state.error = error
                    self._state.data_ready.notify_all()

    def _partition_result(
        self,
        state: PartitionState,
        sent: tuple[int, int],
        result: broker_pb2.FetchPartitionResult,
    ) -> None:
        offset, generation = sent
        batches: list[FetchedBatch] = []
        error: MeridianError | None = None
        if result.error == ErrorCode.NONE and result.records:
            try:
                batches = split_batches(
                    result.records, offset, state.tp, verify_crc=self._config.check_crcs
                )
                if result.aborted_transactions:
                    aborted = [(a.producer_id, a.first_offset) for a in result.aborted_transactions]
                    batches = drop_aborted(batches, aborted)
            except MeridianError as corrupt:
                error = corrupt
        with self._state.lock:
            state.in_flight = False
            if state.generation != generation or state.fetch_offset != offset:
                return  # sought or reset meanwhile: this data is stale
            if result.error == ErrorCode.NONE:
                state.high_watermark = result.high_watermark
                state.log_start_offset = result.log_start_offset
            if error is not None:
                state.error = error
            elif result.error == ErrorCode.NONE:
                self._buffer(state, generation, batches, len(result.records))
                return
            elif result.error == ErrorCode.OFFSET_OUT_OF_RANGE:
                state.reset = "out_of_range"
            elif MeridianError(result.error).retriable:
                self._refresh_wanted = True
                state.retry_at = time.monotonic() + self._config.retry_backoff_s
                return
            else:
                state.error = MeridianError(
                    result.error, f"{state.tp.topic}/{state.tp.partition}: {result.error_message}"
                )
            self._state.data_ready.notify_all()

    def _buffer(
        self, state: PartitionState, generation: int, batches: list[FetchedBatch], fetched: int
    ) -> None:
        if not batches:
            if fetched:  # bytes, but not one whole batch: it exceeds the partition limit
                state.error = MeridianError(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"{state.tp.topic}/{state.tp.partition}: the batch at offset "
                    f"{state.fetch_offset} is larger than max_partition_fetch_bytes "
                    f"({self._config.partition_max_bytes})",
                )
                self._state.data_ready.notify_all()
            return
        size = sum(batch.end - batch.start for batch in batches)
        state.fetch_offset = batches[-1].next_offset
        state.buffered_bytes += size
        self._state.buffer.append(CompletedFetch(state, generation, deque(batches), size))
        self._state.data_ready.notify_all()

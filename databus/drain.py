"""Draining a stream's spool to its topic, exactly once and in order.

The drain works one *chunk* at a time: the spool's records ``[start, end)``, cut so that
each partition's share fits one batch of ``batch_bytes``. A chunk's lifecycle:

1. **Plan** (``plan``) under the stream's configuration of the moment: each record's
   target topic (the stream's topic, or its lane topic when the record carries
   ``x-lane`` or the stream names a lane: ``lanes.lane_topic``) and partition
   (``murmur2`` of the key, as every Meridian and Kafka producer computes it; keyless
   records of a chunk go to one partition, rotating by chunk, or one by one with
   ``round_robin``). The plan is a pure function of the records and the
   ``PendingChunk`` parameters.
2. **Journal**: the chunk, with the producer id and the base sequence of each
   partition's batch, is written to the drain state (``spool.DrainState.pending``) and
   synced *before* any batch is sent.
3. **Send** one batch per partition until every one is written or answered as a
   duplicate, pausing as long as a broker's ``throttle_ms`` asks (the tenant's quota);
   retriable failures (a leader moving, brokers down, a lane topic still
   being made) are retried with backoff, the same bytes each time; other failures are
   retried slowly, counted and shown in the health endpoint, never dropped.
4. **Commit**: ``committed`` moves to ``end`` and each partition's next sequence past
   its batch, in one durable write of the drain state.

After a kill at any point the agent starts from the drain state: a journaled chunk is
planned again from the same records and parameters and sent again with the same
sequences, so the brokers store what they missed and answer the rest as duplicates:
every record spooled reaches its topic once, in spool order per partition. Should the
brokers have forgotten the producer (``UNKNOWN_PRODUCER_ID``: its state expired), the
drain takes a new producer id and resends only the batches not yet written.

Configuration changes apply from the next chunk: a chunk in flight finishes under the
parameters it was journaled with.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from databus.config import StreamConfig
from databus.metrics import BATCH_RECORDS, SEND_SECONDS
from databus.spool import PendingChunk, Spool
from databus.upstream import Outcome, PartitionBatch, Upstream
from dataplane.errors import ErrorCode, MeridianError, is_retriable
from dataplane.hashing import partition_for_key
from dataplane.records import Compression, Record
from dataplane.records.builder import BatchBuilder
from dataplane.records.layout import HEADER_SIZE
from dataplane.storage.errors import StorageError
from lanes.names import LANE_HEADER, lane_of_headers, lane_topic, with_lane_header

log = logging.getLogger(__name__)
T = TypeVar("T")

_CODECS = {c.name.lower(): c for c in Compression}
SEND_TIMEOUT_S = 30.0
STOP_JOIN_S = 2.0
BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 2.0
# Partitions whose batches may share one chunk, and the bytes of a chunk: bound a
# chunk's read and its produce requests (the brokers take 64 MiB a request).
MAX_CHUNK_PARTITIONS = 16
MAX_CHUNK_BYTES = 16 * 1024 * 1024
# A record's framing in a batch at most (length, attributes, timestamp and offset
# deltas, key and value lengths, header count: zigzag varints at their widest), and a
# header's (its key and value lengths).
RECORD_OVERHEAD = 40
HEADER_OVERHEAD = 10
# OUT_OF_ORDER_SEQUENCE_NUMBER for this long on end: the brokers lost what came before
# (an acks=1 write lost with its leader), so the batch is sent under a new producer id.
OUT_OF_ORDER_GIVE_UP_S = 30.0
# A target topic the brokers refuse for good when the chunk is planned: a write's lane
# that its tenant does not declare (LANE_NOT_FOUND). Its records go to the stream's
# dead-letter file instead of holding the stream. Other failures (an ACL, a token, a
# deleted topic) may be fixed, so they are retried, holding the stream.
UNDELIVERABLE = 0
GIVE_UP_CODES = frozenset({ErrorCode.LANE_NOT_FOUND})
DEAD = "!dead-letter"


def tp_key(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


@dataclass
class Planned:
    """A chunk's batches: records by target "topic/partition", in spool order."""

    records: dict[str, list[Record]]
    end: int  # the chunk ends before this offset (the records that fit)


def target_of(record: Record, chunk: PendingChunk) -> str:
    lane = lane_of_headers(record.headers) or chunk.lane
    return chunk.topic if lane is None else lane_topic(chunk.topic, lane)


def record_size(
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
    lane: str | None,
) -> int:
    """An upper bound of a record's bytes in a batch (framing varints at their widest),
    with the ``x-lane`` header a lane adds at the drain."""
    size = RECORD_OVERHEAD + len(key or b"") + len(value or b"")
    size += sum(len(k.encode()) + len(v or b"") + HEADER_OVERHEAD for k, v in headers)
    if lane is not None:
        size += len(LANE_HEADER) + len(lane) + HEADER_OVERHEAD
    return size


def compression_slack(size: int) -> int:
    """What compressing ``size`` bytes may add at most, for data that does not compress
    (measured: gzip and snappy add ~300 B to 1 MiB, lz4 and zstd less)."""
    return size // 128 + 64


def batch_limit(batch_bytes: int, max_batch_bytes: int) -> int:
    """The records' bytes one partition's batch of a chunk may hold: ``batch_bytes``,
    and never more than the topic takes in one batch (its ``max_message_bytes``, less
    the header and what compression may add)."""
    room = max_batch_bytes - HEADER_SIZE
    return max(1, min(batch_bytes, room - compression_slack(room)))


def plan(records: list[Record], chunk: PendingChunk, batch_bytes: int | None) -> Planned:
    """Assign ``records`` (from ``chunk.start``) to partitions; with ``batch_bytes``,
    stop before the first record whose partition's batch would outgrow it (a first
    record always fits). Pure: the same records and chunk always give the same plan."""
    out: dict[str, list[Record]] = {}
    sizes: dict[str, int] = {}
    total = 0
    end = chunk.start
    for index, record in enumerate(records):
        topic = target_of(record, chunk)
        count = chunk.partitions[topic]
        if count == UNDELIVERABLE:
            out.setdefault(DEAD, []).append(record)
            end = record.offset + 1
            continue
        if record.key is not None and chunk.partitioner == "murmur2":
            partition = partition_for_key(record.key, count)
        elif chunk.partitioner == "round_robin":
            partition = (chunk.sticky + index) % count
        else:
            partition = chunk.sticky % count
        key = tp_key(topic, partition)
        size = record_size(record.key, record.value, record.headers, chunk.lane)
        if batch_bytes is not None and key in out and sizes[key] + size > batch_bytes:
            break
        if batch_bytes is not None and out and total + size > MAX_CHUNK_BYTES:
            break
        total += size
        if batch_bytes is not None and key not in out and len(out) >= MAX_CHUNK_PARTITIONS:
            break
        out.setdefault(key, []).append(record)
        sizes[key] = sizes.get(key, 0) + size
        end = record.offset + 1
    return Planned(out, end)


def build_batches(
    planned: Planned, chunk: PendingChunk, producer_id: int, epoch: int
) -> dict[str, PartitionBatch]:
    """The batch of every partition of ``planned`` not yet written, sequenced by the
    chunk; records written to a lane by the stream's setting carry ``x-lane``."""
    batches = {}
    for key, records in planned.records.items():
        if key in chunk.acked or key == DEAD or key in chunk.dead:
            continue
        topic, _, partition = key.rpartition("/")
        builder = BatchBuilder(
            compression=_CODECS[chunk.compression],
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=chunk.sequences[key],
        )
        for r in records:
            headers: list[tuple[str, bytes | None]] = list(r.headers)
            if chunk.lane is not None and lane_of_headers(headers) is None:
                headers = with_lane_header(headers, chunk.lane)
            builder.append(r.value, key=r.key, timestamp=r.timestamp, headers=headers)
        batches[key] = PartitionBatch(topic, int(partition), builder.build(), len(records))
    return batches


class DrainStats:
    """What the drain did, read by the metrics (plain counters, one writer)."""

    def __init__(self) -> None:
        self.records_out = 0
        self.bytes_out = 0
        self.batches = 0
        self.requests = 0
        self.send_errors = 0
        self.last_error = ""
        self.last_error_at = 0.0
        self.undeliverable = 0
        self.throttled_s = 0.0
        self.undeliverable_reason = ""


class Drainer:
    """The thread draining one stream's spool (see the module docstring).

    ``config()`` gives the stream's current configuration; ``on_commit(offset)`` runs
    after each chunk is committed (it wakes ``ack_on_broker`` writers).
    """

    def __init__(
        self,
        name: str,
        spool: Spool,
        upstream: Upstream,
        config: Callable[[], StreamConfig],
        on_commit: Callable[[int], None],
        max_batch_bytes: Callable[[], int] = lambda: 1024 * 1024,
    ) -> None:
        self.name = name
        self.spool = spool
        self.upstream = upstream
        self.config = config
        self.on_commit = on_commit
        self.max_batch_bytes = max_batch_bytes
        self.stats = DrainStats()
        self.alive = True
        self._out_of_order_since: float | None = None
        self._stop = threading.Event()
        self._stop_when_empty = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"databus-drain-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, drain_timeout_s: float = 0.0) -> None:
        """Stop; first keep draining up to ``drain_timeout_s`` while records are left."""
        self._stop_when_empty.set()
        self._thread.join(drain_timeout_s)
        self._stop.set()
        with self.spool.lock:
            self.spool.lock.notify_all()
        # A produce call in flight may take its timeout to return; the journal makes
        # leaving it safe (the chunk is sent again at the next start).
        self._thread.join(STOP_JOIN_S)

    @property
    def idle(self) -> bool:
        state = self.spool.state
        spool = self.spool
        return state.pending is None and spool.depth_records() == 0 and spool.depth_bytes == 0

    # -- the loop -------------------------------------------------------------------------
    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            if self._stop_when_empty.is_set() and self.idle:
                break
            try:
                if self.spool.state.pending is not None:
                    self._deliver()
                else:
                    self._next_chunk()
                failures = 0
            except Exception as error:
                # Nothing is lost: the spool and the journal hold every record; the same
                # step runs again after a pause (a full disk, a storage error), from the
                # drain state on disk (memory may hold a step that was not saved, and
                # nothing is sent that was not journaled first).
                failures += 1
                with contextlib.suppress(Exception):
                    self.spool.reload_state()
                log.exception("the drain of stream %s failed; trying again", self.name)
                self._note_error(ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(error).__name__}: {error}")
                self._stop.wait(self._backoff(failures, ErrorCode.UNKNOWN_SERVER_ERROR))
        self.alive = False

    def _next_chunk(self) -> None:
        state = self.spool.state
        start = max(state.committed, state.skip_to)
        if start > state.committed:  # dropped records: nothing of them is in flight
            state.committed = start
            self.spool.save_state()
            self.spool.drained(start)
        if not self.spool.wait_for_records(start, 0.2):
            return
        config = self.config()
        limit = batch_limit(config.batch_bytes, self.max_batch_bytes())
        self._linger(config, limit)
        if self._stop.is_set():
            return
        records = self.spool.read(start, self.spool.end_offset, limit * 4)
        if not records:
            return
        chunk = self._journal(records, start, config, limit)
        if chunk is not None:
            log.debug("stream %s: chunk %s..%s", self.name, chunk.start, chunk.end)

    def _linger(self, config: StreamConfig, limit: int) -> None:
        """Wait for a chunk's worth of records, until the oldest record not yet sent has
        waited ``linger_ms`` (as a Kafka producer's batch does): a backlog goes at once."""
        while not self._stop.is_set() and not self._stop_when_empty.is_set():
            waited_ms = self.spool.oldest_age_s() * 1000
            if self.spool.depth_bytes >= limit or waited_ms >= config.linger_ms:
                return
            time.sleep(min(0.005, (config.linger_ms - waited_ms) / 1000))

    def _journal(
        self, records: list[Record], start: int, config: StreamConfig, limit: int
    ) -> PendingChunk | None:
        state = self.spool.state
        if state.producer_id < 0:
            identity = self._retrying(self.upstream.new_producer)
            if identity is None:
                return None
            state.producer_id, state.producer_epoch = identity
            self.spool.save_state()
        chunk = PendingChunk(
            start=start,
            end=start,
            topic=config.topic,
            lane=config.lane,
            partitioner=config.partitioner,
            compression=config.compression,
            acks=config.acks,
            partitions={},
            sticky=state.chunks,
            sequences={},
        )
        targets = self._targets(records, chunk)
        if targets is None:
            return None
        chunk.partitions = targets
        planned = plan(records, chunk, limit)
        chunk.end = planned.end
        chunk.sequences = {key: state.sequences.get(key, 0) for key in planned.records}
        with self.spool.lock:  # ``drop_oldest`` takes it too: no drop inside the chunk
            if max(state.skip_to, state.committed) > start:
                return None  # records at its start were dropped meanwhile: plan again
            state.pending = chunk
        self.spool.save_state()
        return chunk

    def _targets(self, records: list[Record], chunk: PendingChunk) -> dict[str, int] | None:
        """The partition count of every topic the records go to (asked of the brokers,
        which also make a declared lane's topic on first use); None if stopping."""
        wanted = sorted({target_of(r, chunk) for r in records})
        counts: dict[str, int] = {}
        for topic in wanted:
            count = self._retrying(partial(self.upstream.partitions, topic), give_up=True)
            if count is None:
                return None
            counts[topic] = count
        return counts

    def _retrying(self, call: Callable[[], T], *, give_up: bool = False) -> T | None:
        """``call()``, retried while it fails; None once stopping. With ``give_up``, a
        failure of ``GIVE_UP_CODES`` answers ``UNDELIVERABLE`` instead."""
        attempt = 0
        while not self._stop.is_set():
            try:
                return call()
            except MeridianError as error:
                self._note_error(error.code, str(error))
                if give_up and error.code in GIVE_UP_CODES:
                    self.stats.undeliverable_reason = self.stats.last_error
                    return UNDELIVERABLE  # type: ignore[return-value]
                attempt += 1
                self._stop.wait(self._backoff(attempt, error.code))
        return None

    # -- delivering the chunk in flight ---------------------------------------------------
    def _deliver(self) -> None:
        state = self.spool.state
        chunk = state.pending
        assert chunk is not None
        records = self.spool.read(chunk.start, chunk.end, 1 << 62)
        if len(records) != chunk.end - chunk.start:
            # Never commit a chunk whose records were not all read back: that would skip
            # them. (The drain loop logs this and tries again.)
            raise StorageError(
                f"spool {self.spool.directory}: read {len(records)} records of chunk "
                f"[{chunk.start}, {chunk.end})"
            )
        planned = plan(records, chunk, None)
        attempt = 0
        while not self._stop.is_set():
            batches = build_batches(planned, chunk, state.producer_id, state.producer_epoch)
            if not batches:
                self._commit(chunk, planned)
                return
            started = time.monotonic()
            outcomes = self.upstream.produce(
                list(batches.values()), acks=chunk.acks, timeout_s=SEND_TIMEOUT_S
            )
            self.stats.requests += 1
            SEND_SECONDS.labels(self.name).observe(time.monotonic() - started)
            throttle_ms = max((o.throttle_ms for o in outcomes.values()), default=0)
            if throttle_ms > 0:  # over the tenant's quota: the brokers ask for a pause
                self.stats.throttled_s += throttle_ms / 1000
                self._stop.wait(throttle_ms / 1000)
            failed = self._settle(batches, outcomes, chunk)
            if failed is None:
                continue
            attempt += 1
            self._stop.wait(self._backoff(attempt, failed))

    def _settle(
        self,
        batches: dict[str, PartitionBatch],
        outcomes: dict[tuple[str, int], Outcome],
        chunk: PendingChunk,
    ) -> int | None:
        """Mark the written batches; the code to back off for, or None to go on at once."""
        worst: int | None = None
        forgotten = False
        for key, batch in batches.items():
            outcome = outcomes.get((batch.topic, batch.partition))
            if outcome is None:
                worst = ErrorCode.UNKNOWN_SERVER_ERROR
                continue
            if outcome.ok:
                chunk.acked.append(key)
                self.stats.batches += 1
                self.stats.records_out += batch.count
                self.stats.bytes_out += len(batch.data)
                BATCH_RECORDS.labels(self.name).observe(batch.count)
                continue
            code = outcome.error
            self._note_error(code, outcome.message)
            if code == ErrorCode.UNKNOWN_PRODUCER_ID or self._out_of_order_too_long(code):
                forgotten = True
            elif code == ErrorCode.MESSAGE_TOO_LARGE:
                # The topic takes smaller batches than it did when the records were
                # taken (its limit was lowered): nothing of the batch was stored, and no
                # resend can succeed. Its records go to the dead-letter file.
                chunk.dead.append(key)
                self.stats.undeliverable_reason = self.stats.last_error
                continue
            worst = code if worst is None or not is_retriable(code) else worst
        if forgotten and self._all_refused(batches, outcomes, chunk):
            # Only once every batch not yet written was refused for its sequence: a batch
            # whose outcome is unknown (a timeout) might be stored, and under a new id
            # would be stored twice.
            self._new_producer(chunk)
            return ErrorCode.UNKNOWN_PRODUCER_ID
        if forgotten:
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        if any(key in chunk.dead for key in batches):
            self.spool.save_state()
            return ErrorCode.MESSAGE_TOO_LARGE
        if worst != ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            self._out_of_order_since = None
        return worst

    @staticmethod
    def _all_refused(
        batches: dict[str, PartitionBatch],
        outcomes: dict[tuple[str, int], Outcome],
        chunk: PendingChunk,
    ) -> bool:
        refused = (ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        for key, batch in batches.items():
            outcome = outcomes.get((batch.topic, batch.partition))
            if key in chunk.acked or key in chunk.dead:
                continue
            if outcome is None or outcome.error not in refused:
                return False
        return True

    def _out_of_order_too_long(self, code: int) -> bool:
        if code != ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            return False
        now = time.monotonic()
        if self._out_of_order_since is None:
            self._out_of_order_since = now
        if now - self._out_of_order_since < OUT_OF_ORDER_GIVE_UP_S:
            return False
        self._out_of_order_since = None
        return True

    def _new_producer(self, chunk: PendingChunk) -> None:
        """The brokers forgot our producer: a new id, sequences from 0, and only the
        batches not yet written are sent again (journaled before they are)."""
        state = self.spool.state
        identity = self._retrying(self.upstream.new_producer)
        if identity is None:
            return
        state.producer_id, state.producer_epoch = identity
        state.sequences = {}
        chunk.sequences = {k: 0 for k in chunk.sequences if k not in chunk.acked}
        self.spool.save_state()
        log.warning("stream %s: the brokers forgot its producer; now %s", self.name, identity)

    def _commit(self, chunk: PendingChunk, planned: Planned) -> None:
        dead = [r for key in (DEAD, *chunk.dead) for r in planned.records.get(key, ())]
        if dead:
            self.spool.dead_letter(dead, chunk, self.stats.undeliverable_reason)
            self.stats.undeliverable += len(dead)
        state = self.spool.state
        for key, base in chunk.sequences.items():
            if key in chunk.dead:
                continue  # never stored: the next batch reuses its sequence
            state.sequences[key] = (base + len(planned.records.get(key, ()))) & 0x7FFFFFFF
        state.committed = chunk.end
        state.pending = None
        state.chunks += 1
        self.spool.save_state()
        self.spool.drained(chunk.end)
        self.on_commit(chunk.end)

    def _note_error(self, code: int, message: str) -> None:
        self.stats.send_errors += 1
        self.stats.last_error = f"{_code_name(code)}: {message}"
        self.stats.last_error_at = time.time()
        log.info("stream %s: %s", self.name, self.stats.last_error)

    @staticmethod
    def _backoff(attempt: int, code: int) -> float:
        ceiling = BACKOFF_MAX_S if is_retriable(code) else 4 * BACKOFF_MAX_S
        delay: float = min(ceiling, BACKOFF_MIN_S * 2 ** min(attempt, 10))
        return delay * (0.5 + random.random() / 2)


def _code_name(code: int) -> str:
    try:
        return ErrorCode.Name(code)  # type: ignore[arg-type]
    except ValueError:
        return str(code)

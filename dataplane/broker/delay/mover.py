"""The leader of a timer partition moves its records to their topics when they are due.

Lifecycle of a ``Mover`` (one per timer partition this broker leads, at one leader
epoch; ``manager`` starts and stops them):

1. **Rebuild**: read the partition from its log start, decoding every record: a
   scheduled record enters the due-time index and the offset table (``index``); a move
   intent or a cancellation (``markers``) marks the offsets it names done. Only
   committed records (below the high watermark) are ever read, here and later; and the
   rebuild goes on until it has read the whole log the leader had when it took the
   lead. A new leader's high watermark may lag what was committed (a restarted broker
   starts from its checkpoint): everything committed is in its log, since it was in
   sync, and becomes visible as the followers catch up; an intent left unread would
   send its records a second time.
2. **Resolve**: the last move intent in the log may have been cut short by the previous
   leader's death. It is sent again exactly as it was (the producer id, epoch,
   sequences, batches and bytes it names), so each target keeps what already landed
   (its producer table answers the resend as a duplicate) and takes what did not.
3. **Run**: with a producer id of its own (new at each leadership), the mover reads
   what is newly committed, and in *rounds* takes the due records (at most
   ``ROUND_RECORDS`` / ``ROUND_BYTES``), writes the round's move intent, waits until it
   is committed, marks its records done, then sends each target partition its batches
   (``targets``; ``acks=all``) and retries each until the target acknowledges or
   refuses it for good. A round starts only once the previous one is acknowledged
   everywhere, so only the last intent can ever be in doubt.

Why exactly once: a record is sent only under a committed intent that names its
producer id, epoch and sequences. Before any leader sends, every earlier intent is
settled (by the previous rounds, or by step 2). A resend repeats the same sequences, so
a target that has the batch answers it as a duplicate, across its own failovers too (its
followers replicate its producer table). A deposed leader cannot commit a new intent,
so it sends nothing new; what it still has in flight is the last intent, which the new
leader resends with the same sequences.

What a target refuses for good (the topic deleted: unknown for ``MISSING_GRACE_S``; a
record over its size limit; a lane no longer declared) is dropped and counted; a
storage quota in excess is waited out (the records stay pending, and counted). A
cancellation (``cancel``) writes a cancel marker and is committed before it is
answered; it and a round exclude each other, so a record is either cancelled or moved.

The log start follows the first pending offset (every record below it is moved or
cancelled), never past the records of the last intent, so space is given back segment
by segment (a timer log has no retention of its own).

Thread safety: event-loop only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dataplane._gen.meridian.v1 import broker_pb2, delay_pb2
from dataplane.broker.delay.index import DueIndex, OffsetTable
from dataplane.broker.delay.markers import (
    CANCEL,
    MOVE,
    MarkerError,
    MoveIntent,
    TargetMove,
    decode_cancel,
    decode_move,
    encode_cancel,
    encode_move,
    marker_batch,
    marker_kind,
)
from dataplane.broker.delay.schedule import Scheduled, scheduled_of
from dataplane.broker.delay.targets import TargetWriter
from dataplane.broker.partitions import Partition
from dataplane.broker.producers import CACHED_BATCHES
from dataplane.delays import (
    DELAYED_FROM,
    DELIVER_AT,
    SCHEDULING_HEADERS,
    DelayedId,
    parse_deliver_at,
    without,
)
from dataplane.errors import ErrorCode, MeridianError, is_retriable
from dataplane.records import BatchBuilder, Record, decode_batches

log = logging.getLogger(__name__)
T = TypeVar("T")

READ_BYTES = 256 * 1024
ROUND_RECORDS = 4000
ROUND_BYTES = 3 * 1024 * 1024
BATCH_BYTES = 256 * 1024
MAX_TARGET_BATCHES = CACHED_BATCHES - 1  # a resend of them all is still recognised
IDLE_WAIT_S = 1.0
TRIM_INTERVAL_S = 5.0
MISSING_GRACE_S = 30.0
RETRY_BACKOFF_S = (0.05, 2.0)
# Refusals a mover waits out rather than drops: the records stay pending (and counted).
WAIT_OUT = frozenset({ErrorCode.QUOTA_EXCEEDED})


class DeposedError(Exception):
    """The partition is no longer led here at the mover's epoch (or was deleted)."""


@dataclass
class MoverCounts:
    """What the mover did since it started (its leadership)."""

    moved: int = 0
    cancelled: int = 0
    dropped: int = 0


@dataclass
class _Item:
    offset: int
    due: int
    record: Record
    scheduled: Scheduled


@dataclass
class _Plan:
    intent: MoveIntent
    payloads: dict[tuple[str, int], bytes]
    dues: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    batches: dict[tuple[str, int], list[list[_Item]]] = field(default_factory=dict)


@dataclass(frozen=True)
class MoverHooks:
    """What a mover reports and asks: ``moved(tenant, topic, lateness_ms list)``,
    ``dropped(tenant, reason, count)``, ``known_partitions(topic)`` (None: the cluster
    does not know the topic), ``new_producer_id()``."""

    moved: Callable[[str, str, list[int]], None]
    dropped: Callable[[str, str, int], None]
    known_partitions: Callable[[str], set[int] | None]
    new_producer_id: Callable[[], Awaitable[int]]


class Mover:
    def __init__(
        self,
        part: Partition,
        tenant: str,
        leader_epoch: int,
        *,
        run_io: Callable[[Callable[[], Any]], Awaitable[Any]],
        writer: TargetWriter,
        hooks: MoverHooks,
        clock_ms: Callable[[], int],
    ) -> None:
        self.part = part
        self.tenant = tenant
        self.leader_epoch = leader_epoch
        self._io = run_io
        self._writer = writer
        self._hooks = hooks
        self._clock_ms = clock_ms
        self.table = OffsetTable(part.log.log_start_offset)
        self.index = DueIndex(clock_ms())
        self.pending = 0
        self.pending_bytes = 0
        self.by_topic: dict[str, int] = {}
        self.counts = MoverCounts()
        self.ready = asyncio.Event()
        self._lock = asyncio.Lock()
        self._ingested = self.table.base
        self._last_intent: MoveIntent | None = None
        self._round_floor: int | None = None
        self._producer_id = -1
        self._sequences: dict[tuple[str, int], int] = {}
        self._missing_since: dict[tuple[str, int], float] = {}
        self._last_trim = time.monotonic()

    # -- running ---------------------------------------------------------------------------
    async def run(self) -> None:
        """Rebuild, resolve, then move until deposed (returns) or cancelled."""
        try:
            await self._catch_up(self.part.log.log_end_offset)
            if self._last_intent is not None:
                plan = await self._plan_of(self._last_intent)
                landed = await self._deliver(self._last_intent, plan, resend=True)
                log.info(
                    "timer %s-%d: the last intent resent to %d partitions, %d of which had it",
                    self.part.topic, self.part.index, len(plan.payloads), landed,
                )  # fmt: skip
            self._producer_id = await self._hooks.new_producer_id()
            self.ready.set()
            log.info(
                "timer %s-%d led at epoch %d: %d pending, producer %d",
                self.part.topic, self.part.index, self.leader_epoch, self.pending,
                self._producer_id,
            )  # fmt: skip
            while True:
                await self._step()
        except DeposedError:
            log.info("timer %s-%d: no longer led here", self.part.topic, self.part.index)

    async def _step(self) -> None:
        self._check_leader()
        await self._ingest_new()
        now = self._clock_ms()
        due = self.index.pop_due(now, ROUND_RECORDS)
        if due:
            await self._round([(d, o) for d, o in due if not self.table.done(o)])
            return
        if time.monotonic() - self._last_trim >= TRIM_INTERVAL_S:
            await self._trim()
        upcoming = self.index.next_due()
        wait = IDLE_WAIT_S if upcoming is None else (upcoming - now) / 1000
        await asyncio.wait([self.part.changed()], timeout=min(IDLE_WAIT_S, max(0.001, wait)))

    async def _catch_up(self, end: int) -> None:
        """Read until everything below ``end`` is read (committed)."""
        while True:
            self._check_leader()
            await self._ingest_new()
            if self._ingested >= end:
                return
            await asyncio.wait([self.part.changed()], timeout=IDLE_WAIT_S)

    def _check_leader(self) -> None:
        state = self.part.replica
        if self.part.deleted or (
            state is not None and (not state.is_leader or state.leader_epoch != self.leader_epoch)
        ):
            raise DeposedError

    # -- reading the log -----------------------------------------------------------------
    async def _ingest_new(self) -> None:
        """Take in every committed record past what was read (see step 1)."""
        log_ = self.part.log
        while self._ingested < log_.high_watermark:
            start = self._ingested
            result = await self._io(functools.partial(log_.read, start, READ_BYTES))
            if result.next_offset <= start:
                return
            self.table.extend_to(result.next_offset)
            for record in decode_batches(result.data):
                if record.offset >= start:
                    self._ingest(record)
            self._ingested = result.next_offset

    def _ingest(self, record: Record) -> None:
        kind = marker_kind(record)
        if kind is None:
            self._ingest_scheduled(record)
            return
        self.table.finish(record.offset)
        try:
            if kind == MOVE:
                intent = decode_move(record.value or b"")
                for offset in intent.offsets():
                    self._finish(offset)
                self._last_intent = intent
                self._round_floor = min(intent.offsets(), default=None)
            elif kind == CANCEL:
                for offset in decode_cancel(record.value or b""):
                    self._finish(offset, cancelled=True)
        except MarkerError as exc:  # written by a leader of this partition: never expected
            log.error("timer %s-%d: marker at %d: %s", self.part.topic, self.part.index,
                      record.offset, exc)  # fmt: skip

    def _ingest_scheduled(self, record: Record) -> None:
        try:
            scheduled = scheduled_of(record)
        except MeridianError as exc:  # checked when scheduled: never expected
            log.error("timer %s-%d: record %d is not a scheduled record: %s",
                      self.part.topic, self.part.index, record.offset, exc)  # fmt: skip
            self.table.finish(record.offset)
            return
        size = _size(record)
        self.table.record(record.offset, scheduled.topic, size)
        self.index.add(scheduled.deliver_at, record.offset)
        self.pending += 1
        self.pending_bytes += size
        self.by_topic[scheduled.topic] = self.by_topic.get(scheduled.topic, 0) + 1

    def _finish(self, offset: int, *, cancelled: bool = False) -> bool:
        """Mark a scheduled record moved (or cancelled); False if it already was done."""
        if not self.table.covers(offset) or not self.table.finish(offset, cancelled=cancelled):
            return False
        topic = self.table.topic_of(offset)
        if topic is None:
            return True
        self.pending -= 1
        self.pending_bytes -= self.table.size_of(offset)
        left = self.by_topic.get(topic, 1) - 1
        if left:
            self.by_topic[topic] = left
        else:
            self.by_topic.pop(topic, None)
        return True

    async def _records(self, offsets: Iterable[int]) -> dict[int, Record]:
        """The records at ``offsets`` (committed ones), reading each batch once."""
        wanted = sorted(set(offsets))
        found: dict[int, Record] = {}
        at = 0
        while at < len(wanted):
            start = wanted[at]
            result = await self._io(functools.partial(self.part.log.read, start, READ_BYTES))
            if result.next_offset <= start:
                break
            for record in decode_batches(result.data):
                found[record.offset] = record
            while at < len(wanted) and wanted[at] < result.next_offset:
                at += 1
        return {offset: found[offset] for offset in wanted if offset in found}

    # -- moving --------------------------------------------------------------------------
    async def _round(self, due: list[tuple[int, int]]) -> None:
        async with self._lock:
            self._check_leader()
            due = [(d, o) for d, o in due if not self.table.done(o)]
            if not due:
                return
            records = await self._records(o for _, o in due)
            items = []
            for deliver_at, offset in due:
                record = records.get(offset)
                if record is None:  # below the log start: never expected
                    self._finish(offset)
                    continue
                items.append(_Item(offset, deliver_at, record, scheduled_of(record)))
            plan, left = self._plan(items)
            for item in left:  # past this round's bounds: the next round takes them
                self.index.add(item.due, item.offset)
            if not plan.payloads:
                return
            await self._append_marker(MOVE, encode_move(plan.intent))
            for offset in plan.intent.offsets():
                self._finish(offset)
            self._last_intent = plan.intent
            self._round_floor = min(plan.intent.offsets())
        await self._deliver(plan.intent, plan)

    def _plan(self, items: list[_Item]) -> tuple[_Plan, list[_Item]]:
        """The round's batches per target partition, in due order, within the bounds."""
        groups: dict[tuple[str, int], list[_Item]] = {}
        for item in items:
            groups.setdefault((item.scheduled.topic, item.scheduled.partition), []).append(item)
        targets, payloads, dues, left = [], {}, {}, []
        planned: dict[tuple[str, int], list[list[_Item]]] = {}
        total = 0
        for tp, group in groups.items():
            batches, taken = _split(group, total)
            left += group[taken:]
            if not taken:
                continue
            base = self._sequences.get(tp, 0)
            counts = tuple(len(b) for b in batches)
            offsets = tuple(item.offset for b in batches for item in b)
            targets.append(TargetMove(tp[0], tp[1], base, counts, offsets))
            payloads[tp] = self._encode(batches, tp, self._producer_id, base)
            dues[tp] = [item.due for b in batches for item in b]
            planned[tp] = batches
            self._sequences[tp] = (base + len(offsets)) % 2**31
            total += len(payloads[tp])
        intent = MoveIntent(self._producer_id, 0, tuple(targets))
        return _Plan(intent, payloads, dues, planned), left

    def _encode(
        self, batches: list[list[_Item]], tp: tuple[str, int], producer_id: int, base: int
    ) -> bytes:
        out = b""
        for batch in batches:
            builder = BatchBuilder(producer_id=producer_id, producer_epoch=0, base_sequence=base)
            for item in batch:
                record = item.record
                headers = without(record.headers, SCHEDULING_HEADERS)
                headers.append((DELAYED_FROM, str(self._id_of(tp[0], item.offset)).encode()))
                timestamp = max(item.due, record.timestamp)
                builder.append(record.value, key=record.key, timestamp=timestamp, headers=headers)
            out += builder.build()
            base = (base + len(batch)) % 2**31
        return out

    def _id_of(self, topic: str, offset: int) -> DelayedId:
        return DelayedId(topic, self.part.index, offset)

    async def _plan_of(self, intent: MoveIntent) -> _Plan:
        """The batches ``intent`` named, rebuilt byte for byte (step 2)."""
        records = await self._records(intent.offsets())
        payloads, dues = {}, {}
        for target in intent.targets:
            tp = (target.topic, target.partition)
            items, at = [], 0
            for offset in target.offsets:
                record = records.get(offset)
                if record is None:
                    continue
                scheduled = scheduled_of(record)
                items.append(_Item(offset, scheduled.deliver_at, record, scheduled))
            if len(items) != len(target.offsets):
                log.error("timer %s-%d: records of the last intent are gone; %s-%d not resent",
                          self.part.topic, self.part.index, *tp)  # fmt: skip
                continue
            batches = []
            for count in target.batch_counts:
                batches.append(items[at : at + count])
                at += count
            payloads[tp] = self._encode(batches, tp, intent.producer_id, target.base_sequence)
            dues[tp] = [item.due for item in items]
        return _Plan(intent, payloads, dues)

    async def _deliver(self, intent: MoveIntent, plan: _Plan, *, resend: bool = False) -> int:
        """Send every target its batches until it keeps or refuses them for good
        (``resend``: the last intent of a previous leader, step 2: not counted as moved
        here, since the previous leader may have counted it); returns how many targets
        answered that they had them already."""
        duplicates = 0
        pending = dict(plan.payloads)
        bases = {(t.topic, t.partition): t.base_sequence for t in intent.targets}
        backoff = RETRY_BACKOFF_S[0]
        restarted: set[tuple[str, int]] = set()
        while pending:
            results = await self._writer.produce(pending, acks=-1)
            for tp, result in results.items():
                verdict = self._verdict(tp, result)
                if verdict == "unknown_producer" and not resend and tp not in restarted:
                    # This leadership's own producer, unknown to a target made anew since
                    # its first batch: start the target's sequences again.
                    pending[tp] = self._encode(plan.batches[tp], tp, self._producer_id, 0)
                    self._sequences[tp] = len(plan.dues[tp])
                    restarted.add(tp)
                    continue
                if verdict is None:
                    continue  # try again
                del pending[tp]
                self._missing_since.pop(tp, None)
                count = len(plan.dues.get(tp, ()))
                if verdict == "":
                    duplicates += result.duplicate
                    if not resend:
                        self.counts.moved += count
                        now = self._clock_ms()
                        self._hooks.moved(self.tenant, tp[0], [now - d for d in plan.dues[tp]])
                    continue
                self.counts.dropped += count
                self._hooks.dropped(self.tenant, verdict, count)
                log.warning("timer %s-%d: %d records for %s-%d dropped: %s",
                            self.part.topic, self.part.index, count, *tp,
                            result.error_message or verdict)  # fmt: skip
                if intent.producer_id == self._producer_id and tp in bases:
                    self._sequences[tp] = bases[tp]  # nothing of it was stored
            if pending:
                self._check_leader()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RETRY_BACKOFF_S[1])
        return duplicates

    def _verdict(
        self, tp: tuple[str, int], result: broker_pb2.PartitionProduceResult
    ) -> str | None:
        """An empty string: delivered; a reason to drop; or None: try again."""
        code = result.error
        if code == ErrorCode.NONE:
            return ""
        if code == ErrorCode.UNKNOWN_PRODUCER_ID:
            return "unknown_producer"  # the target was made anew since the producer's start
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            return "in_doubt"
        if not is_retriable(code) and code not in WAIT_OUT:
            return ErrorCode.Name(code).lower()
        known = self._hooks.known_partitions(tp[0])
        if known is not None and tp[1] in known:
            self._missing_since.pop(tp, None)
            return None
        since = self._missing_since.setdefault(tp, time.monotonic())
        return "topic_missing" if time.monotonic() - since >= MISSING_GRACE_S else None

    async def _append_marker(self, kind: bytes, value: bytes) -> None:
        """Append a marker and wait until it is committed (``DeposedError`` if the
        leadership moves first)."""
        try:
            info = await self.part.submit(marker_batch(kind, value, self._clock_ms()))
        except MeridianError as exc:
            if exc.code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE):
                raise DeposedError from exc
            raise
        while self.part.log.high_watermark <= info.last_offset:
            self._check_leader()
            await asyncio.wait([self.part.changed()], timeout=IDLE_WAIT_S)
        self._check_leader()

    async def _trim(self) -> None:
        """Let the log start follow the first pending record (see the module docstring)."""
        self._last_trim = time.monotonic()
        floor = self.table.low_water()
        if self._round_floor is not None:
            floor = min(floor, self._round_floor)
        log_ = self.part.log
        if floor <= log_.log_start_offset:
            return
        start = await self._io(lambda: log_.advance_log_start_offset(floor))
        self.table.trim(start)

    # -- cancel, list, describe ------------------------------------------------------------
    async def cancel(
        self, delayed: DelayedId, wait_s: float = 5.0
    ) -> delay_pb2.CancelDelayedResponse:
        """Cancel the scheduled record ``delayed`` names (see ``delay.proto``)."""
        await asyncio.wait_for(self.ready.wait(), wait_s)
        offset = delayed.offset
        deadline = time.monotonic() + wait_s
        while self._ingested <= offset < self.part.log.log_end_offset:
            if time.monotonic() >= deadline:  # scheduled, not yet replicated
                raise MeridianError(
                    ErrorCode.REQUEST_TIMED_OUT, f"{delayed} is not committed yet: retry"
                )
            await asyncio.wait([self.part.changed()], timeout=0.1)
        async with self._lock:
            self._check_leader()
            answer = self._cancel_answer(delayed)
            if answer is not None and answer.error:
                return answer
            if answer is None:
                await self._append_marker(CANCEL, encode_cancel([offset]))
                if self._finish(offset, cancelled=True):
                    self.counts.cancelled += 1
        records = await self._records([offset])
        due = _deliver_at(records.get(offset))
        return delay_pb2.CancelDelayedResponse(deliver_at_ms=due)

    def _cancel_answer(self, delayed: DelayedId) -> delay_pb2.CancelDelayedResponse | None:
        """The answer without cancelling anything, or None to cancel."""
        offset = delayed.offset
        not_found = delay_pb2.CancelDelayedResponse(
            error=ErrorCode.DELAYED_RECORD_NOT_FOUND,
            error_message=f"no scheduled record {delayed} is pending",
        )
        if offset >= self._ingested or not self.table.covers(offset):
            return not_found
        if self.table.topic_of(offset) != delayed.topic:
            return not_found
        if self.table.cancelled(offset):
            return delay_pb2.CancelDelayedResponse()
        if self.table.done(offset):
            return delay_pb2.CancelDelayedResponse(
                error=ErrorCode.DELAYED_RECORD_DELIVERED,
                error_message=f"{delayed} was already delivered",
            )
        return None

    async def scheduled(
        self, topic: str, after: tuple[int, int], limit: int, value_bytes: int
    ) -> list[delay_pb2.DelayedRecord]:
        """Pending records by (due, offset) strictly after ``after``."""
        await asyncio.wait_for(self.ready.wait(), 5.0)
        chosen: list[tuple[int, int]] = []
        for entry in self.index.entries():
            if entry <= after or self.table.done(entry[1]):
                continue
            if topic and self.table.topic_of(entry[1]) != topic:
                continue
            chosen.append(entry)
            if len(chosen) >= limit:
                break
        records = await self._records(o for _, o in chosen)
        out = []
        for due, offset in chosen:
            record = records.get(offset)
            if record is not None:
                out.append(self._listed(record, due, value_bytes))
        return out

    def _listed(self, record: Record, due: int, value_bytes: int) -> delay_pb2.DelayedRecord:
        scheduled = scheduled_of(record)
        value = record.value
        listed = delay_pb2.DelayedRecord(
            id=str(self._id_of(scheduled.topic, record.offset)),
            topic=scheduled.topic,
            partition=scheduled.partition,
            deliver_at_ms=due,
            timestamp=record.timestamp,
            value_size=-1 if value is None else len(value),
            headers=[
                delay_pb2.DelayedHeader(key=k, value=v)
                for k, v in without(record.headers, SCHEDULING_HEADERS)
            ],
        )
        if record.key is not None:
            listed.key = record.key
        if value is not None and value_bytes > 0:
            listed.value = value[:value_bytes]
        return listed

    def _next_pending_due(self) -> int | None:
        """The due time of the earliest record still pending: a cancelled record keeps its
        index entry until due, so the index's own earliest may be one no longer held."""
        for due, offset in self.index.entries():
            if not self.table.done(offset):
                return due
        return None

    def describe(self) -> delay_pb2.TimerPartitionState:
        upcoming = self._next_pending_due() if self.pending else None
        return delay_pb2.TimerPartitionState(
            tenant=self.tenant,
            partition=self.part.index,
            pending_records=self.pending,
            pending_bytes=self.pending_bytes,
            next_deliver_at_ms=-1 if upcoming is None else upcoming,
            moved_records=self.counts.moved,
            cancelled_records=self.counts.cancelled,
            dropped_records=self.counts.dropped,
            ready=self.ready.is_set(),
            topics=[
                delay_pb2.PendingByTopic(topic=t, records=n)
                for t, n in sorted(self.by_topic.items())
            ],
        )


def _split(group: list[_Item], total: int) -> tuple[list[list[_Item]], int]:
    """The batches of one target within a round's bounds, and how many items they take."""
    batches: list[list[_Item]] = []
    size = 0
    taken = 0
    for item in group:
        record_size = _size(item.record) + 64
        if total + record_size > ROUND_BYTES and (batches or total):
            break
        if not batches or (size + record_size > BATCH_BYTES and batches[-1]):
            if len(batches) == MAX_TARGET_BATCHES:
                break
            batches.append([])
            size = 0
        batches[-1].append(item)
        size += record_size
        total += record_size
        taken += 1
    return batches, taken


def _size(record: Record) -> int:
    size = len(record.key or b"") + len(record.value or b"")
    for key, value in record.headers:
        size += len(key) + len(value or b"")
    return size


def _deliver_at(record: Record | None) -> int:
    if record is None:
        return -1
    for key, value in record.headers:
        if key == DELIVER_AT:
            return parse_deliver_at(value)
    return -1

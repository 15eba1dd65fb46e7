"""The leader of a timer partition moves its records to their topics when they are due.

Lifecycle of a ``Mover`` (one per timer partition this broker leads, at one leader
epoch; ``manager`` starts and stops them):

1. **Rebuild**: read the partition from its log start, decoding every record: a
   scheduled record enters the due-time index and the offset table (``index``); a move
   intent or a cancellation (``markers``) marks the offsets it names done, a requeue
   makes them pending again. Only committed records (below the high watermark) are ever
   read, here and later; and the rebuild goes on until it has read the whole log the
   leader had when it took the lead (its end read under the log's append lock, so an
   append under way then is in it, and any later one passed the leader epoch check
   below). A new leader's high watermark may lag what was committed (a restarted broker
   starts from its checkpoint): everything committed is in its log, since it was in
   sync, and becomes visible as the followers catch up; an intent left unread would send
   its records a second time.
2. **Resolve**: the last move intent in the log (unless a requeue after it says it was
   settled) may have been cut short by the previous leader's death. It is delivered
   again exactly as it was (the producer id, epoch, sequences, batches and bytes it
   names, see *Delivering*), so each target keeps what already landed and takes what
   did not.
3. **Run**: with a producer id of its own (see *Producer ids*), the mover reads what is
   newly committed, and in *rounds* takes the due records (at most ``ROUND_RECORDS`` /
   ``ROUND_BYTES``), plans each target partition's batches (within the target topic's
   ``max_message_bytes``, at most ``MAX_TARGET_BATCHES``), writes the round's move intent,
   waits until it is committed, marks its records done, then delivers it. A round
   starts only once the previous one is settled everywhere, so only the last intent can
   ever be in doubt.

**Delivering an intent.** Each target partition gets its batches one at a time, in
order: a batch is sent once the one before it is acknowledged (every target's next batch
goes in one request per leader), and is sent again, the same bytes, until the target
acknowledges it (a duplicate answer included) or refuses it:

- for good (the topic deleted: unknown to the cluster for ``MISSING_GRACE_S``; a lane
  no longer declared; ...): that batch and the target's later ones are dropped and
  counted;
- as too large (``MESSAGE_TOO_LARGE``): a batch of one record is dropped and counted;
  the records of a larger one are requeued, and that topic's batches are made smaller;
  the target's later batches are requeued either way;
- as out of the producer's sequence (``OUT_OF_ORDER_SEQUENCE_NUMBER``,
  ``UNKNOWN_PRODUCER_ID``, ``INVALID_PRODUCER_EPOCH``: the target lost what it knew of
  the producer, or was made anew): that batch and the later ones are requeued, and a
  live leader takes a new producer id;
- a storage quota in excess is waited out (the records stay pending, and counted);
  retriable refusals are retried with backoff.

A refused batch was not stored (a target checks under its append lock), and the target's
later batches were not sent: so what is requeued is exactly what the target does not
hold. A **requeue** marker names those records; once it is committed they are pending
again, and a later round moves them. Since a target's batches go one at a time, a new
leader delivering the last intent again finds, batch after batch, either its original
(answered as a duplicate: a target remembers the last ``CACHED_BATCHES`` batches of a
producer, and an intent holds at most ``MAX_TARGET_BATCHES`` per target) or a target
expecting exactly it, however much of what the target's old leader appended its
followers had copied.

**Why exactly once**: a record is sent only under a committed intent that names its
producer id, epoch and sequences. Before any leader sends, every earlier intent is
settled (by the previous rounds, or by step 2). A resend repeats the same sequences, so
a target that has a batch answers it as a duplicate, across its own failovers too (its
followers replicate its producer table). A deposed leader cannot commit a new intent,
so it sends nothing new; what it still has in flight is the last intent, which the new
leader resends with the same sequences.

**Producer ids**: a mover's producer id lies above every client's (``MOVER_PRODUCER_ID``:
client ids carry a broker id under 2**20 in bits 40 and up) and names its timer
partition (12 bits) and a 48-bit counter: one more than the counter of the last intent
in the log, and at least the milliseconds since 2024. So no id is used twice by the
movers of a timer log, whatever any broker's disk held before (a broker rebuilt on an
empty disk included); and the targets of a timer log, its tenant's topics, receive no
other timer log's records.

**Appends**: the mover's own records (intents, requeues, cancellations, carried records)
are appended to the log directly, under its append lock, refused unless the partition
is still led here at the mover's leader epoch, so an append a stopped mover had under
way cannot land under a later leadership; each is waited for until committed.

**Cancel** (``cancel``) writes a cancel marker and is committed before it is answered; it
and a round exclude each other, so a record is either cancelled or moved. Cancelling a
record moved or cancelled answers so while the offset table still covers it; once the
log start passed it, its id names no pending record (``DELAYED_RECORD_NOT_FOUND``).

**Space**: every ``TRIM_INTERVAL_S``, between two rounds however busy the mover is, the
log start follows the first pending offset (every record below it is moved or
cancelled), so space is given back segment by segment (a timer log has no retention of
its own). It passes the records of the last intent only once a requeue after it says it
was settled (when nothing else does, a requeue naming no record: a new leader rebuilt
from past them has nothing to resend). A record pending long would hold
the log start back, and with it every record after it (disk, the offset table, what a
new leader reads); so when more than ``CARRY_SPAN`` offsets lie between the first
pending record and the end and at most one in ``CARRY_DENSITY`` of them is pending, the
pending records at the start are *carried forward*: appended again at the end with
``x-delay-origin`` naming the offset their id names (ids do not change). A carried copy
replaces its original when it is read, committed (the original is done from then on; a
copy whose original was moved or cancelled meanwhile is void): by the mover that carried
it before it lets a round, cancel or listing see the records, and by a new leader's
rebuild the same way. So a record and its copy are never both pending, nor neither,
across failover too. The table then spans at most
``CARRY_SPAN`` offsets, or ``CARRY_DENSITY`` per pending record.

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
    REQUEUE,
    MarkerError,
    MoveIntent,
    Requeued,
    TargetMove,
    decode_cancel,
    decode_move,
    decode_requeue,
    encode_cancel,
    encode_move,
    encode_requeue,
    marker_batch,
    marker_kind,
)
from dataplane.broker.delay.schedule import Scheduled, delivered_size, origin_of, scheduled_of
from dataplane.broker.delay.targets import TargetWriter
from dataplane.broker.partitions import Partition
from dataplane.broker.producers import CACHED_BATCHES
from dataplane.delays import DELAY_ORIGIN, DELAYED_FROM, NOT_DELIVERED, DelayedId, without
from dataplane.errors import ErrorCode, MeridianError, is_retriable
from dataplane.records import HEADER_SIZE, BatchBuilder, Record, decode_batches
from dataplane.storage.errors import LogClosedError, OffsetOutOfRangeError
from dataplane.storage.log import AppendInfo, PartitionLog

log = logging.getLogger(__name__)
T = TypeVar("T")

READ_BYTES = 256 * 1024
ROUND_RECORDS = 4000
ROUND_BYTES = 3 * 1024 * 1024
BATCH_BYTES = 256 * 1024
MIN_BATCH_BYTES = 1024
MAX_TARGET_BATCHES = CACHED_BATCHES - 1  # a resend of them all is still recognised
IDLE_WAIT_S = 1.0
TRIM_INTERVAL_S = 5.0
MISSING_GRACE_S = 30.0
RETRY_BACKOFF_S = (0.05, 2.0)
LIST_YIELD_EVERY = 2048  # a listing gives the loop back after this many entries
CARRY_SPAN = 1 << 20
CARRY_DENSITY = 16
CARRY_PASSES = 8  # of ROUND_RECORDS / ROUND_BYTES each, at most, between two rounds
# Refusals a mover waits out rather than drops: the records stay pending (and counted).
WAIT_OUT = frozenset({ErrorCode.QUOTA_EXCEEDED})
# Refusals saying the target does not follow the producer's sequence as the mover does.
SEQUENCE_REFUSALS = frozenset(
    {
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.UNKNOWN_PRODUCER_ID,
        ErrorCode.INVALID_PRODUCER_EPOCH,
    }
)
STORED, TOO_LARGE, REQUEUED = "", "message_too_large", "requeue"

MOVER_PRODUCER_ID = 1 << 61
PID_PARTITION_BITS = 12
PID_COUNTER_BITS = 48
PID_EPOCH_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z


def mover_producer_id(partition: int, counter: int) -> int:
    """The producer id of counter ``counter`` of timer partition ``partition``."""
    if not 0 <= partition < 1 << PID_PARTITION_BITS or not 0 <= counter < 1 << PID_COUNTER_BITS:
        raise ValueError(f"no mover producer id for partition {partition}, counter {counter}")
    return MOVER_PRODUCER_ID | partition << PID_COUNTER_BITS | counter


def mover_counter(producer_id: int, partition: int) -> int | None:
    """The counter of ``producer_id`` when it is a mover's of ``partition`` (else None)."""
    if producer_id >> (PID_PARTITION_BITS + PID_COUNTER_BITS) != MOVER_PRODUCER_ID >> (
        PID_PARTITION_BITS + PID_COUNTER_BITS
    ):
        return None
    if producer_id >> PID_COUNTER_BITS & ((1 << PID_PARTITION_BITS) - 1) != partition:
        return None
    return producer_id & ((1 << PID_COUNTER_BITS) - 1)


class DeposedError(Exception):
    """The partition is no longer led here at the mover's epoch (or was deleted)."""


@dataclass
class MoverCounts:
    """What the mover did since it started (its leadership)."""

    moved: int = 0
    cancelled: int = 0
    dropped: int = 0
    requeued: int = 0
    carried: int = 0


@dataclass
class _Item:
    offset: int  # where the record is now
    id_offset: int  # the offset its id names (where it was first scheduled)
    due: int
    record: Record
    scheduled: Scheduled
    size: int  # bytes it takes in a delivered batch (at most)

    @property
    def tp(self) -> tuple[str, int]:
        return self.scheduled.topic, self.scheduled.partition


@dataclass
class _Target:
    """One target partition's batches of an intent, and how far their delivery got."""

    tp: tuple[str, int]
    batches: list[list[_Item]]
    payloads: list[bytes]
    bases: list[int]  # the base sequence of each batch
    sent: int = 0  # batches acknowledged


@dataclass
class _Plan:
    intent: MoveIntent
    targets: list[_Target] = field(default_factory=list)


@dataclass(frozen=True)
class MoverHooks:
    """What a mover reports and asks: ``moved(tenant, topic, lateness_ms list)``,
    ``dropped(tenant, reason, count)``, ``known_partitions(topic)`` (None: the cluster
    does not know the topic), ``message_limit(topic, partition)`` (the largest batch the
    topic stores, None: not known here)."""

    moved: Callable[[str, str, list[int]], None]
    dropped: Callable[[str, str, int], None]
    known_partitions: Callable[[str], set[int] | None]
    message_limit: Callable[[str, int], int | None]


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
        self._unsettled: list[MoveIntent] = []
        self._round_floor: int | None = None
        self._producer_id = -1
        self._pid_counter = -1
        self._own_pids: set[int] = set()
        self._own_markers: set[int] = set()  # markers written here and not read back yet
        self._sequences: dict[tuple[str, int], int] = {}
        self._limits: dict[str, int] = {}  # batch sizes learnt from targets' refusals
        self._carried: dict[int, int] = {}  # id offset -> where a carried record is now
        self._missing_since: dict[tuple[str, int], float] = {}
        self._last_trim = time.monotonic()

    # -- running ---------------------------------------------------------------------------
    async def run(self) -> None:
        """Rebuild, resolve, then move until deposed (returns) or cancelled."""
        try:
            await self._catch_up(await self._io(self._settled_end))
            if self._last_intent is not None:
                await self._resolve(self._last_intent)
            self._take_producer_id()
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

    def _settled_end(self) -> int:
        """The log end once no append is under way (see step 1; blocking)."""
        with self.part.log.append_lock():
            return self.part.log.log_end_offset

    async def _step(self) -> None:
        self._check_leader()
        await self._ingest_new()
        while self._unsettled:
            await self._resolve(self._unsettled.pop(0))
        if time.monotonic() - self._last_trim >= TRIM_INTERVAL_S:  # between rounds, however busy
            passes = 0
            while passes < CARRY_PASSES and await self._carry():
                passes += 1
            await self._trim()
        now = self._clock_ms()
        due = self.index.pop_due(now, ROUND_RECORDS)
        if due:
            await self._round(due)
            return
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

    def _take_producer_id(self) -> None:
        """A producer id never used by a mover of this timer partition (see the module
        docstring); its sequences start at 0 everywhere."""
        counter = max(self._pid_counter + 1, self._clock_ms() - PID_EPOCH_MS)
        self._pid_counter = counter
        self._producer_id = mover_producer_id(self.part.index, counter)
        self._own_pids.add(self._producer_id)
        self._sequences = {}

    def _current(self, id_offset: int) -> int:
        """Where the record whose id names ``id_offset`` is now (carried forward or not)."""
        return self._carried.get(id_offset, id_offset)

    # -- reading the log -----------------------------------------------------------------
    async def _ingest_new(self) -> None:
        """Take in every committed record past what was read (see step 1)."""
        log_ = self.part.log
        while self._ingested < log_.high_watermark:
            start = self._ingested
            next_offset, records = await self._io(
                functools.partial(_read_from, log_, start, READ_BYTES)
            )
            if next_offset <= start:
                return
            self.table.extend_to(next_offset)
            for record in records:
                self._ingest(record)
            self._ingested = next_offset

    def _ingest(self, record: Record) -> None:
        kind = marker_kind(record)
        if kind is None:
            self._ingest_scheduled(record)
            return
        self.table.finish(record.offset)
        if record.offset in self._own_markers:  # applied when written
            self._own_markers.discard(record.offset)
            return
        try:
            if kind == MOVE:
                self._ingest_move(decode_move(record.value or b""))
            elif kind == REQUEUE:
                for entry in decode_requeue(record.value or b""):
                    self._unfinish(entry)
                # A requeue (none at all: a mark) follows a settled intent.
                self._last_intent = None
                self._round_floor = None
            elif kind == CANCEL:
                for offset in decode_cancel(record.value or b""):
                    self._finish(offset, cancelled=True)
        except MarkerError as exc:  # written by a leader of this partition: never expected
            log.error("timer %s-%d: marker at %d: %s", self.part.topic, self.part.index,
                      record.offset, exc)  # fmt: skip

    def _ingest_move(self, intent: MoveIntent) -> None:
        for offset in intent.offsets():
            self._finish(offset)
        self._round_floor = min(intent.offsets(), default=None)
        counter = mover_counter(intent.producer_id, self.part.index)
        if counter is not None:
            self._pid_counter = max(self._pid_counter, counter)
        if not self.ready.is_set():
            self._last_intent = intent
        else:
            # Not this mover's (its own are skipped): one an earlier leadership had under
            # way. The fenced appends and the rebuild's end rule it out; were it ever
            # read, it is delivered before the next round, under a producer id past its.
            log.error("timer %s-%d: an intent of producer %d read after the rebuild",
                      self.part.topic, self.part.index, intent.producer_id)  # fmt: skip
            self._unsettled.append(intent)
            self._take_producer_id()

    def _ingest_scheduled(self, record: Record) -> None:
        try:
            scheduled = scheduled_of(record)
            origin = origin_of(record)
        except MeridianError as exc:  # checked when scheduled: never expected
            log.error("timer %s-%d: record %d is not a scheduled record: %s",
                      self.part.topic, self.part.index, record.offset, exc)  # fmt: skip
            self.table.finish(record.offset)
            return
        indexed = False
        if origin is not None:
            replaced = self._current(origin)
            if replaced != record.offset:  # a copy, carried by this leadership or another
                if self.table.covers(replaced) and self.table.done(replaced):
                    self.table.finish(record.offset)  # void: its original was moved meanwhile
                    return
                indexed = self.table.topic_of(replaced) is not None
                if self.table.covers(replaced):
                    self._finish(replaced)
                self._carried[origin] = record.offset
            else:
                indexed = True  # read twice: never expected; the index holds its entry
        size = _size(record)
        self.table.record(record.offset, scheduled.topic, size)
        if not indexed:
            self.index.add(scheduled.deliver_at, record.offset if origin is None else origin)
        self._count(scheduled.topic, size, 1)

    def _count(self, topic: str, size: int, sign: int) -> None:
        self.pending += sign
        self.pending_bytes += sign * size
        left = self.by_topic.get(topic, 0) + sign
        if left > 0:
            self.by_topic[topic] = left
        else:
            self.by_topic.pop(topic, None)

    def _finish(self, offset: int, *, cancelled: bool = False) -> bool:
        """Mark a scheduled record moved (or cancelled, or carried); False if it already
        was done."""
        if not self.table.covers(offset) or not self.table.finish(offset, cancelled=cancelled):
            return False
        topic = self.table.topic_of(offset)
        if topic is not None:
            self._count(topic, self.table.size_of(offset), -1)
        return True

    def _unfinish(self, entry: Requeued) -> None:
        """A requeued record is pending again (when it is still covered and done, and was
        not cancelled)."""
        offset = entry.offset
        table = self.table
        if not table.covers(offset) or not table.done(offset) or table.cancelled(offset):
            return
        topic = table.topic_of(offset)
        if topic is None or not table.unfinish(offset):
            return
        self._count(topic, table.size_of(offset), 1)
        self.index.add(entry.due, entry.id_offset)

    async def _records(self, offsets: Iterable[int]) -> dict[int, Record]:
        """The records at ``offsets`` (committed ones), reading only the batches that
        hold them, each once, on the I/O pool."""
        wanted = sorted(set(offsets))
        if not wanted:
            return {}
        return dict(await self._io(functools.partial(_read_at, self.part.log, wanted)))

    # -- moving --------------------------------------------------------------------------
    async def _round(self, due: list[tuple[int, int]]) -> None:
        async with self._lock:
            self._check_leader()
            # A requeued record may have a second entry (its first not yet popped then).
            current = {self._current(i): (d, i) for d, i in reversed(due)}
            found = [(d, i, o) for o, (d, i) in current.items() if self.table.covers(o)]
            found = [(d, i, o) for d, i, o in found if not self.table.done(o)]
            found.sort()
            if not found:
                return
            records = await self._records(o for _, _, o in found)
            items = []
            for deliver_at, id_offset, offset in found:
                record = records.get(offset)
                if record is None:  # below the log start: never expected
                    self._finish(offset)
                    continue
                items.append(self._item(offset, id_offset, deliver_at, record))
            plan, left = self._plan(items)
            for item in left:  # past this round's bounds: the next round takes them
                self.index.add(item.due, item.id_offset)
            if not plan.targets:
                return
            await self._append_marker(MOVE, encode_move(plan.intent))
            for offset in plan.intent.offsets():
                self._finish(offset)
            self._last_intent = plan.intent
            self._round_floor = min(plan.intent.offsets())
        await self._settle(plan, resend=False)

    def _item(self, offset: int, id_offset: int, due: int, record: Record) -> _Item:
        scheduled = scheduled_of(record)
        delayed_id = self._id_of(scheduled.topic, id_offset)
        return _Item(offset, id_offset, due, record, scheduled, delivered_size(record, delayed_id))

    def _batch_limit(self, tp: tuple[str, int]) -> int:
        limit = BATCH_BYTES
        for known in (self._limits.get(tp[0]), self._hooks.message_limit(*tp)):
            if known is not None and known > 0:
                limit = min(limit, known)
        return max(limit, HEADER_SIZE + 1)

    def _plan(self, items: list[_Item]) -> tuple[_Plan, list[_Item]]:
        """The round's batches per target partition, in due order, within the bounds."""
        groups: dict[tuple[str, int], list[_Item]] = {}
        for item in items:
            groups.setdefault(item.tp, []).append(item)
        moves, targets, left = [], [], []
        total = 0
        for tp, group in groups.items():
            batches, taken, total = _split(group, total, self._batch_limit(tp))
            left += group[taken:]
            if not taken:
                continue
            bases, sequence = [], self._sequences.get(tp, 0)
            for batch in batches:
                bases.append(sequence)
                sequence = (sequence + len(batch)) % 2**31
            moves.append(
                TargetMove(
                    tp[0],
                    tp[1],
                    bases[0],
                    tuple(len(b) for b in batches),
                    tuple(item.offset for b in batches for item in b),
                )
            )
            payloads = [
                self._encode(b, tp, self._producer_id, base)
                for b, base in zip(batches, bases, strict=True)
            ]
            targets.append(_Target(tp, batches, payloads, bases))
            self._sequences[tp] = sequence
        return _Plan(MoveIntent(self._producer_id, 0, tuple(moves)), targets), left

    def _encode(
        self, batch: list[_Item], tp: tuple[str, int], producer_id: int, base: int
    ) -> bytes:
        builder = BatchBuilder(producer_id=producer_id, producer_epoch=0, base_sequence=base)
        for item in batch:
            record = item.record
            headers = without(record.headers, NOT_DELIVERED)
            headers.append((DELAYED_FROM, str(self._id_of(tp[0], item.id_offset)).encode()))
            timestamp = max(item.due, record.timestamp)
            builder.append(record.value, key=record.key, timestamp=timestamp, headers=headers)
        return builder.build()

    def _id_of(self, topic: str, offset: int) -> DelayedId:
        return DelayedId(topic, self.part.index, offset)

    async def _plan_of(self, intent: MoveIntent) -> _Plan:
        """The batches ``intent`` named, rebuilt byte for byte (step 2)."""
        records = await self._records(intent.offsets())
        plan = _Plan(intent)
        for target in intent.targets:
            tp = (target.topic, target.partition)
            items = []
            for offset in target.offsets:
                record = records.get(offset)
                if record is None:
                    break
                scheduled = scheduled_of(record)
                origin = origin_of(record)
                items.append(
                    self._item(offset, offset if origin is None else origin,
                               scheduled.deliver_at, record)
                )  # fmt: skip
            if len(items) != len(target.offsets):
                log.error("timer %s-%d: records of the last intent are gone; %s-%d not resent",
                          self.part.topic, self.part.index, *tp)  # fmt: skip
                continue
            batches, bases, at, sequence = [], [], 0, target.base_sequence
            for count in target.batch_counts:
                batches.append(items[at : at + count])
                bases.append(sequence)
                at += count
                sequence = (sequence + count) % 2**31
            payloads = [
                self._encode(b, tp, intent.producer_id, base)
                for b, base in zip(batches, bases, strict=True)
            ]
            plan.targets.append(_Target(tp, batches, payloads, bases))
        return plan

    async def _resolve(self, intent: MoveIntent) -> None:
        """Deliver an intent of an earlier leadership again (step 2)."""
        plan = await self._plan_of(intent)
        await self._settle(plan, resend=True)
        log.info("timer %s-%d: the last intent delivered again to %d partitions",
                 self.part.topic, self.part.index, len(plan.targets))  # fmt: skip

    async def _settle(self, plan: _Plan, *, resend: bool) -> None:
        """Deliver ``plan``, then requeue what its targets refused without storing."""
        requeue, fresh = await self._deliver(plan, resend=resend)
        if requeue:
            await self._requeue(requeue)
        if fresh:
            self._take_producer_id()

    async def _deliver(self, plan: _Plan, *, resend: bool) -> tuple[list[_Item], bool]:
        """Send every target its batches, one at a time, until each is stored or refused
        (see the module docstring; ``resend``: an intent of an earlier leadership, not
        counted as moved here, since its leader may have counted it). Returns the records
        to requeue, and whether this mover needs a new producer id."""
        requeue: list[_Item] = []
        fresh = False
        own = plan.intent.producer_id == self._producer_id
        active = {t.tp: t for t in plan.targets if t.batches}
        backoff = RETRY_BACKOFF_S[0]
        while active:
            wave = {tp: t.payloads[t.sent] for tp, t in active.items()}
            results = await self._writer.produce(wave, acks=-1)
            progressed = False
            for tp, result in results.items():
                target = active[tp]
                verdict = self._verdict(tp, result)
                if verdict is None:
                    continue  # try again
                progressed = True
                self._missing_since.pop(tp, None)
                batch = target.batches[target.sent]
                if verdict == STORED:
                    target.sent += 1
                    if not resend:
                        self._moved(tp, batch)
                    if target.sent == len(target.batches):
                        del active[tp]
                    continue
                del active[tp]
                later = [item for b in target.batches[target.sent + 1 :] for item in b]
                if own:  # nothing of this batch or the later ones was stored
                    self._sequences[tp] = target.bases[target.sent]
                if verdict == TOO_LARGE and len(batch) > 1:
                    size = len(target.payloads[target.sent])
                    self._limits[tp[0]] = max(MIN_BATCH_BYTES, size // 2)
                    requeue += batch + later
                elif verdict == TOO_LARGE:
                    self._drop(tp, batch, verdict, result)
                    requeue += later
                elif verdict == REQUEUED:
                    requeue += batch + later
                    fresh = fresh or own
                else:
                    self._drop(tp, batch + later, verdict, result)
            if active and not progressed:
                self._check_leader()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RETRY_BACKOFF_S[1])
        return requeue, fresh

    def _moved(self, tp: tuple[str, int], batch: list[_Item]) -> None:
        self.counts.moved += len(batch)
        now = self._clock_ms()
        self._hooks.moved(self.tenant, tp[0], [now - item.due for item in batch])

    def _drop(
        self,
        tp: tuple[str, int],
        items: list[_Item],
        reason: str,
        result: broker_pb2.PartitionProduceResult,
    ) -> None:
        if not items:
            return
        self.counts.dropped += len(items)
        self._hooks.dropped(self.tenant, reason, len(items))
        log.warning("timer %s-%d: %d records for %s-%d dropped: %s",
                    self.part.topic, self.part.index, len(items), *tp,
                    result.error_message or reason)  # fmt: skip

    def _verdict(
        self, tp: tuple[str, int], result: broker_pb2.PartitionProduceResult
    ) -> str | None:
        """``STORED``; ``TOO_LARGE``; ``REQUEUED`` (a sequence refusal); another reason to
        drop; or None: try again."""
        code = result.error
        if code == ErrorCode.NONE:
            return STORED
        if code == ErrorCode.MESSAGE_TOO_LARGE:
            return TOO_LARGE
        if code in SEQUENCE_REFUSALS:
            return REQUEUED
        if not is_retriable(code) and code not in WAIT_OUT:
            return ErrorCode.Name(code).lower()
        known = self._hooks.known_partitions(tp[0])
        if known is not None and tp[1] in known:
            self._missing_since.pop(tp, None)
            return None
        since = self._missing_since.setdefault(tp, time.monotonic())
        return "topic_missing" if time.monotonic() - since >= MISSING_GRACE_S else None

    async def _requeue(self, items: list[_Item]) -> None:
        """Make ``items`` pending again, once a requeue marker naming them is committed."""
        entries = [Requeued(item.offset, item.due, item.id_offset) for item in items]
        async with self._lock:
            await self._append_marker(REQUEUE, encode_requeue(entries))
            for entry in entries:
                self._unfinish(entry)
            self.counts.requeued += len(entries)
        log.info("timer %s-%d: %d records requeued", self.part.topic, self.part.index,
                 len(entries))  # fmt: skip

    async def _append_marker(self, kind: bytes, value: bytes) -> None:
        """Append a marker the caller applies itself: reading it back changes nothing."""
        await self._append_own(marker_batch(kind, value, self._clock_ms()), marker=True)

    async def _append_own(self, data: bytes, *, marker: bool = False) -> AppendInfo:
        """Append the mover's own batches and wait until they are committed (see
        *Appends*; ``DeposedError`` if the leadership moves first). ``marker``: one
        marker, skipped when read back."""
        part = self.part
        epoch = self.leader_epoch if part.replica is not None else None

        def before_write(base_offset: int, headers: list[Any]) -> None:
            part.check_leader(epoch)
            part.producers.check_and_record(base_offset, headers)

        def write() -> AppendInfo:
            return part.log.append(data, leader_epoch=epoch, before_write=before_write)

        try:
            info: AppendInfo = await self._io(write)
        except LogClosedError as exc:
            raise DeposedError from exc
        except MeridianError as exc:
            if exc.code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE):
                raise DeposedError from exc
            raise
        if marker and info.base_offset >= self._ingested:
            self._own_markers.add(info.base_offset)
        part.notify_append()
        if part.replica is None:
            part.notify()
        elif part.on_leader_append is not None:
            part.on_leader_append(part)  # the HW moves with the ISR: it notifies then
        while part.log.high_watermark <= info.last_offset:
            self._check_leader()
            await asyncio.wait([part.changed()], timeout=IDLE_WAIT_S)
        self._check_leader()
        return info

    # -- space ---------------------------------------------------------------------------
    async def _carry(self) -> bool:
        """Carry forward the pending records at the log start when they hold back too
        much (see *Space*); whether anything was carried."""
        low = self.table.low_water()
        span = self._ingested - low
        if span < CARRY_SPAN or self.pending * CARRY_DENSITY > span:
            return False
        async with self._lock:
            self._check_leader()
            offsets = self.table.pending_in(low, low + CARRY_SPAN // 2, ROUND_RECORDS)
            if not offsets:
                return False
            records = await self._records(offsets)
            copies: list[Record] = []
            size = 0
            for offset in offsets:
                record = records.get(offset)
                if record is None or (copies and size + _size(record) > ROUND_BYTES):
                    break
                copies.append(record)
                size += _size(record)
            if not copies:
                return False
            info = await self._append_own(_carried_batches(copies))
            # The copies take over as a new leader's rebuild would have them do, when read
            # (``_ingest_scheduled``): each in one step, so no listing, count or cancel
            # ever finds the record neither here nor there.
            await self._ingest_new()
            self.counts.carried += len(copies)
        log.info("timer %s-%d: %d records carried forward from %d to %d",
                 self.part.topic, self.part.index, len(copies), copies[0].offset,
                 info.base_offset)  # fmt: skip
        return True

    async def _trim(self) -> None:
        """Let the log start follow the first pending record (see *Space*)."""
        self._last_trim = time.monotonic()
        table = self.table
        for origin, now_at in list(self._carried.items()):
            if now_at < table.base or (table.covers(now_at) and table.done(now_at)):
                del self._carried[origin]
        floor = table.low_water()
        if self._round_floor is not None and self._round_floor < floor:
            # The last intent's records are what holds the log start back: its round is
            # settled (rounds run between trims), so say so in the log, and a new leader
            # has nothing to resend and needs them no more.
            async with self._lock:
                await self._append_marker(REQUEUE, encode_requeue([]))
                self._round_floor = None
                self._last_intent = None
        log_ = self.part.log
        if floor <= log_.log_start_offset:
            return
        start = await self._io(lambda: log_.advance_log_start_offset(floor))
        table.trim(start)

    # -- cancel, list, describe ------------------------------------------------------------
    async def cancel(
        self, delayed: DelayedId, wait_s: float = 5.0
    ) -> delay_pb2.CancelDelayedResponse:
        """Cancel the scheduled record ``delayed`` names (see ``delay.proto``)."""
        await asyncio.wait_for(self.ready.wait(), wait_s)
        deadline = time.monotonic() + wait_s
        while self._ingested <= self._current(delayed.offset) < self.part.log.log_end_offset:
            if time.monotonic() >= deadline:  # scheduled, not yet replicated
                raise MeridianError(
                    ErrorCode.REQUEST_TIMED_OUT, f"{delayed} is not committed yet: retry"
                )
            await asyncio.wait([self.part.changed()], timeout=0.1)
        async with self._lock:
            self._check_leader()
            offset = self._current(delayed.offset)
            answer = self._cancel_answer(delayed, offset)
            if answer is not None and answer.error:
                return answer
            if answer is None:
                await self._append_marker(CANCEL, encode_cancel([offset]))
                self._finish(offset, cancelled=True)
                self.counts.cancelled += 1
        records = await self._records([offset])
        found = records.get(offset)
        due = scheduled_of(found).deliver_at if found is not None else -1
        return delay_pb2.CancelDelayedResponse(deliver_at_ms=due)

    def _cancel_answer(
        self, delayed: DelayedId, offset: int
    ) -> delay_pb2.CancelDelayedResponse | None:
        """The answer without cancelling anything, or None to cancel."""
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
        self,
        topic: str,
        after: tuple[int, int],
        limit: int,
        value_bytes: int,
        may_read: Callable[[str], bool],
    ) -> list[delay_pb2.DelayedRecord]:
        """Pending records by (due, id offset) strictly after ``after``, of topics
        ``may_read`` allows (each topic asked once); gives the loop back as it walks."""
        await asyncio.wait_for(self.ready.wait(), 5.0)
        allowed: dict[str, bool] = {}
        chosen: list[tuple[int, int]] = []
        previous = None
        for walked, entry in enumerate(self.index.entries(after), 1):
            if not walked % LIST_YIELD_EVERY:
                await asyncio.sleep(0)
            if entry == previous:
                continue  # a requeued record's second entry
            previous = entry
            due, id_offset = entry
            offset = self._current(id_offset)
            if not self.table.covers(offset) or self.table.done(offset):
                continue
            name = self.table.topic_of(offset)
            if name is None or (topic and name != topic):
                continue
            if name not in allowed:
                allowed[name] = may_read(name)
            if not allowed[name]:
                continue
            chosen.append((due, offset))
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
        origin = origin_of(record)
        value = record.value
        listed = delay_pb2.DelayedRecord(
            id=str(self._id_of(scheduled.topic, record.offset if origin is None else origin)),
            topic=scheduled.topic,
            partition=scheduled.partition,
            deliver_at_ms=due,
            timestamp=record.timestamp,
            value_size=-1 if value is None else len(value),
            headers=[
                delay_pb2.DelayedHeader(key=k, value=v)
                for k, v in without(record.headers, NOT_DELIVERED)
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
        for due, id_offset in self.index.entries():
            offset = self._current(id_offset)
            if self.table.covers(offset) and not self.table.done(offset):
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


def _split(group: list[_Item], total: int, limit: int) -> tuple[list[list[_Item]], int, int]:
    """The batches of one target within a round's bounds and the target's batch size
    ``limit`` (a record larger than it goes alone), how many items they take, and the
    round's bytes after them."""
    batches: list[list[_Item]] = []
    size = 0
    taken = 0
    room = limit - HEADER_SIZE
    for item in group:
        if total + item.size > ROUND_BYTES and (batches or total):
            break
        if not batches or (size + item.size > room and batches[-1]):
            if len(batches) == MAX_TARGET_BATCHES:
                break
            batches.append([])
            size = 0
        batches[-1].append(item)
        size += item.size
        total += item.size
        taken += 1
    return batches, taken, total


def _carried_batches(records: list[Record]) -> bytes:
    """Batches (no producer id) of copies of ``records``, each with ``x-delay-origin``."""
    out = []
    builder = BatchBuilder()
    for record in records:
        if len(builder) and builder.estimated_size() > BATCH_BYTES:
            out.append(builder.build())
            builder = BatchBuilder()
        headers: list[tuple[str, bytes | None]] = list(record.headers)
        if origin_of(record) is None:
            headers.append((DELAY_ORIGIN, str(record.offset).encode()))
        builder.append(record.value, key=record.key, timestamp=record.timestamp, headers=headers)
    out.append(builder.build())
    return b"".join(out)


def _read_from(log_: PartitionLog, start: int, max_bytes: int) -> tuple[int, list[Record]]:
    """The committed records from ``start`` (at most about ``max_bytes``) and the offset
    after them (blocking: reads and decodes on the I/O pool)."""
    result = log_.read(start, max_bytes)
    return result.next_offset, [r for r in decode_batches(result.data) if r.offset >= start]


def _read_at(log_: PartitionLog, wanted: list[int]) -> list[tuple[int, Record]]:
    """The committed records at the sorted offsets ``wanted``: each batch holding one is
    read once, alone (blocking), and only its wanted records are kept, so what a call
    holds is the records asked for, not every batch they sit in."""
    asked = set(wanted)
    found: dict[int, Record] = {}
    for offset in wanted:
        if offset in found:
            continue
        try:
            result = log_.read(offset, 1)  # the batch holding it, whole
        except OffsetOutOfRangeError:
            continue
        if result.next_offset <= offset:
            continue
        for record in decode_batches(result.data):
            if record.offset in asked:
                found[record.offset] = record
    return [(offset, found[offset]) for offset in wanted if offset in found]


def _size(record: Record) -> int:
    size = len(record.key or b"") + len(record.value or b"")
    for key, value in record.headers:
        size += len(key) + len(value or b"")
    return size

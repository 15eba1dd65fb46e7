"""The producer's record accumulator: per-partition queues of batches, bounded memory.

``append`` (called by ``Producer.send`` in any thread) chooses the partition, encodes the
record into the last batch of that partition's queue or opens a new one, and charges
its bytes to ``buffer_memory``. ``drain`` (called by the sender thread) takes the batches
that are ready: every batch but the last of a queue (they are full), and the last one
once full, older than ``linger_ms``, or when a flush, a close or a blocked ``send``
wants it out. ``release`` returns a completed batch's memory and wakes blocked senders.

One lock guards everything here; it is held for one append (a few microseconds), never
across I/O. The sender is woken when a batch opens (to time its linger) and when one
fills, not per record.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from dataplane.client.batch import ProducerBatch
from dataplane.client.errors import BufferFullError
from dataplane.client.future import DeliveryFuture, Segment, closed_error
from dataplane.client.partitioner import (
    STICKY_ALL,
    STICKY_KEYLESS,
    Partitioner,
    choose_sticky,
)
from dataplane.client.types import PolledBatch, TopicPartition
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records import (
    HEADER_SIZE,
    NULL_VARINT,
    VARINT_TABLE_SIZE,
    VARINTS,
    builder,
    copying,
    varint,
)

CopyRule = tuple[bytes, bytes, bytes]  # origin key, origin, offset key

_RECORD_OVERHEAD = 24  # the most a record's varints and attribute byte take, roughly


def _key_bytes(key: bytes | bytearray | memoryview | None) -> bytes | None:
    """A key as the partitioner hashes it (checked bytes-like by ``records_size``)."""
    return key if key is None or type(key) is bytes else bytes(key)


@dataclass
class TopicQueues:
    """A topic's partitions as the producer knows them, and one batch queue per partition."""

    name: str
    count: int
    available: list[int]
    queues: list[deque[ProducerBatch]] = field(default_factory=list)
    tps: list[TopicPartition] = field(default_factory=list)
    sticky: int = -1  # the sticky partition, -1 until chosen
    scheduled_bytes: int = 0  # delayed records sent for the sticky partition since chosen

    def __post_init__(self) -> None:
        self.resize(self.count, self.available)

    def resize(self, count: int, available: list[int]) -> None:
        """Adopt a new partition count (partitions are only ever added)."""
        for partition in range(len(self.queues), count):
            self.queues.append(deque())
            self.tps.append(TopicPartition(self.name, partition))
        self.count = max(self.count, count)
        self.available = available
        if self.sticky >= 0 and available and self.sticky not in available:
            self.sticky = -1  # it lost its leader: choose again


class RecordAccumulator:
    def __init__(
        self,
        partitioner: Partitioner,
        *,
        batch_bytes: int,
        linger_s: float,
        buffer_memory: int,
        block_on_full: bool,
        max_block_s: float,
        max_record_bytes: int,
    ) -> None:
        self._partitioner = partitioner
        self._sticky_all = partitioner.sticky == STICKY_ALL
        self._sticky_keyless = partitioner.sticky in (STICKY_ALL, STICKY_KEYLESS)
        self._batch_limit = batch_bytes - HEADER_SIZE
        self.linger_s = linger_s
        self.buffer_memory = buffer_memory
        self._block_on_full = block_on_full
        self._max_block_s = max_block_s
        self.max_record_bytes = max_record_bytes
        self.lock = threading.Lock()
        self._space = threading.Condition(self.lock)
        self.topics: dict[str, TopicQueues] = {}
        self._nonempty: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.incomplete: set[ProducerBatch] = set()
        self.used = 0
        self.waiters = 0
        self.flushing = 0
        self.closed = False
        self.refusal: MeridianError | None = None  # why appends fail: closed, or fatal
        self.wakeup: Callable[[], None] = lambda: None
        # Told of each batch opened (under ``lock``): a transaction adds its partition then.
        self.on_open: Callable[[TopicPartition], None] | None = None
        self.sender_thread: threading.Thread | None = None

    # -- the send path -------------------------------------------------------------------
    def append(
        self,
        topic: TopicQueues,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: bytes,
        timestamp: int,
    ) -> DeliveryFuture:
        """Encode a record into its partition's batch; ``partition`` None: choose one.

        ``headers`` is the encoded header block (``b"\\x00"`` for none). This is the
        producer's per-record cost, so the record is encoded here, inline (the layout is
        ``batch.py``'s): what does not depend on the batch (key, value length) before
        taking the lock, the timestamp and offset deltas under it.
        """
        if value is None:
            vlen, kv, value = 0, NULL_VARINT, b""
        else:
            vlen = len(value)
            kv = VARINTS[vlen] if vlen < VARINT_TABLE_SIZE else varint(vlen)
        if key is None:
            kv = NULL_VARINT + kv
        else:
            klen = len(key)
            kv = (VARINTS[klen] if klen < VARINT_TABLE_SIZE else varint(klen)) + key + kv
        fixed = 1 + len(kv) + vlen + len(headers)  # all but the length and two deltas
        if fixed > self.max_record_bytes:
            self.too_large(fixed)
        lock = self.lock  # acquire/release: a third cheaper than `with` per record
        lock.acquire()
        try:
            if self.refusal is not None:
                raise self.refusal
            if self.used + fixed > self.buffer_memory and self.used:
                self._wait_for_space(fixed + _RECORD_OVERHEAD)
            sticky = False
            if partition is None:
                if self._sticky_all or (key is None and self._sticky_keyless):
                    sticky = True
                    partition = topic.sticky
                    if partition < 0:
                        partition = topic.sticky = choose_sticky(topic.available, topic.count)
                else:
                    partition = self._partitioner.partition(
                        topic.name, key, topic.available, topic.count
                    )
            queue = topic.queues[partition]
            wake = False
            while True:
                if not queue:
                    self._open(topic, partition)
                    wake = True
                batch = queue[-1]
                count = batch.count
                if count:
                    delta = timestamp - batch.base_timestamp
                    vt = VARINTS[delta] if 0 <= delta < VARINT_TABLE_SIZE else varint(delta)
                    vo = VARINTS[count] if count < VARINT_TABLE_SIZE else varint(count)
                else:
                    vt = vo = b"\x00"  # the first record's deltas
                size = fixed + len(vt) + len(vo)
                prefix = VARINTS[size] if size < VARINT_TABLE_SIZE else varint(size)
                records = batch.records
                size += len(prefix)
                if count and len(records) + size > batch.limit:
                    wake = True  # a full batch is ready to go
                    if sticky and topic.count > 1:  # Kafka's sticky move: a new partition
                        sticky = False
                        partition = choose_sticky(topic.available, topic.count, partition)
                        topic.sticky = partition
                        queue = topic.queues[partition]
                    else:
                        self._open(topic, partition)
                    continue
                records += b"".join((prefix, b"\x00", vt, vo, kv, value, headers))
                batch.count = count + 1
                if not count:
                    batch.base_timestamp = batch.max_timestamp = timestamp
                elif timestamp > batch.max_timestamp:
                    batch.max_timestamp = timestamp
                break
            self.used += size  # a batch's share is len(records): see release
        finally:
            lock.release()
        if wake:
            self.wakeup()
        return DeliveryFuture(batch.result, count, timestamp)

    def append_many(
        self,
        topic: TopicQueues,
        partition: int | None,
        records: Sequence[object],
        now: int,
        reserve: int,
        keyed: int,
        shared: bytes | None = None,
    ) -> list[Segment]:
        """Encode ``records`` (checked by ``records_size``; ``keyed`` of them have a key)
        into the batches of ``partition``, or of the partitions the partitioner chooses
        when None; records without a timestamp take ``now``, and without headers the
        encoded headers ``shared`` (when given). All or none are queued:
        ``reserve`` bytes of buffer are waited for first. Where each record went is in
        the returned segments.

        The records go in a few compiled calls, one per batch they fill, under the lock
        (the sender drains after the call), so the per-record cost is the encoder's.
        """
        with self.lock:
            if self.refusal is not None:
                raise self.refusal
            if self.used + reserve > self.buffer_memory and self.used:
                self._wait_for_space(reserve)
            if partition is not None:
                segments = self._fill(topic, partition, False, records, now, None, shared)
            elif self._sticky_all or (not keyed and self._sticky_keyless):
                sticky = self._sticky(topic)
                segments = self._fill(topic, sticky, True, records, now, None, shared)
            else:
                segments = self._route(topic, records, now, shared)
        self.wakeup()
        return segments

    def append_copy(
        self, topic: TopicQueues, partition: int, polled: PolledBatch, reserve: int, rule: CopyRule
    ) -> tuple[list[Segment], int, int, int, int]:
        """Copy the records of a fetched batch into ``partition``'s batches
        (``copying.copy_records`` by ``rule``), opening batches as they fill, once
        ``reserve`` bytes of buffer are free. Returns the segments, the records copied and
        dropped, the offset of the last record copied (-1: none) and the key and value
        bytes copied. ``ValueError``: a bad record (checked by the caller first)."""
        fetched = polled.batch
        segments: list[Segment] = []
        pos, copied, dropped, last, payload = fetched.start, 0, 0, -1, 0
        with self.lock:
            if self.refusal is not None:
                raise self.refusal
            if self.used + reserve > self.buffer_memory and self.used:
                self._wait_for_space(reserve)
            while True:
                queue = topic.queues[partition]
                if not queue:
                    self._open(topic, partition)
                batch = queue[-1]
                count, data = batch.count, batch.records
                pos, n, base, highest, written, d, at, size = copying.copy_records(
                    data, fetched.data, pos, fetched.end, fetched.base_offset,
                    fetched.base_timestamp, polled.min_offset, count,
                    batch.base_timestamp if count else None,
                    max(0, batch.limit - len(data)), *rule,
                )  # fmt: skip
                dropped += d
                if n:
                    assert base is not None  # records were written: both are set
                    assert highest is not None
                    segments.append(Segment(batch.result, count, copied, n, None))
                    batch.count = count + n
                    batch.base_timestamp = base
                    if not count or highest > batch.max_timestamp:
                        batch.max_timestamp = highest
                    self.used += written
                    copied, last, payload = copied + n, at, payload + size
                if pos >= fetched.end:
                    break
                self._open(topic, partition)  # the batch is full
        self.wakeup()
        return segments, copied, dropped, last, payload

    def choose_partition(self, topic: TopicQueues, key: bytes | None, size: int = 0) -> int:
        """The partition ``append`` would give a record with ``key`` now. ``size``: the
        record goes elsewhere (scheduled for later, ``delayed``) and counts against the
        sticky partition it is given as it would in a batch there: a batch's worth of
        them moves the sticky partition, as a full batch does."""
        with self.lock:
            if self._sticky_all or (key is None and self._sticky_keyless):
                partition = self._sticky(topic)
                if size:
                    topic.scheduled_bytes += size
                    if topic.scheduled_bytes > self._batch_limit and topic.count > 1:
                        topic.sticky = choose_sticky(topic.available, topic.count, partition)
                        topic.scheduled_bytes = 0
                return partition
            return self._partitioner.partition(
                topic.name, _key_bytes(key), topic.available, topic.count
            )

    def _sticky(self, topic: TopicQueues) -> int:
        if topic.sticky < 0:
            topic.sticky = choose_sticky(topic.available, topic.count)
        return topic.sticky

    def _route(
        self, topic: TopicQueues, records: Sequence[object], now: int, shared: bytes | None
    ) -> list[Segment]:
        """Records to the partitions the partitioner names, keyless ones to the sticky
        partition when it keeps them (murmur2), each group in call order."""
        groups: dict[int, list[int]] = {}
        sticky_keyless = self._sticky_keyless
        choose = self._partitioner.partition
        for index, item in enumerate(records):
            key = item[0] if isinstance(item, tuple) else None  # ProducerRecord too
            chosen = -1 if key is None and sticky_keyless else None
            if chosen is None:
                chosen = choose(topic.name, _key_bytes(key), topic.available, topic.count)
            groups.setdefault(chosen, []).append(index)
        segments: list[Segment] = []
        for chosen, positions in groups.items():
            part = [records[i] for i in positions]
            if chosen < 0:
                sticky = self._sticky(topic)
                segments += self._fill(topic, sticky, True, part, now, positions, shared)
            else:
                segments += self._fill(topic, chosen, False, part, now, positions, shared)
        return segments

    def _fill(
        self,
        topic: TopicQueues,
        partition: int,
        sticky: bool,
        records: Sequence[object],
        now: int,
        positions: list[int] | None,
        shared: bytes | None = None,
    ) -> list[Segment]:
        """Encode ``records`` into ``partition``'s batches, opening batches (or, for
        ``sticky`` records, moving the sticky partition, as ``append`` does) as they fill."""
        segments: list[Segment] = []
        index, total, moved = 0, len(records), False
        while index < total:
            queue = topic.queues[partition]
            if not queue:
                self._open(topic, partition)
            batch = queue[-1]
            count, data = batch.count, batch.records
            end, base, highest, written = builder.encode_records(
                data, records, index, count, batch.base_timestamp if count else None, now,
                max(0, batch.limit - len(data)), shared,
            )  # fmt: skip
            if end > index:
                assert base is not None  # records were written: both are set
                assert highest is not None
                segments.append(Segment(batch.result, count, index, end - index, positions))
                batch.count = count + end - index
                batch.base_timestamp = base
                if not count or highest > batch.max_timestamp:
                    batch.max_timestamp = highest
                self.used += written
                index, moved = end, False
            if index < total:  # the batch is full
                if sticky and topic.count > 1 and not moved:
                    partition = choose_sticky(topic.available, topic.count, partition)
                    topic.sticky, moved = partition, True
                else:
                    self._open(topic, partition)
        return segments

    def too_large(self, size: int) -> None:
        raise MeridianError(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"a record of about {size} bytes does not fit max_request_bytes "
            f"(at most {self.max_record_bytes} bytes of records per batch)",
        )

    def _open(self, topic: TopicQueues, partition: int) -> None:
        batch = ProducerBatch(topic.tps[partition], self._batch_limit, time.monotonic())
        queue = topic.queues[partition]
        queue.append(batch)
        self._nonempty[batch.tp] = queue
        self.incomplete.add(batch)
        if self.on_open is not None:
            self.on_open(batch.tp)

    def _wait_for_space(self, hint: int) -> None:
        if not self._block_on_full or threading.current_thread() is self.sender_thread:
            # (the sender thread, sending from a delivery callback, would wait for itself)
            raise BufferFullError(
                f"the producer buffer is full: {self.used} of {self.buffer_memory} bytes "
                "(buffer_memory) await delivery"
            )
        deadline = time.monotonic() + self._max_block_s
        self.waiters += 1
        try:
            self.wakeup()  # a blocked send makes every batch ready
            while self.used and self.used + hint > self.buffer_memory:
                remaining = deadline - time.monotonic()
                if self.refusal is not None:
                    break
                if remaining <= 0:
                    raise BufferFullError(
                        f"the producer buffer stayed full for {self._max_block_s * 1000:.0f} ms "
                        f"(max_block_ms): {self.used} of {self.buffer_memory} bytes "
                        f"(buffer_memory) await delivery"
                    )
                self._space.wait(remaining)
        finally:
            self.waiters -= 1
        if self.refusal is not None:
            raise self.refusal

    # -- the sender's side ---------------------------------------------------------------
    def drain(
        self, now: float, take: Callable[[TopicPartition, ProducerBatch], bool]
    ) -> list[ProducerBatch]:
        """Remove and return ready batches, oldest first per partition, that ``take`` wants.

        ``take(tp, batch)`` is asked about each ready batch in queue order and decides
        (leader known, room in the request); the first refusal ends that partition.
        """
        out: list[ProducerBatch] = []
        with self.lock:
            force = bool(self.flushing or self.closed or self.waiters)
            for tp, queue in list(self._nonempty.items()):
                while queue:
                    batch = queue[0]
                    last = len(queue) == 1
                    if last and not (force or self._ripe(batch, now)):
                        break
                    if not take(tp, batch):
                        break
                    out.append(queue.popleft())
                if not queue:
                    del self._nonempty[tp]
        return out

    def _ripe(self, batch: ProducerBatch, now: float) -> bool:
        return (
            now - batch.created >= self.linger_s
            or len(batch.records) + _RECORD_OVERHEAD >= self._batch_limit
        )

    def next_linger_deadline(self) -> float | None:
        """When the oldest open batch is due (monotonic seconds), or None if none is open."""
        with self.lock:
            created = [q[-1].created for q in self._nonempty.values() if q]
        return min(created) + self.linger_s if created else None

    def has_ready(self, now: float) -> bool:
        with self.lock:
            if self.flushing or self.closed or self.waiters:
                return bool(self._nonempty)
            return any(len(q) > 1 or (q and self._ripe(q[0], now)) for q in self._nonempty.values())

    def expire(self, now: float, older_than_s: float) -> list[ProducerBatch]:
        """Remove queued batches created more than ``older_than_s`` ago."""
        expired: list[ProducerBatch] = []
        with self.lock:
            for tp, queue in list(self._nonempty.items()):
                while queue and now - queue[0].created > older_than_s:
                    expired.append(queue.popleft())
                if not queue:
                    del self._nonempty[tp]
        return expired

    def take_all(self) -> list[ProducerBatch]:
        """Remove every queued batch (an abort)."""
        with self.lock:
            batches = [b for q in self._nonempty.values() for b in q]
            for queue in self._nonempty.values():
                queue.clear()
            self._nonempty.clear()
        return batches

    def take_topic(self, topic: str, created_before: float) -> list[ProducerBatch]:
        """Remove the queued batches of ``topic`` created before ``created_before``
        (monotonic clock)."""
        taken: list[ProducerBatch] = []
        with self.lock:
            for tp in [tp for tp in self._nonempty if tp.topic == topic]:
                queue = self._nonempty[tp]  # the partition's own queue, oldest first
                while queue and queue[0].created < created_before:
                    taken.append(queue.popleft())
                if not queue:
                    del self._nonempty[tp]
        return taken

    def queued_partitions(self) -> Iterable[TopicPartition]:
        with self.lock:
            return list(self._nonempty)

    def release(self, batch: ProducerBatch) -> None:
        """A batch is complete: return its memory, wake blocked senders and flushes."""
        with self.lock:
            self.used -= len(batch.records)  # every record appended was charged
            self.incomplete.discard(batch)
            if self.waiters:
                self._space.notify_all()

    def replace(self, batch: ProducerBatch, parts: list[ProducerBatch]) -> None:
        """``batch`` was split into ``parts``: they take over its memory and its place
        among the batches a flush waits for."""
        with self.lock:
            self.used += sum(len(part.records) for part in parts) - len(batch.records)
            self.incomplete.discard(batch)
            self.incomplete.update(parts)
        batch.release()

    def complete(
        self,
        batch: ProducerBatch,
        base_offset: int,
        log_append_time: int = -1,
        error: MeridianError | None = None,
    ) -> None:
        self.release(batch)
        batch.release()
        batch.result.complete(base_offset, log_append_time, error)

    def close(self, refusal: MeridianError | None = None) -> None:
        """Refuse further appends (with ``refusal``); wake blocked senders so they fail."""
        with self.lock:
            self.closed = True
            if self.refusal is None:
                self.refusal = refusal or closed_error()
            self._space.notify_all()

    def refuse(self, error: MeridianError) -> None:
        """A fatal error: appends raise ``error`` from now on (the producer stays open)."""
        with self.lock:
            self.refusal = error
            self._space.notify_all()

    def pending(self) -> list[ProducerBatch]:
        with self.lock:
            return list(self.incomplete)

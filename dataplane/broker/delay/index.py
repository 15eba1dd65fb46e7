"""The pending records of one timer partition: by due time (``DueIndex``) and by offset
(``OffsetTable``). Both hold flat arrays of machine integers, never a Python object per
record, so a million pending records cost about 26 MB (``bench/messaging_delay.py``
measures it), not hundreds.

``DueIndex`` is a two-level timing wheel of ``(due_ms, offset)`` entries:

- *near* buckets of ``NEAR_MS`` (250 ms) hold everything due before the *horizon*, the
  end of the minute after the current one; each bucket is one ``array('q')`` of packed
  entries (the due time's distance from the bucket's start in the high bits, the offset
  in the low ``OFFSET_BITS``), so sorting a bucket sorts by (due, offset);
- *far* buckets of ``FAR_MS`` (one minute) hold the rest as ``(due, offset)`` pairs, one
  array each (at most 43,200 for 30 days), with their earliest due time kept aside;
  ``advance(now)`` moves the horizon on and pours the far buckets it passes into near
  ones, so each entry is copied at most twice in its life.

``pop_due(now, limit)`` returns due entries in (due, offset) order. A near bucket is
sorted once, when it is first popped (or asked for its earliest entry), and then read
from a cursor; entries added to it after that (a record due at once) go to a small heap
beside it, and the two are merged as they are popped. So draining a million entries due
at once sorts them once, not once per round. Entries are never removed from the middle:
a cancelled or moved record stays until its bucket comes due and is skipped then
(``OffsetTable.done``). ``entries(after)`` walks what is held in (due, offset) order for
listings, from ``after`` on, sorting a copy of one bucket at a time and skipping the
buckets that end before ``after``.

``OffsetTable`` covers the timer partition from ``base`` (its log start when rebuilt)
to ``end`` (what the mover has read): per offset, a *done* bit (not pending: moved,
cancelled, carried forward, or not a scheduled record at all, such as a marker), a
*cancelled* bit, the target topic's id (``int32``, into ``topics``) and the record's size
(``int32``), about 8 bytes per offset. ``low_water()`` is the first offset still pending:
the log may start there. The mover keeps the span from ``low_water()`` to ``end``
bounded by carrying long-pending records forward (``mover``), so the table grows with
what is pending, not with everything scheduled since the oldest pending record.

Thread safety: none; the mover uses both from the event loop only.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections.abc import Iterator

NEAR_MS = 250
FAR_MS = 60_000
NO_TOPIC = -1
OFFSET_BITS = 55  # a near entry: (due - bucket start) << OFFSET_BITS | offset
_OFFSET_MASK = (1 << OFFSET_BITS) - 1
MAX_OFFSET = _OFFSET_MASK
_NEVER = 2**63 - 1


def _pairs(data: array[int]) -> list[tuple[int, int]]:
    it = iter(data)
    return list(zip(it, it, strict=True))


class _Near:
    """One near bucket: packed entries, unsorted until first popped, then read from
    ``cursor``; ``late`` (a heap) takes what is added after the sort."""

    __slots__ = ("cursor", "items", "late", "sorted")

    def __init__(self) -> None:
        self.items = array("q")
        self.sorted = False
        self.cursor = 0
        self.late: list[int] = []

    def sort(self) -> None:
        if not self.sorted:
            self.items = array("q", sorted(self.items))
            self.sorted = True

    def head(self) -> int:
        """The smallest packed entry left (``_NEVER`` when empty); the bucket is sorted."""
        first = self.items[self.cursor] if self.cursor < len(self.items) else _NEVER
        return min(first, self.late[0]) if self.late else first

    def left(self) -> int:
        return len(self.items) - self.cursor + len(self.late)

    def snapshot(self) -> list[int]:
        """What is left, sorted (a copy)."""
        rest = self.items[self.cursor :] if self.sorted else self.items
        return sorted([*rest, *self.late])


class DueIndex:
    """``(due_ms, offset)`` entries by due time; see the module docstring."""

    def __init__(self, now_ms: int) -> None:
        self._near: dict[int, _Near] = {}
        self._far: dict[int, array[int]] = {}
        self._far_min: dict[int, int] = {}
        self._near_keys: list[int] = []  # heap of the keys of _near
        self._far_keys: list[int] = []  # heap of the keys of _far
        self._horizon = self._horizon_for(now_ms)
        self._size = 0

    def __len__(self) -> int:
        """Entries held, skipped ones (cancelled, moved) included."""
        return self._size

    @staticmethod
    def _horizon_for(now_ms: int) -> int:
        return (now_ms // FAR_MS + 2) * FAR_MS

    def add(self, due_ms: int, offset: int) -> None:
        if not 0 <= offset <= MAX_OFFSET:
            raise ValueError(f"offset {offset} is out of the index's range")
        if due_ms < self._horizon:
            self._put_near(due_ms, offset)
        else:
            key = due_ms // FAR_MS
            bucket = self._far.get(key)
            if bucket is None:
                bucket = self._far[key] = array("q")
                self._far_min[key] = due_ms
                heapq.heappush(self._far_keys, key)
            elif due_ms < self._far_min[key]:
                self._far_min[key] = due_ms
            bucket.append(due_ms)
            bucket.append(offset)
        self._size += 1

    def _put_near(self, due: int, offset: int) -> None:
        key = due // NEAR_MS
        bucket = self._near.get(key)
        if bucket is None:
            bucket = self._near[key] = _Near()
            heapq.heappush(self._near_keys, key)
        packed = (due - key * NEAR_MS) << OFFSET_BITS | offset
        if bucket.sorted:
            heapq.heappush(bucket.late, packed)
        else:
            bucket.items.append(packed)

    def advance(self, now_ms: int) -> None:
        """Move the horizon to ``now_ms``'s, pouring far buckets it passes into near ones."""
        horizon = self._horizon_for(now_ms)
        if horizon <= self._horizon:
            return
        self._horizon = horizon
        while self._far_keys and self._far_keys[0] * FAR_MS < horizon:
            key = heapq.heappop(self._far_keys)
            bucket = self._far.pop(key)
            del self._far_min[key]
            for due, offset in _pairs(bucket):
                self._put_near(due, offset)

    def pop_due(self, now_ms: int, limit: int) -> list[tuple[int, int]]:
        """At most ``limit`` entries due at or before ``now_ms``, in (due, offset) order,
        removed from the index."""
        self.advance(now_ms)
        out: list[tuple[int, int]] = []
        while self._near_keys and len(out) < limit:
            key = self._near_keys[0]
            start = key * NEAR_MS
            if start > now_ms:
                break
            bucket = self._near[key]
            bucket.sort()
            # Packed entries below ``bound`` are due.
            bound = (min(now_ms - start, NEAR_MS) + 1) << OFFSET_BITS
            items = bucket.items
            while len(out) < limit:
                if not bucket.late:  # the common case: a slice of the sorted items
                    end = bisect_left(items, bound, bucket.cursor)
                    end = min(end, bucket.cursor + limit - len(out))
                    out.extend(
                        (start + (p >> OFFSET_BITS), p & _OFFSET_MASK)
                        for p in items[bucket.cursor : end]
                    )
                    bucket.cursor = end
                    break
                packed = bucket.head()
                if packed >= bound:
                    break
                if bucket.cursor < len(items) and items[bucket.cursor] == packed:
                    bucket.cursor += 1
                else:
                    heapq.heappop(bucket.late)
                out.append((start + (packed >> OFFSET_BITS), packed & _OFFSET_MASK))
            if bucket.left():
                break  # the limit, or the rest is not due yet
            del self._near[key]
            heapq.heappop(self._near_keys)
        self._size -= len(out)
        return out

    def next_due(self) -> int | None:
        """The earliest due time held (skipped entries included), or None."""
        while self._near_keys:
            key = self._near_keys[0]
            bucket = self._near[key]
            bucket.sort()
            packed = bucket.head()
            if packed != _NEVER:
                return key * NEAR_MS + (packed >> OFFSET_BITS)
            del self._near[key]  # emptied by pops: never expected, but harmless
            heapq.heappop(self._near_keys)
        if self._far_keys:
            return self._far_min[self._far_keys[0]]
        return None

    def entries(self, after: tuple[int, int] | None = None) -> Iterator[tuple[int, int]]:
        """Every entry strictly after ``after`` (all when None) in (due, offset) order; a
        sorted copy of each bucket is taken as it is reached."""
        floor = after[0] if after is not None else None
        for key in sorted(self._near_keys):
            start = key * NEAR_MS
            if floor is not None and start + NEAR_MS <= floor:
                continue
            bucket = self._near.get(key)
            if bucket is None:
                continue
            for packed in bucket.snapshot():
                entry = (start + (packed >> OFFSET_BITS), packed & _OFFSET_MASK)
                if after is None or entry > after:
                    yield entry
        for key in sorted(self._far_keys):
            if floor is not None and (key + 1) * FAR_MS <= floor:
                continue
            far = self._far.get(key)
            if far is None:
                continue
            for entry in sorted(_pairs(far)):
                if after is None or entry > after:
                    yield entry


class OffsetTable:
    """Per-offset state of a timer partition from ``base`` to ``end``; see the module
    docstring. ``topics`` names the target topic of each id."""

    def __init__(self, base: int) -> None:
        self.base = base
        self.end = base
        self._done = bytearray()
        self._cancelled = bytearray()
        self._topic = array("i")
        self._size = array("i")
        self._low = base  # every offset below is done
        self.topics: list[str] = []
        self._topic_ids: dict[str, int] = {}

    def extend_to(self, end: int) -> None:
        """Cover offsets up to ``end`` (exclusive); new ones are pending, topic unknown."""
        grow = end - self.end
        if grow <= 0:
            return
        self._topic.extend([NO_TOPIC] * grow)
        self._size.extend([0] * grow)
        need = (end - self.base + 7) // 8
        if need > len(self._done):
            self._done.extend(bytes(need - len(self._done)))
            self._cancelled.extend(bytes(need - len(self._cancelled)))
        self.end = end

    def covers(self, offset: int) -> bool:
        return self.base <= offset < self.end

    def topic_id(self, topic: str) -> int:
        found = self._topic_ids.get(topic)
        if found is None:
            found = self._topic_ids[topic] = len(self.topics)
            self.topics.append(topic)
        return found

    def record(self, offset: int, topic: str, size: int) -> None:
        """``offset`` holds a scheduled record for ``topic`` of ``size`` bytes."""
        at = offset - self.base
        self._topic[at] = self.topic_id(topic)
        self._size[at] = min(size, 2**31 - 1)

    def topic_of(self, offset: int) -> str | None:
        if not self.covers(offset):
            return None
        found = self._topic[offset - self.base]
        return None if found == NO_TOPIC else self.topics[found]

    def size_of(self, offset: int) -> int:
        return self._size[offset - self.base]

    def done(self, offset: int) -> bool:
        """Not pending: moved, cancelled, not a scheduled record, or below ``base``."""
        if offset < self.base:
            return True
        if offset >= self.end:
            return False
        at = offset - self.base
        return bool(self._done[at >> 3] & (1 << (at & 7)))

    def cancelled(self, offset: int) -> bool:
        at = offset - self.base
        return self.covers(offset) and bool(self._cancelled[at >> 3] & (1 << (at & 7)))

    def finish(self, offset: int, *, cancelled: bool = False) -> bool:
        """Mark ``offset`` done (and cancelled); False when it already was done."""
        if self.done(offset):
            return False
        at = offset - self.base
        self._done[at >> 3] |= 1 << (at & 7)
        if cancelled:
            self._cancelled[at >> 3] |= 1 << (at & 7)
        return True

    def unfinish(self, offset: int) -> bool:
        """Mark ``offset`` pending again (a requeued record); False when it was not done
        or was cancelled."""
        if not self.covers(offset) or not self.done(offset) or self.cancelled(offset):
            return False
        at = offset - self.base
        self._done[at >> 3] &= ~(1 << (at & 7)) & 0xFF
        self._low = min(self._low, offset)
        return True

    def low_water(self) -> int:
        """The first offset from ``base`` that is not done (``end`` when all are)."""
        at, limit, done = self._low - self.base, self.end - self.base, self._done
        while at < limit:
            if not at & 7 and at + 8 <= limit and done[at >> 3] == 0xFF:
                at += 8
            elif done[at >> 3] & (1 << (at & 7)):
                at += 1
            else:
                break
        self._low = self.base + min(at, limit)
        return self._low

    def pending_in(self, start: int, stop: int, limit: int) -> list[int]:
        """Up to ``limit`` offsets in [``start``, ``stop``) that are pending scheduled
        records, in order (whole bytes of done offsets are skipped at once)."""
        out: list[int] = []
        at = max(start, self.base) - self.base
        stop = min(stop, self.end) - self.base
        done, topics = self._done, self._topic
        while at < stop and len(out) < limit:
            if not at & 7 and done[at >> 3] == 0xFF:
                at += 8
                continue
            if not done[at >> 3] & (1 << (at & 7)) and topics[at] != NO_TOPIC:
                out.append(self.base + at)
            at += 1
        return out

    def trim(self, new_base: int) -> None:
        """Forget offsets below ``new_base`` (a multiple-of-8 step below it is kept)."""
        drop = ((min(new_base, self.end) - self.base) >> 3) << 3
        if drop <= 0:
            return
        del self._done[: drop >> 3]
        del self._cancelled[: drop >> 3]
        del self._topic[:drop]
        del self._size[:drop]
        self.base += drop
        self._low = max(self._low, self.base)

"""The pending records of one timer partition: by due time (``DueIndex``) and by offset
(``OffsetTable``). Both hold flat arrays of machine integers, never a Python object per
record, so a million pending records cost about 26 MB (``bench/messaging_delay.py``
measures it), not hundreds.

``DueIndex`` is a two-level timing wheel of ``(due_ms, offset)`` pairs:

- *near* buckets of ``NEAR_MS`` (250 ms) hold everything due before the *horizon*, the
  end of the minute after the current one; each bucket is one ``array('q')`` of pairs;
- *far* buckets of ``FAR_MS`` (one minute) hold the rest, one array each (at most 43,200
  for 30 days); ``advance(now)`` moves the horizon on and pours the far buckets it
  passes into near ones, so each entry is copied at most twice in its life.

``pop_due(now, limit)`` returns due entries in (due, offset) order: it sorts one near
bucket at a time (a quarter of a second of entries). Entries are never removed from the
middle: a cancelled or moved record stays until its bucket comes due and is skipped
then (``OffsetTable.done``). ``entries()`` walks everything in (due, offset) order for
listings, sorting one bucket at a time.

``OffsetTable`` covers the timer partition from ``base`` (its log start when rebuilt)
to ``end`` (what the mover has read): per offset, a *done* bit (not pending: moved,
cancelled, or not a scheduled record at all, such as a marker), a *cancelled* bit, the
target topic's id (``int32``, into ``topics``) and the record's size (``int32``).
``low_water()`` is the first offset still pending: the log may start there.

Thread safety: none; the mover uses both from the event loop only.
"""

from __future__ import annotations

import bisect
import heapq
from array import array
from collections.abc import Iterator

NEAR_MS = 250
FAR_MS = 60_000
NO_TOPIC = -1
_MAX_OFFSET = 2**63 - 1


def _pairs(data: array[int]) -> list[tuple[int, int]]:
    it = iter(data)
    return list(zip(it, it, strict=True))


class DueIndex:
    """``(due_ms, offset)`` entries by due time; see the module docstring."""

    def __init__(self, now_ms: int) -> None:
        self._near: dict[int, array[int]] = {}
        self._far: dict[int, array[int]] = {}
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
        if due_ms < self._horizon:
            self._put(self._near, self._near_keys, due_ms // NEAR_MS, due_ms, offset)
        else:
            self._put(self._far, self._far_keys, due_ms // FAR_MS, due_ms, offset)
        self._size += 1

    @staticmethod
    def _put(
        buckets: dict[int, array[int]], keys: list[int], key: int, due: int, offset: int
    ) -> None:
        bucket = buckets.get(key)
        if bucket is None:
            bucket = buckets[key] = array("q")
            heapq.heappush(keys, key)
        bucket.append(due)
        bucket.append(offset)

    def advance(self, now_ms: int) -> None:
        """Move the horizon to ``now_ms``'s, pouring far buckets it passes into near ones."""
        horizon = self._horizon_for(now_ms)
        if horizon <= self._horizon:
            return
        self._horizon = horizon
        while self._far_keys and self._far_keys[0] * FAR_MS < horizon:
            key = heapq.heappop(self._far_keys)
            bucket = self._far.pop(key)
            for due, offset in _pairs(bucket):
                self._put(self._near, self._near_keys, due // NEAR_MS, due, offset)

    def pop_due(self, now_ms: int, limit: int) -> list[tuple[int, int]]:
        """At most ``limit`` entries due at or before ``now_ms``, in (due, offset) order,
        removed from the index."""
        self.advance(now_ms)
        out: list[tuple[int, int]] = []
        while self._near_keys and len(out) < limit:
            key = self._near_keys[0]
            if key * NEAR_MS > now_ms:
                break
            entries = sorted(_pairs(self._near[key]))
            due = bisect.bisect_right(entries, (now_ms, _MAX_OFFSET))
            taken = min(due, limit - len(out))
            out.extend(entries[:taken])
            if taken < len(entries):  # the limit, or the rest is not due yet
                self._near[key] = array("q", [n for pair in entries[taken:] for n in pair])
                break
            del self._near[key]
            heapq.heappop(self._near_keys)
        self._size -= len(out)
        return out

    def next_due(self) -> int | None:
        """The earliest due time held (skipped entries included), or None."""
        for buckets, keys in ((self._near, self._near_keys), (self._far, self._far_keys)):
            if keys:
                return int(min(buckets[keys[0]][0::2]))
        return None

    def entries(self) -> Iterator[tuple[int, int]]:
        """Every entry in (due, offset) order (a snapshot of each bucket as reached)."""
        for buckets, keys in ((self._near, self._near_keys), (self._far, self._far_keys)):
            for key in sorted(keys):
                bucket = buckets.get(key)
                if bucket is not None:
                    yield from sorted(_pairs(bucket))


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
        self._size[at] = size

    def topic_of(self, offset: int) -> str | None:
        found = self._topic[offset - self.base]
        return None if found == NO_TOPIC else self.topics[found]

    def size_of(self, offset: int) -> int:
        return self._size[offset - self.base]

    def done(self, offset: int) -> bool:
        """Not pending: moved, cancelled, not a scheduled record, or below ``base``."""
        if offset < self.base:
            return True
        at = offset - self.base
        return bool(self._done[at >> 3] & (1 << (at & 7)))

    def cancelled(self, offset: int) -> bool:
        at = offset - self.base
        return at >= 0 and bool(self._cancelled[at >> 3] & (1 << (at & 7)))

    def finish(self, offset: int, *, cancelled: bool = False) -> bool:
        """Mark ``offset`` done (and cancelled); False when it already was done."""
        if self.done(offset):
            return False
        at = offset - self.base
        self._done[at >> 3] |= 1 << (at & 7)
        if cancelled:
            self._cancelled[at >> 3] |= 1 << (at & 7)
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

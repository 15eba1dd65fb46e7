"""The process-wide budget of open segment files: one bounded LRU shared by every log.

A segment (``segment.py``) holds file descriptors only while it is *open*: one for its
``.log`` and one per mapped index (Python's ``mmap`` keeps a descriptor of its own for
every mapping). A segment is opened when a read, an append or any maintenance first pins
it (``LogSegment.pin``), and closed again when this cache needs the room, when it sat
unused for longer than housekeeping allows (``close_idle``), or when its log closes or
deletes it. Closing unmaps its indexes, trimming a preallocated one to its entries
first, so an idle active segment leaves no preallocated file behind; reopening maps
them again and appends continue after the last entry.

Contract:

- A pinned segment (``Pin``) is never closed: every use of a segment's descriptors and
  mappings happens under a pin, so closing an unpinned one needs no lock of the segment.
- The descriptors held by open segments stay within ``max_open_files``. When more than
  that are pinned at the same moment, the cache lets the excess stay open rather than
  block (a reader waiting for a descriptor that another waiting reader holds would
  deadlock), and closes the excess as soon as it is unpinned.
- Short-lived descriptors (a checkpoint being written, an index being resized or
  synced, a directory being synced) are not counted; each is closed before the call
  that opened it returns.

Thread safety: one lock guards the LRU, the total, and every segment's pin count and
open state. It may be taken while holding a segment's own lock, never the other way
round, and no file is opened or closed under it except the ``.log`` and mappings of the
segment being opened or closed.
"""

from __future__ import annotations

import logging
import resource
import threading
import time
from collections import OrderedDict, deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dataplane.storage.segment_state import SegmentState

log = logging.getLogger(__name__)

MIN_OPEN_FILES = 16
_MAX_DEFAULT_OPEN_FILES = 16_384  # each mapping also counts against vm.max_map_count
_HEADROOM = 1_024  # left to sockets, checkpoints and everything else of the process


def default_max_open_files() -> int:
    """A budget that fits the process's limit on open files with room for the rest.

    Half of a small limit; otherwise the limit minus 1,024, capped at 16,384.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return _MAX_DEFAULT_OPEN_FILES
    if soft < 2 * _HEADROOM:
        return max(MIN_OPEN_FILES, soft // 2)
    return min(_MAX_DEFAULT_OPEN_FILES, soft - _HEADROOM)


class SegmentFileCache:
    """A bounded LRU of open segments, counted in file descriptors. See the module doc."""

    def __init__(self, max_open_files: int) -> None:
        self._lock = threading.Lock()
        self._open: OrderedDict[SegmentState, None] = OrderedDict()  # least recent first
        self._max_open_files = max(MIN_OPEN_FILES, max_open_files)
        self._open_files = 0
        # Unpinning stamps a segment with the current tick, not a clock reading (cheaper
        # on every read and append); ``close_idle`` starts a new tick and remembers when.
        self._tick = 0
        self._tick_started: deque[tuple[int, float]] = deque([(0, time.monotonic())], 256)
        self.opened = 0  # segments opened since the process started
        self.closed = 0  # ... and closed again

    @property
    def max_open_files(self) -> int:
        return self._max_open_files

    @property
    def open_files(self) -> int:
        """Descriptors held by open segments now."""
        return self._open_files

    @property
    def open_segments(self) -> int:
        return len(self._open)

    def set_max_open_files(self, max_open_files: int) -> None:
        """Change the budget (at least ``MIN_OPEN_FILES``); closes what no longer fits."""
        with self._lock:
            self._max_open_files = max(MIN_OPEN_FILES, max_open_files)
            self._shrink()

    def pin(self, segment: SegmentState) -> Pin:
        """The context manager that pins ``segment`` (``LogSegment.pin`` hands it out)."""
        return Pin(self, segment)

    def adjust(self, segment: SegmentState, change: int) -> None:
        """A pinned segment mapped (+1) or unmapped (-1) an index."""
        with self._lock:
            segment._open_fds += change
            self._open_files += change
            if change > 0:
                self._shrink()

    def retire(self, segment: SegmentState, *, deleted: bool) -> None:
        """The segment is closed for good (or deleted): close its files once unpinned."""
        with self._lock:
            if deleted:
                segment._deleted = True
            else:
                segment._retired = True
            if not segment._pins:
                self._close(segment)

    def close_idle(self, idle_s: float) -> int:
        """Close unpinned segments unused for at least ``idle_s`` seconds (as far as the
        ticks of earlier calls tell); returns how many. ``close_idle(0)`` closes every
        unpinned segment."""
        now = time.monotonic()
        with self._lock:
            self._tick += 1
            self._tick_started.append((self._tick, now))
            # The last tick that ended (the next one started) before the cutoff:
            # segments stamped with it or earlier were last used before the cutoff.
            idle_tick = -1
            for tick, started in self._tick_started:
                if started > now - idle_s:
                    break
                idle_tick = tick - 1
            idle = []
            for segment in self._open:
                if not segment._pins and segment._last_used <= idle_tick:
                    idle.append(segment)
            for segment in idle:
                self._close(segment)
            return len(idle)

    def _shrink(self) -> None:
        """Close least recently used unpinned segments until the budget holds again."""
        excess = self._open_files - self._max_open_files
        if excess <= 0:
            return
        victims = []
        for segment in self._open:
            if not segment._pins:
                victims.append(segment)
                excess -= segment._open_fds
                if excess <= 0:
                    break
        for segment in victims:
            self._close(segment)

    def _close(self, segment: SegmentState) -> None:
        if segment in self._open:
            del self._open[segment]
            self._open_files -= segment._open_fds
            segment._open_fds = 0
            self.closed += 1
        try:
            segment._close_files()
        except OSError:
            log.exception("closing segment %s failed", segment.log_path)


class Pin:
    """Pins a segment for the length of a ``with`` block, opening it first if closed.

    Entering raises ``FileNotFoundError`` for a segment that was deleted or retired, and
    any ``OSError`` opening its files. The first pin of a deferred segment checks its
    indexes (``LogSegment._finish_loading``) outside the cache's lock. One instance per
    segment, holding no state of its own: reads and appends take it on every call, so
    entering and leaving do their work inline.
    """

    __slots__ = ("_cache", "_segment")

    def __init__(self, cache: SegmentFileCache, segment: SegmentState) -> None:
        self._cache = cache
        self._segment = segment

    def __enter__(self) -> SegmentState:
        cache, segment = self._cache, self._segment
        with cache._lock:
            if segment._deleted or segment._retired:
                raise FileNotFoundError(f"segment {segment.log_path} is closed")
            if segment._fd < 0:
                files = segment._open_files()
                segment._open_fds = files
                cache._open_files += files
                cache._open[segment] = None
                cache.opened += 1
                segment._pins += 1
                cache._shrink()
            else:
                cache._open.move_to_end(segment)
                segment._pins += 1
        if segment._deferred:
            try:
                segment._finish_loading()
            except BaseException:
                self.__exit__()
                raise
        return segment

    def __exit__(self, *exc: object) -> None:
        cache, segment = self._cache, self._segment
        with cache._lock:
            segment._pins -= 1
            if segment._pins:
                return
            segment._last_used = cache._tick
            if segment._deleted or segment._retired:
                cache._close(segment)
            elif cache._open_files > cache._max_open_files:
                cache._shrink()


SEGMENT_FILES = SegmentFileCache(default_max_open_files())
"""The cache every segment of the process uses; ``LogManager`` sets its budget."""

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

Interface: the cache drives a segment through ``CachedSegment`` (its ``open_files``,
``close_files`` and ``finish_loading`` hooks), and keeps its own record of each segment
in that segment's ``Pin`` (pin count, descriptors held, last use, closed for good). The
segment reads that record (``Pin.closed_for_good``) but never writes it.

Thread safety: one lock guards the LRU, the total, and every segment's ``Pin`` record
and open state. It may be taken while holding a segment's own lock, never the other way
round, and no file is opened or closed under it except the ``.log`` and mappings of the
segment being opened or closed.
"""

from __future__ import annotations

import logging
import resource
import threading
import time
from collections import OrderedDict, deque
from pathlib import Path
from typing import Protocol

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


class CachedSegment(Protocol):
    """The hooks a segment gives the cache (``LogSegment`` implements them).

    The cache calls ``open_files`` and ``close_files`` under its own lock, and
    ``finish_loading`` outside it, on the first pin while ``loading_deferred`` is true.
    """

    @property
    def log_path(self) -> Path: ...

    @property
    def is_open(self) -> bool: ...

    @property
    def loading_deferred(self) -> bool: ...

    def open_files(self) -> int:
        """Open the segment's files; returns the descriptors now held."""
        ...

    def close_files(self, *, trim: bool) -> None:
        """Close every descriptor and mapping (trimming preallocated indexes if ``trim``)."""
        ...

    def finish_loading(self) -> None:
        """Check (and if need be rebuild) what a deferred load trusted."""
        ...


class SegmentFileCache:
    """A bounded LRU of open segments, counted in file descriptors. See the module doc."""

    def __init__(self, max_open_files: int) -> None:
        self._lock = threading.Lock()
        self._open: OrderedDict[Pin, None] = OrderedDict()  # least recent first
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

    def pin(self, segment: CachedSegment) -> Pin:
        """The segment's ``Pin``: its record here, and the context manager that pins it
        (``LogSegment.pin`` hands it out). One per segment."""
        return Pin(self, segment)

    def adjust(self, pin: Pin, change: int) -> None:
        """A pinned segment mapped (+1) or unmapped (-1) an index."""
        with self._lock:
            pin.open_fds += change
            self._open_files += change
            if change > 0:
                self._shrink()

    def retire(self, pin: Pin, *, deleted: bool) -> None:
        """The segment is closed for good (or deleted): close its files once unpinned.

        A deleted segment's indexes are not trimmed when they close: the files are gone.
        """
        with self._lock:
            if deleted:
                pin.deleted = True
            pin.closed_for_good = True
            if not pin.pins:
                self._close(pin)

    def acquire(self, pin: Pin) -> None:
        """Count one more pin of the segment, opening its files first if it is closed."""
        segment = pin.segment
        with self._lock:
            if pin.closed_for_good:
                raise FileNotFoundError(f"segment {segment.log_path} is closed")
            if segment.is_open:
                self._open.move_to_end(pin)
                pin.pins += 1
                return
            files = segment.open_files()
            pin.open_fds = files
            self._open_files += files
            self._open[pin] = None
            self.opened += 1
            pin.pins += 1
            self._shrink()

    def release(self, pin: Pin) -> None:
        """Count one pin less; the last one may close the segment."""
        with self._lock:
            pin.pins -= 1
            if pin.pins:
                return
            pin.last_used = self._tick
            if pin.closed_for_good:
                self._close(pin)
            elif self._open_files > self._max_open_files:
                self._shrink()

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
            for pin in self._open:
                if not pin.pins and pin.last_used <= idle_tick:
                    idle.append(pin)
            for pin in idle:
                self._close(pin)
            return len(idle)

    def _shrink(self) -> None:
        """Close least recently used unpinned segments until the budget holds again."""
        excess = self._open_files - self._max_open_files
        if excess <= 0:
            return
        victims = []
        for pin in self._open:
            if not pin.pins:
                victims.append(pin)
                excess -= pin.open_fds
                if excess <= 0:
                    break
        for pin in victims:
            self._close(pin)

    def _close(self, pin: Pin) -> None:
        if pin in self._open:
            del self._open[pin]
            self._open_files -= pin.open_fds
            pin.open_fds = 0
            self.closed += 1
        try:
            pin.segment.close_files(trim=not pin.deleted)
        except OSError:
            log.exception("closing segment %s failed", pin.segment.log_path)


class Pin:
    """The cache's record of one segment, and the context manager that pins it.

    ``with pin:`` keeps the segment open (opening it first if closed) for the length of
    the block. Entering raises ``FileNotFoundError`` for a segment that was deleted or
    retired, and any ``OSError`` opening its files. The first pin of a deferred segment
    runs its ``finish_loading`` outside the cache's lock. Reads and appends take the pin
    on every call, so entering and leaving stay small.

    The record (``pins``, ``open_fds``, ``last_used``, ``deleted``, ``closed_for_good``)
    is written only by the cache, under its lock.
    """

    __slots__ = ("_cache", "closed_for_good", "deleted", "last_used", "open_fds", "pins", "segment")

    def __init__(self, cache: SegmentFileCache, segment: CachedSegment) -> None:
        self._cache = cache
        self.segment = segment
        self.pins = 0
        self.open_fds = 0
        self.last_used = 0  # the cache's tick when last unpinned
        self.deleted = False
        self.closed_for_good = False  # retired or deleted: nothing reopens it

    def __enter__(self) -> None:
        self._cache.acquire(self)
        segment = self.segment
        if segment.loading_deferred:
            try:
                segment.finish_loading()
            except BaseException:
                self._cache.release(self)
                raise

    def __exit__(self, *exc: object) -> None:
        self._cache.release(self)


SEGMENT_FILES = SegmentFileCache(default_max_open_files())
"""The cache every segment of the process uses; ``LogManager`` sets its budget."""

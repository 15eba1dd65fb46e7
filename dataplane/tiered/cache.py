"""A bounded, least-recently-used cache of immutable objects' bytes (chunks of remote
segments and their whole indexes), shared by every read of one ``RemoteLogReader``.

Bounded by bytes (``capacity_bytes``, the sum of the values kept): an insert evicts the
least recently used values until the new one fits; a value larger than the whole budget
is returned to its reader and not kept. Remote objects never change under a key, so a
cached value is never stale and nothing expires but by eviction.

A miss loads once: readers that ask for a key while another thread loads it wait for
that load and share its result (or its failure) instead of fetching the same bytes
again; they count as hits, since no fetch was made for them. ``stats()`` reports hits,
misses (loads), evictions and what is held, for the broker's metrics.

Thread safety: any number of threads may call any method; loads run outside the lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class CacheStats:
    hits: int
    misses: int
    evictions: int
    entries: int
    size_bytes: int
    capacity_bytes: int

    @property
    def hit_rate(self) -> float:
        """Hits per lookup (0.0 before the first)."""
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0


@dataclass(slots=True)
class _Load:
    """A load in progress, which later askers wait for."""

    done: threading.Event = field(default_factory=threading.Event)
    value: bytes = b""
    error: BaseException | None = None


class ByteCache:
    """See the module docstring."""

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"a cache of {capacity_bytes} bytes")
        self.capacity_bytes = capacity_bytes
        self._lock = threading.Lock()
        self._values: OrderedDict[Hashable, bytes] = OrderedDict()
        self._loading: dict[Hashable, _Load] = {}
        self._size_bytes = 0
        self._hits = self._misses = self._evictions = 0

    def get(self, key: Hashable, load: Callable[[], bytes]) -> bytes:
        """The value under ``key``, loaded by ``load()`` (once) when it is not held;
        what ``load`` raises is raised to every thread that waited for it."""
        with self._lock:
            value = self._values.get(key)
            if value is not None:
                self._values.move_to_end(key)
                self._hits += 1
                return value
            pending = self._loading.get(key)
            if pending is None:
                self._loading[key] = mine = _Load()
                self._misses += 1
            else:
                self._hits += 1
        if pending is not None:
            pending.done.wait()
            if pending.error is not None:
                raise pending.error
            return pending.value
        return self._load(key, mine, load)

    def _load(self, key: Hashable, mine: _Load, load: Callable[[], bytes]) -> bytes:
        try:
            mine.value = load()
        except BaseException as exc:
            mine.error = exc
            raise
        finally:
            with self._lock:
                del self._loading[key]
                if mine.error is None:
                    self._keep(key, mine.value)
            mine.done.set()
        return mine.value

    def _keep(self, key: Hashable, value: bytes) -> None:
        """Insert under the lock, evicting the least recently used to make room."""
        if len(value) > self.capacity_bytes:
            return
        while self._values and self._size_bytes + len(value) > self.capacity_bytes:
            _, evicted = self._values.popitem(last=False)
            self._size_bytes -= len(evicted)
            self._evictions += 1
        self._values[key] = value
        self._size_bytes += len(value)

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                hits=self._hits,
                misses=self._misses,
                evictions=self._evictions,
                entries=len(self._values),
                size_bytes=self._size_bytes,
                capacity_bytes=self.capacity_bytes,
            )

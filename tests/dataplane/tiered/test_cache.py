"""ByteCache: bounded by bytes, least recently used out first, one load per missing key."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from dataplane.tiered.cache import ByteCache


def test_keeps_at_most_its_budget_evicting_the_least_recently_used() -> None:
    cache = ByteCache(capacity_bytes=30)
    loads: list[str] = []

    def loader(key: str) -> Callable[[], bytes]:
        def load() -> bytes:
            loads.append(key)
            return key.encode() * 10

        return load

    for key in "abc":
        cache.get(key, loader(key))
    cache.get("a", loader("a"))  # held: now the most recently used
    cache.get("d", loader("d"))  # evicts b, the least recently used
    cache.get("b", loader("b"))  # evicts c
    assert loads == ["a", "b", "c", "d", "b"]
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.evictions) == (1, 5, 2)
    assert (stats.entries, stats.size_bytes) == (3, 30)


def test_a_value_over_the_budget_is_returned_not_kept() -> None:
    cache = ByteCache(capacity_bytes=10)
    cache.get("small", lambda: b"12345")
    assert cache.get("big", lambda: b"x" * 11) == b"x" * 11
    stats = cache.stats()
    assert (stats.entries, stats.size_bytes, stats.evictions) == (1, 5, 0)


def test_concurrent_askers_of_a_missing_key_share_one_load() -> None:
    cache = ByteCache(capacity_bytes=100)
    release, loads = threading.Event(), []

    def load() -> bytes:
        loads.append(1)
        release.wait(10)
        return b"value"

    results: list[bytes] = []
    threads = [
        threading.Thread(target=lambda: results.append(cache.get("k", load))) for _ in range(5)
    ]
    for thread in threads:
        thread.start()
    while cache.stats().hits + cache.stats().misses < 5:
        threading.Event().wait(0.001)
    release.set()
    for thread in threads:
        thread.join()
    assert results == [b"value"] * 5
    assert loads == [1]
    assert (cache.stats().misses, cache.stats().hits) == (1, 4)


def test_a_failed_load_raises_and_is_not_kept() -> None:
    cache = ByteCache(capacity_bytes=100)

    def fail() -> bytes:
        raise OSError("store down")

    with pytest.raises(OSError, match="store down"):
        cache.get("k", fail)
    assert cache.get("k", lambda: b"later") == b"later"
    assert cache.stats().misses == 2

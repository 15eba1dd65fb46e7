"""Choosing a record's partition.

- ``murmur2`` (the default, as Kafka's default partitioner): a keyed record goes to
  ``toPositive(murmur2(key)) % partitions`` (``dataplane.hashing.partition_for_key``), so
  keys land where Kafka's Java client would put them; keyless records stick to one
  partition until its batch fills, then move to another (Kafka's sticky behaviour).
- ``sticky``: every record sticks to one partition until its batch fills, keys ignored.
- ``round_robin``: partitions in turn, record by record, keys ignored (Kafka's
  ``RoundRobinPartitioner``).
- a callable ``fn(topic, key, partitions) -> int``.

The accumulator keeps each topic's sticky partition and moves it, for the records the
partitioner's ``sticky`` names, when the batch there is full, before it opens another
(so the record that did not fit goes to the new partition); it calls ``partition``,
under its lock, for the other records.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Final, Protocol, TypeAlias

from dataplane.hashing import partition_for_key

PartitionerFn: TypeAlias = Callable[[str, bytes | None, int], int]

_KEY_CACHE_SIZE: Final = 1 << 16


STICKY_NONE: Final = 0  # every record asks ``partition``
STICKY_KEYLESS: Final = 1  # keyless records stick; keyed ones ask ``partition``
STICKY_ALL: Final = 2  # every record sticks


class Partitioner(Protocol):
    """``sticky`` says which records the accumulator keeps on its sticky choice."""

    sticky: int

    def partition(self, topic: str, key: bytes | None, available: Sequence[int], count: int) -> int:
        """The partition of a record; ``available`` have a known leader (maybe none)."""


def choose_sticky(available: Sequence[int], count: int, avoid: int = -1) -> int:
    """A random partition with a leader other than ``avoid`` (any one, if none has)."""
    pool = [p for p in available if p != avoid and p < count]
    if not pool:
        pool = [p for p in range(count) if p != avoid] or [0]
    return random.choice(pool)


class Murmur2Partitioner:
    """Kafka's default: murmur2 of the key; keyless records sticky per batch."""

    sticky = STICKY_KEYLESS

    def __init__(self) -> None:
        self._hashes: dict[tuple[bytes, int], int] = {}

    def partition(self, topic: str, key: bytes | None, available: Sequence[int], count: int) -> int:
        if key is None:
            return choose_sticky(available, count)
        hashes = self._hashes
        partition = hashes.get((key, count))
        if partition is None:
            if len(hashes) >= _KEY_CACHE_SIZE:
                hashes.clear()
            partition = hashes[key, count] = partition_for_key(key, count)
        return partition


class StickyPartitioner:
    """One partition per topic until its batch fills; keys are ignored."""

    sticky = STICKY_ALL

    def partition(self, topic: str, key: bytes | None, available: Sequence[int], count: int) -> int:
        return choose_sticky(available, count)


class RoundRobinPartitioner:
    """Each topic's partitions in turn, preferring those with a leader; keys ignored."""

    sticky = STICKY_NONE

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, available: Sequence[int], count: int) -> int:
        turn = self._next.get(topic, 0)
        self._next[topic] = turn + 1
        if available:
            return available[turn % len(available)]
        return turn % count


class CallablePartitioner:
    """A user function ``fn(topic, key, partitions) -> partition``."""

    sticky = STICKY_NONE

    def __init__(self, fn: PartitionerFn) -> None:
        self._fn = fn

    def partition(self, topic: str, key: bytes | None, available: Sequence[int], count: int) -> int:
        return self._fn(topic, key, count)


PARTITIONERS: Final[dict[str, Callable[[], Partitioner]]] = {
    "murmur2": Murmur2Partitioner,
    "sticky": StickyPartitioner,
    "round_robin": RoundRobinPartitioner,
}


def make_partitioner(spec: str | PartitionerFn | Partitioner) -> Partitioner:
    """The partitioner named ``spec``, or one wrapping a callable."""
    if isinstance(spec, str):
        factory = PARTITIONERS.get(spec)
        if factory is None:
            names = ", ".join(sorted(PARTITIONERS))
            raise ValueError(f"unknown partitioner {spec!r}: use one of {names} or a callable")
        return factory()
    if hasattr(spec, "partition") and hasattr(spec, "sticky"):
        return spec
    if callable(spec):
        return CallablePartitioner(spec)
    raise TypeError(f"partitioner must be a name or a callable, not {type(spec).__name__}")

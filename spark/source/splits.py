"""Split planning: which pieces of which partitions a read covers, without Spark.

A ``Split`` is one Spark input partition: the offsets ``[start, end)`` of one topic
partition, read either from one sealed segment in the object store (``source`` "store",
carrying the manifest trimmed to that segment, so a task reads exactly what planning
saw) or through the brokers' Fetch (``source`` "tail": what lies past the store's end, up
to the high watermark seen at planning).

``plan_splits(options, filters)`` is the batch plan, a pure function of the options, the
filters and what the store and brokers hold; ``Planner`` is its machinery, shared with the
streaming reader (``ranges`` of per-partition offsets).

Filters (``pushdown``): ``topic`` and ``partition`` (``=``, ``IN``) and ``offset``
(``<``, ``<=``, ``>``, ``>=``, ``=``) are applied exactly, by dropping splits and clipping
their ranges, and not handed back to Spark; ``timestamp`` lower bounds (``>``, ``>=``,
``=``) drop the segments whose max timestamp is below them and are handed back (Spark
filters the rows). Timestamp upper bounds prune nothing: a segment's records may carry
timestamps below its first batch's (producers set them), and the manifest keeps no
minimum. Every other filter is handed back.

Thread safety: a ``Planner`` is used from one thread; splits are immutable and picklable.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from dataplane.client import TopicPartition
from dataplane.tiered.layout import Manifest, RemoteSegment
from dataplane.tiered.reader import TopicStoreReader
from dataplane.tiered.remote_log import RemoteLogReader
from lanes.names import split_topic
from spark.source.options import EARLIEST, LATEST, Bound, SourceOptions
from spark.source.tail import Brokers

STORE: Final = "store"
TAIL: Final = "tail"
# Index objects read while resolving timestamps to offsets at planning.
_INDEX_CACHE_BYTES: Final = 16 * 1024 * 1024
_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Split(InputPartition):
    """One Spark input partition; see the module docstring."""

    topic: str
    partition: int
    start: int
    end: int
    source: str
    manifest: Manifest | None = None  # STORE: the manifest listing only this segment

    @property
    def segment(self) -> RemoteSegment:
        assert self.manifest is not None, "a tail split has no segment"
        return self.manifest.segments[0]


@dataclass(frozen=True)
class Pushdown:
    """What the accepted filters allow: ``None`` is no restriction."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    offset_low: int = 0
    offset_high: int | None = None
    timestamp_low_ms: int | None = None

    @classmethod
    def of(cls, filters: Iterable[Filter]) -> tuple[Pushdown, list[Filter]]:
        """The restriction ``filters`` make, and those Spark must still apply."""
        pushdown, rejected = cls(), []
        for item in filters:
            narrowed, exact = pushdown._with(item)
            if narrowed is None or not exact:
                rejected.append(item)
            pushdown = narrowed or pushdown
        return pushdown, rejected

    def _with(self, item: Filter) -> tuple[Pushdown | None, bool]:
        """This narrowed by ``item`` (None: not understood) and whether it is exact."""
        column = getattr(item, "attribute", ())
        value = getattr(item, "value", None)
        if column == ("topic",):
            values = _values(item, str)
            return (None, False) if values is None else (self._topics(values), True)
        if column == ("partition",):
            values = _values(item, int)
            return (None, False) if values is None else (self._partitions(values), True)
        if column == ("offset",) and isinstance(value, int) and not isinstance(value, bool):
            return self._offsets(item, value), True
        if column == ("timestamp",):
            return self._timestamp(item, value), False
        return None, False

    def _topics(self, values: frozenset[Any]) -> Pushdown:
        topics = values if self.topics is None else self.topics & values
        return replace(self, topics=topics)

    def _partitions(self, values: frozenset[Any]) -> Pushdown:
        partitions = values if self.partitions is None else self.partitions & values
        return replace(self, partitions=partitions)

    def _offsets(self, item: Filter, value: int) -> Pushdown | None:
        low, high = _interval(item, value)
        if low is None and high is None:
            return None
        new_low = self.offset_low if low is None else max(self.offset_low, low)
        new_high = self.offset_high
        if high is not None:
            new_high = high if new_high is None else min(new_high, high)
        return replace(self, offset_low=new_low, offset_high=new_high)

    def _timestamp(self, item: Filter, value: object) -> Pushdown | None:
        millis = _epoch_ms(value)
        low = None if millis is None else _interval(item, millis)[0]
        if low is None:
            return None
        current = self.timestamp_low_ms
        return replace(self, timestamp_low_ms=low if current is None else max(current, low))

    def keeps(self, topic: str, partition: int) -> bool:
        return (self.topics is None or topic in self.topics) and (
            self.partitions is None or partition in self.partitions
        )

    def keeps_segment(self, segment: RemoteSegment) -> bool:
        low = self.timestamp_low_ms
        return low is None or segment.max_timestamp < 0 or segment.max_timestamp >= low

    def clip(self, start: int, end: int) -> tuple[int, int]:
        high = end if self.offset_high is None else min(end, self.offset_high)
        return max(start, self.offset_low), high


def _values(item: Filter, kind: type) -> frozenset[Any] | None:
    if isinstance(item, EqualTo | EqualNullSafe):
        values: tuple[Any, ...] = (item.value,)
    elif isinstance(item, In):
        values = tuple(item.value)
    else:
        return None
    if not all(isinstance(v, kind) and not isinstance(v, bool) for v in values):
        return None
    return frozenset(values)


def _interval(item: Filter, value: int) -> tuple[int | None, int | None]:
    """``[low, high)`` of the integers ``item`` keeps (None: unbounded on that side)."""
    if isinstance(item, EqualTo | EqualNullSafe):
        return value, value + 1
    if isinstance(item, GreaterThan):
        return value + 1, None
    if isinstance(item, GreaterThanOrEqual):
        return value, None
    if isinstance(item, LessThan):
        return None, value
    if isinstance(item, LessThanOrEqual):
        return None, value + 1
    return None, None


def _epoch_ms(value: object) -> int | None:
    """A timestamp literal in whole ms, rounded down (a naive one is UTC: the session's
    zone); rounding down only widens a lower bound, so pruning stays safe."""
    if not isinstance(value, dt.datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return (value - _EPOCH) // dt.timedelta(milliseconds=1)


class Planner:
    """Resolves options against the store and the brokers into splits."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.store = (
            TopicStoreReader(options.store, options.store_options) if options.store else None
        )
        self.brokers = Brokers(options.bootstrap, options.token) if options.bootstrap else None
        self._manifests: dict[TopicPartition, Manifest | None] = {}

    def close(self) -> None:
        if self.brokers is not None:
            self.brokers.close()

    def __enter__(self) -> Planner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what is read ---------------------------------------------------------------------
    def topics(self) -> list[str]:
        """The topics read: those the options name (from the brokers' listing, which
        shows only what the token may see, when brokers are given; else the store's),
        with their lane topics when ``includeLanes``."""
        options = self.options
        known = self.brokers.topics() if self.brokers is not None else self._store_topics()
        if options.topic is not None and options.topic not in known:
            known = [*known, options.topic]  # the store or brokers say why it is missing
        chosen = []
        for name in sorted(set(known)):
            trunk, lane = split_topic(name)
            if options.matches(trunk) and (lane is None or options.include_lanes):
                chosen.append(name)
        return chosen

    def _store_topics(self) -> list[str]:
        assert self.store is not None
        return self.store.topics()

    def topic_partitions(self, pushdown: Pushdown = Pushdown()) -> list[TopicPartition]:
        return [
            TopicPartition(topic, p)
            for topic in self.topics()
            if pushdown.topics is None or topic in pushdown.topics
            for p in self.partitions(topic)
            if pushdown.keeps(topic, p)
        ]

    def partitions(self, topic: str) -> list[int]:
        if self.brokers is not None:
            return self.brokers.partitions(topic)
        assert self.store is not None
        return self.store.partitions(topic)

    def manifest(self, tp: TopicPartition) -> Manifest | None:
        """The partition's manifest in the store (None: no store, or not tiered there)."""
        if tp not in self._manifests:
            self._manifests[tp] = self._read_manifest(tp)
        return self._manifests[tp]

    def _read_manifest(self, tp: TopicPartition) -> Manifest | None:
        if self.store is None:
            return None
        try:
            manifest = self.store.manifest(tp.topic, tp.partition)
        except LookupError:
            if self.brokers is None:
                raise
            return None  # a topic the brokers have and the store does not (not tiered)
        return None if manifest.is_empty else manifest

    # -- offsets --------------------------------------------------------------------------
    def earliest_and_latest(
        self, tps: Sequence[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """Per partition its first offset kept and its end: the high watermark when
        brokers are given, else the store's end."""
        if self.brokers is not None:
            firsts = self.brokers.offsets(dict.fromkeys(tps, EARLIEST))
            ends = self.brokers.offsets(dict.fromkeys(tps, LATEST))
            return {tp: (firsts[tp], ends[tp]) for tp in tps}
        out = {}
        for tp in tps:
            manifest = self.manifest(tp)
            out[tp] = (
                (0, 0) if manifest is None else (manifest.log_start_offset, manifest.end_offset)
            )
        return out

    def resolve(
        self,
        bound: Bound,
        tps: Sequence[TopicPartition],
        limits: Mapping[TopicPartition, tuple[int, int]],
    ) -> dict[TopicPartition, int]:
        """Per partition the offset ``bound`` names, within ``limits`` (earliest, latest)."""
        if bound.timestamp_ms is not None:
            return self._at_timestamp(bound.timestamp_ms, tps, limits)
        out = {}
        for tp in tps:
            first, last = limits[tp]
            spec = bound.offset_for(tp.topic, tp.partition)
            out[tp] = first if spec == EARLIEST else last if spec == LATEST else spec
            out[tp] = min(max(out[tp], first), last)
        return out

    def _at_timestamp(
        self,
        timestamp_ms: int,
        tps: Sequence[TopicPartition],
        limits: Mapping[TopicPartition, tuple[int, int]],
    ) -> dict[TopicPartition, int]:
        """Per partition the first offset whose timestamp is >= ``timestamp_ms`` (Kafka's
        rule: the store's time index, then the brokers'), else its end."""
        out: dict[TopicPartition, int] = {}
        remote = RemoteLogReader(self.store.store, _INDEX_CACHE_BYTES) if self.store else None
        for tp in tps:
            manifest = self.manifest(tp)
            found = None
            if remote is not None and manifest is not None:
                found = remote.offset_for_timestamp(manifest, timestamp_ms)
            if found is not None:
                out[tp] = found
        rest = [tp for tp in tps if tp not in out]
        if self.brokers is not None:
            asked = self.brokers.offsets(dict.fromkeys(rest, timestamp_ms))
            out.update({tp: offset for tp, offset in asked.items() if offset >= 0})
        for tp in tps:
            first, last = limits[tp]
            out[tp] = min(max(out.get(tp, last), first), last)
        return out

    # -- splits ---------------------------------------------------------------------------
    def splits(
        self, tp: TopicPartition, start: int, end: int, pushdown: Pushdown = Pushdown()
    ) -> Iterator[Split]:
        """The splits of ``[start, end)`` of one partition, within ``pushdown``: one per
        store segment it overlaps, then one tail split past the store's end."""
        start, end = pushdown.clip(start, end)
        if start >= end:
            return
        manifest = self.manifest(tp)
        store_end = start
        if manifest is not None:
            start = max(start, manifest.log_start_offset)
            store_end = max(start, min(end, manifest.end_offset))
            for segment in manifest.segments:
                low, high = max(start, segment.start_offset), min(store_end, segment.end_offset)
                if low < high and pushdown.keeps_segment(segment):
                    trimmed = replace(manifest, segments=(segment,))
                    yield Split(tp.topic, tp.partition, low, high, STORE, trimmed)
        if self.brokers is not None and store_end < end:
            yield Split(tp.topic, tp.partition, store_end, end, TAIL)


def plan_splits(
    options: SourceOptions | Mapping[str, str], filters: Sequence[Filter] = ()
) -> list[Split]:
    """The splits a batch read of ``options`` with ``filters`` pushed plans."""
    parsed = options if isinstance(options, SourceOptions) else SourceOptions.parse(options)
    return batch_splits(parsed, Pushdown.of(filters)[0])


def batch_splits(options: SourceOptions, pushdown: Pushdown) -> list[Split]:
    with Planner(options) as planner:
        tps = planner.topic_partitions(pushdown)
        limits = planner.earliest_and_latest(tps)
        starts = planner.resolve(options.starting, tps, limits)
        ends = planner.resolve(options.ending, tps, limits)
        return [split for tp in tps for split in planner.splits(tp, starts[tp], ends[tp], pushdown)]

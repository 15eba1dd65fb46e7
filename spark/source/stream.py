"""The Structured Streaming reader: offsets per partition, split per segment.

An offset is ``{"<topic>/<partition>": next_offset}`` (JSON, in Spark's checkpoint).
``initialOffset`` resolves ``startingOffsets`` / ``startingTimestamp`` (default:
``latest``, as Kafka's source); ``latestOffset`` is each partition's end: the store's
(sealed segments only) or, with ``bootstrap``, the high watermark (the tail read through
Fetch). ``partitions(start, end)`` plans the same splits a batch read of that range does;
a partition first seen in ``end`` (a new topic matching ``topicPattern``, a new lane
topic) starts at its earliest offset. Offsets never go backwards: an end below the start
(a store that lost its newest manifest) reads nothing until the store is back past it,
and a partition of the start that is not visible now (its topic briefly unlisted) keeps
its offset, so it resumes there, not at its earliest, when it is back.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from dataplane.client import TopicPartition
from spark.source.options import SourceOptions
from spark.source.reader import read_split
from spark.source.splits import Planner, Split


def offset_key(tp: TopicPartition) -> str:
    return f"{tp.topic}/{tp.partition}"


def parse_key(key: str) -> TopicPartition:
    topic, _, partition = key.rpartition("/")
    return TopicPartition(topic, int(partition))


class MeridianStreamReader(DataSourceStreamReader):
    """See the module docstring. Picklable: the options only."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 (Spark's name)
        with Planner(self.options) as planner:
            tps = planner.topic_partitions()
            limits = planner.earliest_and_latest(tps)
            starts = planner.resolve(self.options.starting, tps, limits)
        return {offset_key(tp): offset for tp, offset in starts.items()}

    def latestOffset(self, *args: Any) -> dict[str, int]:  # noqa: N802 (Spark's name)
        """Spark 4.2+ passes ``(start, limit)``, 4.1 nothing: every limit reads all."""
        start: Mapping[str, int] = args[0] if args else {}
        with Planner(self.options) as planner:
            tps = planner.topic_partitions()
            limits = planner.earliest_and_latest(tps)
        latest = {offset_key(tp): last for tp, (_, last) in limits.items()}
        ends = {**start, **latest}
        return {key: max(offset, start.get(key, offset)) for key, offset in ends.items()}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        with Planner(self.options) as planner:
            new = [parse_key(key) for key in end if key not in start]
            firsts = {
                offset_key(tp): first for tp, (first, _) in planner.earliest_and_latest(new).items()
            }
            splits: list[Split] = []
            for key, stop in end.items():
                begin = start.get(key, firsts.get(key, stop))
                splits += planner.splits(parse_key(key), begin, stop)
        return splits

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Split), partition
        return read_split(self.options, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the store and the brokers keep no reader state."""

"""The batch reader: splits planned on the driver, read as Arrow batches in the tasks.

``MeridianReader`` takes the filters it can apply (``splits.Pushdown``) and hands the
others back to Spark, plans with ``splits.batch_splits`` and reads each split with
``read_split``: a store split through ``spark.columns.segment_batches`` (control batches
skipped), a tail split through the brokers' Fetch with the caller's token
(``tail.read_tail``). Batches follow ``spark.columns.SCHEMA``; never Python rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from dataplane.tiered.reader import TopicStoreReader
from spark import columns
from spark.source.options import SourceOptions
from spark.source.splits import STORE, Pushdown, Split, batch_splits
from spark.source.tail import read_tail


class MeridianReader(DataSourceReader):
    """See the module docstring. Picklable: options and the pushdown only."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.pushdown = Pushdown()

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802 (Spark's name)
        if not self.options.push_filters:
            return iter(filters)  # Spark applies them all; no split is pruned
        self.pushdown, rejected = Pushdown.of(filters)
        return iter(rejected)

    def partitions(self) -> Sequence[InputPartition]:
        return batch_splits(self.options, self.pushdown)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, Split):
            return iter(())  # Spark's stand-in when the plan has no split
        return read_split(self.options, partition)


def read_split(options: SourceOptions, split: Split) -> Iterator[pa.RecordBatch]:
    """The records of one split as batches of ``spark.columns.SCHEMA``."""
    if split.source == STORE:
        assert options.store is not None
        assert split.manifest is not None
        store = TopicStoreReader(options.store, options.store_options)
        yield from columns.segment_batches(
            store,
            split.topic,
            split.partition,
            split.manifest,
            split.segment,
            split.start,
            split.end,
        )
        return
    assert options.bootstrap is not None, "a tail split needs bootstrap"
    yield from read_tail(
        options.bootstrap, options.token, split.topic, split.partition, split.start, split.end
    )

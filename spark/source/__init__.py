"""The ``meridian`` PySpark data source: topics as DataFrames, batch and streaming.

```python
df = (spark.read.format("meridian")
      .option("topic", "acme.orders")
      .option("store", "s3://meridian-tier/prod")
      .option("storeOptions", json.dumps({"client_kwargs": {"endpoint_url": ...}}))
      .load())                         # columns: spark.columns.DDL
```

Options: ``options.py``; splits and filter pushdown: ``splits.py``; the batch reader:
``reader.py``; the streaming reader: ``stream.py``; the brokers' tail: ``tail.py``.
``spark.session.local_session()`` registers it. docs/spark.md says it all in prose.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from spark import columns
from spark.source.options import SourceOptionError, SourceOptions
from spark.source.reader import MeridianReader
from spark.source.splits import Split, plan_splits
from spark.source.stream import MeridianStreamReader

__all__ = ["MeridianDataSource", "SourceOptionError", "SourceOptions", "Split", "plan_splits"]


class MeridianDataSource(DataSource):
    """``spark.read.format("meridian")`` and ``spark.readStream.format("meridian")``."""

    @classmethod
    def name(cls) -> str:
        return "meridian"

    def schema(self) -> str:
        return columns.DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return MeridianReader(SourceOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        return MeridianStreamReader(SourceOptions.parse(self.options, streaming=True))

"""The secondary-index build job: ``python -m spark.jobs.index --spec FILE [--continuous
--interval-s N]`` (``spark.jobs.run`` says how a run goes; ``spark.index`` what it
writes)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from dataplane.tiered.reader import TopicStoreReader
from spark import index
from spark.chunks import Chunk, Plan
from spark.jobs import run
from spark.jobs.spec import Field, IndexSpec
from spark.manifests import OutputManifest
from spark.output import ChunkResult

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def columns(
    spec: IndexSpec, latest: OutputManifest, reader: TopicStoreReader, plan: Plan
) -> tuple[tuple[Field, ...], bool]:
    """An index always declares its fields."""
    return spec.fields, False


def task(spec: IndexSpec, fields: tuple[Field, ...], chunk: Chunk) -> ChunkResult:
    return index.index_chunk(spec, chunk)


JOB = run.Job(
    kind="index",
    load=IndexSpec.from_json,
    check=index.check_spec,
    definition=index.definition,
    task=task,
    columns=columns,
)


def main(argv: list[str] | None = None, spark: SparkSession | None = None) -> int:
    return run.main(JOB, argv, spark)


if __name__ == "__main__":
    sys.exit(main())

"""The Parquet export job: ``python -m spark.jobs.export --spec FILE [--continuous
--interval-s N]`` (``spark.jobs.run`` says how a run goes; ``spark.export`` what it
writes). A ``json`` export without declared fields infers them on its first run from the
first chunk of every partition (``spark.fields.infer_fields``) and keeps them, in its
manifest, for every later run."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from dataplane.tiered.reader import TopicStoreReader
from spark import export
from spark.chunks import Plan, chunk_table
from spark.fields import infer_fields
from spark.jobs import run
from spark.jobs.spec import ExportSpec, Field
from spark.manifests import OutputManifest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

INFER_SAMPLE_ROWS = 1000


def columns(
    spec: ExportSpec, latest: OutputManifest, reader: TopicStoreReader, plan: Plan
) -> tuple[tuple[Field, ...], bool]:
    """The fields to write: the manifest's once one is committed, else the declared ones,
    else (``json``) the ones inferred from a sample; and whether they were inferred."""
    if latest.version:
        return latest.fields, latest.inferred
    if spec.fields or spec.value_format != "json":
        return spec.fields, False
    values: list[bytes | None] = []
    for chunk in run.sample_chunks(plan):
        values.extend(chunk_table(reader, chunk).column("value").to_pylist()[:INFER_SAMPLE_ROWS])
    return infer_fields(values, export.RESERVED), True


JOB = run.Job(
    kind="export",
    load=ExportSpec.from_json,
    check=export.check_spec,
    definition=export.definition,
    task=export.export_chunk,
    columns=columns,
)


def main(argv: list[str] | None = None, spark: SparkSession | None = None) -> int:
    return run.main(JOB, argv, spark)


if __name__ == "__main__":
    sys.exit(main())

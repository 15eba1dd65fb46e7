"""The one shape of every Meridian Spark job: plan on the driver, write in tasks, commit.

A run (``run_once``):

1. reads the target's latest manifest (``spark.manifests``; a target written for another
   definition fails the run);
2. plans the chunks past what it covers (``spark.chunks.plan``: sealed segments in the
   store only, so a re-run plans the same chunks);
3. runs one Spark task per chunk, which reads the chunk from the store and writes its
   files under names made of its offset range (``Job.task``);
4. commits the next manifest version listing the files and the new covered ends; a run
   that loses this commit to an overlapping run fails with ``OverlappingRunError``.

The transforms are pure functions of Arrow tables run inside the tasks (``spark.export``,
``spark.index``), not DataFrame transforms ending in ``df.write``: a file's name must
carry its chunk's offset range and its content be a function of that chunk alone, and
the commit must be one exclusive create, none of which Spark's writers give (their
files are named ``part-<n>-<uuid>``, and pyspark ships no S3 filesystem).

A run killed anywhere before step 4 committed nothing: the next run plans the same
chunks and writes the same files again. ``main`` parses ``--spec FILE`` (and
``--continuous --interval-s N``: one session, a run every N seconds until SIGTERM) and
prints each run's ``JobResult`` as one JSON line, the last line being the final one;
its exit status is 0 when that run succeeded, else 1.
"""

from __future__ import annotations

import argparse
import functools
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dataplane.tiered.reader import TopicStoreReader
from dataplane.tiered.store import ObjectStore
from spark import chunks, manifests
from spark.chunks import Chunk, Plan
from spark.jobs.spec import ExportSpec, Field, IndexSpec, JobResult
from spark.manifests import OutputManifest
from spark.output import ChunkResult

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Spec = ExportSpec | IndexSpec


@dataclass(frozen=True)
class Job:
    """What differs between jobs: their kind, checks, definition, columns and task."""

    kind: str  # "export" | "index"
    load: Callable[[str], Spec]
    check: Callable[[Any], None]
    definition: Callable[[Any], dict[str, Any]]
    task: Callable[..., ChunkResult]  # (spec, fields, chunk) -> ChunkResult
    # the fields to write: (spec, latest manifest, reader, plan) -> (fields, inferred)
    columns: Callable[[Any, OutputManifest, TopicStoreReader, Plan], tuple[tuple[Field, ...], bool]]


class NothingToInferError(ValueError):
    """A ``json`` export without declared fields whose first records hold no field to
    infer (tombstones, non-JSON, not objects): committing no columns would export every
    later record without its value, so the run fails and commits nothing."""


def run_once(spark: SparkSession, job: Job, spec: Spec) -> JobResult:
    """One run (see the module docstring); raises on failure."""
    job.check(spec)
    target = ObjectStore.open(spec.target_uri, spec.target_options)
    latest = manifests.latest(target, job.kind, job.definition(spec))
    reader = TopicStoreReader(spec.store_uri, spec.store_options)
    topics = chunks.source_topics(reader, spec.topic, spec.include_lanes)
    plan = chunks.plan(reader, topics, latest.covered)
    if not plan.covered:
        return JobResult("succeeded", latest.version, dict(latest.covered))
    fields, inferred = job.columns(spec, latest, reader, plan)
    if inferred and not fields:
        if not plan.chunks:  # nothing sealed to infer from yet: commit nothing, wait
            return JobResult("succeeded", latest.version, dict(latest.covered))
        raise NothingToInferError(
            "no field could be inferred from the sampled records (none is a JSON object "
            "with a field): declare the export's fields"
        )
    task = functools.partial(job.task, spec, fields)
    results: list[ChunkResult] = []
    if plan.chunks:
        # One partition per chunk, so a task is a chunk (see the module docstring).
        rdd = spark.sparkContext.parallelize(plan.chunks, len(plan.chunks))
        results = rdd.map(task).collect()
    files = [f for result in results for f in result.files]
    added = _sum([result.counts for result in results])
    base = replace(latest, fields=fields, inferred=inferred)
    committed = base.next_version(
        files, plan.covered, plan.skipped, added, now_ms=int(time.time() * 1000)
    )
    manifests.commit(target, committed)
    return JobResult(
        "succeeded",
        committed.version,
        dict(committed.covered),
        rows=added.get("rows", 0),
        bytes=added.get("bytes", 0),
        files=added.get("files", 0),
        dead_letter_rows=added.get("dead_letter_rows", 0),
    )


def main(job: Job, argv: list[str] | None, spark: SparkSession | None = None) -> int:
    """Parse ``argv``, run (once or continuously), print the results; the exit status."""
    parser = argparse.ArgumentParser(prog=f"python -m spark.jobs.{job.kind}")
    parser.add_argument("--spec", required=True, help="the job's JSON specification")
    parser.add_argument("--continuous", action="store_true", help="run again until SIGTERM")
    parser.add_argument("--interval-s", type=float, default=60.0, help="between runs")
    args = parser.parse_args(argv)
    try:
        spec = job.load(Path(args.spec).read_text())
    except (OSError, ValueError, TypeError) as exc:
        print(JobResult("failed", error=f"bad specification: {exc}").to_json(), flush=True)
        return 1
    if spark is None:
        from spark.session import local_session

        spark = local_session(f"meridian-{job.kind}")
    stop = threading.Event()
    if args.continuous:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while True:
        result = _attempt(spark, job, spec)
        print(result.to_json(), flush=True)
        if result.status != "succeeded" or not args.continuous or stop.wait(args.interval_s):
            return 0 if result.status == "succeeded" else 1


def _attempt(spark: SparkSession, job: Job, spec: Spec) -> JobResult:
    try:
        return run_once(spark, job, spec)
    except Exception as exc:  # every failure becomes the run's result, for the launcher
        traceback.print_exc()
        return JobResult("failed", error=f"{type(exc).__name__}: {exc}")


def _sum(counts: list[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for one in counts:
        for name, value in one.items():
            total[name] = total.get(name, 0) + value
    return total


def sample_chunks(plan: Plan) -> list[Chunk]:
    """The first chunk of every partition: what a first run infers fields from."""
    first: dict[str, Chunk] = {}
    for chunk in plan.chunks:
        first.setdefault(chunk.key, chunk)
    return list(first.values())

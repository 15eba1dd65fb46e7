"""``spark.readStream.format("meridian")``: offsets per partition; each trigger reads
the segments sealed since the last one, once."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from tests.spark.support import (
    TieredCluster,
    consume,
    create_tiered,
    rows,
    sdk_rows,
    state,
    wait_for,
    write_events,
)

pytestmark = pytest.mark.slow

TOPIC = "acme.stream"


def _run_available_now(
    spark: SparkSession, tiered: TieredCluster, checkpoint: Path, topic: str = TOPIC, **extra: str
) -> list:
    """The rows one ``availableNow`` run delivers, micro-batch after micro-batch."""
    delivered: list = []

    def collect(batch: DataFrame, _batch_id: int) -> None:
        delivered.extend(rows(batch.toArrow()))

    query = (
        spark.readStream.format("meridian")
        .options(**tiered.options(topic, startingOffsets="earliest", **extra))
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    return sorted(delivered)


def _uploaded_past(tiered: TieredCluster, offset: int) -> bool:
    with tiered.internal() as c:
        (s,) = state(c, TOPIC)
    return s.upload_lag_ms == 0 and s.remote_end_offset > offset


def test_a_second_trigger_reads_only_the_new_segments(
    spark: SparkSession, tiered: TieredCluster, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "checkpoint"
    with tiered.internal() as c:
        create_tiered(c, TOPIC, 1, "301")
        write_events(c, TOPIC, 0, 0, 100)
    assert wait_for(lambda: _uploaded_past(tiered, 50), timeout_s=60)
    first_end = tiered.store().manifest(TOPIC, 0).end_offset
    first = _run_available_now(spark, tiered, checkpoint)
    assert [r[2] for r in first] == list(range(first_end))

    with tiered.internal() as c:
        write_events(c, TOPIC, 0, 100, 100)
    assert wait_for(lambda: _uploaded_past(tiered, first_end + 50), timeout_s=60)
    second_end = tiered.store().manifest(TOPIC, 0).end_offset
    second = _run_available_now(spark, tiered, checkpoint)
    assert [r[2] for r in second] == list(range(first_end, second_end))

    sdk = consume(tiered.address, tiered.token(), TOPIC, 1)
    assert first + second == sdk_rows([r for r in sdk if r.offset < second_end])


def test_with_a_token_each_trigger_also_reads_the_tail_through_fetch_once(
    spark: SparkSession, tiered: TieredCluster, tmp_path: Path
) -> None:
    topic, checkpoint, token = "acme.streamtail", tmp_path / "checkpoint", tiered.token()
    with tiered.internal() as c:
        create_tiered(c, topic, 1, "302")
        write_events(c, topic, 0, 0, 80)
    brokers = {"bootstrap": tiered.address, "token": token}
    first = _run_available_now(spark, tiered, checkpoint, topic, **brokers)
    assert first == sdk_rows(consume(tiered.address, token, topic, 1))
    assert len(first) > tiered.store().manifest(topic, 0).end_offset  # the tail too
    with tiered.internal() as c:
        write_events(c, topic, 0, 80, 7)
    second = _run_available_now(spark, tiered, checkpoint, topic, **brokers)
    assert [r[2] for r in second] == list(range(80, 87))

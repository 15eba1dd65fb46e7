"""The ``meridian`` data source on a real tiered topic: what a DataFrame holds equals
what the SDK consumer reads (codecs, headers, tombstones, a control batch, lanes,
records only in the store), the tail through Fetch with the tenant's token and
another tenant's refused, filters that prune splits, and the S3 endpoint."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the usual name)
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan

from dataplane.client import ErrorCode, MeridianError
from spark.source import plan_splits
from spark.source.splits import STORE, TAIL
from spark.source.tail import read_tail
from tests.spark.conftest import CONTROL_OFFSET, EVENTS, EVENTS_PER_PARTITION, LANE_TOPIC
from tests.spark.support import (
    T0_MS,
    TieredCluster,
    consume,
    create_tiered,
    rows,
    sdk_rows,
    state,
    wait_uploaded,
    write_events,
)
from tests.support.brokers import tiered_process

pytestmark = pytest.mark.slow


def _load(spark: SparkSession, options: dict[str, str]) -> DataFrame:
    return spark.read.format("meridian").options(**options).load()


def _store_end(tiered: TieredCluster, topic: str, partition: int) -> int:
    return tiered.store().manifest(topic, partition).end_offset


def test_a_store_read_equals_what_the_sdk_reads_up_to_the_stores_end(
    spark: SparkSession, tiered: TieredCluster
) -> None:
    """Every codec, headers (repeated keys, a null value), null keys and values; the
    control batch leaves no row; the oldest records are only in the store."""
    options = tiered.options(EVENTS)
    got = rows(_load(spark, options).toArrow())
    ends = {p: _store_end(tiered, EVENTS, p) for p in (0, 1)}
    sdk = consume(tiered.address, tiered.token(), EVENTS, 2)
    expected = sdk_rows([r for r in sdk if r.offset < ends[r.partition]])
    assert got == expected
    assert len(got) > EVENTS_PER_PARTITION  # most of both partitions
    assert any(r[4] is None for r in got)
    assert any(r[5] is None for r in got)
    assert any(h[1] is None for r in got for h in r[6])
    with tiered.internal() as c:
        local_starts = [s.log_start_offset for s in state(c, EVENTS)]
    assert all(start > 0 for start in local_starts)  # offset 0 on: only in the store
    offsets = {r[2] for r in got if r[1] == 0}
    assert CONTROL_OFFSET not in offsets  # the control batch's offset has no row
    assert offsets | {CONTROL_OFFSET} >= set(range(local_starts[0]))
    splits = plan_splits(options)
    assert {s.source for s in splits} == {STORE}
    assert len(splits) == sum(len(tiered.store().segments(EVENTS, p)) for p in (0, 1))


def test_the_tail_is_read_through_fetch_with_the_tenants_token(
    spark: SparkSession, tiered: TieredCluster
) -> None:
    token = tiered.token("acme")
    options = tiered.options(EVENTS, bootstrap=tiered.address, token=token)
    splits = plan_splits(options)
    tails = [s for s in splits if s.source == TAIL]
    assert sorted(s.partition for s in tails) == [0, 1]
    assert all(s.start == _store_end(tiered, EVENTS, s.partition) < s.end for s in tails)
    got = rows(_load(spark, options).toArrow())
    assert got == sdk_rows(consume(tiered.address, token, EVENTS, 2))


def test_another_tenants_token_gets_the_typed_refusal_not_data(
    spark: SparkSession, tiered: TieredCluster
) -> None:
    options = tiered.options(EVENTS, bootstrap=tiered.address, token=tiered.token("beta"))
    with pytest.raises(MeridianError) as planned:
        plan_splits(options)
    assert planned.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(MeridianError) as fetched:
        list(read_tail(tiered.address, tiered.token("beta"), EVENTS, 0, 0, 10))
    assert fetched.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(PySparkException, match="TOPIC_AUTHORIZATION_FAILED"):
        _load(spark, options).count()


def test_lane_topics_come_with_their_lane_when_asked(
    spark: SparkSession, tiered: TieredCluster
) -> None:
    trunk_only = rows(_load(spark, tiered.options(EVENTS)).toArrow())
    assert {r[7] for r in trunk_only} == {None}
    with_lanes = rows(_load(spark, tiered.options(EVENTS, includeLanes="true")).toArrow())
    lane_rows = [r for r in with_lanes if r[0] == LANE_TOPIC]
    end = _store_end(tiered, LANE_TOPIC, 0)
    sdk = consume(tiered.address, tiered.token(), LANE_TOPIC, 1)
    assert lane_rows == sdk_rows([r for r in sdk if r.offset < end])
    assert lane_rows
    assert {r[7] for r in lane_rows} == {"ppe"}
    assert sorted(trunk_only + lane_rows) == with_lanes


def test_a_partition_filter_plans_only_that_partitions_splits(
    spark: SparkSession, tiered: TieredCluster
) -> None:
    options = tiered.options(EVENTS)
    splits = plan_splits(options, [EqualTo(("partition",), 1)])
    assert {s.partition for s in splits} == {1}
    assert len(splits) == len(tiered.store().segments(EVENTS, 1))
    assert plan_splits(options, [In(("partition",), (0, 1))]) == plan_splits(options)
    everything = rows(_load(spark, options).toArrow())
    pushed = {**options, "pushFilters": "true"}
    assert _load(spark, pushed).where("partition = 1").count() == sum(
        1 for r in everything if r[1] == 1
    )


def test_without_push_filters_a_reused_dataframe_answers_every_query_whole(
    spark: SparkSession, tiered: TieredCluster
) -> None:
    """Spark 4.3 reuses a pushed plan for later queries of one DataFrame: pushdown is
    opt-in, so by default a filtered query leaves the next one whole."""
    everything = rows(_load(spark, tiered.options(EVENTS)).toArrow())
    df = _load(spark, tiered.options(EVENTS))
    assert df.where("partition = 1").count() == sum(1 for r in everything if r[1] == 1)
    assert df.count() == len(everything) > sum(1 for r in everything if r[1] == 1) > 0


def test_an_offset_range_plans_the_overlapping_segments_and_returns_exactly_its_rows(
    spark: SparkSession, tiered: TieredCluster
) -> None:
    options = tiered.options(EVENTS)
    segments = tiered.store().segments(EVENTS, 1)
    low, high = segments[1].start_offset + 3, segments[2].start_offset + 2
    filters = [
        EqualTo(("partition",), 1),
        GreaterThanOrEqual(("offset",), low),
        LessThan(("offset",), high),
    ]
    splits = plan_splits(options, filters)
    assert [(s.start, s.end) for s in splits] == [
        (low, segments[1].end_offset),
        (segments[2].start_offset, high),
    ]
    pushed = {**options, "pushFilters": "true"}
    df = _load(spark, pushed).where(f"partition = 1 and offset >= {low} and offset < {high}")
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(low, high))


def test_a_timestamp_range_returns_its_rows_and_prunes_older_segments(
    spark: SparkSession, tiered: TieredCluster
) -> None:
    options = tiered.options(EVENTS)
    everything = rows(_load(spark, options).toArrow())
    low_ms, high_ms = T0_MS + 1100 * 1000, T0_MS + 1150 * 1000  # partition 1's events
    low = dt.datetime.fromtimestamp(low_ms / 1000, dt.UTC)
    high = dt.datetime.fromtimestamp(high_ms / 1000, dt.UTC)
    df = _load(spark, options).where((F.col("timestamp") >= low) & (F.col("timestamp") < high))
    assert rows(df.toArrow()) == [r for r in everything if low_ms <= r[3] < high_ms]
    pruned = plan_splits(options, [GreaterThanOrEqual(("timestamp",), low)])
    assert 0 < len(pruned) < len(plan_splits(options))
    assert all(s.segment.max_timestamp >= low_ms for s in pruned)


def test_starting_and_ending_options_bound_each_partition(
    spark: SparkSession, tiered: TieredCluster
) -> None:
    starting = json.dumps({EVENTS: {"0": 10, "1": 20}})
    ending = json.dumps({EVENTS: {"0": 30}})
    options = tiered.options(EVENTS, startingOffsets=starting, endingOffsets=ending)
    got = rows(_load(spark, options).toArrow())
    assert [r[2] for r in got if r[1] == 0] == [o for o in range(10, 30)]
    assert [r[2] for r in got if r[1] == 1] == list(range(20, _store_end(tiered, EVENTS, 1)))
    since = T0_MS + 1200 * 1000
    by_time = tiered.options(EVENTS, startingTimestamp=str(since))
    got = rows(_load(spark, by_time).toArrow())
    assert got
    assert all(r[1] == 1 and r[3] >= since for r in got)
    assert got[0][3] == since


def test_the_same_through_an_s3_endpoint(
    spark: SparkSession,
    tiered: TieredCluster,
    s3_store_uri: tuple[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    uri, store_options = s3_store_uri
    options_file = tmp_path / "store.json"
    options_file.write_text(json.dumps(store_options))
    options_file.chmod(0o600)
    args = ["--remote-store-uri", uri, "--remote-store-options-file", str(options_file)]
    extra = tiered.issuer.broker_args()
    with tiered_process(tmp_path / "broker-1", args, extra_args=extra) as broker:
        s3 = TieredCluster(broker, tiered.issuer, uri, store_options)
        with s3.internal() as c:
            create_tiered(c, "acme.s3", 1, "201")
            write_events(c, "acme.s3", 0, 0, 120)
            wait_uploaded(c, "acme.s3", min_segments=2)
        got = rows(_load(spark, s3.options("acme.s3")).toArrow())
        end = _store_end(s3, "acme.s3", 0)
        sdk = consume(s3.address, s3.token(), "acme.s3", 1)
    assert got == sdk_rows([r for r in sdk if r.offset < end])
    assert len(got) == end > 0


def test_spark_never_reads_the_segments_pushed_filters_prune(
    spark: SparkSession, tiered: TieredCluster, tmp_path: Path
) -> None:
    """In a copy of the store whose partition 0 and first segment of partition 1 lost
    their objects, the filtered queries that exclude them still read."""
    copy = tmp_path / "objects"
    shutil.copytree(tiered.store_uri, copy)
    store = TieredCluster(tiered.broker, tiered.issuer, str(copy), {})
    first = store.store().segments(EVENTS, 1)[0]
    for log in copy.glob(f"{EVENTS}/*/0/segments/*.log"):
        log.unlink()
    for log in copy.glob(f"{EVENTS}/*/1/segments/{first.base_offset:020d}-*.log"):
        log.unlink()
    options = store.options(EVENTS)
    with pytest.raises(PySparkException, match="RemoteSegmentMissing"):
        _load(spark, options).count()
    everything = rows(_load(spark, tiered.options(EVENTS)).toArrow())
    wanted = [r for r in everything if r[1] == 1 and r[2] >= first.end_offset]
    query = f"partition = 1 and offset >= {first.end_offset}"
    pushed = {**options, "pushFilters": "true"}
    assert rows(_load(spark, pushed).where(query).toArrow()) == wanted

"""Split planning without Spark: one split per segment clipped to the bounds, filters
applied exactly or handed back, lanes and patterns, and the options refused."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

from dataplane.tiered import manifests
from dataplane.tiered.layout import Manifest, RemoteSegment
from dataplane.tiered.store import ObjectStore
from spark.source import SourceOptionError, SourceOptions, plan_splits
from spark.source.splits import STORE, Pushdown

TOPIC = "acme.orders"
LANE = "acme.orders~ppe"
T0 = 1_764_300_000_000
# Per partition: segments [0,100) [100,250) [250,400), 1 record per second from T0.
BOUNDS = ((0, 100), (100, 250), (250, 400))


def _segment(start: int, end: int) -> RemoteSegment:
    return RemoteSegment(
        id=f"{start:016x}",
        base_offset=start,
        start_offset=start,
        end_offset=end,
        size_bytes=1000,
        first_timestamp=T0 + start * 1000,
        max_timestamp=T0 + (end - 1) * 1000,
        leader_epoch=0,
        uploaded_at_ms=T0,
    )


def _commit(
    store: ObjectStore, topic: str, partition: int, bounds: tuple[tuple[int, int], ...]
) -> None:
    empty = Manifest(topic=topic, partition=partition, topic_id="9")
    manifest = empty.next_version(
        [_segment(s, e) for s, e in bounds], broker_id=1, leader_epoch=0, now_ms=T0
    )
    assert manifests.commit(store, manifest)


@pytest.fixture
def store(tmp_path: Path) -> str:
    objects = ObjectStore.open(str(tmp_path / "objects"))
    for partition in (0, 1):
        _commit(objects, TOPIC, partition, BOUNDS)
    _commit(objects, LANE, 0, ((0, 30),))
    _commit(objects, "acme.audit", 0, ((0, 10),))
    return str(tmp_path / "objects")


def _ranges(splits: list) -> list[tuple[str, int, int, int]]:
    return [(s.topic, s.partition, s.start, s.end) for s in splits]


def test_one_store_split_per_segment(store: str) -> None:
    splits = plan_splits({"topic": TOPIC, "store": store})
    assert _ranges(splits) == [(TOPIC, p, s, e) for p in (0, 1) for s, e in BOUNDS]
    assert {s.source for s in splits} == {STORE}
    assert all(s.manifest.segments == (s.segment,) for s in splits)  # one segment each


def test_starting_and_ending_offsets_clip_each_partition(store: str) -> None:
    options = {
        "topic": TOPIC,
        "store": store,
        "startingOffsets": json.dumps({TOPIC: {"0": 120}}),
        "endingOffsets": json.dumps({TOPIC: {"0": 260, "1": -1}}),
    }
    assert _ranges(plan_splits(options)) == [
        (TOPIC, 0, 120, 250),
        (TOPIC, 0, 250, 260),
        *[(TOPIC, 1, s, e) for s, e in BOUNDS],
    ]
    latest = plan_splits({"topic": TOPIC, "store": store, "startingOffsets": "latest"})
    assert latest == []


def test_partition_and_offset_filters_are_applied_exactly_and_not_handed_back() -> None:
    filters = [
        In(("partition",), (1, 2)),
        EqualTo(("partition",), 1),
        GreaterThan(("offset",), 99),
        LessThanOrEqual(("offset",), 260),
    ]
    pushdown, rejected = Pushdown.of(filters)
    assert rejected == []
    assert pushdown.partitions == frozenset({1})
    assert pushdown.clip(0, 400) == (100, 261)


def test_filters_prune_splits(store: str) -> None:
    options = {"topic": TOPIC, "store": store}
    only_one = plan_splits(options, [EqualTo(("partition",), 1)])
    assert _ranges(only_one) == [(TOPIC, 1, s, e) for s, e in BOUNDS]
    window = [
        EqualTo(("partition",), 0),
        GreaterThanOrEqual(("offset",), 90),
        LessThan(("offset",), 110),
    ]
    assert _ranges(plan_splits(options, window)) == [(TOPIC, 0, 90, 100), (TOPIC, 0, 100, 110)]
    assert plan_splits(options, [EqualTo(("offset",), 400)]) == []


def test_a_timestamp_lower_bound_prunes_older_segments_and_is_handed_back(store: str) -> None:
    since = dt.datetime.fromtimestamp((T0 + 260_000) / 1000, dt.UTC)
    lower = GreaterThanOrEqual(("timestamp",), since)
    assert Pushdown.of([lower])[1] == [lower]
    splits = plan_splits({"topic": TOPIC, "store": store}, [lower])
    assert _ranges(splits) == [(TOPIC, 0, 250, 400), (TOPIC, 1, 250, 400)]
    # An upper bound prunes nothing: a segment may hold records older than its first batch.
    upper = LessThan(("timestamp",), since)
    assert Pushdown.of([upper]) == (Pushdown(), [upper])


def test_other_filters_are_handed_back() -> None:
    filters = [IsNotNull(("key",)), EqualTo(("offset",), "7"), LessThan(("partition",), 3)]
    assert Pushdown.of(filters) == (Pushdown(), filters)


def test_lanes_and_patterns_choose_the_topics(store: str) -> None:
    def topics(**options: str) -> set[str]:
        return {s.topic for s in plan_splits({"store": store, **options})}

    assert topics(topic=TOPIC) == {TOPIC}
    assert topics(topic=TOPIC, includeLanes="true") == {TOPIC, LANE}
    assert topics(topicPattern=r"acme\..*") == {TOPIC, "acme.audit"}
    assert topics(topicPattern=r"acme\.a.*", includeLanes="true") == {"acme.audit"}


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"store": "/x"}, "topic"),
        ({"topic": TOPIC, "topicPattern": ".*", "store": "/x"}, "topic"),
        ({"topic": TOPIC}, "store"),
        ({"topic": TOPIC, "store": "/x", "token": "t"}, "token"),
        ({"topic": TOPIC, "store": "/x", "startingOffsets": "{bad"}, "startingOffsets"),
        ({"topic": TOPIC, "store": "/x", "endingOffsets": '{"t": {"0": -3}}'}, "endingOffsets"),
        (
            {
                "topic": TOPIC,
                "store": "/x",
                "startingOffsets": "earliest",
                "startingTimestamp": "1",
            },
            "startingTimestamp",
        ),
        ({"topic": TOPIC, "store": "/x", "endingTimestamp": "soon"}, "endingTimestamp"),
        ({"topic": TOPIC, "store": "/x", "storeOptions": "[]"}, "storeOptions"),
        ({"topic": TOPIC, "store": "/x", "includeLanes": "yes"}, "includeLanes"),
        ({"topicPattern": "(", "store": "/x"}, "topicPattern"),
    ],
)
def test_bad_options_are_refused_by_name(options: dict[str, str], option: str) -> None:
    with pytest.raises(SourceOptionError) as refused:
        SourceOptions.parse(options)
    assert refused.value.option == option


def test_options_are_case_insensitive_and_streaming_starts_at_the_end() -> None:
    parsed = SourceOptions.parse({"TOPIC": TOPIC, "Store": "/x", "STORE" + "OPTIONS": '{"a": 1}'})
    assert (parsed.topic, parsed.store, parsed.store_options) == (TOPIC, "/x", {"a": 1})
    assert parsed.starting.offsets == -2
    assert (
        SourceOptions.parse({"topic": TOPIC, "store": "/x"}, streaming=True).starting.offsets == -1
    )

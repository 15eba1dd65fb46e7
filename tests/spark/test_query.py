"""The Index Query's scan of what no index covers (no Spark: no index is built here):
the partitions the caller names, and the byte limit on the store's part."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dataplane.tiered.store import ObjectStore
from spark.jobs.spec import Field, IndexSpec
from spark.query import UncoveredTooLargeError, query_index
from tests.spark.jobs.topics import TieredTopic, orders, tail_of

USER_ID = Field("user_id", "user.id", "long")
Key = tuple[str, int, int]


def _spec(store: ObjectStore, target: Path) -> IndexSpec:
    return IndexSpec(
        index_id="i1",
        topic="acme.orders",
        store_uri=store.uri,
        target_uri=str(target),
        fields=(USER_ID,),
        include_lanes=True,
    )


def _all(spec: IndexSpec, **query: object) -> list[Key]:
    answer = query_index(spec, field="user_id", value="3", limit=10_000, **query)  # type: ignore[arg-type]
    assert answer.next_cursor is None
    return sorted((r.topic, r.partition, r.offset) for r in answer.records)


def _wanted(parts: list[TieredTopic]) -> list[Key]:
    return sorted(
        (p.topic, p.partition, r.offset)
        for p in parts
        for r in p.records()
        if r.value is not None and json.loads(r.value)["user"]["id"] == 3
    )


def test_partitions_with_nothing_in_the_store_are_answered_from_their_tail(
    tmp_path: Path,
) -> None:
    """A partition never sealed, and a lane topic the store does not hold, still count."""
    store = ObjectStore.open(str(tmp_path / "store"))
    sealed = TieredTopic(store, tmp_path / "logs", "acme.orders", 0)
    sealed.produce(orders(0, 200))
    sealed.seal()
    sealed.produce(orders(200, 30))
    unsealed = TieredTopic(store, tmp_path / "logs", "acme.orders", 1)
    unsealed.produce(orders(1000, 50))
    lane = TieredTopic(store, tmp_path / "logs", "acme.orders~eu", 0)
    lane.produce(orders(2000, 40))
    parts = [sealed, unsealed, lane]
    spec = _spec(store, tmp_path / "never-built")
    tail = tail_of({"acme.orders": [sealed, unsealed], "acme.orders~eu": [lane]})
    asked = {"acme.orders": [0, 1], "acme.orders~eu": [0]}
    found = _all(spec, tail=tail, partitions=asked)
    assert found == _wanted(parts)
    assert {(topic, p) for topic, p, _ in found} == {
        ("acme.orders", 0),
        ("acme.orders", 1),
        ("acme.orders~eu", 0),
    }
    assert _all(spec, tail=tail) == _wanted([sealed])  # None: the store's partitions
    for part in parts:
        part.close()


def test_more_uncovered_store_bytes_than_the_limit_is_a_typed_error(tmp_path: Path) -> None:
    store = ObjectStore.open(str(tmp_path / "store"))
    part = TieredTopic(store, tmp_path / "logs", "acme.orders", 0)
    part.produce(orders(0, 600))
    part.seal()
    spec = _spec(store, tmp_path / "never-built")
    stored = sum(s.size_bytes for s in part.uploaded)
    assert len(part.uploaded) > 1
    with pytest.raises(UncoveredTooLargeError) as caught:
        _all(spec, max_scan_bytes=stored - 1)
    assert (caught.value.uncovered_bytes, caught.value.limit_bytes) == (stored, stored - 1)
    assert not isinstance(caught.value, ValueError)  # not bad input: build the index first
    assert _all(spec, max_scan_bytes=stored) == _wanted([part])
    part.close()


def test_row_groups_without_statistics_are_always_read(tmp_path: Path) -> None:
    """Parquet keeps no min/max of a column chunk holding a very long value: such a row
    group cannot be pruned, so every lookup reads it (and the others still prune)."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark.columns import SCHEMA
    from spark.query import VALUE_COLUMN, _Bounds, _cached_footer

    values = ["alice", "bob", "carol", "dave", "x" * 100_000, "zed"]
    at = dt.datetime(2026, 11, 28, tzinfo=dt.UTC)
    rows = {VALUE_COLUMN: pa.array(values)}
    for field in SCHEMA:
        if field.name == "timestamp":
            rows[field.name] = pa.array([at] * len(values), field.type)
        elif field.name == "offset":
            rows[field.name] = pa.array(range(len(values)), field.type)
        else:
            rows[field.name] = pa.nulls(len(values), field.type)
    path = tmp_path / "index.parquet"
    pq.write_table(pa.table(rows), path, row_group_size=2)
    store = ObjectStore.open(str(tmp_path))
    footer = _cached_footer(store.fs, str(path), path.stat().st_size)
    assert footer.unknown == [2]
    everything = _Bounds(None, None, None)
    assert footer.row_groups("bob", everything) == [0, 2]
    assert footer.row_groups("zed", everything) == [2]
    assert footer.row_groups("nobody", everything) == [2]

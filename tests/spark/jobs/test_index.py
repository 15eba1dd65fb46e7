"""The index build and Index Query: answers equal a brute-force scan of the topic, for
covered, uncovered and mixed ranges, page by page; what is not indexed is counted."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from dataplane.records import Record
from dataplane.tiered.store import ObjectStore
from spark.jobs import index
from spark.jobs.spec import Field, IndexSpec, JobResult
from spark.query import IndexQueryError, query_index
from tests.spark.jobs.support import Source, latest, read_files, run_job
from tests.spark.jobs.topics import BASE_MS, TieredTopic, orders, tail_of

pytestmark = pytest.mark.slow

FIELDS = (
    Field("user_id", "user.id", "long"),
    Field("country", "country", "string"),
    Field("amount", "amount", "double"),
    Field("coupon", "coupon", "string"),
    Field("paid", "paid", "boolean"),
)
Key = tuple[int, int, int, str]


def _spec(uri: str, target: Path) -> IndexSpec:
    return IndexSpec(
        index_id="i1", topic="acme.orders", store_uri=uri, target_uri=str(target), fields=FIELDS
    )


@pytest.fixture(scope="module")
def indexed(
    source: Source, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[IndexSpec, JobResult]:
    folder = tmp_path_factory.mktemp("indexed")
    spec = _spec(source.uri, folder / "index")
    code, result = run_job(index, spec, folder, spark)
    assert code == 0, result.error
    return spec, result


def _brute(
    records: Iterable[tuple[str, int, Record]],
    field: Field,
    wanted: Any,
    from_ms: int | None = None,
    to_ms: int | None = None,
) -> list[Key]:
    """The oracle: every record's JSON walked by hand."""
    found = []
    for topic, partition, record in records:
        try:
            value: Any = json.loads(record.value) if record.value is not None else None
        except ValueError:
            continue
        for step in field.path.split("."):
            value = value.get(step) if isinstance(value, dict) else None
        if type(value) is not type(wanted) or value != wanted:
            continue
        if (from_ms is None or record.timestamp >= from_ms) and (
            to_ms is None or record.timestamp < to_ms
        ):
            found.append((record.timestamp, partition, record.offset, topic))
    return sorted(found)


def _records(parts: list[TieredTopic], *, with_tail: bool) -> list[tuple[str, int, Record]]:
    return [
        (part.topic, part.partition, record)
        for part in parts
        for record in part.records(0, None if with_tail else part.store_end)
    ]


def _pages(spec: IndexSpec, limit: int, **query: Any) -> tuple[list[Key], int, int]:
    """Every page's records, and how many came from the index and from the scan."""
    keys: list[Key] = []
    from_index = from_scan = 0
    cursor = None
    while True:
        answer = query_index(spec, limit=limit, cursor=cursor, **query)
        assert len(answer.records) <= limit
        keys.extend((r.timestamp, r.partition, r.offset, r.topic) for r in answer.records)
        from_index += answer.from_index
        from_scan += answer.from_scan
        cursor = answer.next_cursor
        if cursor is None:
            return keys, from_index, from_scan


def test_index_files_are_sorted_by_value_and_time_in_modest_row_groups(
    indexed: tuple[IndexSpec, JobResult],
) -> None:
    spec, result = indexed
    assert result.files > 0
    for path, table in read_files(spec.target_uri, "index"):
        field = path.split("/")[0]
        keys = list(
            zip(
                *(
                    table.column(c).to_pylist()
                    for c in ("indexed_value", "timestamp", "partition", "offset")
                ),
                strict=True,
            )
        )
        assert keys == sorted(keys), path
        assert field in {f.name for f in FIELDS}
    store = ObjectStore.open(spec.target_uri)
    first = latest(spec.target_uri).files[0]
    metadata = pq.ParquetFile(store.path(first.path)).metadata
    assert metadata.row_group(0).column(0).statistics.has_min_max


def test_what_is_not_indexed_is_counted_by_reason(
    source: Source, indexed: tuple[IndexSpec, JobResult]
) -> None:
    spec, _ = indexed
    counts = latest(spec.target_uri).counts
    sealed = sum(p.store_end for p in source.parts["acme.orders"])
    assert counts["tombstones"] == 1
    assert counts["not_objects"] == 2
    assert counts["wrong_type.amount"] == 41
    assert counts["indexed.coupon"] == 30
    assert counts["missing.coupon"] > 0.9 * sealed
    for f in FIELDS:
        total = sum(counts[f"{kind}.{f.name}"] for kind in ("indexed", "missing", "wrong_type"))
        assert total + 3 == counts["rows"]


@pytest.mark.parametrize(
    ("field", "text", "wanted"),
    [
        (FIELDS[0], "3", 3),
        (FIELDS[1], "de", "de"),
        (FIELDS[3], "c1", "c1"),
        (FIELDS[2], "45.0", 45.0),
        (FIELDS[4], "false", False),
    ],
)
def test_a_query_of_a_covered_range_equals_a_brute_force_scan(
    source: Source, indexed: tuple[IndexSpec, JobResult], field: Field, text: str, wanted: Any
) -> None:
    spec, _ = indexed
    sealed = _records(source.parts["acme.orders"], with_tail=False)
    keys, from_index, from_scan = _pages(spec, 37, field=field.name, value=text)
    assert keys == _brute(sealed, field, wanted)
    assert (from_index, from_scan) == (len(keys), 0)


def test_a_time_range_and_small_pages_never_repeat_or_skip(
    source: Source, indexed: tuple[IndexSpec, JobResult]
) -> None:
    spec, _ = indexed
    sealed = _records(source.parts["acme.orders"], with_tail=False)
    window = {"from_ms": BASE_MS + 600_000, "to_ms": BASE_MS + 3_600_000}
    keys, _, _ = _pages(spec, 7, field="user_id", value="5", **window)
    assert keys == _brute(sealed, FIELDS[0], 5, **window)
    assert len(set(keys)) == len(keys) > 7


def test_without_an_index_everything_comes_from_the_scan_and_the_tail(
    source: Source, tmp_path: Path
) -> None:
    spec = _spec(source.uri, tmp_path / "never-built")
    every = _records(source.parts["acme.orders"], with_tail=True)
    tail = tail_of(source.parts)
    keys, from_index, from_scan = _pages(spec, 50, field="user_id", value="2", tail=tail)
    assert keys == _brute(every, FIELDS[0], 2)
    assert (from_index, from_scan) == (0, len(keys))


def test_a_partly_covered_index_answers_from_both_without_gaps(spark: Any, tmp_path: Path) -> None:
    store = ObjectStore.open(str(tmp_path / "store"))
    parts = [TieredTopic(store, tmp_path / "logs", "acme.orders", p) for p in (0, 1)]
    for part in parts:
        part.produce(orders(part.partition * 1000, 600))
        part.seal()
    spec = _spec(store.uri, tmp_path / "index")
    assert run_job(index, spec, tmp_path, spark)[0] == 0
    for part in parts:  # more sealed past the covered end, and an unsealed tail
        part.produce(orders(5000 + part.partition * 1000, 300))
        part.seal()
        part.produce(orders(8000 + part.partition * 1000, 40))
    every = _records(parts, with_tail=True)
    tail = tail_of({"acme.orders": parts})
    keys, from_index, from_scan = _pages(spec, 25, field="user_id", value="4", tail=tail)
    assert keys == _brute(every, FIELDS[0], 4)
    assert from_index > 0
    assert from_scan > 0
    assert from_index + from_scan == len(keys)
    for part in parts:
        part.close()


def test_bad_queries_say_why(indexed: tuple[IndexSpec, JobResult]) -> None:
    spec, _ = indexed
    cases: list[tuple[dict[str, Any], str]] = [
        ({"field": "nope", "value": "1"}, "no field 'nope'"),
        ({"field": "user_id", "value": "x1"}, "user_id"),
        ({"field": "user_id", "value": "1.5"}, "user_id"),
        ({"field": "user_id", "value": "1", "limit": 0}, "limit"),
        ({"field": "user_id", "value": "1", "cursor": "%%%"}, "damaged"),
    ]
    for query, message in cases:
        with pytest.raises(IndexQueryError, match=message):
            query_index(spec, **query)
    other = query_index(spec, field="user_id", value="1", limit=1).next_cursor
    with pytest.raises(IndexQueryError, match="another query"):
        query_index(spec, field="user_id", value="2", cursor=other)

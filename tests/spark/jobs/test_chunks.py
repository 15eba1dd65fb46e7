"""Planning: chunks of sealed segments past the covered ends, the same every time."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from dataplane.tiered.reader import TopicStoreReader
from dataplane.tiered.store import ObjectStore
from spark.chunks import chunk_table, plan, source_topics
from tests.dataplane.tiered.support import commit
from tests.spark.jobs.topics import TieredTopic, orders


@pytest.fixture
def topic(tmp_path: Path) -> Iterator[TieredTopic]:
    store = ObjectStore.open(str(tmp_path / "store"))
    part = TieredTopic(store, tmp_path / "logs", "acme.orders")
    part.produce(orders(0, 1200), control_every=4)
    part.seal()
    part.produce(orders(1200, 100))  # not sealed: not in the store
    yield part
    part.close()


def test_chunks_are_the_sealed_segments_cut_at_multiples_of_the_chunk_size(
    topic: TieredTopic,
) -> None:
    reader = TopicStoreReader(topic.store.uri)
    found = plan(reader, ["acme.orders"], {}, chunk_offsets=100)
    bounds = [(c.start, c.end) for c in found.chunks]
    assert bounds[0][0] == 0
    assert bounds[-1][1] == topic.store_end
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    segment_ends = {s.end_offset for s in topic.uploaded}
    assert all(end % 100 == 0 or end in segment_ends for _, end in bounds)
    assert found.covered == {"acme.orders/0": topic.store_end}
    assert plan(reader, ["acme.orders"], {}, chunk_offsets=100) == found


def test_a_plan_starts_at_the_covered_end_and_is_empty_when_all_is_covered(
    topic: TieredTopic,
) -> None:
    reader = TopicStoreReader(topic.store.uri)
    later = plan(reader, ["acme.orders"], {"acme.orders/0": 250}, chunk_offsets=100)
    assert later.chunks[0].start == 250
    done = plan(reader, ["acme.orders"], {"acme.orders/0": topic.store_end})
    assert done.chunks == []
    assert done.covered == {}


def test_a_chunk_reads_its_user_records_without_control_batches(topic: TieredTopic) -> None:
    reader = TopicStoreReader(topic.store.uri)
    chunks = plan(reader, ["acme.orders"], {}).chunks
    offsets = [o for c in chunks for o in chunk_table(reader, c).column("offset").to_pylist()]
    assert offsets == [r.offset for r in topic.records(0, topic.store_end)]


def test_offsets_retention_removed_before_a_run_are_skipped_and_counted(
    topic: TieredTopic,
) -> None:
    kept = topic.uploaded[2:]
    commit(topic.store, kept, topic=topic.topic, topic_id=topic.topic_id)
    found = plan(TopicStoreReader(topic.store.uri), ["acme.orders"], {"acme.orders/0": 10})
    assert found.chunks[0].start == kept[0].start_offset
    assert found.skipped == {"acme.orders/0": kept[0].start_offset - 10}


def test_lane_topics_join_the_plan_only_when_asked(tmp_path: Path) -> None:
    store = ObjectStore.open(str(tmp_path / "store"))
    for name in ("acme.orders", "acme.orders~eu", "acme.other"):
        part = TieredTopic(store, tmp_path / "logs", name)
        part.produce(orders(0, 10))
        part.seal()
        part.close()
    reader = TopicStoreReader(store.uri)
    assert source_topics(reader, "acme.orders", False) == ["acme.orders"]
    assert source_topics(reader, "acme.orders", True) == ["acme.orders", "acme.orders~eu"]
    assert plan(reader, ["acme.nothing"], {}).chunks == []

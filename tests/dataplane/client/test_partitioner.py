"""Partitioners: Kafka's key placement, sticky moves, round robin and callables."""

from __future__ import annotations

import itertools
import random

import pytest
from kafka.partitioner.default import DefaultPartitioner
from kafka.partitioner.default import murmur2 as kafka_murmur2

from dataplane.client.partitioner import (
    STICKY_ALL,
    STICKY_KEYLESS,
    Murmur2Partitioner,
    make_partitioner,
)

from .support import accumulator, append_specs, drain_all

NOW = 1_700_000_000_000


def test_keys_land_where_kafka_puts_them() -> None:
    """murmur2 placement equals kafka-python's DefaultPartitioner formula on many keys."""
    rng = random.Random(7)
    keys = [rng.randbytes(rng.randrange(0, 40)) for _ in range(3000)]
    keys += [f"customer-{i}".encode() for i in range(2000)]
    partitioner = Murmur2Partitioner()
    for count in (1, 3, 7, 12, 100):
        for key in keys:
            want = (kafka_murmur2(key) & 0x7FFFFFFF) % count
            assert partitioner.partition("t.t", key, list(range(count)), count) == want


class _Cluster:
    """The slice of kafka-python's ClusterMetadata its DefaultPartitioner reads."""

    def __init__(self, count: int) -> None:
        self.count = count

    def topics(self) -> set[str]:
        return {"t.t"}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self.count))

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return set(range(self.count))


def test_keys_land_where_kafka_pythons_default_partitioner_puts_them() -> None:
    rng = random.Random(11)
    keys = [rng.randbytes(rng.randrange(1, 64)) for _ in range(2000)]
    ours = Murmur2Partitioner()
    for count in (2, 5, 16):
        theirs, cluster = DefaultPartitioner(), _Cluster(count)
        for key in keys:
            want = theirs.partition("t.t", key, key, b"v", b"v", cluster)
            assert ours.partition("t.t", key, list(range(count)), count) == want


def test_known_java_placements() -> None:
    """Values Kafka's Java client gives (Utils.murmur2 test vectors)."""
    assert kafka_murmur2(b"21") == -973932308 & 0xFFFFFFFF
    partitioner = Murmur2Partitioner()
    assert partitioner.partition("t.t", b"21", [], 2**31 - 1) == (-973932308 & 0x7FFFFFFF)


def test_keyless_records_stick_until_the_batch_fills() -> None:
    """Keyless records go to one partition, then move once its batch is full."""
    acc, topic = accumulator(partitions=4, batch_bytes=61 + 500)
    futures = append_specs(acc, topic, [(None, b"x" * 90, NOW, [])] * 12, partition=None)
    partitions = [f._result.tp.partition for f in futures]
    runs = [(p, len(list(group))) for p, group in itertools.groupby(partitions)]
    assert [length for _, length in runs] == [5, 5, 2], partitions  # 5 records fill 500 bytes
    assert sorted(b.count for b in drain_all(acc)) == [2, 5, 5]


def test_keyless_delayed_records_move_the_sticky_partition_as_a_batch_would() -> None:
    """Records scheduled for later take the sticky partition without entering its batch:
    each batch's worth of them moves it, so keyless delays spread as sends do."""
    acc, topic = accumulator(partitions=4, batch_bytes=61 + 500)
    chosen = [acc.choose_partition(topic, None, 90) for _ in range(24)]
    runs = [(p, len(list(group))) for p, group in itertools.groupby(chosen)]
    assert [length for _, length in runs] == [6, 6, 6, 6], chosen
    keyed = {acc.choose_partition(topic, b"same", 90) for _ in range(24)}
    assert keyed == {(kafka_murmur2(b"same") & 0x7FFFFFFF) % 4}


def test_keyed_records_ignore_the_sticky_choice() -> None:
    acc, topic = accumulator(partitions=5, batch_bytes=61 + 300)
    futures = append_specs(acc, topic, [(b"same", b"x" * 90, NOW, [])] * 10, partition=None)
    want = (kafka_murmur2(b"same") & 0x7FFFFFFF) % 5
    assert {f._result.tp.partition for f in futures} == {want}


def test_sticky_partitioner_ignores_keys() -> None:
    acc, topic = accumulator(partitions=3, partitioner="sticky")
    futures = append_specs(
        acc, topic, [(bytes([i]), b"v", NOW, []) for i in range(50)], partition=None
    )
    assert len({f._result.tp.partition for f in futures}) == 1


def test_sticky_prefers_partitions_with_a_leader() -> None:
    acc, topic = accumulator(partitions=6)
    topic.available = [4]
    futures = append_specs(acc, topic, [(None, b"v", NOW, [])] * 3, partition=None)
    assert {f._result.tp.partition for f in futures} == {4}


def test_round_robin_cycles_through_partitions() -> None:
    acc, topic = accumulator(partitions=3, partitioner="round_robin")
    futures = append_specs(acc, topic, [(b"k", b"v", NOW, [])] * 7, partition=None)
    assert [f._result.tp.partition for f in futures] == [0, 1, 2, 0, 1, 2, 0]


def test_callable_partitioner_gets_topic_key_and_count() -> None:
    calls = []

    def fn(topic: str, key: bytes | None, count: int) -> int:
        calls.append((topic, key, count))
        return count - 1

    acc, topic = accumulator(partitions=4, partitioner=fn)
    (future,) = append_specs(acc, topic, [(b"k", b"v", NOW, [])], partition=None)
    assert calls == [("t.t", b"k", 4)]
    assert future._result.tp.partition == 3


def test_explicit_partition_wins() -> None:
    acc, topic = accumulator(partitions=4, partitioner="round_robin")
    futures = append_specs(acc, topic, [(None, b"v", NOW, [])] * 3, partition=2)
    assert {f._result.tp.partition for f in futures} == {2}


def test_partitioner_names() -> None:
    assert make_partitioner("murmur2").sticky == STICKY_KEYLESS
    assert make_partitioner("sticky").sticky == STICKY_ALL
    with pytest.raises(ValueError, match="unknown partitioner 'hash'"):
        make_partitioner("hash")
    with pytest.raises(TypeError):
        make_partitioner(42)  # type: ignore[arg-type]

"""The streaming reader's offsets, planned against a fake planner (no JVM here)."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from dataplane.client import TopicPartition
from spark.source import stream
from spark.source.stream import MeridianStreamReader


class _Planner:
    """What the store shows now: ``{tp: (earliest, latest)}``."""

    visible: ClassVar[dict[TopicPartition, tuple[int, int]]] = {}

    def __init__(self, _options: Any) -> None:
        pass

    def __enter__(self) -> _Planner:
        return self

    def __exit__(self, *_exc: object) -> None:
        pass

    def topic_partitions(self) -> list[TopicPartition]:
        return list(self.visible)

    def earliest_and_latest(
        self, tps: list[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, int]]:
        return {tp: self.visible[tp] for tp in tps if tp in self.visible}


@pytest.fixture
def reader(monkeypatch: pytest.MonkeyPatch) -> MeridianStreamReader:
    monkeypatch.setattr(stream, "Planner", _Planner)
    return MeridianStreamReader(options=None)  # type: ignore[arg-type]


def test_a_partition_not_visible_now_keeps_its_offset(reader: MeridianStreamReader) -> None:
    """Unlisted for a trigger, it resumes where it was, not at its earliest (a replay)."""
    _Planner.visible = {TopicPartition("acme.a", 0): (0, 40)}
    start = {"acme.a/0": 30, "acme.b/0": 25}
    latest = reader.latestOffset(start, None)
    assert latest == {"acme.a/0": 40, "acme.b/0": 25}
    _Planner.visible = {TopicPartition("acme.a", 0): (0, 40), TopicPartition("acme.b", 0): (0, 60)}
    assert reader.latestOffset(latest, None) == {"acme.a/0": 40, "acme.b/0": 60}


def test_offsets_never_go_backwards_and_new_partitions_appear(
    reader: MeridianStreamReader,
) -> None:
    _Planner.visible = {TopicPartition("acme.a", 0): (0, 10), TopicPartition("acme.c", 1): (5, 9)}
    assert reader.latestOffset({"acme.a/0": 30}, None) == {"acme.a/0": 30, "acme.c/1": 9}

"""Fixtures for storage tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.log import PartitionLog

from .support import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def small_config() -> LogConfig:
    """Small segments and dense indexes, so a few KB exercise rolls and lookups."""
    return LogConfig(
        max_segment_bytes=8 * 1024,
        index_interval_bytes=256,
        durability=Durability.NEVER,
        retention_ms=-1,
    )


@pytest.fixture
def open_log(tmp_path: Path, clock: ManualClock) -> Iterator[Callable[..., PartitionLog]]:
    """Factory opening logs under tmp_path with the manual clock; closes them at the end."""
    opened: list[PartitionLog] = []

    def factory(
        config: LogConfig | None = None, name: str = "t-0", **kwargs: object
    ) -> PartitionLog:
        log = PartitionLog.open(tmp_path / name, config, clock_ms=clock, **kwargs)  # type: ignore[arg-type]
        opened.append(log)
        return log

    yield factory
    for log in opened:
        log.close()

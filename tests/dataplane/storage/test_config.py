"""LogConfig validation and persistence."""

from __future__ import annotations

import pytest

from dataplane.records import TimestampType
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.errors import InvalidConfigError


@pytest.mark.parametrize(
    "changes",
    [
        {"max_segment_bytes": 100},
        {"max_segment_bytes": 2**31},
        {"retention_ms": -2},
        {"retention_bytes": -5},
        {"flush_interval_ms": 0},
        {"max_batch_bytes": 10},
        {"index_interval_bytes": -1},
        {"durability": "sometimes"},
        {"segment_ms": True},
    ],
)
def test_out_of_bounds_values_are_refused_with_their_name(changes):
    with pytest.raises(InvalidConfigError, match=next(iter(changes))):
        LogConfig(**changes)


def test_round_trips_through_a_dict():
    config = LogConfig(
        durability=Durability.ALWAYS,
        retention_bytes=10**9,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
    )
    assert LogConfig.from_dict(config.to_dict()) == config


def test_from_dict_refuses_unknown_keys_and_bad_enums():
    with pytest.raises(InvalidConfigError, match="unknown"):
        LogConfig.from_dict({"retention.ms": 5})
    with pytest.raises(InvalidConfigError):
        LogConfig.from_dict({"durability": "fast"})

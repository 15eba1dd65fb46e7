"""Value types of the SDK's public API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record landed (offset -1 with ``acks=0``)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    log_append_time: int = -1


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0: CreateTime, 1: LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    leader_epoch: int = -1

"""Per-log configuration and the durability modes.

Durability modes (``LogConfig.durability``) — what an append promises once it returns:

``always``
    Group commit. ``append`` returns only after ``fdatasync`` has covered its bytes and
    every byte appended before them. One fsync covers all batches appended while the
    previous fsync ran, so concurrent appenders share its cost. An acknowledged batch
    survives a process crash, a kernel crash and a power loss (on a device that honours
    flushes).
``interval``
    ``append`` returns once its bytes are in the kernel's page cache; a flush starts once
    ``flush_interval_ms`` have passed since the last one (noticed by the next append, or
    by the log manager's housekeeping when appends stop) and runs on a background thread,
    never in the appender. A process crash loses nothing that was acknowledged; a kernel
    crash or power loss loses at most the last ``flush_interval_ms`` of acknowledged
    appends, plus the time that flush takes.
``never``
    ``append`` returns once its bytes are in the page cache; the log is fsynced only
    after a segment is sealed (by the log manager's housekeeping, shortly after the roll)
    and at clean close, leaving the rest to the kernel's writeback. A process crash loses
    nothing acknowledged; a kernel crash or power loss may lose anything since the last
    of those flushes. Use it where replication provides durability.

Readers never see what a crash could take back in the mode they chose: an unreplicated
``always`` log exposes a record (its high watermark moves) only once it is synced.

In every mode recovery after any crash truncates a torn tail, so a reader never sees a
partial batch.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass
from typing import Any

from dataplane.records import TimestampType
from dataplane.storage.errors import InvalidConfigError

MiB = 1024 * 1024
DAY_MS = 24 * 60 * 60 * 1000
MAX_SEGMENT_BYTES_LIMIT = 2**31 - 1  # positions in the offset index are 32-bit
_TOPIC_ID = re.compile(r"^[A-Za-z0-9_-]{0,64}$")


class Durability(enum.StrEnum):
    ALWAYS = "always"
    INTERVAL = "interval"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Configuration of one partition log; every field names its unit.

    ``retention_ms`` and ``retention_bytes`` of -1 mean unlimited.
    ``max_batch_bytes`` bounds one batch as stored (Kafka's ``max.message.bytes``).

    Tiered storage (``dataplane.tiered``): with ``remote_storage`` the broker uploads
    sealed segments to the cluster's object store; ``retention_ms`` / ``retention_bytes``
    then bound the whole partition (remote and local), and ``local_retention_ms`` /
    ``local_retention_bytes`` what stays on local disk once uploaded (-2: the same as the
    total, -1: unlimited). A segment is never deleted locally before its upload is
    confirmed. ``topic_id`` is the topic's immutable id, which names its objects.
    """

    max_segment_bytes: int = 1024 * MiB
    segment_ms: int = 7 * DAY_MS
    max_index_bytes: int = 10 * MiB
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * DAY_MS
    retention_bytes: int = -1
    max_batch_bytes: int = 1 * MiB + 12
    durability: Durability = Durability.INTERVAL
    flush_interval_ms: int = 1000
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    remote_storage: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    topic_id: str = ""

    def __post_init__(self) -> None:
        _check_range("max_segment_bytes", self.max_segment_bytes, 1024, MAX_SEGMENT_BYTES_LIMIT)
        _check_range("segment_ms", self.segment_ms, 1, 2**63 - 1)
        _check_range("max_index_bytes", self.max_index_bytes, 64, 2**31 - 1)
        _check_range("index_interval_bytes", self.index_interval_bytes, 0, 2**31 - 1)
        _check_range("retention_ms", self.retention_ms, -1, 2**63 - 1)
        _check_range("retention_bytes", self.retention_bytes, -1, 2**63 - 1)
        _check_range("max_batch_bytes", self.max_batch_bytes, 61, MAX_SEGMENT_BYTES_LIMIT)
        _check_range("flush_interval_ms", self.flush_interval_ms, 1, 2**31 - 1)
        _check_range("local_retention_ms", self.local_retention_ms, -2, 2**63 - 1)
        _check_range("local_retention_bytes", self.local_retention_bytes, -2, 2**63 - 1)
        if not isinstance(self.remote_storage, bool):
            raise InvalidConfigError("remote_storage must be true or false")
        if not isinstance(self.topic_id, str) or not _TOPIC_ID.match(self.topic_id):
            raise InvalidConfigError("topic_id is up to 64 characters of [A-Za-z0-9_-]")
        if not isinstance(self.durability, Durability):
            raise InvalidConfigError(f"durability must be one of {[d.value for d in Durability]}")

    @property
    def effective_local_retention_ms(self) -> int:
        """What stays on local disk by age: ``local_retention_ms``, or the total."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        """What stays on local disk by size: ``local_retention_bytes``, or the total."""
        if self.local_retention_bytes == -2:
            return self.retention_bytes
        return self.local_retention_bytes

    def with_changes(self, **changes: Any) -> LogConfig:
        """A copy with ``changes`` applied and validated."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["durability"] = self.durability.value
        data["timestamp_type"] = int(self.timestamp_type)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LogConfig:
        """Build from ``to_dict`` output; unknown keys are refused, missing ones default."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - fields
        if unknown:
            raise InvalidConfigError(f"unknown log config keys: {sorted(unknown)}")
        values = dict(data)
        try:
            if "durability" in values:
                values["durability"] = Durability(values["durability"])
            if "timestamp_type" in values:
                values["timestamp_type"] = TimestampType(values["timestamp_type"])
        except ValueError as exc:
            raise InvalidConfigError(str(exc)) from exc
        return cls(**values)


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidConfigError(f"{name}={value!r} is out of range [{low}, {high}]")

"""The partition checkpoint: a small JSON file replaced atomically.

``<partition dir>/partition.json`` holds what the segment files cannot tell::

    {"version": 1, "clean_shutdown": bool, "log_start_offset": int,
     "recovery_point": int, "high_watermark": int, "config": {...LogConfig...},
     "last_segment": {"base_offset": int, "size_bytes": int, "next_offset": int,
                      "max_timestamp": int, "offset_of_max_timestamp": int}}

``recovery_point`` is an offset below which every byte (log and indexes) was fsynced;
recovery after an unclean stop re-validates from the segment that holds it.
``clean_shutdown`` is written true by ``close`` and false before the first change to the
log's files after it was opened (an append, a roll, a truncation, a deletion), so a crash
after any change leaves it false, while a log opened and never changed keeps the clean
checkpoint that still describes it exactly.
``last_segment`` is present only in a clean checkpoint: the last segment as it was
closed, so that opening needs no read to know where the log ends (the segment's size is
checked against the directory listing). Older checkpoints lack it; it is optional.

The file is replaced whole and durably (``dataplane.files.replace_file``), so a crash
leaves either the old or the new checkpoint, never a mix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataplane.files import replace_file
from dataplane.storage.config import LogConfig
from dataplane.storage.errors import CheckpointError, InvalidConfigError

CHECKPOINT_FILE = "partition.json"
_VERSION = 1


@dataclass(frozen=True, slots=True)
class LastSegment:
    """The last segment of a cleanly closed log."""

    base_offset: int
    size_bytes: int
    next_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int

    def describes(self, base_offset: int, size_bytes: int) -> bool:
        """Whether a listed segment is this one: same base offset and size."""
        return self.base_offset == base_offset and self.size_bytes == size_bytes

    def to_json(self) -> dict[str, int]:
        return {
            "base_offset": self.base_offset,
            "size_bytes": self.size_bytes,
            "next_offset": self.next_offset,
            "max_timestamp": self.max_timestamp,
            "offset_of_max_timestamp": self.offset_of_max_timestamp,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LastSegment:
        return cls(**{name: int(data[name]) for name in _LAST_SEGMENT_FIELDS})


_LAST_SEGMENT_FIELDS = (
    "base_offset",
    "size_bytes",
    "next_offset",
    "max_timestamp",
    "offset_of_max_timestamp",
)


@dataclass(frozen=True, slots=True)
class PartitionCheckpoint:
    clean_shutdown: bool
    log_start_offset: int
    recovery_point: int
    high_watermark: int
    config: LogConfig
    last_segment: LastSegment | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "version": _VERSION,
            "clean_shutdown": self.clean_shutdown,
            "log_start_offset": self.log_start_offset,
            "recovery_point": self.recovery_point,
            "high_watermark": self.high_watermark,
            "config": self.config.to_dict(),
        }
        if self.last_segment is not None:
            data["last_segment"] = self.last_segment.to_json()
        return data


def read_checkpoint(directory: Path) -> PartitionCheckpoint | None:
    """The checkpoint in ``directory``, or None when there is none.

    Raises ``CheckpointError`` when the file exists but cannot be used (damaged, or
    written by an unknown version).
    """
    path = directory / CHECKPOINT_FILE
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise CheckpointError(path, f"not JSON: {exc}") from exc
    try:
        if data.get("version") != _VERSION:
            raise CheckpointError(path, f"unknown version {data.get('version')!r}")
        return PartitionCheckpoint(
            clean_shutdown=bool(data["clean_shutdown"]),
            log_start_offset=int(data["log_start_offset"]),
            recovery_point=int(data["recovery_point"]),
            high_watermark=int(data["high_watermark"]),
            config=LogConfig.from_dict(data["config"]),
            last_segment=(
                LastSegment.from_json(data["last_segment"]) if data.get("last_segment") else None
            ),
        )
    except (AttributeError, KeyError, TypeError, ValueError, InvalidConfigError) as exc:
        raise CheckpointError(path, f"{type(exc).__name__}: {exc}") from exc


def write_checkpoint(directory: Path, checkpoint: PartitionCheckpoint) -> None:
    payload = json.dumps(checkpoint.to_json(), sort_keys=True).encode()
    replace_file(directory / CHECKPOINT_FILE, payload)

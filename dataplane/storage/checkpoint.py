"""The partition checkpoint: a small JSON file replaced atomically.

``<partition dir>/partition.json`` holds what the segment files cannot tell::

    {"version": 1, "clean_shutdown": bool, "log_start_offset": int,
     "recovery_point": int, "high_watermark": int, "config": {...LogConfig...}}

``recovery_point`` is an offset below which every byte (log and indexes) was fsynced;
recovery after an unclean stop re-validates from the segment that holds it.
``clean_shutdown`` is written true by ``close`` and false as soon as a log is opened,
before any append, so a crash at any moment leaves it false.

The file is written to a temporary name, fsynced, renamed over the old one and the
directory fsynced, so a crash leaves either the old or the new checkpoint, never a mix.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataplane.storage.config import LogConfig
from dataplane.storage.errors import CheckpointError, InvalidConfigError

CHECKPOINT_FILE = "partition.json"
_VERSION = 1


@dataclass(frozen=True, slots=True)
class PartitionCheckpoint:
    clean_shutdown: bool
    log_start_offset: int
    recovery_point: int
    high_watermark: int
    config: LogConfig

    def to_json(self) -> dict[str, Any]:
        return {
            "version": _VERSION,
            "clean_shutdown": self.clean_shutdown,
            "log_start_offset": self.log_start_offset,
            "recovery_point": self.recovery_point,
            "high_watermark": self.high_watermark,
            "config": self.config.to_dict(),
        }


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
        )
    except (AttributeError, KeyError, TypeError, ValueError, InvalidConfigError) as exc:
        raise CheckpointError(path, f"{type(exc).__name__}: {exc}") from exc


def write_checkpoint(directory: Path, checkpoint: PartitionCheckpoint) -> None:
    path = directory / CHECKPOINT_FILE
    tmp = directory / (CHECKPOINT_FILE + ".tmp")
    payload = json.dumps(checkpoint.to_json(), sort_keys=True).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)

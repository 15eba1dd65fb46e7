"""Typed failures of the storage engine.

One class per failure mode, each carrying the offending values so a caller (the
broker's error table, an operator reading a log line) can say exactly what went wrong.
They describe requests the log cannot satisfy; bytes that are not a valid RecordBatch
v2 raise the codec's ``dataplane.records.errors.CorruptBatchError`` family.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base class of every error raised by ``dataplane.storage``."""


class OffsetOutOfRangeError(StorageError):
    """A read or lookup asked for an offset outside [log start, log end]."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(f"offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class MarkedRecordsError(Exception):
    """An append found records carrying the header it was told to watch for (the
    broker's ``x-deliver-at``): nothing was written, every batch was valid, and the
    caller takes the append another way. Not a ``StorageError``: nothing failed."""

    def __init__(self, marker: bytes, records: int) -> None:
        super().__init__(f"{records} records carry a {marker.decode(errors='replace')!r} header")
        self.marker = marker
        self.records = records


class InvalidOffsetError(StorageError):
    """A batch handed to the log carries offsets the log cannot accept."""


class AppendTruncatedError(StorageError):
    """An append was truncated away (by replication) before it could be synced."""

    def __init__(self, base_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"the append at offset {base_offset} was truncated (log end now "
            f"{log_end_offset}) before it was synced"
        )
        self.base_offset = base_offset
        self.log_end_offset = log_end_offset


class IndexCorruptError(StorageError):
    """An index file contradicts its invariants; its segment rebuilds it from the log."""

    def __init__(self, path: object, reason: str) -> None:
        super().__init__(f"corrupt index {path}: {reason}")
        self.path = path
        self.reason = reason


class CheckpointError(StorageError):
    """A partition checkpoint exists but cannot be read."""

    def __init__(self, path: object, reason: str) -> None:
        super().__init__(f"unreadable checkpoint {path}: {reason}")
        self.path = path
        self.reason = reason


class LogClosedError(StorageError):
    """The log (or its manager) has been closed."""


class LogDirOfflineError(StorageError):
    """An I/O error made the log directory unusable; the log refuses further writes."""

    def __init__(self, path: str, cause: BaseException) -> None:
        super().__init__(f"log directory {path} is offline: {cause}")
        self.path = path
        self.cause = cause


class InvalidConfigError(StorageError):
    """A log configuration value is out of bounds."""

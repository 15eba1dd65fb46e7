"""Helpers for storage tests: deterministic batches, hand-framed batches that lie, a
manual clock, crash copies."""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from pathlib import Path

from crc32c import crc32c
from kafka.record.util import encode_varint

from dataplane.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchBuilder,
    Compression,
    Record,
    decode_batches,
)
from dataplane.storage.log import PartitionLog


class ManualClock:
    """A wall clock in ms that moves only when a test says so."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def make_batch(
    values: list[bytes],
    *,
    timestamps: list[int] | None = None,
    compression: Compression = Compression.NONE,
    key_prefix: str = "k",
) -> bytes:
    """One batch; record i has key ``<prefix><i>``, the given value and timestamp."""
    builder = BatchBuilder(compression=compression)
    for i, value in enumerate(values):
        timestamp = timestamps[i] if timestamps else 1_000 + i
        builder.append(value, key=f"{key_prefix}{i}".encode(), timestamp=timestamp)
    return builder.build()


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Poll ``condition`` until it holds or ``timeout_s`` passes; returns its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.001)
    return condition()


def read_all(log: PartitionLog, start: int | None = None) -> list[Record]:
    """Every record from ``start`` (default the log start) to the LEO, via ``read``."""
    offset = log.log_start_offset if start is None else start
    out: list[Record] = []
    while offset < log.log_end_offset:
        result = log.read(offset, 64 * 1024)
        assert result.data, f"empty read at {offset} below LEO {log.log_end_offset}"
        out.extend(r for r in decode_batches(result.data) if r.offset >= offset)
        offset = result.next_offset
    return out


def crash_copy(log: PartitionLog, target: Path) -> Path:
    """Copy a live log's directory as a SIGKILL would leave it (no clean close)."""
    import shutil

    shutil.copytree(log.directory, target)
    return target


# --- hand-framed batches: each field honest unless a test makes it lie ----------------

BASE_TS = 1_700_000_000_000
INT32_MAX = 2**31 - 1


def varint(value: int) -> bytes:
    out = bytearray()
    encode_varint(value, out.append)
    return bytes(out)


def record(
    offset_delta: int,
    *,
    ts_delta: int = 0,
    key: bytes | None = None,
    value: bytes | None = b"v",
    headers: bytes = b"\x00",
    length: int | None = None,
) -> bytes:
    """One record: its fields encoded honestly unless given raw (``headers``, ``length``)."""
    body = b"\x00" + varint(ts_delta) + varint(offset_delta)
    for field in (key, value):
        body += varint(-1) if field is None else varint(len(field)) + field
    body += headers
    return varint(len(body) if length is None else length) + body


def frame(
    payload: bytes,
    *,
    count: int,
    last_offset_delta: int | None = None,
    max_timestamp: int | None = None,
    base_timestamp: int = BASE_TS,
    attributes: int = 0,
) -> bytes:
    """A batch around ``payload`` (raw record bytes) with the given header and a valid CRC."""
    fields = (
        attributes,
        count - 1 if last_offset_delta is None else last_offset_delta,
        base_timestamp,
        base_timestamp if max_timestamp is None else max_timestamp,
        -1,
        -1,
        -1,
        count,
    )
    covered = struct.pack(">hiqqqhii", *fields) + payload
    length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    return struct.pack(">qiibI", 0, length, -1, 2, crc32c(covered)) + covered

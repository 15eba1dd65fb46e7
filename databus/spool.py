"""A stream's spool: the durable local log of writes not yet on their topic, and its
drain state.

Layout, in the stream's directory ``<data dir>/streams/<stream>/``:

- ``log/``: a ``dataplane.storage.PartitionLog`` (the brokers' storage engine). Each
  accepted write is one RecordBatch of its records (key, value, headers, the write's
  timestamp); the log's offsets are the spool's offsets. Its durability mode is the
  stream's ``fsync`` (``always``: an append returns after a group commit's fdatasync).
- ``dead-letter.jsonl``: records no broker would take (see ``dead_letter``).
- ``drain.json``: the drain state (``DrainState``), replaced whole and durably
  (``dataplane.files.replace_file``) at every step of the drain, so it survives a kill
  at any point: the offset below which every record reached its topic (``committed``),
  the producer identity and next sequence of every partition written, and the chunk in
  flight (``pending``, see ``databus.drain``), written *before* its batches are sent.

Accounting: the spool counts the bytes of records accepted and neither drained nor
dropped (``depth_bytes``), per write, in memory (rebuilt from the batch headers at
open). ``spool_max_bytes`` bounds it; ``make_room`` applies the stream's ``when_full``.
Dropping (``drop_oldest``) moves ``skip_to`` past whole writes at the front of what is
not yet in flight; disk space returns as the drain passes whole segments (``trim``).

Thread safety: ``append`` may be called from many threads (the log serialises them);
the drain state belongs to the stream's drainer, except ``skip_to``, which
``drop_oldest`` moves: both take ``lock`` to change or check it against ``pending``;
the accounting takes ``lock`` too.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dataplane.files import replace_file
from dataplane.records import Record, decode_batches
from dataplane.records.builder import BatchBuilder
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.log import PartitionLog

log = logging.getLogger(__name__)
DRAIN_FILE = "drain.json"
DEAD_LETTER_FILE = "dead-letter.jsonl"
_STATE_VERSION = 1
MiB = 1024 * 1024
# One write is one batch of the spool: the HTTP and gRPC bodies are bounded well below.
MAX_WRITE_BYTES = 64 * MiB
READ_STEP_BYTES = 4 * MiB


@dataclass
class PendingChunk:
    """A chunk of the spool in flight: records ``[start, end)`` planned with these
    parameters (so a restart rebuilds exactly the same batches, see ``databus.drain``)."""

    start: int
    end: int
    topic: str
    lane: str | None
    partitioner: str
    compression: str
    acks: str
    partitions: dict[str, int]  # target topic -> its partition count when planned
    sticky: int  # the partition keyless records of this chunk go to (murmur2)
    sequences: dict[str, int]  # "topic/partition" -> base sequence of its batch
    acked: list[str] = field(default_factory=list)  # "topic/partition" already written
    dead: list[str] = field(default_factory=list)  # "topic/partition" no broker will take


@dataclass
class DrainState:
    committed: int = 0  # every record below reached its topic, was dropped or skipped
    skip_to: int = 0  # records below were dropped (``drop_oldest``) unless in ``pending``
    producer_id: int = -1
    producer_epoch: int = -1
    sequences: dict[str, int] = field(default_factory=dict)  # "topic/partition" -> next
    pending: PendingChunk | None = None
    chunks: int = 0  # chunks committed so far (picks the sticky partition)

    def to_json(self) -> bytes:
        data = asdict(self)
        data["version"] = _STATE_VERSION
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> DrainState:
        data: dict[str, Any] = json.loads(raw)
        if data.pop("version", None) != _STATE_VERSION:
            raise ValueError(f"unknown drain state version in {raw[:80]!r}")
        pending = data.pop("pending")
        return cls(**data, pending=None if pending is None else PendingChunk(**pending))


class SpoolFull(Exception):  # noqa: N818 - an outcome the stream maps to its answer
    """No room for a write: ``reason`` says why (``reject``, or ``block`` timed out)."""

    def __init__(self, reason: str, depth_bytes: int, limit: int) -> None:
        super().__init__(f"the spool is full ({depth_bytes} of {limit} bytes): {reason}")
        self.reason = reason
        self.depth_bytes = depth_bytes
        self.limit = limit


def log_config(fsync: str, fsync_interval_ms: int, max_bytes: int) -> LogConfig:
    segment = max(1 * MiB, min(64 * MiB, max_bytes // 8))
    return LogConfig(
        max_segment_bytes=segment,
        retention_ms=-1,
        retention_bytes=-1,
        max_batch_bytes=MAX_WRITE_BYTES,
        durability=Durability(fsync),
        flush_interval_ms=fsync_interval_ms,
        segment_ms=2**62,
    )


class Spool:
    """One stream's spool (see the module docstring)."""

    def __init__(self, directory: Path, config: LogConfig) -> None:
        self.directory = Path(directory)
        self.log = PartitionLog.open(self.directory / "log", config)
        self._state_path = self.directory / DRAIN_FILE
        self.state = self._load_state()
        self.lock = threading.Condition()
        # (end offset, bytes) of each write not yet drained or dropped, oldest first
        self._writes: deque[tuple[int, int]] = deque()
        self.depth_bytes = 0
        self.dropped_records = 0
        # Offset ranges accepted and then dropped or dead-lettered, newest last, for
        # ``ack_on_broker`` writers still waiting on them.
        self.undelivered: deque[tuple[int, int]] = deque(maxlen=10_000)
        self._oldest_ms: deque[tuple[int, float]] = deque()  # (end offset, monotonic time)
        self._rebuild_accounting()

    # -- drain state ----------------------------------------------------------------------
    def _load_state(self) -> DrainState:
        try:
            state = DrainState.from_json(self._state_path.read_bytes())
        except FileNotFoundError:
            state = DrainState(committed=self.log.log_start_offset)
        state.committed = max(state.committed, self.log.log_start_offset)
        end = self.log.log_end_offset
        if (
            state.committed > end
            or state.skip_to > end
            or (state.pending and state.pending.end > end)
        ):
            # The log lost its tail to a power loss (fsync interval or never) after the
            # drain had moved past it: the lost records are gone, and the offsets they
            # held will be given to new writes, so the drain starts again at the log's
            # end, under a new producer id (the brokers know the old one's sequences).
            log.warning(
                "spool %s ends at %s, below its drain state %s: its tail was lost",
                self.directory,
                end,
                state,
            )
            # Records below ``end`` that the drain may not have delivered (a chunk in
            # flight) are sent again: at least once rather than lost.
            state = DrainState(committed=min(state.committed, end), skip_to=min(state.skip_to, end))
            replace_file(self._state_path, state.to_json(), private=True)
        return state

    def reload_state(self) -> None:
        """Take the drain state on disk again: after a failed step, memory may hold
        changes that never reached it (``save_state`` raised)."""
        state = self._load_state()
        with self.lock:
            self.state = state

    def save_state(self) -> None:
        replace_file(self._state_path, self.state.to_json(), private=True)

    # -- writing --------------------------------------------------------------------------
    def append(self, records: list[tuple[Any, ...]], now_ms: int) -> tuple[int, int]:
        """Spool one write's records (``(key, value, headers, timestamp)`` tuples); returns
        ``(first offset, end offset)`` once the log's durability mode holds them."""
        builder = BatchBuilder()
        builder.extend(records, now=now_ms)
        data = builder.build()
        info = self.log.append(data)
        end = info.last_offset + 1
        with self.lock:
            if end > self.state.committed:  # else the drain was quicker than this line
                self._writes.append((end, len(data)))
                self._oldest_ms.append((end, time.monotonic()))
                self.depth_bytes += len(data)
            self.lock.notify_all()
        return info.base_offset, end

    def reserve(self, size: int, *, when_full: str, max_bytes: int, timeout_s: float) -> None:
        """Wait (``block``), refuse (``reject``) or drop (``drop_oldest``) until ``size``
        more bytes fit under ``max_bytes``; raises ``SpoolFull`` when they don't."""
        deadline = time.monotonic() + timeout_s
        with self.lock:
            while self.depth_bytes and self.depth_bytes + size > max_bytes:
                if when_full == "drop_oldest" and self._drop_oldest_locked():
                    continue
                left = deadline - time.monotonic()
                if when_full != "block" or left <= 0:
                    reason = "timed out waiting for room" if when_full == "block" else when_full
                    raise SpoolFull(reason, self.depth_bytes, max_bytes)
                self.lock.wait(min(left, 0.5))

    def _drop_oldest_locked(self) -> bool:
        """Drop the oldest write not in flight; False when every write is in flight."""
        floor = max(self.state.skip_to, self.state.committed)
        pending = self.state.pending
        if pending is not None:
            floor = max(floor, pending.end)
        for index, (end, size) in enumerate(self._writes):
            if end > floor:
                start = self._writes[index - 1][0] if index else self.state.committed
                start = max(start, floor)
                del self._writes[index]
                self.depth_bytes -= size
                self.dropped_records += end - start
                self.state.skip_to = end
                self.undelivered.append((start, end))
                return True
        return False

    # -- draining -------------------------------------------------------------------------
    @property
    def end_offset(self) -> int:
        return self.log.high_watermark

    def read(self, start: int, end: int, max_bytes: int) -> list[Record]:
        """Records of offsets ``[start, end)``: all of them, or, past ``max_bytes`` of
        writes read, the first ones (at least one write's). ``start`` and ``end`` may fall
        inside a write (a chunk may end inside one): the log is read in whole writes
        up to the spool's end and the records outside the range are left out."""
        records: list[Record] = []
        offset, read = start, 0
        while offset < end and read < max_bytes:
            result = self.log.read(offset, min(max_bytes - read, READ_STEP_BYTES))
            if not result.data:
                break
            read += len(result.data)
            records.extend(r for r in decode_batches(result.data) if start <= r.offset < end)
            offset = result.next_offset
        return records

    def wait_for_records(self, after: int, timeout_s: float) -> bool:
        """Whether records at or above ``after`` exist, waiting up to ``timeout_s``."""
        with self.lock:
            if self.end_offset > after:
                return True
            self.lock.wait(timeout_s)
            return self.end_offset > after

    def drained(self, committed: int) -> None:
        """Records below ``committed`` reached their topic: forget their accounting,
        wake writers waiting for room, and give whole drained segments back."""
        with self.lock:
            while self._writes and self._writes[0][0] <= committed:
                self.depth_bytes -= self._writes.popleft()[1]
            while self._oldest_ms and self._oldest_ms[0][0] <= committed:
                self._oldest_ms.popleft()
            self.lock.notify_all()
        self.log.advance_log_start_offset(committed)
        self.log.maybe_flush()

    def was_undelivered(self, start: int, end: int) -> bool:
        """Whether any offset of ``[start, end)`` was dropped or dead-lettered."""
        with self.lock:
            return any(s < end and start < e for s, e in self.undelivered)

    def oldest_age_s(self) -> float:
        """How long the oldest write not yet delivered has waited (monotonic clock)."""
        with self.lock:
            return max(0.0, time.monotonic() - self._oldest_ms[0][1]) if self._oldest_ms else 0.0

    def depth_records(self) -> int:
        return max(0, self.end_offset - max(self.state.committed, self.state.skip_to))

    def _rebuild_accounting(self) -> None:
        start = max(self.state.committed, self.state.skip_to)
        now = time.monotonic()
        for base, header in self.log.batch_headers(start):
            end = base + header.last_offset_delta + 1
            size = header.size
            self._writes.append((end, size))
            self._oldest_ms.append((end, now))  # write times are not kept: from the start
            self.depth_bytes += size

    def dead_letter(self, records: list[Record], chunk: PendingChunk, reason: str) -> None:
        """Keep records no broker will take in ``dead-letter.jsonl`` (one JSON object
        per record: spool offset, target topic, key and value in base64, headers, the
        reason), synced before the chunk commits."""
        lines = []
        for r in records:
            entry = {
                "offset": r.offset,
                "timestamp_ms": r.timestamp,
                "topic": chunk.topic,
                "lane": chunk.lane,
                "key_b64": None if r.key is None else base64.b64encode(r.key).decode(),
                "value_b64": None if r.value is None else base64.b64encode(r.value).decode(),
                "headers": [
                    [k, None if v is None else v.decode("utf-8", "replace")] for k, v in r.headers
                ],
                "reason": reason,
            }
            lines.append(json.dumps(entry, separators=(",", ":")) + "\n")
        with self.lock:
            for r in records:
                last = self.undelivered[-1] if self.undelivered else None
                if last is not None and last[1] == r.offset:
                    self.undelivered[-1] = (last[0], r.offset + 1)
                else:
                    self.undelivered.append((r.offset, r.offset + 1))
        fd = os.open(
            self.directory / DEAD_LETTER_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600
        )
        try:
            os.write(fd, "".join(lines).encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def update_config(self, config: LogConfig) -> None:
        if config != self.log.config:
            self.log.update_config(config)

    def close(self) -> None:
        self.log.close()

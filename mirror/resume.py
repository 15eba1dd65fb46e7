"""Where each partition's copy resumes: the target holds the truth.

For a target partition, the last record whose ``x-origin-region`` is the leg's *from*
region carries in ``x-origin-offset`` the last source offset copied (records are written
in source order by one idempotent producer, so nothing before it is missing and nothing
after it was written). ``find_resume`` reads the target backward from its high watermark
in windows (``WINDOW_RECORDS``, doubling up to ``MAX_WINDOW_RECORDS``), each read
forward, and stops at the checkpoint (a target offset known to hold a copy, from the
control plane's offset map) or the log start:

- found: resume at its ``x-origin-offset`` + 1;
- not found, with a checkpoint: resume at the checkpoint's source offset + 1 (the
  record at the checkpoint itself would have been found unless retention removed it);
- nothing at all: the link's start position (``earliest``, ``latest``, a timestamp).

A checkpoint whose target offset is at or past the target's high watermark is not of
this target (a copy deleted and made again starts empty): it is ignored, so a new copy
never skips records. An ``x-origin-offset`` that is not a decimal int64 counts as absent
(``provenance.parse_offset``).

Records of other origins in the target (local traffic, copies from a third region) are
passed over; a checkpoint keeps the scan short when there are many.

Before the scan, ``settle`` waits (up to ``SETTLE_TIMEOUT_S``) until each target
partition's high watermark reaches the log end offset its leader had when asked: a
previous worker's last batch may have been appended by the leader and not yet be
replicated, so invisible to a reader; were the scan to pass it, that batch would be
copied again once it is committed. A batch the leader loses instead (a leader change
truncates it) is gone, which the scan then sees.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from dataplane.client import Admin, Consumer, ErrorCode, MeridianError, TopicPartition
from mirror.config import Checkpoint
from mirror.provenance import origin

WINDOW_RECORDS = 1_000
MAX_WINDOW_RECORDS = 64_000
READ_TIMEOUT_S = 30.0
SETTLE_TIMEOUT_S = 30.0


class StoppingError(Exception):
    """The worker is stopping: the scan was left unfinished."""


@dataclass(frozen=True)
class Found:
    """What the scan found: the next source offset to copy (None: use the start
    position) and the target offset of the copy it was found at (-1: none)."""

    next_source_offset: int | None
    target_offset: int = -1
    scanned: int = 0


def settle(
    admin: Admin, tps: Iterable[TopicPartition], stop: threading.Event
) -> list[TopicPartition]:
    """Wait until the high watermark of each of ``tps`` reaches the log end offset it
    had at the call (see the module docstring); returns those that did not within
    ``SETTLE_TIMEOUT_S``. Raises ``StoppingError`` once ``stop`` is set."""
    wanted = list(tps)
    ends = _log_ends(admin, {tp.topic for tp in wanted})
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    pending = wanted
    while True:
        marks = _log_ends(admin, {tp.topic for tp in pending}, high_watermark=True)
        pending = [tp for tp in pending if marks.get(tp, -1) < ends.get(tp, -1)]
        if not pending or time.monotonic() > deadline:
            return pending
        if stop.wait(0.1):
            raise StoppingError()


def _log_ends(
    admin: Admin, topics: Iterable[str], *, high_watermark: bool = False
) -> dict[TopicPartition, int]:
    out = {}
    for topic in topics:
        for p in admin.describe_topic(topic).partitions:
            out[TopicPartition(topic, p.partition)] = (
                p.high_watermark if high_watermark else p.log_end_offset
            )
    return out


def find_resume(
    reader: Consumer,
    tp: TopicPartition,
    from_region: str,
    bounds: tuple[int, int],
    checkpoint: Checkpoint | None,
    stopping: threading.Event | None = None,
) -> Found:
    """The resume point of target partition ``tp`` whose log spans ``bounds`` (log
    start, high watermark); see the module docstring. ``reader`` is a consumer of the
    target without a group; it is left assigned to ``tp``. Raises ``StoppingError`` once
    ``stopping`` is set."""
    log_start, end = bounds
    if checkpoint is not None and checkpoint.target_offset >= end:
        checkpoint = None  # not in this target (a copy deleted and made again): ignored
    stop = log_start
    if checkpoint is not None and checkpoint.target_offset >= log_start:
        stop = checkpoint.target_offset
    wanted = from_region.encode()
    window, scanned = WINDOW_RECORDS, 0
    reader.assign([tp])
    while end > stop:
        start = max(stop, end - window)
        hit = _last_copy(reader, tp, wanted, start, end, stopping)
        scanned += end - start
        if hit is not None:
            return Found(hit[0] + 1, hit[1], scanned)
        end, window = start, min(window * 2, MAX_WINDOW_RECORDS)
    if checkpoint is not None:
        return Found(checkpoint.source_offset + 1, checkpoint.target_offset, scanned)
    return Found(None, -1, scanned)


def _last_copy(
    reader: Consumer,
    tp: TopicPartition,
    wanted: bytes,
    start: int,
    end: int,
    stopping: threading.Event | None,
) -> tuple[int, int] | None:
    """(origin offset, target offset) of the last copy from ``wanted`` in
    ``[start, end)``, reading forward."""
    reader.seek(tp, start)
    last = None
    deadline = time.monotonic() + READ_TIMEOUT_S
    while reader.position(tp) < end:
        if stopping is not None and stopping.is_set():
            raise StoppingError()
        records = reader.poll(200)
        if not records and time.monotonic() > deadline:
            raise MeridianError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{tp.topic}/{tp.partition}: the target did not return offsets {start}..{end}"
                f" within {READ_TIMEOUT_S:.0f} s",
            )
        for record in records:
            if record.offset >= end:
                break
            region, offset = origin(record.headers)
            if region == wanted and offset is not None:
                last = (offset, record.offset)
        if records:
            deadline = time.monotonic() + READ_TIMEOUT_S
    return last

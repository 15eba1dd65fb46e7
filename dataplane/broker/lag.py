"""Lag in time: the age of the oldest record a consumer group has not consumed.

A group's committed offset is the next offset it will read, so the record there is its
oldest unconsumed one; its timestamp says how far behind the group is in time, which
is what operators alert on (a lag in records means little without the rate).

The record is found as a fetch finds it: the offset index gives the batch holding the
offset (``PartitionLog.read``), and that one batch is decoded — never a scan of the
log. A committed offset below the log start (retention removed what the group had not
read) means the record at the log start. One at or past the high watermark means the
group is caught up: no record, age 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from dataplane.records import decode_batches
from dataplane.storage.errors import OffsetOutOfRangeError
from dataplane.storage.log import PartitionLog, wall_clock_ms

# Batches read past the committed offset before giving up on finding a record there
# (control batches, which decode to no records, may sit at it).
_BATCHES_TRIED = 4
NO_RECORD = -1


@dataclass(frozen=True, slots=True)
class RecordAge:
    """The oldest unconsumed record's timestamp (``NO_RECORD`` when caught up) and its
    age in ms by this broker's clock (0 when caught up, never negative)."""

    timestamp: int
    age_ms: int


CAUGHT_UP = RecordAge(NO_RECORD, 0)


def timestamp_at(log: PartitionLog, offset: int) -> int:
    """The timestamp of the first record at or after ``offset`` below the high watermark
    (as a consumer decodes it), or ``NO_RECORD``."""
    for _ in range(_BATCHES_TRIED):
        if offset >= log.high_watermark:
            return NO_RECORD
        try:
            result = log.read(offset, 1)
        except OffsetOutOfRangeError:  # retention passed it meanwhile: the new log start
            offset = max(offset, log.log_start_offset)
            continue
        for record in decode_batches(result.data):
            if record.offset >= offset:
                return record.timestamp
        if result.next_offset <= offset:
            return NO_RECORD
        offset = result.next_offset
    return NO_RECORD


def record_age(log: PartitionLog, committed: int, now_ms: int | None = None) -> RecordAge:
    """The age of the record at a group's ``committed`` offset (see the module docstring)."""
    offset = max(committed, log.log_start_offset)
    timestamp = timestamp_at(log, offset)
    if timestamp == NO_RECORD:
        return CAUGHT_UP
    now = wall_clock_ms() if now_ms is None else now_ms
    return RecordAge(timestamp, max(0, now - timestamp))

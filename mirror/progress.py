"""One partition's progress, shared by the copy loop, the producer's delivery callbacks
and the status server (every field under the owner's lock).

Offsets: ``sent_next`` is the source offset after the last record handed to the
producer (the copy loop's position); ``next_source_offset`` the source offset after the
last record the target acknowledged (or skipped behind it): the progress that counts.
Calls in flight are completed in order per partition (the producer's contract), so each
completion moves ``next_source_offset`` to that call's end.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

POINTS_KEPT = 100  # offset-map points listed per partition (the status contract)
# Errors under which the source's end is not known to be reached: the source unreachable,
# or its end before the copy's position.
UNCERTAIN = frozenset({"source", "past_end"})


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Call:
    """One ``send_copy`` in flight: source offsets up to ``end`` (exclusive)."""

    first_timestamp_ms: int
    last_source_offset: int
    end: int
    records: int
    size_bytes: int
    sent_at_ms: int = field(default_factory=now_ms)


@dataclass
class PartitionProgress:
    source_topic: str
    target_topic: str
    partition: int
    state: str = "resuming"
    next_source_offset: int = -1
    sent_next: int = -1
    source_end_offset: int = -1
    source_log_start_offset: int = -1
    target_end_offset: int = -1
    copied_records: int = 0
    copied_bytes: int = 0
    skipped_records: int = 0
    records_lost_to_retention: int = 0
    errors_total: int = 0
    errors: dict[str, tuple[str, int]] = field(default_factory=dict)  # kind -> (text, since)
    last_progress_ms: int = field(default_factory=now_ms)
    caught_up_ms: int = field(default_factory=now_ms)
    inflight: deque[Call] = field(default_factory=deque)
    points: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=POINTS_KEPT))
    last_point_ms: int = 0
    lag_from: int = -1  # before the first resume: the checkpoint's next source offset

    def set_error(self, kind: str, text: str) -> None:
        if kind not in self.errors:
            self.errors_total += 1
        since = self.errors.get(kind, (text, now_ms()))[1]
        self.errors[kind] = (text, since)

    def clear_error(self, kind: str) -> None:
        self.errors.pop(kind, None)

    def start_at(self, offset: int) -> None:
        self.next_source_offset = self.sent_next = offset
        self.inflight.clear()
        self.state = "copying"

    def advance(self, end: int) -> None:
        if end > self.next_source_offset:
            self.next_source_offset = end
            self.last_progress_ms = now_ms()
        self.note_caught_up()

    def _caught_up(self) -> bool:
        """Known to have copied everything up to the source's end: not while the next
        offset is unknown (before the first resume), the source unreachable or its end
        before the copy's position."""
        return (
            self.next_source_offset >= 0
            and self.source_end_offset >= 0
            and self.next_source_offset >= self.source_end_offset
            and not self.inflight
            and not self.errors.keys() & UNCERTAIN
        )

    def note_caught_up(self) -> None:
        """Remember when the copy last reached the source's end (``lag_seconds``)."""
        if self._caught_up():
            self.caught_up_ms = now_ms()

    def lag_records(self) -> int:
        """Source high watermark - next source offset; before the first resume, from
        the checkpoint; 0 when neither is known."""
        at = self.next_source_offset if self.next_source_offset >= 0 else self.lag_from
        if self.source_end_offset < 0 or at < 0:
            return 0
        return max(0, self.source_end_offset - at)

    def lag_seconds(self, at_ms: int) -> float:
        """The age of the oldest source record not yet copied, bounded by the time since
        the partition was last caught up (every record older than that was copied then),
        so a producer's skewed clock cannot inflate it: min(now - CreateTime of the
        first record in flight, now - last caught up); 0 when caught up."""
        if self._caught_up():
            self.caught_up_ms = at_ms
            return 0.0
        since_caught_up = max(0.0, (at_ms - self.caught_up_ms) / 1000)
        if self.inflight:
            oldest = max(0.0, (at_ms - self.inflight[0].first_timestamp_ms) / 1000)
            return min(oldest, since_caught_up)
        return since_caught_up

    def status(self, at_ms: int) -> dict[str, Any]:
        errors = sorted(self.errors.values(), key=lambda e: e[1])
        state = "error" if errors else self.state
        if self.inflight and at_ms - self.inflight[0].sent_at_ms > STUCK_DELIVERY_MS:
            waited = (at_ms - self.inflight[0].sent_at_ms) / 1000
            errors.append((f"the target has not acknowledged for {waited:.0f} s", at_ms))
            state = "error"
        return {
            "source_topic": self.source_topic,
            "target_topic": self.target_topic,
            "partition": self.partition,
            "state": state,
            "next_source_offset": self.next_source_offset,
            "source_end_offset": self.source_end_offset,
            "source_log_start_offset": self.source_log_start_offset,
            "target_end_offset": self.target_end_offset,
            "lag_records": self.lag_records(),
            "lag_seconds": round(self.lag_seconds(at_ms), 3),
            "copied_records": self.copied_records,
            "copied_bytes": self.copied_bytes,
            "skipped_records": self.skipped_records,
            "records_lost_to_retention": self.records_lost_to_retention,
            "error": "; ".join(text for text, _ in errors),
            "error_since_ms": min((since for _, since in errors), default=None),
            "last_progress_ms": self.last_progress_ms,
        }


# A delivery unacknowledged this long is reported as the partition's error (the producer
# keeps retrying: the target may be down).
STUCK_DELIVERY_MS = 10_000

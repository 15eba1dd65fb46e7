"""Removing records from a partition log: retention, advancing the log start, truncation.

``LogRetention`` adds these operations to ``LogState`` (``log_state.py``) for
``PartitionLog`` (``log.py``). Each takes the append lock for its whole run; one that
changes the log marks it unclean before touching a file and ends by writing the
checkpoint with the new log start offset or LEO.

- Retention (``delete_retained_segments``) deletes whole leading segments, never data at
  or above the high watermark.
- ``advance_log_start_offset`` makes the offsets below a point unreadable, deleting the
  segments that lie wholly below it.
- Truncation removes every record at or above an offset, a whole batch at a time, and is
  synced before it returns.

A read working on an older segment snapshot keeps the files of a deleted segment it has
pinned until it unpins it (see ``segment.py``); one that finds a segment gone retries on
the current snapshot.
"""

from __future__ import annotations

from dataplane.storage.log_state import LogState
from dataplane.storage.segment import LogSegment


class LogRetention(LogState):
    """Retention, log start advancement and truncation. See the module docstring."""

    def delete_retained_segments(self, now_ms: int | None = None) -> list[int]:
        """Delete leading segments past ``retention_ms`` or beyond ``retention_bytes``.

        Only whole segments go, never data at or above the high watermark. When every
        segment has expired the active one is rolled first, so the log ends up empty with
        its LEO kept. Returns the base offsets deleted.
        """
        now = self._clock_ms() if now_ms is None else now_ms
        with self._lock:
            self._check_writable()
            view, high_watermark = self._view, self._high_watermark
            doomed = view.expired_by_time(now, self.config.retention_ms, high_watermark)
            if not doomed:
                doomed = view.over_size(self.config.retention_bytes, high_watermark)
            if not doomed:
                return []
            self._mark_unclean()
            self._note_activity()
            if doomed[-1] is self._view.segments[-1]:
                self._roll(self._log_end_offset)
            return self._delete_leading(doomed)

    def _delete_leading(self, doomed: list[LogSegment]) -> list[int]:
        remaining = list(self._view.segments[len(doomed) :])
        self._log_start_offset = max(self._log_start_offset, remaining[0].base_offset)
        self._set_view(remaining)
        with self._unflushed_lock:
            self._unflushed = [s for s in self._unflushed if s not in doomed]
        self._delete_segments(doomed)
        self._write_checkpoint(clean_shutdown=False)
        return [s.base_offset for s in doomed]

    def _delete_segments(self, doomed: list[LogSegment] | tuple[LogSegment, ...]) -> None:
        try:
            for segment in doomed:
                segment.delete()
        except OSError as exc:
            raise self._go_offline(exc) from exc

    def advance_log_start_offset(self, offset: int) -> int:
        """Make offsets below ``offset`` unreadable (bounded by the high watermark)."""
        with self._lock:
            self._check_writable()
            target = min(offset, self._high_watermark)
            if target <= self._log_start_offset:
                return self._log_start_offset
            doomed = [s for s in self._view.segments[:-1] if s.next_offset <= target]
            if doomed:
                self._mark_unclean()
            self._log_start_offset = target
            self._note_activity()
            if doomed:
                self._delete_leading(doomed)
            else:
                self._write_checkpoint()
            return self._log_start_offset

    def truncate_to(self, offset: int) -> int:
        """Remove every record at or above ``offset``; returns the new LEO.

        A batch holding ``offset`` is removed whole (batches are never split), so the
        new LEO may be below ``offset`` — but never below the log start: when the batch
        holding ``offset`` began there, the log is emptied and restarts at the log start.
        Truncating to or below the log start empties the log and restarts it at
        ``offset``. The truncation is synced before returning.
        """
        with self._lock:
            self._check_writable()
            if offset >= self._log_end_offset:
                return self._log_end_offset
            if offset <= self._log_start_offset:
                return self.truncate_fully_and_start_at(offset)
            self._mark_unclean()
            self._note_activity()
            # Before any file changes: a flush round already running must not count what
            # is about to be cut, nor acknowledge an append in it.
            self._committer.truncated(offset)
            view = self._view
            keep = list(view.segments[: view.floor_index(offset) + 1])
            self._delete_segments(view.segments[len(keep) :])
            tail = keep[-1]
            try:
                tail.truncate_to(offset)
                tail.reopen_for_append()
                tail.flush()
            except OSError as exc:
                raise self._go_offline(exc) from exc
            with self._unflushed_lock:
                self._unflushed = [s for s in self._unflushed if s in keep and s is not tail]
            self._set_view(keep)
            if tail.next_offset < self._log_start_offset:
                # The batch holding ``offset`` began below the log start: nothing readable
                # is left, and offsets below the log start are never handed out again.
                return self.truncate_fully_and_start_at(self._log_start_offset)
            self._after_truncation(tail.next_offset)
            return self._log_end_offset

    def truncate_fully_and_start_at(self, offset: int) -> int:
        """Delete every segment and restart the empty log at ``offset``."""
        with self._lock:
            self._check_writable()
            self._mark_unclean()
            self._note_activity()
            self._committer.truncated(min(offset, self._log_end_offset))
            self._delete_segments(self._view.segments)
            with self._unflushed_lock:
                self._unflushed = []
            try:
                self._set_view([self._new_segment(offset)])
            except OSError as exc:
                raise self._go_offline(exc) from exc
            self._log_start_offset = offset
            self._after_truncation(offset, restarted=True)
            return offset

    def _after_truncation(self, end: int, *, restarted: bool = False) -> None:
        self._log_end_offset = end
        self._log_start_offset = min(self._log_start_offset, end)
        if restarted:
            self._committer.reset(end)  # an empty log: nothing below ``end`` to sync
        else:
            self._committer.truncated(end)
        with self._hw_lock:
            self._high_watermark = self._clamp(self._high_watermark)
        self._publish()
        self._write_checkpoint()

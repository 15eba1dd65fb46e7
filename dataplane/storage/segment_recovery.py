"""Loading and recovering a log segment: trusting what a clean shutdown left, or
re-validating every batch.

``SegmentRecovery`` adds to ``SegmentState`` (``segment_state.py``) what ``recovery.py``
calls when a log opens, and what a segment does itself when an index proves wrong:

- ``defer_loading``: trust the listing and the checkpoint; the first pin checks each
  index against the log at its last entry (``_finish_loading``) and rebuilds both if
  that fails;
- ``load_clean``: the same check at once, then a walk of the tail after the last index
  entry to find where the segment ends;
- ``recover``: re-validate every batch (CRC included), rebuild both indexes and
  truncate a torn tail; ``verify`` is its read-only counterpart;
- ``_rebuild_indexes``: what a read does when an index entry disagrees with the log.

``load_clean``, ``recover``, ``verify`` and index rebuilds pin the segment themselves;
``recover`` and rebuilds also hold the segment's lock.
"""

from __future__ import annotations

import logging

from dataplane.records.errors import CorruptBatchError
from dataplane.storage.errors import IndexCorruptError
from dataplane.storage.scan import CorruptRegion, ScanResult, scan_segment
from dataplane.storage.segment_state import SegmentState

log = logging.getLogger(__name__)


class SegmentRecovery(SegmentState):
    """Deferred and clean loading, recovery and index rebuilds. See the module docstring."""

    # -- deferred loading ---------------------------------------------------------------
    def defer_loading(
        self,
        next_offset: int,
        *,
        sealed: bool,
        max_timestamp: int | None = None,
        offset_of_max_timestamp: int | None = None,
    ) -> None:
        """Trust what the listing and checkpoint say; check the indexes on first pin.

        The max timestamp, when not given, is read from the time index when first asked.
        """
        self.next_offset = next_offset
        self.sealed = sealed
        self._deferred = True
        if max_timestamp is None:
            self._timestamps_known = False
        else:
            self._max_timestamp = max_timestamp
            self._offset_of_max_timestamp = offset_of_max_timestamp or self.base_offset

    def _finish_loading(self) -> None:
        """First pin of a deferred segment: check the indexes against the log."""
        with self._lock:
            if not self._deferred:
                return
            self._deferred = False  # the checks below pin the segment again
            try:
                if self._needs_rebuild:
                    self._rebuild_indexes("its offset index file was unusable")
                elif self._indexes_look_sane():
                    self._load_timestamps_and_tail()
                else:
                    self._rebuild_indexes("an index disagrees with the log at its last entry")
            except BaseException:
                self._deferred = True
                raise
            self._timestamps_known = True

    def _load_timestamps_and_tail(self) -> None:
        last = self.time_index.last_entry
        if last is not None:
            self._max_timestamp, self._offset_of_max_timestamp = last
        if not self.sealed:
            position = 0
            if self.offset_index.entries:
                _, position = self.offset_index.entry_at(self.offset_index.entries - 1)
            self._bytes_since_index = self._size - position

    # -- clean loading ------------------------------------------------------------------
    def load_clean(self, next_offset: int | None) -> bool:
        """Load a segment that was closed cleanly, trusting its indexes after a sanity check.

        ``next_offset`` is the next segment's base offset for a sealed segment, or None for
        the last one, whose end is found by walking from its last index entry. Returns
        False when the indexes fail the check (the caller then calls ``recover``).
        """
        with self._pin:
            if self.indexes_missing or not self._indexes_look_sane():
                return False
            last = self.time_index.last_entry
            if last is not None:
                self._max_timestamp, self._offset_of_max_timestamp = last
            if next_offset is not None:
                self.next_offset = next_offset
                self.sealed = True
                return self._size == 0 or last is not None
            return self._load_tail()

    def _indexes_look_sane(self) -> bool:
        """Check the last entry of each index against the log itself."""
        try:
            if self.offset_index.entries:
                offset, position = self.offset_index.entry_at(self.offset_index.entries - 1)
                if position >= self._size or self._read_header(position).base_offset != offset:
                    return False
            last = self.time_index.last_entry
            if last is None:
                return not (self.sealed and self._size)  # sealing records the max timestamp
            return self._batch_max_timestamp(last[1]) == last[0]
        except (CorruptBatchError, IndexCorruptError):
            return False

    def _batch_max_timestamp(self, base_offset: int) -> int | None:
        """Max timestamp of the batch starting at ``base_offset``, None if there is none."""
        with self._lock:
            _, position = self.offset_index.lookup(base_offset)
        for _, header in self._walk(position, self._size, verify_crc=False):
            if header.base_offset >= base_offset:
                return header.max_timestamp if header.base_offset == base_offset else None
        return None

    def _load_tail(self) -> bool:
        """Walk the batches after the last index entry to find the end of the segment."""
        position = 0
        if self.offset_index.entries:
            _, position = self.offset_index.entry_at(self.offset_index.entries - 1)
        expected = None
        try:
            for pos, header in self._walk(position, self._size, verify_crc=False):
                if expected is not None and header.base_offset != expected:
                    return False
                expected = header.next_offset
                self._bytes_since_index = 0 if pos == position else self._bytes_since_index
                self._bytes_since_index += header.size
                self._note_timestamp(header.base_offset, header.max_timestamp)
                position = pos + header.size
        except CorruptBatchError:
            return False
        if position != self._size:
            return False
        if expected is not None:
            self.next_offset = expected
        return True

    # -- recovery -----------------------------------------------------------------------
    def recover(self, *, expected_base: int | None = None, is_last: bool) -> ScanResult:
        """Re-validate every batch (CRC included) and rebuild both indexes.

        A run of invalid bytes followed by a valid batch is kept and reported as a
        ``CorruptRegion`` (reads that reach it fail; later offsets stay readable). Invalid
        bytes with nothing valid after them are a torn tail: truncated when this is the
        last segment, reported when it is a sealed one (truncating would leave a gap).
        """
        with self._pin, self._lock:
            self._modified = True
            self._deferred = self._needs_rebuild = False
            self._timestamps_known = True
            self._reset_indexes()
            result = ScanResult()
            expected = self.base_offset if expected_base is None else expected_base
            for item in scan_segment(self._fd, self._size, self.base_offset, expected):
                if isinstance(item, CorruptRegion):
                    if item.length < 0 and is_last:
                        result.truncated_bytes = self._size - item.position
                        result.truncated_reason = item.reason
                        self._truncate_file(item.position)
                        break
                    if item.length < 0:
                        item.length = self._size - item.position
                    result.corrupt.append(item)
                    self._force_index_entry = True
                    continue
                position, header = item
                self._index_batch(position, header.base_offset, header.size)
                self._note_timestamp(header.base_offset, header.max_timestamp)
                expected = header.next_offset
                result.batches += 1
            result.valid_bytes = self._size
            self.next_offset = expected
            return result

    def verify(self) -> list[CorruptRegion]:
        """Every corrupt region of the segment, found by a read-only CRC scan."""
        found = []
        with self._pin:
            for item in scan_segment(self._fd, self._size, self.base_offset, self.base_offset):
                if isinstance(item, CorruptRegion):
                    if item.length < 0:
                        item.length = self._size - item.position
                    found.append(item)
        return found

    def _rebuild_indexes(self, reason: str, already_rebuilt: bool = False) -> None:
        """Rebuild both indexes from the log; where the segment ends does not change."""
        if already_rebuilt:  # a fresh index cannot disagree with the log it was built from
            raise CorruptBatchError(f"segment {self.log_path} is inconsistent: {reason}")
        log.warning("rebuilding indexes of %s: %s", self.log_path, reason)
        with self._pin, self._lock:
            self.index_rebuilds += 1
            was_sealed, next_offset = self.sealed, self.next_offset
            self.recover(expected_base=self.base_offset, is_last=False)
            self.next_offset = next_offset
            if was_sealed:
                self.offset_index.trim()
                self.time_index.trim()

"""Opening a partition directory: loading its segments, recovering them when needed.

Opening reads the checkpoint and one listing of the directory (names and sizes); it
opens no segment file unless one must be recovered. After a clean shutdown (the
checkpoint says so) every segment is *deferred* (``LogSegment.defer_loading``): sealed
ones end where the next begins, and the last one ends at the log end offset the
checkpoint recorded with its size, which the listing must confirm. Each segment's
indexes are checked against the log at their last entries when it is first used; an
index that is missing or of an impossible size is rebuilt at once. After an unclean
stop, segments that lie wholly below the checkpoint's recovery point are deferred the
same way (they and their indexes were fsynced), and every later segment is re-validated
batch by batch, CRC included: its indexes are rebuilt, a torn tail of the last segment
is truncated, and a corrupt batch with valid data after it is kept and reported (reads
that reach it fail; nothing is skipped silently). A missing or unreadable checkpoint
means: recover everything. What was done is returned as a ``RecoveryReport``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from dataplane.storage.checkpoint import LastSegment, PartitionCheckpoint, read_checkpoint
from dataplane.storage.config import LogConfig
from dataplane.storage.errors import CheckpointError
from dataplane.storage.scan import CorruptRegion
from dataplane.storage.segment import LogSegment
from dataplane.storage.segment_files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    SegmentFiles,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RecoveryReport:
    """What opening a log found and did."""

    path: Path
    clean_shutdown: bool
    segments: int = 0
    segments_recovered: int = 0
    batches_scanned: int = 0
    truncated_bytes: int = 0
    truncated_reason: str | None = None
    indexes_rebuilt: list[int] = field(default_factory=list)
    corrupt: list[CorruptRegion] = field(default_factory=list)
    segments_deleted: list[int] = field(default_factory=list)
    checkpoint_problem: str | None = None
    log_start_offset: int = 0
    log_end_offset: int = 0
    duration_s: float = 0.0

    @property
    def repaired(self) -> bool:
        return bool(self.truncated_bytes or self.indexes_rebuilt or self.segments_deleted)

    def __str__(self) -> str:
        lines = [
            f"{self.path.name}: {'clean' if self.clean_shutdown else 'unclean'} shutdown, "
            f"{self.segments} segments, offsets [{self.log_start_offset}, "
            f"{self.log_end_offset}), opened in {self.duration_s * 1000:.1f} ms"
        ]
        if self.checkpoint_problem:
            lines.append(f"  checkpoint unusable, recovered everything: {self.checkpoint_problem}")
        if self.segments_recovered:
            lines.append(
                f"  re-validated {self.segments_recovered} segments, {self.batches_scanned} batches"
            )
        if self.truncated_bytes:
            lines.append(
                f"  truncated a torn tail of {self.truncated_bytes} bytes: {self.truncated_reason}"
            )
        if self.indexes_rebuilt:
            lines.append(f"  rebuilt indexes of segments {self.indexes_rebuilt}")
        if self.segments_deleted:
            lines.append(f"  deleted segments below the log start: {self.segments_deleted}")
        lines.extend(f"  CORRUPT: {region}" for region in self.corrupt)
        return "\n".join(lines)


@dataclass(slots=True)
class LoadedLog:
    """A partition directory as found: what ``PartitionLog`` starts from."""

    config: LogConfig
    segments: list[LogSegment]
    recovered: list[LogSegment]  # rewritten by recovery: to be synced before use
    log_start_offset: int
    high_watermark: int | None
    report: RecoveryReport
    checkpoint: PartitionCheckpoint | None  # as read (None: missing or unusable)
    changed: bool  # files were repaired, deleted or created while loading


def load_log(directory: Path, config: LogConfig | None, initial_offset: int) -> LoadedLog:
    """Load (recovering as needed) the log in ``directory``; see the module docstring."""
    sizes = list_directory(directory)
    bases = sorted(int(name[: -len(LOG_SUFFIX)]) for name in sizes if name.endswith(LOG_SUFFIX))
    checkpoint, problem = _checkpoint(directory)
    is_new = checkpoint is None and not bases and problem is None
    clean = is_new or (checkpoint is not None and checkpoint.clean_shutdown)
    report = RecoveryReport(directory, clean_shutdown=clean, checkpoint_problem=problem)
    effective = config or (checkpoint.config if checkpoint else LogConfig())
    recovery_point: int | None = None  # None: trust every segment
    if not clean:
        recovery_point = checkpoint.recovery_point if checkpoint else -1
    last = checkpoint.last_segment if checkpoint is not None and clean else None
    segments, recovered = _load_segments(
        directory, effective, bases, sizes, recovery_point, last, report
    )
    if checkpoint is not None:
        start = checkpoint.log_start_offset
    else:
        start = bases[0] if bases else initial_offset
    created = not segments
    if created:
        segments = [LogSegment.create(directory, start, effective, sync_directory=False)]
    start = min(max(start, segments[0].base_offset), segments[-1].next_offset)
    while len(segments) > 1 and segments[0].next_offset <= start:
        report.segments_deleted.append(segments[0].base_offset)
        segments.pop(0).delete()
    high_watermark = checkpoint.high_watermark if checkpoint else None
    changed = created or bool(recovered) or bool(report.segments_deleted)
    return LoadedLog(
        effective, segments, recovered, start, high_watermark, report, checkpoint, changed
    )


def list_directory(directory: Path) -> dict[str, int]:
    """Sizes of the segment files in ``directory``, by name, after removing leftovers:
    temporary files and indexes whose ``.log`` is gone."""
    sizes: dict[str, int] = {}
    leftovers: list[str] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            name = entry.name
            if name.endswith((LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)):
                sizes[name] = entry.stat().st_size
            elif name.endswith((".tmp", ".deleted")):
                leftovers.append(name)
    for name in list(sizes):
        stem, _, suffix = name.rpartition(".")
        if "." + suffix != LOG_SUFFIX and stem + LOG_SUFFIX not in sizes:
            leftovers.append(name)
            del sizes[name]
    for name in leftovers:
        (directory / name).unlink(missing_ok=True)
    return sizes


def _checkpoint(directory: Path) -> tuple[PartitionCheckpoint | None, str | None]:
    try:
        return read_checkpoint(directory), None
    except CheckpointError as exc:
        log.error("%s", exc)
        return None, exc.reason


def remove_leftovers(directory: Path) -> None:
    """Delete temporary files and indexes whose ``.log`` is gone."""
    list_directory(directory)


def _load_segments(
    directory: Path,
    config: LogConfig,
    bases: list[int],
    sizes: dict[str, int],
    recovery_point: int | None,
    last: LastSegment | None,
    report: RecoveryReport,
) -> tuple[list[LogSegment], list[LogSegment]]:
    segments: list[LogSegment] = []
    recovered: list[LogSegment] = []
    expected: int | None = None
    for i, base in enumerate(bases):
        segment = LogSegment(directory, base, config, SegmentFiles.listed(sizes, base))
        next_base = bases[i + 1] if i + 1 < len(bases) else None
        trusted = recovery_point is None or (next_base is not None and next_base <= recovery_point)
        if (
            trusted
            and next_base is None
            and last is not None
            and not last.describes(base, segment.size_bytes)
        ):
            log.warning("%s changed after its clean shutdown: recovering its end", directory)
            report.clean_shutdown = trusted = False
        if not (trusted and _load_trusted(segment, next_base, last)):
            if trusted or segment.indexes_missing:
                report.indexes_rebuilt.append(base)
            _recover_segment(segment, expected, next_base, report)
            recovered.append(segment)
        expected = segment.next_offset
        segments.append(segment)
    return segments, recovered


def _load_trusted(segment: LogSegment, next_base: int | None, last: LastSegment | None) -> bool:
    """Load a segment recovery may trust; False when it must be recovered instead.

    A sealed one, and the last one when the checkpoint describes it, are deferred; the
    last one of a checkpoint that does not describe it (an older version) is walked from
    its last index entry.
    """
    if segment.indexes_missing:
        return False
    if next_base is not None:
        segment.defer_loading(next_base, sealed=True)
        return True
    if last is None:
        return segment.load_clean(None)
    segment.defer_loading(
        last.next_offset,
        sealed=False,
        max_timestamp=last.max_timestamp,
        offset_of_max_timestamp=last.offset_of_max_timestamp,
    )
    return True


def _recover_segment(
    segment: LogSegment, expected: int | None, next_base: int | None, report: RecoveryReport
) -> None:
    result = segment.recover(expected_base=expected, is_last=next_base is None)
    report.segments_recovered += 1
    report.batches_scanned += result.batches
    report.truncated_bytes += result.truncated_bytes
    report.truncated_reason = result.truncated_reason or report.truncated_reason
    report.corrupt.extend(result.corrupt)
    if next_base is not None:
        # A sealed segment ends where the next begins, even when its tail is corrupt:
        # the offsets in between are reported and fail to read, they do not vanish.
        segment.seal()
        segment.next_offset = next_base

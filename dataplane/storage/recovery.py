"""Opening a partition directory: loading its segments, recovering them when needed.

After a clean shutdown (the checkpoint says so) every segment is loaded as it is, each
index checked against the log at its last entry. After an unclean one, segments that
lie wholly below the checkpoint's recovery point are trusted the same way (they and
their indexes were fsynced), and every later segment is re-validated batch by batch,
CRC included: its indexes are rebuilt, a torn tail of the last segment is truncated,
and a corrupt batch with valid data after it is kept and reported (reads that reach it
fail; nothing is skipped silently). A missing or unreadable checkpoint means: recover
everything. What was done is returned as a ``RecoveryReport``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from dataplane.storage.checkpoint import PartitionCheckpoint, read_checkpoint
from dataplane.storage.config import LogConfig
from dataplane.storage.errors import CheckpointError
from dataplane.storage.scan import CorruptRegion
from dataplane.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
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


def load_log(directory: Path, config: LogConfig | None, initial_offset: int) -> LoadedLog:
    """Load (recovering as needed) the log in ``directory``; see the module docstring."""
    remove_leftovers(directory)
    bases = sorted(int(p.name[: -len(LOG_SUFFIX)]) for p in directory.glob("*" + LOG_SUFFIX))
    checkpoint, problem = _checkpoint(directory)
    is_new = checkpoint is None and not bases and problem is None
    clean = is_new or (checkpoint is not None and checkpoint.clean_shutdown)
    report = RecoveryReport(directory, clean_shutdown=clean, checkpoint_problem=problem)
    effective = config or (checkpoint.config if checkpoint else LogConfig())
    recovery_point: int | None = None  # None: trust every segment
    if not clean:
        recovery_point = checkpoint.recovery_point if checkpoint else -1
    segments, recovered = _load_segments(directory, effective, bases, recovery_point, report)
    if checkpoint is not None:
        start = checkpoint.log_start_offset
    else:
        start = bases[0] if bases else initial_offset
    if not segments:
        segments = [LogSegment.create(directory, start, effective)]
    start = min(max(start, segments[0].base_offset), segments[-1].next_offset)
    while len(segments) > 1 and segments[0].next_offset <= start:
        report.segments_deleted.append(segments[0].base_offset)
        segments.pop(0).delete()
    high_watermark = checkpoint.high_watermark if checkpoint else None
    return LoadedLog(effective, segments, recovered, start, high_watermark, report)


def _checkpoint(directory: Path) -> tuple[PartitionCheckpoint | None, str | None]:
    try:
        return read_checkpoint(directory), None
    except CheckpointError as exc:
        log.error("%s", exc)
        return None, exc.reason


def remove_leftovers(directory: Path) -> None:
    """Delete temporary files and indexes whose ``.log`` is gone."""
    for path in directory.iterdir():
        orphan_index = path.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and not (
            path.with_suffix(LOG_SUFFIX).exists()
        )
        if orphan_index or path.name.endswith((".tmp", ".deleted")):
            path.unlink()


def _load_segments(
    directory: Path,
    config: LogConfig,
    bases: list[int],
    recovery_point: int | None,
    report: RecoveryReport,
) -> tuple[list[LogSegment], list[LogSegment]]:
    segments: list[LogSegment] = []
    recovered: list[LogSegment] = []
    expected: int | None = None
    for i, base in enumerate(bases):
        segment = LogSegment(directory, base, config)
        next_base = bases[i + 1] if i + 1 < len(bases) else None
        trusted = recovery_point is None or (next_base is not None and next_base <= recovery_point)
        if not (trusted and segment.load_clean(next_base)):
            if trusted or segment.indexes_missing:
                report.indexes_rebuilt.append(base)
            _recover_segment(segment, expected, next_base, report)
            recovered.append(segment)
        expected = segment.next_offset
        segments.append(segment)
    return segments, recovered


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

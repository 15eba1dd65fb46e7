"""The fault test's verdicts: every acknowledged record is in the log exactly once, in
order, at the offset its acknowledgement named; and every replica of a partition holds
the same bytes up to the high watermark.

Both checks return a list of problems (empty: all good), each a line a human can act
on, so a failing test prints the whole diff at once rather than the first mismatch.
Payloads are ``b"<producer>:<sequence>:<padding>"`` (``payload``), so any record in the
log can be traced back to the send that wrote it.
"""

from __future__ import annotations

import itertools
import struct
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dataplane.storage.log import PartitionLog

READ_CHUNK_BYTES = 1024 * 1024
MAX_LINES_PER_KIND = 15
# RecordBatch v2: base offset (8), batch length (4: the bytes after this field),
# partition leader epoch (4). See dataplane.records.layout.
_BATCH_PREFIX = struct.Struct(">qii")


@dataclass(frozen=True, slots=True)
class Ack:
    """One acknowledged record: where the broker said it landed, and when (monotonic s)."""

    partition: int
    offset: int
    payload: bytes
    sent_at: float
    acked_at: float


def payload(producer: int, sequence: int, pad_bytes: int = 0) -> bytes:
    """The value of record ``sequence`` of producer ``producer``."""
    return b"%d:%d:" % (producer, sequence) + b"x" * pad_bytes


def parse_payload(value: bytes | None) -> tuple[int, int] | None:
    """``(producer, sequence)`` of a value made by ``payload``; None for anything else."""
    if value is None:
        return None
    parts = value.split(b":", 2)
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), int(parts[1])


def check_partition(
    partition: int,
    acks: Iterable[Ack],
    log_records: Sequence[tuple[int, bytes | None]],
    *,
    log_start_offset: int = 0,
    high_watermark: int | None = None,
) -> list[str]:
    """Problems in one partition's log (``(offset, value)`` read up to the high
    watermark) against the records acknowledged for it."""
    problems: list[str] = []
    by_offset = dict(log_records)
    problems += _gaps(partition, [o for o, _ in log_records], log_start_offset, high_watermark)
    problems += _duplicates(partition, log_records)
    problems += _strangers(partition, log_records)
    problems += _missing(partition, acks, by_offset)
    problems += _out_of_order(partition, acks)
    return problems


def acked_while_short(
    acks: Mapping[int, Sequence[Ack]], since: float, until: float, what: str
) -> list[str]:
    """Records sent at or after ``since`` and acknowledged before ``until`` (monotonic
    s). While two of three replicas are down, a record sent meanwhile is on one replica
    at most, so with ``min_insync_replicas=2`` acks=all must not acknowledge it before
    one of them is back."""
    lines = [
        f"p{p}: offset {ack.offset} ({ack.payload[:16]!r}) ACKNOWLEDGED by one replica: "
        f"sent {ack.sent_at - since:.2f} s after {what} began, acked "
        f"{until - ack.acked_at:.2f} s before it ended"
        for p, found in sorted(acks.items())
        for ack in found
        if ack.sent_at >= since and ack.acked_at < until
    ]
    return _capped(lines, "records acknowledged while replicas were down")


def _capped(lines: list[str], what: str) -> list[str]:
    if len(lines) <= MAX_LINES_PER_KIND:
        return lines
    hidden = len(lines) - MAX_LINES_PER_KIND
    return [*lines[:MAX_LINES_PER_KIND], f"  ... and {hidden} more {what}"]


def _gaps(partition: int, offsets: list[int], start: int, high_watermark: int | None) -> list[str]:
    expected_end = high_watermark if high_watermark is not None else start + len(offsets)
    if offsets == list(range(start, expected_end)):
        return []
    present = set(offsets)
    holes = [o for o in range(start, expected_end) if o not in present]
    extra = sorted(o for o in present if not start <= o < expected_end)
    lines = [f"p{partition}: no record at offset {o} (read {start}..{expected_end})" for o in holes]
    lines += [f"p{partition}: record at offset {o}, outside {start}..{expected_end}" for o in extra]
    if not lines:
        lines = [f"p{partition}: offsets not in order as read: {offsets[:20]}..."]
    return _capped(lines, "offset gaps")


def _duplicates(partition: int, log_records: Sequence[tuple[int, bytes | None]]) -> list[str]:
    counts = Counter(value for _, value in log_records)
    where: dict[bytes | None, list[int]] = defaultdict(list)
    for offset, value in log_records:
        if counts[value] > 1:
            where[value].append(offset)
    lines = [
        f"p{partition}: DUPLICATE {value!r} at offsets {offsets}"
        for value, offsets in where.items()
    ]
    return _capped(lines, "duplicated values")


def _strangers(partition: int, log_records: Sequence[tuple[int, bytes | None]]) -> list[str]:
    lines = [
        f"p{partition}: offset {offset} holds {value!r}, which no producer of this test wrote"
        for offset, value in log_records
        if parse_payload(value) is None
    ]
    return _capped(lines, "unknown records")


def _missing(
    partition: int, acks: Iterable[Ack], by_offset: Mapping[int, bytes | None]
) -> list[str]:
    found_at: dict[bytes | None, list[int]] | None = None
    lines = []
    for ack in acks:
        held = by_offset.get(ack.offset)
        if held == ack.payload:
            continue
        if found_at is None:
            found_at = defaultdict(list)
            for offset, value in by_offset.items():
                found_at[value].append(offset)
        elsewhere = found_at.get(ack.payload, [])
        verdict = f"found at {elsewhere} instead" if elsewhere else "LOST (not in the log)"
        lines.append(
            f"p{partition}: acked {ack.payload[:24]!r} at offset {ack.offset}; the log holds "
            f"{held[:24] if held else held!r} there; {verdict}"
        )
    return _capped(lines, "acknowledged records not where acknowledged")


def _out_of_order(partition: int, acks: Iterable[Ack]) -> list[str]:
    """Each producer's acknowledged records must sit at growing offsets in send order."""
    by_producer: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for ack in acks:
        parsed = parse_payload(ack.payload)
        if parsed is not None:
            by_producer[parsed[0]].append((parsed[1], ack.offset))
    lines = []
    for producer, pairs in sorted(by_producer.items()):
        pairs.sort()
        for (seq_a, off_a), (seq_b, off_b) in itertools.pairwise(pairs):
            if off_b <= off_a:
                lines.append(
                    f"p{partition}: producer {producer} OUT OF ORDER: sequence {seq_a} acked at "
                    f"offset {off_a}, the later {seq_b} at {off_b}"
                )
    return _capped(lines, "out-of-order pairs")


# -- replicas -----------------------------------------------------------------------------
@dataclass(frozen=True)
class ReplicaRead:
    """What one replica's log holds up to a high watermark."""

    broker_id: int
    data: bytes
    log_start_offset: int
    log_end_offset: int
    end_offset: int  # where the read stopped: the high watermark unless the log is shorter


def read_replica(broker_id: int, directory: Path, high_watermark: int) -> ReplicaRead:
    """The bytes of the log in ``directory`` (a stopped broker's partition directory)
    from its log start up to ``high_watermark``."""
    log = PartitionLog.open(directory, replicated=True)
    try:
        offset, chunks = log.log_start_offset, []
        while offset < min(high_watermark, log.log_end_offset):
            result = log.read(offset, READ_CHUNK_BYTES, max_offset=high_watermark)
            if not result.data:
                break
            chunks.append(result.data)
            offset = result.next_offset
        return ReplicaRead(
            broker_id, b"".join(chunks), log.log_start_offset, log.log_end_offset, offset
        )
    finally:
        log.close()


def batches(data: bytes) -> list[tuple[int, int, int, int]]:
    """``(base_offset, leader_epoch, start, end)`` of each RecordBatch in ``data``."""
    found, position = [], 0
    while position + _BATCH_PREFIX.size <= len(data):
        base_offset, length, epoch = _BATCH_PREFIX.unpack_from(data, position)
        end = position + 12 + length
        found.append((base_offset, epoch, position, end))
        position = end
    return found


def compare_replicas(
    partition: int, reads: Sequence[ReplicaRead], high_watermark: int
) -> list[str]:
    """Problems: a replica short of the high watermark, or bytes that differ between
    replicas (named by the first differing batch: base offset and leader epoch)."""
    problems = [
        f"p{partition}: broker {r.broker_id} holds only up to offset {r.end_offset} "
        f"(log {r.log_start_offset}..{r.log_end_offset}) < high watermark {high_watermark}"
        for r in reads
        if r.end_offset < high_watermark
    ]
    if not reads:
        return [f"p{partition}: no replica to compare"]
    reference = reads[0]
    for other in reads[1:]:
        if other.data != reference.data:
            problems.append(f"p{partition}: DIVERGENT: {_first_difference(reference, other)}")
    return problems


def _first_difference(a: ReplicaRead, b: ReplicaRead) -> str:
    batches_a, batches_b = batches(a.data), batches(b.data)
    for index, (one, two) in enumerate(zip(batches_a, batches_b, strict=False)):
        if a.data[one[2] : one[3]] != b.data[two[2] : two[3]]:
            return (
                f"batch #{index}: broker {a.broker_id} has base offset {one[0]} epoch {one[1]} "
                f"({one[3] - one[2]} bytes), broker {b.broker_id} base offset {two[0]} "
                f"epoch {two[1]} ({two[3] - two[2]} bytes)"
            )
    return (
        f"broker {a.broker_id} has {len(batches_a)} batches ({len(a.data)} bytes), "
        f"broker {b.broker_id} {len(batches_b)} ({len(b.data)} bytes); the shorter is a prefix"
    )

"""The fault test's checker catches what it must: a lost, misplaced, duplicated,
reordered or unknown record, a hole in the offsets, a replica short of the high
watermark, and replicas whose bytes differ (on real logs written with ``PartitionLog``)."""

from __future__ import annotations

from pathlib import Path

from dataplane.records import BatchBuilder
from dataplane.storage.log import PartitionLog
from tests.integration.replication.verify import (
    Ack,
    acked_while_short,
    batches,
    check_partition,
    compare_replicas,
    payload,
    read_replica,
)


def _ack(offset: int, producer: int, seq: int) -> Ack:
    return Ack(0, offset, payload(producer, seq), 0.0, 0.0)


def _log(*values: bytes) -> list[tuple[int, bytes | None]]:
    return list(enumerate(values))


def test_a_clean_partition_passes() -> None:
    log = _log(payload(0, 0), payload(1, 0), payload(0, 1), payload(0, 2))
    acks = [_ack(0, 0, 0), _ack(1, 1, 0), _ack(2, 0, 1)]  # (0, 2) unacknowledged: fine
    assert check_partition(0, acks, log, high_watermark=4) == []


def test_a_lost_record_is_named() -> None:
    log = _log(payload(0, 0), payload(0, 2))
    (problem,) = check_partition(0, [_ack(0, 0, 0), _ack(1, 0, 1)], log, high_watermark=2)
    assert "LOST" in problem
    assert "offset 1" in problem


def test_a_record_at_another_offset_is_named() -> None:
    log = _log(payload(0, 1), payload(0, 0))
    problems = check_partition(0, [_ack(0, 0, 0), _ack(1, 0, 1)], log, high_watermark=2)
    assert any("found at [1] instead" in p for p in problems), problems


def test_a_duplicate_is_named_even_when_not_acknowledged() -> None:
    log = _log(payload(0, 0), payload(0, 1), payload(0, 1))
    problems = check_partition(0, [_ack(0, 0, 0)], log, high_watermark=3)
    assert any("DUPLICATE" in p and "[1, 2]" in p for p in problems), problems


def test_acknowledgements_out_of_send_order_are_named() -> None:
    acks = [_ack(0, 0, 5), _ack(1, 0, 4)]
    problems = check_partition(0, acks, _log(payload(0, 5), payload(0, 4)), high_watermark=2)
    assert any("OUT OF ORDER" in p for p in problems), problems


def test_holes_and_unknown_records_are_named() -> None:
    records: list[tuple[int, bytes | None]] = [(0, payload(0, 0)), (2, b"garbage")]
    problems = check_partition(0, [], records, high_watermark=3)
    assert any("no record at offset 1" in p for p in problems), problems
    assert any("no producer of this test wrote" in p for p in problems), problems


def _write(directory: Path, values: list[list[bytes]], epoch: int = 0) -> None:
    log = PartitionLog.open(directory)
    try:
        for group in values:
            builder = BatchBuilder()
            for value in group:
                builder.append(value, timestamp=1)
            log.append(builder.build(), leader_epoch=epoch)
    finally:
        log.close()


def test_identical_replicas_pass_and_divergent_ones_are_named(tmp_path: Path) -> None:
    same = [[payload(0, 0), payload(0, 1)], [payload(0, 2)]]
    _write(tmp_path / "a", same)
    _write(tmp_path / "b", same)
    _write(tmp_path / "c", [same[0], [payload(9, 9)]])
    reads = [read_replica(i, tmp_path / d, 3) for i, d in ((1, "a"), (2, "b"), (3, "c"))]
    assert len(batches(reads[0].data)) == 2
    assert compare_replicas(0, reads[:2], 3) == []
    (problem,) = compare_replicas(0, reads, 3)
    assert "DIVERGENT" in problem
    assert "batch #1" in problem
    assert "base offset 2" in problem


def test_a_replica_short_of_the_high_watermark_is_named(tmp_path: Path) -> None:
    _write(tmp_path / "a", [[payload(0, 0), payload(0, 1)]])
    _write(tmp_path / "b", [[payload(0, 0), payload(0, 1)], [payload(0, 2)]])
    reads = [read_replica(1, tmp_path / "a", 3), read_replica(2, tmp_path / "b", 3)]
    problems = compare_replicas(0, reads, 3)
    assert any("holds only up to offset 2" in p for p in problems), problems


def test_an_ack_while_two_replicas_are_down_is_named() -> None:
    before = Ack(0, 0, payload(0, 0), 0.5, 1.5)  # sent before the fault: may be on two
    during = Ack(0, 1, payload(0, 1), 2.0, 3.0)  # sent and acked while two were down
    after = Ack(0, 2, payload(0, 2), 2.5, 4.5)  # acked once one was back
    (problem,) = acked_while_short({0: [before, during, after]}, 1.0, 4.0, "fault 3")
    assert "offset 1" in problem
    assert "ACKNOWLEDGED by one replica" in problem

"""Transaction markers: Kafka's control batch, read by kafka-python as Kafka's own."""

from __future__ import annotations

import struct

from kafka.record.default_records import DefaultRecordBatch

from dataplane.records import build_batch, iter_batches, read_header
from dataplane.records.control import Marker, build_marker, marker_of, markers_in, parse_marker


def test_kafka_python_reads_our_markers_as_control_batches() -> None:
    for commit, kind in ((True, 1), (False, 0)):
        data = build_marker(4242, 7, commit=commit, coordinator_epoch=3, timestamp_ms=1_700_000)
        batch = DefaultRecordBatch(bytearray(data))
        assert batch.is_control_batch
        assert batch.is_transactional
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4242, 7, -1)
        batch.validate_crc()
        (record,) = list(batch)
        assert (record.version, record.type, record.commit) == (0, kind, commit)
        assert struct.unpack(">hi", record.value) == (0, 3)  # EndTransactionMarker v0
        assert record.timestamp == 1_700_000


def test_a_marker_reads_back_with_its_fields() -> None:
    data = build_marker(9, 2, commit=False, coordinator_epoch=11)
    assert marker_of(data) == Marker(9, 2, False, 11)
    header = read_header(data)
    assert header.is_control
    assert header.is_transactional
    assert header.record_count == 1


def test_markers_are_found_among_data_batches_by_offset() -> None:
    data = b"".join(
        (
            build_batch([b"a", b"b"], base_offset=0, producer_id=5, producer_epoch=0,
                        base_sequence=0, is_transactional=True),
            _at(build_marker(5, 0, commit=True, coordinator_epoch=0), 2),
            build_batch([b"c"], base_offset=3),
            _at(build_marker(6, 1, commit=False, coordinator_epoch=4), 4),
        )
    )  # fmt: skip
    assert dict(markers_in(data)) == {2: Marker(5, 0, True, 0), 4: Marker(6, 1, False, 4)}
    assert [h.base_offset for _, h in iter_batches(data)] == [0, 2, 3, 4]


def test_other_control_types_and_short_records_end_no_transaction() -> None:
    header = read_header(build_marker(1, 0, commit=True, coordinator_epoch=0))
    assert parse_marker(header, struct.pack(">hh", 0, 2), b"") is None  # KRaft's LEADER_CHANGE
    assert parse_marker(header, b"\x00", None) is None
    # a newer value version with more fields is still read by its version-0 fields
    longer = struct.pack(">hiq", 1, 8, 99)
    assert parse_marker(header, struct.pack(">hh", 0, 0), longer) == Marker(1, 0, False, 8)


def _at(batch: bytes, offset: int) -> bytes:
    return struct.pack(">q", offset) + batch[8:]

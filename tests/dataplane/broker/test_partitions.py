"""A partition's appends in bursts: combined when every request passes, one by one when not."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from dataplane.broker.partitions import Partition
from dataplane.broker.producers import DuplicateBatch, ProducerStateTable
from dataplane.errors import MeridianError
from dataplane.records import TimestampType, build_batch, decode_batches
from dataplane.records.errors import CorruptBatchError, CrcMismatchError
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.log import AppendInfo, PartitionLog
from dataplane.storage.manager import TopicPartition


@pytest.fixture
def partition(tmp_path):
    log = PartitionLog.open(tmp_path / "acme.p-0", LogConfig(durability=Durability.NEVER))
    with ThreadPoolExecutor(1) as pool:
        yield Partition(TopicPartition("acme.p", 0), log, ProducerStateTable(), pool)
    log.close()


def values(log):
    return [r.value for r in decode_batches(log.read(0, 1 << 20).data)]


def corrupt(batch: bytes) -> bytes:
    return batch[:-1] + bytes([batch[-1] ^ 0xFF])


def test_passing_requests_are_appended_together_in_order(partition):
    outcomes = partition.append_many([build_batch([b"a", b"b"]), build_batch([b"c"])])
    assert [(o.base_offset, o.last_offset, o.record_count) for o in outcomes] == [
        (0, 1, 2),
        (2, 2, 1),
    ]
    assert all(isinstance(o, AppendInfo) for o in outcomes)
    assert values(partition.log) == [b"a", b"b", b"c"]


def test_a_refused_request_fails_alone_and_the_rest_keep_their_order(partition):
    pid = 1 << 40
    requests = [
        build_batch([b"a"], producer_id=pid, producer_epoch=0, base_sequence=0),
        corrupt(build_batch([b"bad"])),
        build_batch([b"b"], producer_id=pid, producer_epoch=0, base_sequence=1),
        build_batch([b"a"], producer_id=pid, producer_epoch=0, base_sequence=0),
        build_batch([b"gap"], producer_id=pid, producer_epoch=0, base_sequence=7),
        build_batch([b"c"]),
    ]
    a, bad, b, retry, gap, c = partition.append_many(requests)
    assert (a.base_offset, b.base_offset, c.base_offset) == (0, 1, 2)
    assert isinstance(bad, CrcMismatchError)
    assert isinstance(retry, DuplicateBatch)
    assert retry.base_offset == 0
    assert isinstance(gap, MeridianError)
    assert values(partition.log) == [b"a", b"b", b"c"]


def test_a_batch_split_across_two_requests_is_refused_in_both(partition):
    whole = build_batch([b"split"])
    outcomes = partition.append_many([whole[:30], whole[30:]])
    assert all(isinstance(o, CorruptBatchError) for o in outcomes)
    assert partition.log.log_end_offset == 0


def test_combined_appends_report_the_log_append_time(tmp_path):
    config = LogConfig(durability=Durability.NEVER, timestamp_type=TimestampType.LOG_APPEND_TIME)
    log = PartitionLog.open(tmp_path / "acme.t-0", config)
    with ThreadPoolExecutor(1) as pool:
        part = Partition(TopicPartition("acme.t", 0), log, ProducerStateTable(), pool)
        first, second = part.append_many([build_batch([b"x"]), build_batch([b"y"])])
    assert first.log_append_time == second.log_append_time > 0
    assert {r.timestamp for r in decode_batches(log.read(0, 1 << 20).data)} == {
        first.log_append_time
    }
    log.close()

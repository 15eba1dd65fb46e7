"""Bad produce requests of every kind get their typed error and leave the log unchanged."""

from __future__ import annotations

import struct

import grpc
import pytest
from crc32c import crc32c

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.errors import ErrorCode, error_from_rpc
from dataplane.records import build_batch
from tests.dataplane.broker.support import create, fetch_records, produce, stubs, values_batch
from tests.support.brokers import BrokerProcess, stop_all

TOPIC = "acme.guarded"
GOOD = [b"good-1", b"good-2"]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """One broker with ``TOPIC`` (1 KiB batches at most) holding the two GOOD records."""
    process = BrokerProcess(tmp_path_factory.mktemp("bad") / "broker", broker_id=1).start()
    try:
        with stubs(process) as s:
            create(s, TOPIC, max_message_bytes=1024)
            assert produce(s, TOPIC, 0, values_batch(GOOD)).error == 0
            yield s
    finally:
        stop_all([process])


def _with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def _flipped_crc() -> bytes:
    batch = bytearray(values_batch([b"payload"]))
    batch[-1] ^= 0xFF
    return bytes(batch)


def _bad_magic() -> bytes:
    batch = bytearray(values_batch([b"payload"]))
    batch[16] = 1
    return bytes(batch)


def _unknown_codec() -> bytes:
    batch = bytearray(values_batch([b"payload"]))
    batch[22] = (batch[22] & ~0x07) | 0x06
    return _with_crc(batch)


def _sparse_offsets() -> bytes:
    batch = bytearray(values_batch([b"a", b"b"]))
    struct.pack_into(">i", batch, 23, 5)  # last offset delta 5 for 2 records
    return _with_crc(batch)


CASES = {
    "corrupt CRC": (_flipped_crc(), ErrorCode.CORRUPT_MESSAGE),
    "truncated batch": (values_batch([b"payload"])[:-3], ErrorCode.CORRUPT_MESSAGE),
    "header only": (values_batch([b"payload"])[:40], ErrorCode.CORRUPT_MESSAGE),
    "bad magic": (_bad_magic(), ErrorCode.CORRUPT_MESSAGE),
    "empty records": (b"", ErrorCode.CORRUPT_MESSAGE),
    "oversize batch": (values_batch([b"x" * 2000]), ErrorCode.MESSAGE_TOO_LARGE),
    "unknown codec": (_unknown_codec(), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    "sparse offsets": (_sparse_offsets(), ErrorCode.INVALID_RECORD),
    "control batch": (build_batch([b"m"], is_control=True), ErrorCode.INVALID_RECORD),
    "transactional batch outside a transaction": (
        build_batch(
            [b"t"], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True
        ),
        ErrorCode.INVALID_TXN_STATE,  # no coordinator opened one for producer 7 here
    ),
    "good batch then a corrupt one": (
        values_batch([b"fine"]) + _flipped_crc(),
        ErrorCode.CORRUPT_MESSAGE,
    ),
}


def _assert_unchanged(s) -> None:
    assert [r.value for r in fetch_records(s, TOPIC)] == GOOD


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_batch_gets_its_typed_error_and_nothing_is_written(guarded, case):
    records, code = CASES[case]
    result = produce(guarded, TOPIC, 0, records)
    assert result.error == code, result.error_message
    assert result.error_message
    assert result.base_offset == -1
    _assert_unchanged(guarded)


def test_an_unknown_partition_is_refused(guarded):
    for topic, partition in ((TOPIC, 3), ("acme.absent", 0)):
        result = produce(guarded, topic, partition, values_batch([b"lost"]))
        assert result.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    _assert_unchanged(guarded)


def test_clients_cannot_write_internal_topics(guarded):
    result = produce(guarded, "__consumer_offsets", 0, values_batch([b"forged"]))
    assert result.error == ErrorCode.INVALID_TOPIC


def _request_error(s, request: broker_pb2.ProduceRequest):
    with pytest.raises(grpc.RpcError) as caught:
        s.broker.Produce(request, timeout=10)
    return caught.value.code(), error_from_rpc(caught.value)


def _records(batch: bytes, partition: int = 0) -> broker_pb2.PartitionRecords:
    return broker_pb2.PartitionRecords(topic=TOPIC, partition=partition, records=batch)


@pytest.mark.parametrize("acks", [-2, 2, 7])
def test_unsupported_acks_fail_the_request(guarded, acks):
    request = broker_pb2.ProduceRequest(acks=acks, partitions=[_records(values_batch([b"x"]))])
    status, error = _request_error(guarded, request)
    assert status == grpc.StatusCode.INVALID_ARGUMENT
    assert error.code == ErrorCode.INVALID_REQUIRED_ACKS
    assert "-1" in error.message
    _assert_unchanged(guarded)


def test_a_partition_listed_twice_fails_the_request(guarded):
    batch = values_batch([b"twice"])
    request = broker_pb2.ProduceRequest(acks=1, partitions=[_records(batch), _records(batch)])
    status, error = _request_error(guarded, request)
    assert (status, error.code) == (grpc.StatusCode.INVALID_ARGUMENT, ErrorCode.INVALID_REQUEST)
    _assert_unchanged(guarded)


def test_a_bad_request_in_a_stream_ends_it_after_the_earlier_answers(guarded):
    good = broker_pb2.ProduceRequest(acks=1, partitions=[_records(_flipped_crc())])
    bad = broker_pb2.ProduceRequest(acks=5, partitions=[_records(values_batch([b"x"]))])
    responses = guarded.broker.ProduceStream(iter([good, bad, good]), timeout=10)
    first = next(responses)
    assert first.results[0].error == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(grpc.RpcError) as caught:
        next(responses)
    assert error_from_rpc(caught.value).code == ErrorCode.INVALID_REQUIRED_ACKS
    _assert_unchanged(guarded)


def test_negative_fetch_limits_fail_the_request(guarded):
    request = broker_pb2.FetchRequest(
        max_bytes=-1, partitions=[broker_pb2.FetchPartition(topic=TOPIC, partition=0)]
    )
    with pytest.raises(grpc.RpcError) as caught:
        guarded.broker.Fetch(request, timeout=10)
    assert error_from_rpc(caught.value).code == ErrorCode.INVALID_REQUEST


def test_bad_requests_pipelined_among_good_ones_fail_alone(guarded):
    def request(records):
        return broker_pb2.ProduceRequest(acks=1, partitions=[_records(records)])

    good = [values_batch([f"ok-{i}".encode()]) for i in range(6)]
    bad = [_flipped_crc(), build_batch([b"m"], is_control=True), values_batch([b"x" * 2000])]
    sent = [good[0], bad[0], good[1], good[2], bad[1], good[3], bad[2], good[4], good[5]]
    responses = list(guarded.broker.ProduceStream(iter(map(request, sent)), timeout=30))
    codes = [r.results[0].error for r in responses]
    assert codes == [0, ErrorCode.CORRUPT_MESSAGE, 0, 0, ErrorCode.INVALID_RECORD, 0,
                     ErrorCode.MESSAGE_TOO_LARGE, 0, 0]  # fmt: skip
    offsets = [r.results[0].base_offset for r in responses if r.results[0].error == 0]
    assert offsets == sorted(offsets)
    stored = [r.value for r in fetch_records(guarded, TOPIC)][len(GOOD) :]
    assert stored == [f"ok-{i}".encode() for i in range(6)]

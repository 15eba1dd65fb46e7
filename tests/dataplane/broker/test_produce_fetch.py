"""Produce and fetch through a real broker process, with raw gRPC stubs."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from kafka.record.memory_records import MemoryRecords

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.errors import ErrorCode
from dataplane.records import Compression, Header, Record, build_batch, decode_batches
from tests.dataplane.broker.support import (
    create,
    end_offset,
    fetch_records,
    produce,
    stubs,
    values_batch,
    wait_for,
)


def test_produce_then_fetch_returns_the_records_at_their_offsets(broker):
    with stubs(broker) as s:
        create(s, "acme.orders")
        first = produce(s, "acme.orders", 0, values_batch([b"a", b"b", b"c"]))
        second = produce(s, "acme.orders", 0, values_batch([b"d"]))
        assert (first.error, first.base_offset, first.log_start_offset) == (0, 0, 0)
        assert (second.error, second.base_offset) == (0, 3)
        records = fetch_records(s, "acme.orders")
        assert [(r.offset, r.value) for r in records] == [
            (0, b"a"),
            (1, b"b"),
            (2, b"c"),
            (3, b"d"),
        ]
        assert end_offset(s, "acme.orders") == 4


def test_metadata_lists_this_broker_and_its_partitions(broker):
    with stubs(broker) as s:
        create(s, "acme.orders", partitions=2)
        response = s.broker.Metadata(broker_pb2.MetadataRequest(topics=["acme.orders"]))
        assert [(b.id, b.port) for b in response.brokers] == [(1, broker.port)]
        (topic,) = response.topics
        assert [(p.partition, p.leader_id, list(p.isr)) for p in topic.partitions] == [
            (0, 1, [1]),
            (1, 1, [1]),
        ]


def _request(
    topic: str, partition: int, values: list[bytes], **kwargs
) -> broker_pb2.ProduceRequest:
    records = broker_pb2.PartitionRecords(
        topic=topic, partition=partition, records=values_batch(values)
    )
    return broker_pb2.ProduceRequest(acks=kwargs.pop("acks", 1), partitions=[records], **kwargs)


def test_produce_stream_answers_every_request_in_order(broker):
    with stubs(broker) as s:
        create(s, "acme.stream", partitions=2)
        requests = [
            _request("acme.stream", i % 2, [f"v{i}".encode()] * 3, correlation_id=1000 + i)
            for i in range(200)
        ]
        responses = list(s.broker.ProduceStream(iter(requests), timeout=60))
        assert [r.correlation_id for r in responses] == [1000 + i for i in range(200)]
        for partition in (0, 1):
            offsets = [
                r.results[0].base_offset for i, r in enumerate(responses) if i % 2 == partition
            ]
            assert offsets == [3 * k for k in range(100)], "appends kept the sending order"
            values = [r.value for r in fetch_records(s, "acme.stream", partition)]
            assert values == [f"v{i}".encode() for i in range(partition, 200, 2) for _ in range(3)]


def test_acks_zero_is_answered_without_an_offset_and_still_appended(broker):
    with stubs(broker) as s:
        create(s, "acme.fire")
        requests = [_request("acme.fire", 0, [b"x", b"y"], acks=0) for _ in range(20)]
        responses = list(s.broker.ProduceStream(iter(requests), timeout=30))
        assert len(responses) == 20
        assert all(r.results[0].base_offset == -1 and r.results[0].error == 0 for r in responses)
        assert wait_for(lambda: end_offset(s, "acme.fire") == 40)
        assert [r.value for r in fetch_records(s, "acme.fire")] == [b"x", b"y"] * 20


def _fetch_request(topic, offset=0, *, partitions=(0,), **kwargs) -> broker_pb2.FetchRequest:
    return broker_pb2.FetchRequest(
        partitions=[
            broker_pb2.FetchPartition(topic=topic, partition=p, fetch_offset=offset)
            for p in partitions
        ],
        **kwargs,
    )


def test_a_long_poll_is_woken_by_an_append(broker):
    with stubs(broker) as s:
        create(s, "acme.poll")
        # Far longer than the call's own deadline: only the append can end this fetch in time.
        request = _fetch_request("acme.poll", max_wait_ms=120_000, min_bytes=1)
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(s.broker.Fetch, request, timeout=30)
            assert not wait_for(pending.done, timeout_s=0.3), "returned with nothing to read"
            produce(s, "acme.poll", 0, values_batch([b"wake"]))
            (result,) = pending.result().results
        assert [r.value for r in decode_batches(result.records)] == [b"wake"]
        assert result.high_watermark == 1


def test_a_long_poll_with_nothing_to_read_returns_empty_after_max_wait(broker):
    with stubs(broker) as s:
        create(s, "acme.quiet")
        request = _fetch_request("acme.quiet", max_wait_ms=200, min_bytes=1)
        (result,) = s.broker.Fetch(request, timeout=30).results
        assert (result.error, result.records, result.high_watermark) == (0, b"", 0)


def test_one_fetch_reads_many_partitions_within_max_bytes(broker):
    with stubs(broker) as s:
        create(s, "acme.multi", partitions=3)
        for p in range(3):
            produce(s, "acme.multi", p, values_batch([f"p{p}-{i}".encode() for i in range(5)]))
        response = s.broker.Fetch(_fetch_request("acme.multi", partitions=(0, 1, 2)), timeout=30)
        assert [r.partition for r in response.results] == [0, 1, 2]
        for p, result in enumerate(response.results):
            assert [r.value for r in decode_batches(result.records)] == [
                f"p{p}-{i}".encode() for i in range(5)
            ]
        one_batch = len(response.results[0].records)
        small = _fetch_request("acme.multi", partitions=(0, 1, 2), max_bytes=one_batch)
        limited = s.broker.Fetch(small, timeout=30).results
        assert [len(r.records) for r in limited] == [one_batch, 0, 0]
        assert [r.high_watermark for r in limited] == [5, 5, 5]


def test_fetch_reports_unknown_partitions_and_out_of_range_offsets_per_partition(broker):
    with stubs(broker) as s:
        create(s, "acme.errs")
        produce(s, "acme.errs", 0, values_batch([b"a"]))
        request = broker_pb2.FetchRequest(
            partitions=[
                broker_pb2.FetchPartition(topic="acme.errs", partition=0, fetch_offset=0),
                broker_pb2.FetchPartition(topic="acme.errs", partition=0 + 7, fetch_offset=0),
                broker_pb2.FetchPartition(topic="acme.nope", partition=0, fetch_offset=0),
            ]
        )
        ok, unknown, missing = s.broker.Fetch(request, timeout=30).results
        assert ok.error == 0
        assert ok.records
        assert unknown.error == missing.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        beyond = s.broker.Fetch(_fetch_request("acme.errs", 5), timeout=30).results[0]
        assert beyond.error == ErrorCode.OFFSET_OUT_OF_RANGE
        assert (beyond.records, ok.high_watermark) == (b"", 1)


def test_list_offsets_earliest_latest_and_by_timestamp(broker):
    with stubs(broker) as s:
        create(s, "acme.times")
        for i, ts in enumerate((1_000, 2_000, 3_000)):
            batch = build_batch([Record(i, ts, None, f"r{i}".encode())])
            produce(s, "acme.times", 0, batch)

        def lookup(timestamp):
            request = broker_pb2.ListOffsetsRequest(
                partitions=[
                    broker_pb2.ListOffsetsPartition(
                        topic="acme.times", partition=0, timestamp=timestamp
                    )
                ]
            )
            (result,) = s.broker.ListOffsets(request, timeout=30).results
            return result.error, result.offset, result.timestamp

        assert lookup(-2)[:2] == (0, 0)
        assert lookup(-1)[:2] == (0, 3)
        assert lookup(1_500) == (0, 1, 2_000)  # the found record's own timestamp
        assert lookup(3_000) == (0, 2, 3_000)
        assert lookup(9_000) == (0, -1, -1)
        assert lookup(-7)[0] == ErrorCode.INVALID_TIMESTAMP


def test_kafka_python_decodes_what_fetch_returns(broker):
    with stubs(broker) as s:
        create(s, "acme.compat")
        for codec in (Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD):
            records = [
                Record(0, 1_700_000_000_000 + i, f"k{i}".encode(), f"v{codec}-{i}".encode(),
                       (Header("x-lane", b"ppe"),))
                for i in range(3)
            ]  # fmt: skip
            produce(s, "acme.compat", 0, build_batch(records, compression=codec))
        (result,) = s.broker.Fetch(_fetch_request("acme.compat"), timeout=30).results
        decoded = []
        memory = MemoryRecords(result.records)
        while memory.has_next():
            batch = memory.next_batch()
            assert batch.validate_crc()
            decoded += [(r.offset, r.key, r.value, list(r.headers)) for r in batch]
        expected = [
            (4 * 0 + n * 3 + i, f"k{i}".encode(), f"v{codec}-{i}".encode(), [("x-lane", b"ppe")])
            for n, codec in enumerate(
                (Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD)
            )
            for i in range(3)
        ]
        assert decoded == expected

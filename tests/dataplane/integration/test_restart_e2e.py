"""A broker killed (SIGKILL) and restarted under load loses nothing it acknowledged."""

from __future__ import annotations

import threading
import time

import grpc

from dataplane._gen.meridian.v1 import broker_pb2, broker_pb2_grpc
from dataplane.client import Admin, Consumer, Producer, TopicPartition
from dataplane.records import decode_batches
from tests.support.brokers import BrokerProcess

TOPIC = "acme.orders"
PARTITIONS = 6


def _read_partition(address: str, partition: int) -> list[tuple[int, bytes]]:
    """Every record of a partition, straight from its leader with raw Fetch calls."""
    records: list[tuple[int, bytes]] = []
    offset = 0
    with grpc.insecure_channel(address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        while True:
            request = broker_pb2.FetchRequest(
                max_wait_ms=0,
                max_bytes=4 << 20,
                partitions=[
                    broker_pb2.FetchPartition(
                        topic=TOPIC,
                        partition=partition,
                        fetch_offset=offset,
                        partition_max_bytes=4 << 20,
                    )
                ],
            )
            result = stub.Fetch(request, timeout=30).results[0]
            assert result.error == 0, result.error_message
            batch = [r for r in decode_batches(result.records) if r.offset >= offset]
            if not batch:
                return records
            records.extend((r.offset, r.value or b"") for r in batch)
            offset = batch[-1].offset + 1


def test_restarted_broker_keeps_acked_records_offsets_and_producer_sequences(cluster):
    bootstrap = ",".join(b.address for b in cluster)
    with Admin(bootstrap) as admin:
        admin.create_topic(TOPIC, PARTITIONS)
        leaders = {p.partition: p.leader for p in admin.describe_topic(TOPIC).partitions}
    victim: BrokerProcess = cluster[1]
    victim_parts = [p for p, leader in leaders.items() if leader == victim.broker_id]
    assert victim_parts, "the victim leads some partitions"

    # A group commits positions before the crash.
    with Producer(bootstrap) as producer:
        for n in range(600):
            producer.send(TOPIC, f"before-{n}".encode(), key=str(n).encode())
    with Consumer(
        bootstrap, group_id="acme.audit", auto_offset_reset="earliest", enable_auto_commit=False
    ) as consumer:
        consumer.subscribe([TOPIC])
        got = 0
        deadline = time.monotonic() + 60
        while got < 300:
            assert time.monotonic() < deadline
            got += len(consumer.poll(timeout_ms=200))
        consumer.commit()
        committed_before = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    assert any(v for v in committed_before.values())

    # An idempotent producer keeps sending while the broker dies and comes back.
    acked: dict[bytes, tuple[int, int]] = {}
    failures: list[BaseException] = []
    stop = threading.Event()

    def produce() -> None:
        n = 0
        with Producer(bootstrap, linger_ms=2, retries=1_000_000, delivery_timeout_ms=120_000) as p:
            while not stop.is_set():
                batch = []
                for _ in range(50):
                    value = f"during-{n}".encode()
                    batch.append((value, p.send(TOPIC, value, key=value)))
                    n += 1
                for value, future in batch:
                    try:
                        meta = future.result(timeout=150)
                    except BaseException as exc:
                        failures.append(exc)
                        continue
                    acked[value] = (meta.partition, meta.offset)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    time.sleep(1.0)
    victim.kill()
    time.sleep(0.5)
    victim.restart()
    time.sleep(1.5)
    stop.set()
    thread.join(180)
    assert not thread.is_alive()
    assert not failures, failures[:3]
    assert any(acked[v][0] in victim_parts for v in acked), "records went to the victim"

    stored: dict[bytes, tuple[int, int]] = {}
    for partition in range(PARTITIONS):
        address = next(b.address for b in cluster if b.broker_id == leaders[partition])
        for offset, value in _read_partition(address, partition):
            assert value not in stored, f"{value!r} stored twice: a retry was not deduplicated"
            stored[value] = (partition, offset)
    for value, where in acked.items():
        assert stored.get(value) == where, (
            f"acknowledged {value!r} at {where}, found {stored.get(value)}"
        )

    with Consumer(bootstrap, group_id="acme.audit", enable_auto_commit=False) as consumer:
        committed_after = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    assert committed_after == committed_before

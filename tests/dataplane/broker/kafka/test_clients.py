"""Kafka clients (librdkafka through confluent-kafka, and kafka-python) against a
three-broker Meridian cluster's Kafka listeners: idempotent acks=all produce in every
codec, group consumption with commits, records read back byte-identical by the SDK, and
malformed frames answered by closing the connection without harming the broker."""

from __future__ import annotations

import logging
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from kafka.protocol.producer import ProduceRequest
from prometheus_client.parser import text_string_to_metric_families

from dataplane.client import Consumer as SdkConsumer
from dataplane.client.admin import Admin
from dataplane.local import LocalCluster
from tests.dataplane.broker.kafka.support import RawKafka, one_batch
from tests.support.brokers import start_cluster, stop_all

TOPIC = "acme.orders"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = Path(tmp_path_factory.mktemp("kafka"))
    brokers = LocalCluster(root, 3, kafka=True).start()
    try:
        with Admin(brokers.bootstrap) as admin:
            admin.create_topic(TOPIC, 3)
        yield brokers
    finally:
        brokers.kill()


def _produce(bootstrap: str, codec: str, count: int, prefix: bytes) -> list[bytes]:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": codec,
            "linger.ms": 5,
        }
    )
    failures: list[object] = []
    values = [prefix + b"-%d" % i for i in range(count)]
    deadline = time.monotonic() + 30
    for i, value in enumerate(values):
        producer.produce(
            TOPIC,
            key=b"k%d" % i,
            value=value,
            headers=[("h", b"x")],
            on_delivery=lambda err, msg: failures.append(err) if err else None,
        )
    while producer.flush(1) and time.monotonic() < deadline:
        pass
    assert producer.flush(0) == 0
    assert failures == []
    return values


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_produces_idempotently_in_every_codec(cluster: LocalCluster, codec: str) -> None:
    """Every record acked with acks=all reaches the log once, readable by the SDK."""
    sent = _produce(cluster.kafka_bootstrap, codec, 300, codec.encode())
    group = f"acme.sdk-{codec}"
    with SdkConsumer(cluster.bootstrap, group_id=group, auto_offset_reset="earliest") as consumer:
        consumer.subscribe([TOPIC])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not set(sent) <= set(seen):
            mine = codec.encode() + b"-"
            seen += [r.value for r in consumer.poll(timeout_ms=500) if r.value.startswith(mine)]
    assert sorted(seen) == sorted(sent)


def test_a_consumer_group_reads_everything_and_commits(cluster: LocalCluster) -> None:
    sent = _produce(cluster.kafka_bootstrap, "lz4", 500, b"group")
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": "acme.billing",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([TOPIC])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not set(sent) <= set(got):
        message = consumer.poll(1)
        if message is not None and not message.error():
            got.append(message.value())
            assert message.headers() == [("h", b"x")]
    consumer.commit(asynchronous=False)
    committed = consumer.committed(consumer.assignment(), timeout=10)
    consumer.close()
    assert set(sent) <= set(got)
    assert all(tp.offset > 0 for tp in committed)


def test_kafka_python_negotiates_and_reads(cluster: LocalCluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap.split(","), acks="all")
    for i in range(20):
        producer.send(TOPIC, value=b"kp-%d" % i).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(
        TOPIC,
        bootstrap_servers=cluster.kafka_bootstrap.split(","),
        group_id="acme.kp",
        auto_offset_reset="earliest",
        consumer_timeout_ms=30_000,  # the iteration ends after this long without a record
    )
    wanted = {b"kp-%d" % i for i in range(20)}
    values = set()
    for message in consumer:
        values.add(message.value)
        if wanted <= values:
            break
    consumer.close()
    assert wanted <= values


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">i", 100 * 1024 * 1024 * 1024 // 1024),  # a 100 MiB size field
        struct.pack(">i", 3) + b"abc",  # shorter than any header
        struct.pack(">ihhi", 8, 999, 0, 1),  # an unknown API key
        struct.pack(">ihhi", 20, 0, 9, 1) + b"\x00" * 12,  # Produce v9 cut short
        struct.pack(">i", -5),
    ],
)
def test_malformed_frames_close_the_connection_only(cluster: LocalCluster, frame: bytes) -> None:
    host, port = cluster.brokers[0].kafka_address.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(frame)
        assert sock.recv(1024) == b""  # closed by the broker, nothing answered
    sent = _produce(cluster.kafka_bootstrap, "none", 5, b"after-bad-frame")
    assert len(sent) == 5


class _Lines(logging.Handler):
    """The messages librdkafka logged (its ``logger`` setting)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_fetch_past_the_end_resets_as_the_client_asks(cluster: LocalCluster) -> None:
    """OFFSET_OUT_OF_RANGE comes with an empty record set that librdkafka parses (not a
    null one), so the consumer resets to the end and reads what comes next."""
    from confluent_kafka import TopicPartition

    resets = _Lines()
    logger = logging.getLogger("tests.kafka.reset")
    logger.addHandler(resets)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": "acme.reset",
            "auto.offset.reset": "latest",
            "enable.auto.commit": False,
            "logger": logger,
        }
    )
    errors: list[object] = []
    try:
        consumer.assign([TopicPartition(TOPIC, p, 1_000_000) for p in range(3)])
        deadline = time.monotonic() + 30
        while sum("offset reset" in line for line in resets.lines) < 3:
            assert time.monotonic() < deadline, f"no reset: {resets.lines}"
            message = consumer.poll(0.2)
            if message is not None and message.error():
                errors.append(message.error())
        sent = _produce(cluster.kafka_bootstrap, "none", 30, b"after-reset")
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while not set(sent) <= set(got):
            assert time.monotonic() < deadline, f"read {len(got)} of {len(sent)}"
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                errors.append(message.error())
            else:
                got.append(message.value())
    finally:
        consumer.close()
    assert set(got) == set(sent)
    assert not [e for e in errors if "parse" in str(e).lower()], errors


def _metric(text: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                total += sample.value
    return total


def test_kafka_requests_show_in_the_brokers_metrics(cluster: LocalCluster) -> None:
    def scrape() -> str:
        return "".join(
            urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10)
            .read()
            .decode()
            for b in cluster.brokers
        )

    before = scrape()
    _produce(cluster.kafka_bootstrap, "none", 50, b"metered")
    after = scrape()
    for name, labels in [
        ("meridian_kafka_request_seconds_count", {"api": "Produce"}),
        ("meridian_broker_requests_total", {"rpc": "Produce", "error": "NONE"}),
    ]:
        assert _metric(after, name, **labels) > _metric(before, name, **labels), name


def test_a_failed_acks_zero_produce_closes_the_connection(cluster: LocalCluster) -> None:
    """Kafka answers no acks=0 Produce, so it closes the connection of one that failed
    (here: a partition that does not exist), and the client learns to look again."""
    with RawKafka(cluster.brokers[0].kafka_address) as raw:
        raw.send(
            ProduceRequest, 9, transactional_id=None, acks=0, timeout_ms=1000,
            topic_data=[{"name": TOPIC, "partition_data": [{"index": 99, "records": one_batch()}]}],
        )  # fmt: skip
        assert raw.closed_by_peer()
    leader = (
        AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
        .list_topics(TOPIC, timeout=30)
        .topics[TOPIC]
        .partitions[0]
        .leader
    )
    address = next(b.kafka_address for b in cluster.brokers if b.broker_id == leader)
    with RawKafka(address) as raw:  # one that lands: no answer, the connection stays
        raw.send(
            ProduceRequest, 9, transactional_id=None, acks=0, timeout_ms=1000,
            topic_data=[{"name": TOPIC, "partition_data": [{"index": 0, "records": one_batch()}]}],
        )  # fmt: skip
        assert not raw.closed_by_peer(timeout_s=1)


def test_connections_over_the_per_address_bound_are_closed_at_once(tmp_path: Path) -> None:
    bound = ["--kafka-max-connections-per-ip", "2"]
    (broker,) = start_cluster(tmp_path, 1, kafka=True, extra_args=bound)
    try:
        address = broker.kafka_address
        with RawKafka(address) as first, RawKafka(address):
            with RawKafka(address) as third:
                assert third.closed_by_peer()
            first.close()
            deadline = time.monotonic() + 10
            while True:  # the freed place is taken by the next connection
                with RawKafka(address) as again:
                    if not again.closed_by_peer(timeout_s=0.5):
                        break
                assert time.monotonic() < deadline, "no place freed by closing a connection"
    finally:
        stop_all([broker])

"""Kafka's transactions through the Kafka listener: librdkafka's transactional producer
(confluent-kafka) against three Meridian brokers, its read_committed and
read_uncommitted consumers, librdkafka's consume-transform-produce with
send_offsets_to_transaction, a second producer of the id fencing the first, the SDK's
transactions read by librdkafka, and Apache Kafka's Java transactional copier (a real
JVM, ``tests.support.kafka_jvm``) copying exactly once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from dataplane.client import Consumer as SdkConsumer
from dataplane.client import Producer as SdkProducer
from dataplane.client import TopicPartition as SdkTopicPartition
from dataplane.client.admin import Admin
from dataplane.local import LocalCluster
from tests.support.kafka_jvm import run_kafka_tool

TIMEOUT_S = 60.0
TRANSACTIONAL_COPIER = "org.apache.kafka.tools.TransactionalMessageCopier"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = Path(tmp_path_factory.mktemp("kafka-txn"))
    brokers = LocalCluster(root, 3, kafka=True).start()
    try:
        yield brokers
    finally:
        brokers.kill()


def create(cluster: LocalCluster, topic: str, partitions: int = 3) -> str:
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(topic, partitions)
    return topic


def transactional(cluster: LocalCluster, tid: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "transactional.id": tid,
            "linger.ms": 2,
            "transaction.timeout.ms": 30_000,
        }
    )
    producer.init_transactions(TIMEOUT_S)
    return producer


def read_all(cluster: LocalCluster, topic: str, isolation: str, expected: int) -> list[bytes]:
    """What a librdkafka consumer of that isolation reads from the start, once it has
    read ``expected`` records and then reached the end of every partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": f"acme.reader-{topic}-{isolation}-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                    if len(got) >= expected and len(at_end) == 3:
                        return got
                    continue
                raise KafkaException(message.error())
            at_end.discard(message.partition())
            got.append(message.value())
        raise AssertionError(f"read {len(got)} of {expected} within {TIMEOUT_S} s")
    finally:
        consumer.close()


def test_librdkafka_transactions_are_seen_whole_by_read_committed_consumers(
    cluster: LocalCluster,
) -> None:
    topic = create(cluster, "acme.kafka-txn")
    producer = transactional(cluster, "acme.kafka-txn")
    producer.begin_transaction()
    committed = [b"c%d" % i for i in range(30)]
    for i, value in enumerate(committed):
        producer.produce(topic, value, partition=i % 3)
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    aborted = [b"a%d" % i for i in range(30)]
    for i, value in enumerate(aborted):
        producer.produce(topic, value, partition=i % 3)
    producer.flush(TIMEOUT_S)
    producer.abort_transaction(TIMEOUT_S)
    assert sorted(read_all(cluster, topic, "read_committed", 30)) == sorted(committed)
    assert sorted(read_all(cluster, topic, "read_uncommitted", 60)) == sorted(committed + aborted)


def test_librdkafka_consume_transform_produce_commits_offsets_in_the_transaction(
    cluster: LocalCluster,
) -> None:
    source, sink = create(cluster, "acme.kafka-eos-in"), create(cluster, "acme.kafka-eos-out")
    with SdkProducer(cluster.bootstrap) as seed:
        for p in range(3):
            seed.send_batch(source, [b"%d" % (p * 30 + i) for i in range(30)], partition=p).result()
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": "acme.kafka-eos",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    producer = transactional(cluster, "acme.kafka-eos")
    consumer.subscribe([source])
    done = 0
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while done < 90:
            assert time.monotonic() < deadline, f"{done} of 90 processed"
            messages = consumer.consume(50, 0.5)
            messages = [m for m in messages if not m.error()]
            if not messages:
                continue
            producer.begin_transaction()
            for message in messages:
                producer.produce(sink, b"out-" + message.value(), partition=message.partition())
            offsets = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata())
            producer.commit_transaction(TIMEOUT_S)
            done += len(messages)
        committed = consumer.committed(
            [TopicPartition(source, p) for p in range(3)], timeout=TIMEOUT_S
        )
    finally:
        consumer.close()
    assert [tp.offset for tp in committed] == [30, 30, 30]
    out = read_all(cluster, sink, "read_committed", 90)
    assert sorted(out) == sorted(b"out-%d" % i for i in range(90))


def test_a_second_librdkafka_producer_of_the_id_fences_the_first(cluster: LocalCluster) -> None:
    topic = create(cluster, "acme.kafka-zombie")
    zombie = transactional(cluster, "acme.kafka-zombie")
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    zombie.flush(TIMEOUT_S)
    fresh = transactional(cluster, "acme.kafka-zombie")  # fences the zombie
    fresh.begin_transaction()
    fresh.produce(topic, b"fresh", partition=0)
    fresh.commit_transaction(TIMEOUT_S)
    with pytest.raises(KafkaException) as caught:
        zombie.commit_transaction(TIMEOUT_S)
    assert caught.value.args[0].fatal() or caught.value.args[0].txn_requires_abort()
    assert read_all(cluster, topic, "read_committed", 1) == [b"fresh"]


def test_librdkafka_reads_the_sdks_transactions(cluster: LocalCluster) -> None:
    topic = create(cluster, "acme.kafka-sdk-txn")
    with SdkProducer(cluster.bootstrap, transactional_id="acme.sdk-writer", linger_ms=1) as sdk:
        sdk.init_transactions()
        for commit in (True, False, True):
            sdk.begin_transaction()
            for i in range(6):
                sdk.send(topic, b"%s-%d" % (b"keep" if commit else b"drop", i), partition=i % 3)
            sdk.flush()
            (sdk.commit_transaction if commit else sdk.abort_transaction)()
    seen = read_all(cluster, topic, "read_committed", 12)
    assert sorted(seen) == sorted([b"keep-%d" % i for i in range(6)] * 2)


def test_kafkas_java_transactional_copier_copies_exactly_once(cluster: LocalCluster) -> None:
    """Apache Kafka's own consume-transform-produce tool (the Java client 4.x: a
    read_committed consumer, a transactional producer committing the consumer's offsets,
    aborting some transactions at random) copies every record once, in order."""
    source = create(cluster, "acme.java-copy-in", 1)
    sink = create(cluster, "acme.java-copy-out", 1)
    sent = [b"v%03d" % i for i in range(200)]
    with SdkProducer(cluster.bootstrap) as seed:
        seed.send_batch(source, sent, partition=0).result()
    args = ["--broker-list", cluster.kafka_bootstrap, "--consumer-group", "acme.java-copy"]
    args += ["--input-topic", source, "--input-partition", "0", "--output-topic", sink]
    args += ["--max-messages", "200", "--transaction-size", "20"]
    args += ["--transactional-id", "acme.java-copier", "--enable-random-aborts"]
    args += ["--use-group-metadata"]
    done = run_kafka_tool(TRANSACTIONAL_COPIER, args, timeout_s=180)
    assert b'"stage":"ShutdownComplete"' in done.stdout, done.stderr.decode()[-4000:]
    assert b'"remaining":0' in done.stdout
    with SdkConsumer(cluster.bootstrap, isolation_level="read_committed") as reader:
        reader.assign([SdkTopicPartition(sink, 0)])
        reader.seek_to_beginning()
        copied: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(copied) < len(sent) and time.monotonic() < deadline:
            copied += [r.value or b"" for r in reader.poll(timeout_ms=500)]
    assert copied == sent

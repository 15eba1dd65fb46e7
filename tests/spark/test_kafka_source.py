"""Spark's own Kafka source (``spark.read.format("kafka")``, ``spark-sql-kafka-0-10``)
against the Kafka listeners of a three-broker cluster with authentication on, reading
what the Meridian SDK wrote, signed in with SASL/PLAIN as a service account of ``acme``.

The cluster is ``tests.dataplane.broker.kafka.support``'s. The session is the one every
Spark test of the process shares (``spark``, this folder's conftest); the source's jars
(``tests.support.kafka_jvm.spark_kafka_jars``) are added to it with ``ADD JAR``, as it
may be running already.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from dataplane.client import Producer
from tests.dataplane.broker.kafka.support import (
    ACME_CLIENT,
    ORDERS,
    PARTITIONS,
    acme_token,
    add_clients,
    auth_cluster,
    grpc_bootstrap,
    kafka_bootstrap,
)
from tests.support.brokers import BrokerProcess
from tests.support.issuer import TestIssuer
from tests.support.kafka_jvm import sasl_plain_properties, spark_kafka_jars

Headers = tuple[tuple[str, bytes | None], ...]
Row = tuple[int, int, bytes | None, bytes | None, Headers]  # partition, offset, key, value
# Null keys and values, an empty key and value (not null), every byte value, headers.
RECORDS: list[tuple[bytes | None, bytes | None, Headers]] = [
    (b"order-1", b'{"total": 12}', ()),
    (b"order-2", "prix 12 \u20ac".encode(), (("trace", b"t-1"), ("empty", b""))),
    (None, b"no key", ()),
    (b"order-3", None, ()),
    (b"", b"", ()),
    (b"order-4", bytes(range(256)), ()),
    *((b"bulk-%d" % i, b"value %d" % i, ()) for i in range(24)),
]


@pytest.fixture(scope="module")
def kafka_issuer() -> Iterator[TestIssuer]:
    """The cluster's own issuer (this folder's ``issuer`` knows none of its clients)."""
    with TestIssuer() as running:
        yield add_clients(running)


@pytest.fixture(scope="module")
def kafka_cluster(
    tmp_path_factory: pytest.TempPathFactory, kafka_issuer: TestIssuer
) -> Iterator[list[BrokerProcess]]:
    root: Path = tmp_path_factory.mktemp("spark-kafka")
    with auth_cluster(root, kafka_issuer) as brokers:
        yield brokers


@pytest.fixture(scope="module")
def kafka_source(spark: SparkSession) -> SparkSession:
    """The shared session with Spark's Kafka source on its classpath (``ADD JAR`` puts
    its class loader on the calling thread, this test thread, where the reads run)."""
    for jar in spark_kafka_jars():
        spark.sql(f"ADD JAR '{jar}'")
    return spark


@pytest.fixture(scope="module")
def written(kafka_cluster: list[BrokerProcess], kafka_issuer: TestIssuer) -> list[Row]:
    """``RECORDS`` sent to ``acme.orders`` by the SDK, where it says they landed, in
    (partition, offset) order."""
    token = acme_token(kafka_issuer)
    with Producer(grpc_bootstrap(kafka_cluster), credentials=token, acks="all") as producer:
        sent = [producer.send(ORDERS, v, key=k, headers=list(h) or None) for k, v, h in RECORDS]
        landed = [future.result(timeout=30) for future in sent]
    rows = [(md.partition, md.offset, *record) for md, record in zip(landed, RECORDS, strict=True)]
    assert {row[0] for row in rows} == set(range(PARTITIONS)), "some partition got nothing"
    return sorted(rows, key=lambda row: (row[0], row[1]))


def read_orders(session: SparkSession, brokers: list[BrokerProcess], **options: str) -> DataFrame:
    """``acme.orders`` through the Kafka source, signed in as ``acme``'s account."""
    reader = session.read.format("kafka").option(
        "kafka.bootstrap.servers", kafka_bootstrap(brokers)
    )
    for name, value in sasl_plain_properties(*ACME_CLIENT).items():
        reader = reader.option(f"kafka.{name}", value)
    # The source's consumers are named <prefix>-<uuid>: a group of the tenant's own.
    reader = reader.option("subscribe", ORDERS).option("groupIdPrefix", "acme.spark")
    return reader.options(includeHeaders="true", **options).load()


def rows_of(frame: DataFrame) -> list[Row]:
    return sorted(
        (r.partition, r.offset, _bytes(r.key), _bytes(r.value), _headers(r.headers))
        for r in frame.select("partition", "offset", "key", "value", "headers").collect()
    )


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _headers(headers: Any) -> Headers:
    return tuple((h.key, _bytes(h.value)) for h in headers or ())


def test_spark_reads_the_records_the_sdk_wrote_byte_for_byte(
    kafka_source: SparkSession, kafka_cluster: list[BrokerProcess], written: list[Row]
) -> None:
    frame = read_orders(kafka_source, kafka_cluster)
    assert rows_of(frame) == written
    assert {r.topic for r in frame.select("topic").distinct().collect()} == {ORDERS}


def test_spark_reads_the_offset_range_it_is_given(
    kafka_source: SparkSession, kafka_cluster: list[BrokerProcess], written: list[Row]
) -> None:
    """From offset 1 of every partition to the end: what Spark plans from ListOffsets."""
    starting = json.dumps({ORDERS: {str(p): 1 for p in range(PARTITIONS)}})
    frame = read_orders(kafka_source, kafka_cluster, startingOffsets=starting)
    assert rows_of(frame) == [row for row in written if row[1] >= 1]
